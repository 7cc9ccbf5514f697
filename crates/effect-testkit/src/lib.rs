//! Test support for production-agent-systems: the executor-over-a-store suite
//! every [`EffectLedger`](effect_core::EffectLedger) implementation runs beside
//! the ledger conformance suite (the effect-conformance crate), fault
//! scenarios over the executor, fakes, and a fault-injecting ledger wrapper.
//!
//! - [`certify`]: [`Certification`](certify::Certification) runs the fault
//!   matrix against a user's own contract, handler and provider, counted
//!   through the user's counter, and reports per fault whether the provider
//!   ended with at most one effect and the declared guarantees held.
//! - [`executor_suite`]: the checks of a store that only the executor and the
//!   recovery worker drive (budgets, stored terms, pre- and postconditions,
//!   intent across versions). A store runs [`executor_suite::run_all`] beside
//!   `effect_conformance::run_all`, which checks the ledger's state machine
//!   (docs/spec.md §4) on effect-core alone.
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
//! It depends on effect-core, effect-exec (the scenario runners and the
//! executor suite drive the executor) and effect-conformance (the executor
//! suite is written in its harness). The workspace's own test plumbing (the PostgreSQL proxy, server
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
//! let factory = || -> Arc<dyn EffectLedger> { Arc::new(MemoryLedger::new()) };
//! effect_conformance::run_all(&factory);
//! effect_testkit::executor_suite::run_all(&factory);
//! ```
//!
//! # Feature flags
//!
//! - `http`: the `http_provider` module (hyper and tokio).
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod certify;
pub mod executor_suite;
pub mod faults;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub mod http_provider;
mod injecting;
pub mod matrix;
pub mod provider;
pub mod scenario;

pub use injecting::{FaultInjectingProvider, UnsupportedFaultPoint};
