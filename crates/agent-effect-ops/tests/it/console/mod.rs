//! `agent-effect-ops serve`, the operator console (docs/console.md): its
//! views, actions, authentication, metrics and live refresh, through its
//! router in-process; and in a real headless Chromium (`browser`).

mod actions;
mod approvals;
mod browser;
mod live;
mod metrics;
pub mod support;
mod views;

/// A console that may act, with the tokens file of `support::tokens_file`.
pub const WITH_ACTIONS: &str = "[actions]\nenabled = true\n[auth]\ntokens_file = \"{tokens}\"\n";
