//! Make an AI agent's external side effects safe to execute, recover and test
//! under failure.
//!
//! An agent sends a write (capture a payment, send an email); the provider
//! commits it; the acknowledgement is lost. The agent sees a timeout, which is
//! not proof of failure: retrying blindly can charge twice, giving up leaves
//! work undone. This crate records each operation durably *before* dispatch,
//! under a stable business identity, and reconciles an uncertain outcome through
//! the provider's contract (an outcome probe, a documented idempotency key), or
//! quarantines it for an audited operator decision.
//!
//! This facade re-exports the workspace crates so that one dependency gives the
//! quick start; depend on the single crates to take less:
//!
//! The root holds what a quick start needs (a contract, an executor, a
//! ledger, the errors to match); the rest is grouped by concern:
//!
//! | module | what |
//! |---|---|
//! | [`prelude`] | the quick start's names, for a glob import |
//! | [`typed`] | contracts over your own argument and output types |
//! | [`recovery`] | finishing work nobody waits for: the recovery worker, the sweeper, what waits and why, retention |
//! | [`secrets`] | [`secrets::Secret`] arguments, sealing keys and keyrings, redaction |
//! | [`stores`] | every ledger and its options and errors ([`open`] chooses one from a string) |
//! | [`open`] | a store chosen from a path or a `postgres://` URL, as every binary does |
//!
//! and re-exports the workspace crates, so that one dependency gives
//! everything; depend on the single crates to take less:
//!
//! | module | crate | what |
//! |---|---|---|
//! | [`effect_core`] | `effect-core` | contracts, statuses, canonical JSON, the [`EffectLedger`] trait, transitions, clocks |
//! | [`exec`] | `effect-exec` | the [`EffectExecutor`]: execute, reconcile, resolve, recover |
//! | [`sqlite`] | `effect-ledger-sqlite` | [`SqliteLedger`], the embedded durable store |
//! | `postgres` | `effect-ledger-postgres` | `PostgresLedger`, one ledger for several hosts |
//! | `runtime` | `agent-runtime` | tools, permission policy, runs that wait on uncertain effects |
//! | `testkit` | `effect-testkit` | fakes, fault scenarios, the executor suite every store runs |
//! | `rig` | `effect-rig` | `EffectTool`: rig tools whose calls go through the executor |
//! | `mcp` | `effect-mcp` | effect-backed MCP tools, served and called (rmcp) |
//! | `http` | `effect-http` | HTTP requests as effects: key header, failure classes, `Retry-After`, lookups (reqwest, rustls) |
//! | `otel` | `effect-otel` | OpenTelemetry spans and metrics of the executor |
//!
//! ```
//! use std::sync::Arc;
//! use production_agent_systems::{
//!     EffectContract, EffectExecutor, HandlerError, OutcomeProbeResult, SqliteLedger, SqliteOptions,
//! };
//! use serde_json::{json, Value};
//!
//! let dir = tempfile::tempdir()?;
//! let ledger = SqliteLedger::open(dir.path().join("effects.sqlite3"), SqliteOptions::default())?;
//! let executor = EffectExecutor::new(Arc::new(ledger));
//!
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! // Ask the provider what became of the capture when the answer was lost.
//! .outcome_probe(|_args, key| {
//!     let _key = key.ok_or("no key")?; // look the payment up by key at the provider
//!     Ok(OutcomeProbeResult::committed(json!({"payment_id": "pay-1"})).provider_operation_id("pay-1"))
//! })
//! .build()?;
//!
//! let result = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), |_args: Value, _key| {
//!     // The provider captured the payment, but the response never arrived.
//!     Err::<Value, _>(HandlerError::unknown("timed out"))
//! })?;
//! assert!(result.is_confirmed());
//! assert_eq!(result.provider_operation_id.as_deref(), Some("pay-1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Feature flags
//!
//! - `sqlite` (default): the embedded SQLite ledger.
//! - `postgres`: the PostgreSQL ledger, as `postgres`.
//! - `runtime`: the agent runtime, as `runtime`.
//! - `testkit`: the test kit, as `testkit`.
//! - `tokio`: `EffectExecutor::execute_async` and `execute_typed_async`; with
//!   `runtime`, also the async agent runtime, `runtime::AsyncAgentRuntime`.
//! - `metrics`: counters and timings through the `metrics` facade (see
//!   `effect_exec`'s `metrics` feature); install any recorder.
//! - `otel`: OpenTelemetry traces and metrics, as `otel` (effect-otel):
//!   `otel::install(otel::OtelConfig::default())` in `main` exports GenAI
//!   `execute_tool` spans and the executor's instruments over OTLP/HTTP
//!   (docs/observability.md).
//! - `rig`: the rig adapter, as `rig` (brings `tokio`).
//! - `mcp`: the MCP adapter, as `mcp` (brings `tokio`).
//! - `http`: HTTP requests as effects, as `http` (reqwest with rustls on
//!   ring; brings `tokio`).

#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod open;

#[cfg(feature = "runtime")]
#[cfg_attr(docsrs, doc(cfg(feature = "runtime")))]
pub use agent_runtime as runtime;
pub use effect_core;
pub use effect_exec as exec;
#[cfg(feature = "http")]
#[cfg_attr(docsrs, doc(cfg(feature = "http")))]
pub use effect_http as http;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use effect_ledger_postgres as postgres;
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use effect_ledger_sqlite as sqlite;
#[cfg(feature = "mcp")]
pub use effect_mcp as mcp;
#[cfg(feature = "otel")]
#[cfg_attr(docsrs, doc(cfg(feature = "otel")))]
pub use effect_otel as otel;
#[cfg(feature = "rig")]
pub use effect_rig as rig;
#[cfg(feature = "testkit")]
#[cfg_attr(docsrs, doc(cfg(feature = "testkit")))]
pub use effect_testkit as testkit;

pub use effect_core::{
    ContractError, EffectContract, EffectLedger, EffectLedgerExt, EffectRecord, EffectResult,
    EffectStatus, LedgerError, LedgerErrorKind, MemoryLedger, Outcome, OutcomeProbeResult,
    ProbeStatus, UnknownOutcomePolicy,
};
pub use effect_exec::{
    CallOptions, EffectExecutor, ExecError, ExecutorOptions, HandlerContext, HandlerError,
    UncertainOutcome,
};
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions};

/// The quick start's names, for `use production_agent_systems::prelude::*;`.
pub mod prelude {
    pub use crate::typed::{TypedContract, TypedProbe};
    pub use effect_core::{
        EffectContract, EffectLedger, EffectLedgerExt, EffectStatus, OutcomeProbeResult,
    };
    pub use effect_exec::{EffectExecutor, ExecError, HandlerContext, HandlerError};
}

/// Contracts over your own argument and output types
/// ([`TypedContract`](typed::TypedContract), docs/effect-contracts.md).
pub mod typed {
    pub use effect_exec::{TypedContract, TypedProbe, TypedResult};
}

/// Finishing work nobody waits for (docs/recovering-work.md): the
/// [`RecoveryWorker`](recovery::RecoveryWorker) dispatches stored intent and
/// reconciles what was left uncertain, the [`Sweeper`](recovery::Sweeper)
/// reconciles only, [`waiting`](recovery::waiting) says what waits and for
/// whom, an [`Operator`](recovery::Operator) resolves, cancels, approves or
/// denies an operation, its [`Audit`](recovery::Audit) records who decided, and a
/// [`RetentionPolicy`](recovery::RetentionPolicy) says how long resolved
/// operations are kept.
pub mod recovery {
    pub use effect_core::{ParseRetentionError, RetentionPolicy, RetentionReport};
    pub use effect_exec::{
        Audit, Operator, RecoveryHandle, RecoveryReport, RecoveryWorker, SweepReport, Sweeper,
        Waiting, WaitingFor, waiting,
    };
}

/// Arguments that must not reach the ledger in clear (docs/effect-contracts.md):
/// [`Secret`](secrets::Secret) values, the [`SealingKey`](secrets::SealingKey)
/// and [`Keyring`](secrets::Keyring) that seal stored intent, the
/// [`FingerprintKey`](secrets::FingerprintKey) of keyed fingerprints, and
/// [`Redaction`](secrets::Redaction) of what operators and approvers see.
pub mod secrets {
    pub use effect_core::secret::Secret;
    pub use effect_core::{Redaction, RedactionError};
    pub use effect_exec::secrets::{
        FingerprintKey, KeyError, Keyring, Redactor, SealError, SealingKey,
    };
}

/// Every ledger, with its options and errors. [`open`](crate::open::open)
/// chooses one from a path or a URL.
pub mod stores {
    pub use effect_core::MemoryLedger;
    #[cfg(feature = "postgres")]
    #[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
    pub use effect_ledger_postgres::{PostgresLedger, PostgresOptions, SslMode, TlsError};
    #[cfg(feature = "sqlite")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
    pub use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions, Synchronous};
}

/// The examples of `docs/effect-contracts.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/effect-contracts.md")]
pub struct EffectContractsDoctests;

/// The examples of `docs/approval.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/approval.md")]
pub struct ApprovalDoctests;

/// The examples of `docs/operations.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/operations.md")]
pub struct OperationsDoctests;

/// The examples of `docs/postgres.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/postgres.md")]
pub struct PostgresDoctests;

/// The examples of `docs/compensation.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/compensation.md")]
pub struct CompensationDoctests;

/// The examples of `docs/recovering-work.md`, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/recovering-work.md")]
pub struct RecoveringWorkDoctests;

/// The examples of `docs/rig.md`, compiled and run as doctests.
#[cfg(all(doctest, feature = "rig"))]
#[doc = include_str!("../../../docs/rig.md")]
pub struct RigDoctests;

/// The examples of `docs/mcp.md`, compiled and run as doctests.
#[cfg(all(doctest, feature = "mcp"))]
#[doc = include_str!("../../../docs/mcp.md")]
pub struct McpDoctests;

/// The examples of `docs/http.md`, compiled and run as doctests.
#[cfg(all(doctest, feature = "http"))]
#[doc = include_str!("../../../docs/http.md")]
pub struct HttpDoctests;

/// The examples of `docs/observability.md`, compiled and run as doctests.
#[cfg(all(doctest, feature = "otel"))]
#[doc = include_str!("../../../docs/observability.md")]
pub struct ObservabilityDoctests;
