//! Contract types, canonical JSON, fingerprints and the [`EffectLedger`] trait
//! of production-agent-systems.
//!
//! An agent's write (a payment capture, an email, a ticket) can commit at the
//! provider while its acknowledgement is lost. This crate holds the vocabulary
//! every other crate shares to handle that safely: the [`EffectContract`] that
//! says how to identify an operation and check its outcome, the statuses of
//! docs/spec.md §2, the ledger state machine ([`transition::plan`]) and the
//! [`EffectLedger`] trait that durable stores implement.
//!
//! It also says which arguments are secret (docs/security-boundaries.md): the
//! [`Secret`](secret::Secret) argument wrapper and field-path [`Redaction`]. A store keeps
//! what the executor gives it, sealed values included, without opening it:
//! sealing, secret fingerprints and scrubbing are effect-exec's (its
//! `secrets` module).
//!
//! It depends on serde, serde_json, blake3, sha2 and thiserror only. It never
//! touches a database and never dispatches anything: stores live in their own
//! crates (`effect-ledger-sqlite`, ...) and execution in `effect-exec`.
//! [`MemoryLedger`] is the reference implementation, for examples and tests.
//!
//! Every name has one path. The root holds the vocabulary every store and
//! user shares: the contract, records and statuses, the ledger traits and
//! their requests ([`Transition`], [`NewOperation`], [`Claim`], ...),
//! budgets, clocks, request fingerprints, pruning and retention, and the
//! errors. Modules hold the specialised areas, and nothing in them is also
//! at the root: [`transition`] (the planner a store runs inside its
//! transaction), [`canonical`] (canonical JSON), [`secret`] (secret
//! arguments), [`compensation`], [`event`] and [`evidence`] (stored names),
//! and [`intent`], [`terms`] and [`trace`] (fields of the `prepared` event).
//!
//! ```
//! use effect_core::{EffectContract, MemoryLedger};
//! use serde_json::json;
//!
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     let invoice = args["invoice_id"].as_str().ok_or("missing invoice_id")?;
//!     Ok(format!("invoice:{invoice}:capture"))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! .provider_idempotency_guaranteed(true)
//! .build()?;
//! assert_eq!(contract.operation_id(&json!({"invoice_id": "INV-1"}))?, "invoice:INV-1:capture");
//! # let _ = MemoryLedger::new();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

mod budget;
pub mod canonical;
mod clock;
pub mod compensation;
mod contract;
mod error;
pub mod event;
pub mod evidence;
mod fingerprint;
pub mod intent;
mod ledger;
mod memory;
mod prune;
mod record;
mod redaction;
mod retention;
pub mod secret;
mod status;
pub mod terms;
pub mod trace;
pub mod transition;

pub use budget::{
    Budget, BudgetCharge, BudgetDeferral, BudgetRefusal, BudgetUsage, BudgetUse, BudgetWindow,
    BudgetWrite, CostFn, MAX_BUDGET_AMOUNT, ScopeFn,
};
pub use clock::{
    Clock, ManualClock, Sleeper, StopSignal, SystemClock, ThreadSleeper, format_timestamp,
    unix_seconds,
};
pub use contract::{
    ApprovalRuleFn, AsyncProbeFn, BoxFuture, EffectContract, EffectContractBuilder,
    IntentMigration, IntentMigrationFn, KeyFn, OperationIdFn, PostconditionFn, PreconditionFn,
    ProbeFn,
};
pub use error::{
    BoxError, CallbackError, CanonicalError, ContractError, LedgerError, LedgerErrorKind,
    RedactionError, error_chain,
};
pub use fingerprint::{FingerprintForm, RequestFingerprint};
pub use ledger::{
    EffectLedger, EffectLedgerExt, LedgerStats, ListQuery, MAX_LIST_LIMIT, WriteDurability,
};
pub use memory::MemoryLedger;
pub use prune::{
    ArchiveFile, ArchivedKey, ArchivedOperation, MAX_BATCH_ROWS, PruneArchive, PruneLimits,
    PruneReport, PruneRequest, write_archive_line,
};
pub use record::{
    EffectRecord, EffectResult, Evidence, LedgerEvent, Outcome, OutcomeProbeResult, Revision,
};
pub use redaction::Redaction;
pub use retention::{
    DEFAULT_MIN_RETENTION, ParseRetentionError, PruneLedger, RetentionPolicy, RetentionReport,
    RetentionRule, RulePruned,
};
pub use status::{EffectStatus, ParseStatusError, ProbeStatus, UnknownOutcomePolicy};
pub use transition::request::{
    Approval, Audit, Claim, Confirmation, Guard, ManualAction, ManualResolution, NewOperation,
    Transition,
};
pub use transition::write::TransitionOutcome;
