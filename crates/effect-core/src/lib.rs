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
//! It depends on serde, serde_json, blake3, sha2 and thiserror only. It never
//! touches a database and never dispatches anything: stores live in their own
//! crates (`effect-ledger-sqlite`, ...) and execution in `effect-exec`.
//! [`MemoryLedger`] is the reference implementation, for examples and tests.
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

pub mod canonical;
pub mod clock;
mod contract;
mod error;
pub mod event;
pub mod evidence;
pub mod intent;
mod ledger;
mod memory;
mod prune;
mod record;
mod status;
pub mod transition;

pub use canonical::{FingerprintForm, RequestFingerprint};
pub use clock::{Clock, ManualClock, Sleeper, SystemClock, ThreadSleeper};
pub use contract::{
    AsyncProbeFn, BoxFuture, EffectContract, EffectContractBuilder, KeyFn, OperationIdFn,
    PostconditionFn, ProbeFn,
};
pub use error::{
    BoxError, CallbackError, CanonicalError, ContractError, LedgerError, LedgerErrorKind,
    error_chain,
};
pub use ledger::{
    EffectLedger, EffectLedgerExt, LedgerStats, ListQuery, MAX_LIST_LIMIT, WriteDurability,
};
pub use memory::MemoryLedger;
pub use prune::{ArchivedOperation, PruneReport, PruneRequest};
pub use record::{EffectRecord, EffectResult, Evidence, LedgerEvent, OutcomeProbeResult, Revision};
pub use status::{EffectStatus, ParseStatusError, ProbeStatus, UnknownOutcomePolicy};
pub use transition::{
    Claim, Confirmation, Guard, ManualAction, ManualResolution, NewOperation, Transition,
    TransitionOutcome,
};
