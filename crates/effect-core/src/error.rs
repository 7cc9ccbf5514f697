//! Error types of the core layer.

use std::fmt;

use crate::status::EffectStatus;

/// A boxed error from a lower layer, kept as the `source` of ours.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Arguments or outputs that cannot be represented as canonical JSON.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CanonicalError {
    /// NaN or an infinity was found; JSON cannot carry it faithfully.
    #[error("non-finite number at {path}: JSON cannot represent NaN or infinities")]
    NonFinite {
        /// A JSON-pointer-like path to the value.
        path: String,
    },
    /// Arrays and objects nest deeper than
    /// [`MAX_DEPTH`](crate::canonical::MAX_DEPTH) levels: the ledger could not
    /// read the value back, so nothing holding it is written.
    #[error("JSON nested deeper than {limit} levels at {path}")]
    TooDeep {
        /// A JSON-pointer-like path to the array or object past the limit.
        path: String,
        /// The limit, [`MAX_DEPTH`](crate::canonical::MAX_DEPTH).
        limit: usize,
    },
    /// The value could not be serialized (for example a map with non-string keys).
    #[error("value cannot be serialized as JSON")]
    Serialize {
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}

/// A contract that cannot be built (docs/spec.md §3).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ContractError {
    /// The contract name is empty or only whitespace.
    #[error("contract name must not be blank")]
    BlankName,
    /// The contract version is empty or only whitespace.
    #[error("contract {name:?}: version must not be blank")]
    BlankVersion {
        /// The contract name.
        name: String,
    },
    /// `provider_idempotency_guaranteed` was set without a key function.
    #[error(
        "contract {name:?}: provider_idempotency_guaranteed requires a provider_idempotency_key function"
    )]
    GuaranteeWithoutKey {
        /// The contract name.
        name: String,
    },
    /// A redaction path is not a JSON Pointer.
    #[error("contract {name:?}: invalid redaction path")]
    InvalidRedaction {
        /// The contract name.
        name: String,
        /// What is wrong with the path.
        #[source]
        source: RedactionError,
    },
    /// A budget cannot be declared (docs/approval.md#budgets).
    #[error("contract {name:?}: budget {budget:?}: {why}")]
    InvalidBudget {
        /// The contract name.
        name: String,
        /// The budget's name.
        budget: String,
        /// What is wrong.
        why: &'static str,
    },
    /// An intent migration cannot be declared
    /// ([`EffectContractBuilder::reads_intent_of`](crate::EffectContractBuilder::reads_intent_of)).
    #[error("contract {name:?}: reading the intent of version {earlier:?}: {why}")]
    InvalidIntentMigration {
        /// The contract name.
        name: String,
        /// The earlier version named.
        earlier: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// An error raised by a user callback (operation id, key, probe, postcondition).
///
/// Build one from a message: `Err("missing invoice_id")?` works through `From<&str>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallbackError {
    message: String,
}

/// An error's message followed by its sources' messages, `: `-separated,
/// for a one-line message that has no `source` of its own (a trace, a
/// handler's error text).
///
/// ```
/// use effect_core::{LedgerError, error_chain};
/// let err = LedgerError::unavailable("writing", Some::<effect_core::BoxError>("disk full".into()));
/// assert_eq!(error_chain(&err), format!("{err}: disk full"));
/// ```
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

impl CallbackError {
    /// A callback error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        CallbackError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CallbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CallbackError {}

impl From<&str> for CallbackError {
    fn from(message: &str) -> Self {
        CallbackError::new(message)
    }
}

impl From<String> for CallbackError {
    fn from(message: String) -> Self {
        CallbackError::new(message)
    }
}

/// The backend-neutral kind of a [`LedgerError`], for callers to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LedgerErrorKind {
    /// The same operation id was prepared with different identity fields.
    Conflict,
    /// The operation does not exist.
    NotFound,
    /// The transition is not allowed from the operation's current status.
    InvalidTransition,
    /// The request itself is invalid (blank actor, limit out of range, ...).
    InvalidInput,
    /// The store cannot be reached or is busy; retrying later may succeed.
    Unavailable,
    /// Stored data cannot be decoded.
    Corrupt,
    /// The store does not offer this capability.
    Unsupported,
    /// Any other failure of the storage backend.
    Backend,
}

/// A failure of an [`EffectLedger`](crate::EffectLedger) operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// `prepare` of an existing operation id with different identity fields.
    #[error("operation {operation_id:?} already exists with a different {field}")]
    Conflict {
        /// The operation id.
        operation_id: String,
        /// Which identity field differs: contract name, contract version,
        /// request fingerprint or provider idempotency key.
        field: &'static str,
    },
    /// The operation does not exist.
    #[error("operation {operation_id:?} not found")]
    NotFound {
        /// The operation id.
        operation_id: String,
    },
    /// The transition is not allowed from the current status.
    #[error("cannot {transition} operation {operation_id:?}: its status is {status}")]
    InvalidTransition {
        /// The operation id.
        operation_id: String,
        /// The transition that was asked for.
        transition: &'static str,
        /// The status the operation is in.
        status: EffectStatus,
    },
    /// A retry authorization while a previous handler may still send the
    /// request, without the operator stating that it stopped.
    #[error("cannot authorize a retry of operation {operation_id:?}: {why}")]
    HandlerMayStillRun {
        /// The operation id.
        operation_id: String,
        /// What the record shows.
        why: &'static str,
    },
    /// An approval that cannot be recorded: expired already, or the
    /// operation has an unused one (docs/approval.md).
    #[error("cannot approve operation {operation_id:?}: {why}")]
    ApprovalRefused {
        /// The operation id.
        operation_id: String,
        /// Why.
        why: &'static str,
    },
    /// The request is invalid.
    #[error("invalid ledger request: {message}")]
    InvalidInput {
        /// What is wrong and what to do.
        message: String,
    },
    /// The store is unreachable or busy.
    #[error("ledger unavailable: {message}")]
    Unavailable {
        /// What was being done.
        message: String,
        /// The backend error.
        #[source]
        source: Option<BoxError>,
    },
    /// Stored data cannot be decoded.
    #[error("ledger data is corrupt: {message}")]
    Corrupt {
        /// What could not be decoded, and where.
        message: String,
        /// The decoding error.
        #[source]
        source: Option<BoxError>,
    },
    /// The store does not offer this capability.
    #[error("{capability} is not supported by this ledger")]
    Unsupported {
        /// The capability.
        capability: &'static str,
    },
    /// Any other backend failure.
    #[error("ledger backend failed: {message}")]
    Backend {
        /// What was being done.
        message: String,
        /// The backend error.
        #[source]
        source: Option<BoxError>,
    },
}

impl LedgerError {
    /// The backend-neutral kind.
    pub fn kind(&self) -> LedgerErrorKind {
        match self {
            LedgerError::Conflict { .. } => LedgerErrorKind::Conflict,
            LedgerError::NotFound { .. } => LedgerErrorKind::NotFound,
            LedgerError::InvalidTransition { .. } => LedgerErrorKind::InvalidTransition,
            LedgerError::HandlerMayStillRun { .. } => LedgerErrorKind::InvalidTransition,
            LedgerError::ApprovalRefused { .. } => LedgerErrorKind::InvalidTransition,
            LedgerError::InvalidInput { .. } => LedgerErrorKind::InvalidInput,
            LedgerError::Unavailable { .. } => LedgerErrorKind::Unavailable,
            LedgerError::Corrupt { .. } => LedgerErrorKind::Corrupt,
            LedgerError::Unsupported { .. } => LedgerErrorKind::Unsupported,
            LedgerError::Backend { .. } => LedgerErrorKind::Backend,
        }
    }

    /// An [`LedgerError::InvalidInput`] with this message.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        LedgerError::InvalidInput {
            message: message.into(),
        }
    }

    /// A [`LedgerError::Corrupt`] with this message and source.
    pub fn corrupt(message: impl Into<String>, source: impl Into<Option<BoxError>>) -> Self {
        LedgerError::Corrupt {
            message: message.into(),
            source: source.into(),
        }
    }

    /// A [`LedgerError::Backend`] with this message and source.
    pub fn backend(message: impl Into<String>, source: impl Into<Option<BoxError>>) -> Self {
        LedgerError::Backend {
            message: message.into(),
            source: source.into(),
        }
    }

    /// A [`LedgerError::Unavailable`] with this message and source.
    pub fn unavailable(message: impl Into<String>, source: impl Into<Option<BoxError>>) -> Self {
        LedgerError::Unavailable {
            message: message.into(),
            source: source.into(),
        }
    }
}

/// A [`Redaction`](crate::Redaction) rule that cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedactionError {
    /// The path is not a JSON Pointer (RFC 6901) this crate can apply.
    #[error("redaction path {path:?} is invalid: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
