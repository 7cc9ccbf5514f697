//! Integration tests of the operator CLI, one module per topic.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod approval;
mod approval_view;
mod blocked;
mod budget;
mod cancel;
mod cli;
mod compensation;
mod console;
mod empty;
mod errors;
mod export;
mod fixtures;
mod incident;
mod intent;
mod late;
mod maintenance;
mod postgres;
mod readonly;
mod resolve;
mod stale;
mod support;
mod walkthrough;
