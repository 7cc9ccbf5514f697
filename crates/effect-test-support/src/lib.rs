//! The workspace's own test plumbing, shared by every crate's tests and never
//! published (`publish = false`; only ever a dev-dependency):
//!
//! - [`contracts`]: the capture-payment contract every crate's tests start
//!   from, as a builder to add a probe or a guarantee to.
//! - [`servers`]: the PostgreSQL test server (and its TLS CA) found through
//!   the environment, with the skip-or-fail rule of `EFFECT_REQUIRE_POSTGRES`.
//! - [`slow`]: the switch (`EFFECT_SLOW_TESTS=1`, set by `cargo xtask test`)
//!   that runs the kill-9 soak tests, which a quick `cargo test` skips.
//! - [`snapshots`]: the one insta settings helper (redactions and filters)
//!   that every crate's snapshot tests bind around their assertions.
//! - [`time`]: a clock past every lease of the processes a test killed, so
//!   it need not wait for them to run out.
//! - [`pg_proxy`]: [`CommitCutProxy`](pg_proxy::CommitCutProxy), a loopback
//!   TCP proxy in front of a PostgreSQL server that cuts a connection at a
//!   commit, before it reaches the server or after the server answered.
//!
//! It depends on effect-core only (and insta), so effect-exec's tests use it
//! too. What a store author or an application's tests need is published
//! elsewhere: the ledger conformance suite in effect-conformance, the fakes,
//! scenarios, fault matrix and certification in effect-testkit.
//!
//! ```
//! let contract = effect_test_support::contracts::capture_payment().build()?;
//! assert_eq!(contract.name(), effect_test_support::contracts::CAPTURE_PAYMENT);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

pub mod contracts;
pub mod pg_proxy;
pub mod servers;
pub mod slow;
pub mod snapshots;
pub mod time;
