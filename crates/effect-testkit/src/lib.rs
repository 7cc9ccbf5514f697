//! Test support for production-agent-systems ledgers: the ledger conformance
//! suite every [`EffectLedger`](effect_core::EffectLedger) implementation runs,
//! and a fault-injecting ledger wrapper.
//!
//! - [`certify`]: [`Certification`](certify::Certification) runs the fault
//!   matrix against a user's own contract, handler and provider, counted
//!   through the user's counter, and reports per fault whether the provider
//!   ended with at most one effect and the declared guarantees held.
//! - [`conformance`]: docs/spec.md §4 as small, named checks. A store proves it follows
//!   the state machine with one call to [`conformance::run_all`] from its tests.
//! - [`faults`]: [`FaultyLedger`](faults::FaultyLedger), a decorator that fails
//!   scripted calls (before the inner ledger runs, or after it committed), for
//!   testing how callers survive a ledger that is down or loses replies.
//! - [`provider`]: [`FakePaymentProvider`](provider::FakePaymentProvider), a
//!   deterministic, thread-safe fake payment API, optionally file-backed so its
//!   commits survive the death of the process that made them.
//! - [`scenario`]: fault points, fault schedules, contract variants and the
//!   [`Scenario`](scenario::Scenario) builder that runs a provider (the payment
//!   fake or your own [`ScenarioProvider`](scenario::ScenarioProvider)) through
//!   the executor and reports a [`ScenarioReport`](scenario::ScenarioReport)
//!   with a naive retry-on-error baseline beside it.
//! - `http_provider` (feature `http`): `FakeHttpProvider`, a fake HTTP
//!   payment API on loopback with Stripe-like idempotency keys and scripted
//!   faults (drop or stall after commit, 5xx after commit, 429/503 with
//!   `Retry-After`, stale lookups), for effect-http's fault matrix.
//! - [`matrix`]: every fault point against every contract variant, with the
//!   naive baseline; see `docs/testkit.md`.
//!
//! It depends on effect-core and effect-exec (for scenario runners over the
//! executor). The conformance suite and the fault injector use effect-core
//! only. The workspace's own test plumbing (the PostgreSQL proxy, server
//! discovery, snapshot settings, clocks, the shared contracts) is the
//! unpublished effect-test-support crate. It never depends on a store: stores
//! take this crate as a path-only dev-dependency, so a dependency the other way
//! would be a cycle.
//!
//! This is test-support code: the checks panic on the first disagreement, with
//! the check's name and what differed, as test assertions do.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectLedger, MemoryLedger};
//!
//! // A store's test module does the same with its own fresh ledger.
//! effect_testkit::conformance::run_all(&|| -> Arc<dyn EffectLedger> { Arc::new(MemoryLedger::new()) });
//! ```
//!
//! # Feature flags
//!
//! - `http`: the `http_provider` module (hyper and tokio).
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod certify;
pub mod conformance;
pub mod faults;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http_provider;
mod injecting;
pub mod matrix;
pub mod provider;
pub mod scenario;

pub use injecting::{FaultInjectingProvider, UnsupportedFaultPoint};
