//! Errors of the executor layer.

use effect_core::{CallbackError, CanonicalError, EffectStatus, LedgerError, LedgerErrorKind};

/// Why an execution, reconciliation or resolution could not proceed.
///
/// None of these is an uncertain *outcome*: those are reported as an
/// [`EffectResult`](effect_core::EffectResult) with status `outcome_unknown` or
/// `quarantined`. An `ExecError` means the executor could not do its own job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The arguments cannot be canonical JSON (for example NaN); nothing was written.
    #[error("arguments cannot be recorded")]
    InvalidArguments {
        /// The canonicalization error.
        #[source]
        source: CanonicalError,
    },
    /// A contract callback (operation id or provider key) failed; nothing was written.
    #[error("contract {contract:?} could not derive the operation identity")]
    Contract {
        /// The contract name.
        contract: String,
        /// The callback's error.
        #[source]
        source: CallbackError,
    },
    /// The operation id is already recorded with a different request: other
    /// arguments, another contract or version, or another provider key
    /// (docs/spec.md §1). Nothing was written or dispatched; the caller
    /// derived one id for two different effects.
    #[error("operation {operation_id:?} is already recorded with a different request")]
    Conflict {
        /// The operation id.
        operation_id: String,
        /// The ledger's conflict error, naming what differs.
        #[source]
        source: LedgerError,
    },
    /// The ledger refused or failed a step (an unavailable store, an invalid
    /// transition, ...).
    #[error("ledger step failed for operation {operation_id:?}")]
    Ledger {
        /// The operation id.
        operation_id: String,
        /// The ledger's error.
        #[source]
        source: LedgerError,
    },
    /// Typed arguments do not decode back from their own JSON (a lossy
    /// `Serialize`, say); nothing was written.
    #[error("arguments of contract {contract:?} do not decode back as {type_name}")]
    ArgumentsDecode {
        /// The contract name.
        contract: String,
        /// The argument type.
        type_name: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The output of an operation (stored, probed or fresh) does not decode as
    /// the typed output. The ledger keeps it and nothing is dispatched again:
    /// the effect happened, only its record no longer fits the type.
    #[error("output of operation {operation_id:?} does not decode as {type_name}")]
    OutputDecode {
        /// The operation id.
        operation_id: String,
        /// The output type.
        type_name: &'static str,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
    /// The dispatch lease is shorter than the store can keep alive: a lease
    /// renewal may wait up to `lock_wait` for the store's lock (another
    /// process writing back to back), so a lease shorter than twice that can
    /// run out under a live handler. Nothing was written.
    #[error(
        "the dispatch lease of {lease:?} is shorter than twice the ledger's longest lock wait of {lock_wait:?}; \
         lengthen ExecutorOptions::dispatch_lease or shorten the ledger's busy timeout"
    )]
    LeaseTooShort {
        /// The executor's dispatch lease.
        lease: std::time::Duration,
        /// The ledger's longest lock wait.
        lock_wait: std::time::Duration,
    },
    /// A durable handler was registered for a contract that does not store
    /// its intent: a recovery worker would have no arguments to dispatch
    /// it with.
    #[error(
        "contract {contract:?} does not store its intent; build it with .store_intent(true) \
         so that a recovery worker can dispatch its operations"
    )]
    IntentNotStored {
        /// The contract name.
        contract: String,
    },
    /// The arguments hold secrets (a [`Secret`](effect_core::secret::Secret) or a
    /// redacted field) and the contract stores its intent, but no keyring
    /// seals it: the secrets would reach the ledger in clear. Nothing was
    /// written.
    #[error(
        "contract {contract:?} stores its intent and its arguments hold secrets; \
         give the executor a keyring (EffectExecutor::with_keyring) so they are sealed"
    )]
    SecretsNeedSealing {
        /// The contract name.
        contract: String,
    },
    /// Stored intent could not be sealed or opened: an unknown key id, a
    /// tampered or misplaced envelope.
    #[error("stored intent of operation {operation_id:?} cannot be sealed or opened")]
    Seal {
        /// The operation id.
        operation_id: String,
        /// Why.
        #[source]
        source: crate::secrets::SealError,
    },
    /// The stored intent is sealed and the executor has no keyring to open it.
    #[error(
        "stored intent of operation {operation_id:?} is sealed; give the executor the keyring \
         that sealed it (EffectExecutor::with_keyring)"
    )]
    NoKeyring {
        /// The operation id.
        operation_id: String,
    },
    /// The call was prepared by an executor that derives identities
    /// differently (other keys or fingerprint form): its fingerprint is not
    /// the one this executor records. Nothing was written; prepare the call
    /// with the executor that runs it.
    #[error(
        "operation {operation_id:?} was prepared by an executor with other keys or another \
         fingerprint form"
    )]
    ForeignPreparation {
        /// The operation id.
        operation_id: String,
    },
    /// Dispatching the operation would exceed a budget of its contract
    /// (docs/approval.md#budgets). The store refused the claim in its
    /// transaction, and the refusal is terminal: the operation is
    /// `rejected` (a `budget_exceeded` event), nothing was sent and nothing
    /// was charged, and every later call of the same operation answers
    /// this again. Asking again is a new decision: a call whose arguments
    /// derive a new operation id (an attempt number the contract puts in
    /// the id). A budget declared with
    /// [`defer`](effect_core::Budget::defer) defers instead
    /// ([`BudgetDeferred`](Self::BudgetDeferred)).
    #[error(
        "operation {operation_id:?} was refused by budget {refusal} and is rejected; nothing was \
         sent or charged: to ask again, call with arguments that derive a new operation id \
         (docs/approval.md#budgets)"
    )]
    BudgetExceeded {
        /// The operation id.
        operation_id: String,
        /// The budget, its limit and its use when the claim was refused.
        refusal: Box<effect_core::BudgetRefusal>,
    },
    /// A budget declared with [`defer`](effect_core::Budget::defer)
    /// refused the dispatch: nothing was sent or charged, and the operation
    /// stays `prepared` (or `awaiting_approval`), deferred until `until`. A
    /// later call, or a [`RecoveryWorker`](crate::RecoveryWorker) when the
    /// contract stores its intent, dispatches it once the budget has room
    /// before then; after it, the operation is rejected
    /// ([`BudgetDeferralExpired`](Self::BudgetDeferralExpired)). `until` is
    /// `None` for a retry of an operation already dispatched once, which
    /// waits without a bound (`agent-effect-ops cancel` ends it).
    #[error(
        "operation {operation_id:?} was refused by budget {refusal} and is deferred until {}; \
         nothing was sent or charged: it is dispatched once the budget has room",
        until.as_deref().unwrap_or("an operator cancels it")
    )]
    BudgetDeferred {
        /// The operation id.
        operation_id: String,
        /// The budget, its limit and its use when the deferral began.
        refusal: Box<effect_core::BudgetRefusal>,
        /// The bound of the deferral (ISO-8601 UTC, ledger clock).
        until: Option<String>,
    },
    /// The operation was deferred by a budget and its bound passed before
    /// the budget had room: it is `rejected` (a `budget_deferral_expired`
    /// event), nothing was sent or charged. Asked again as for
    /// [`BudgetExceeded`](Self::BudgetExceeded).
    #[error(
        "operation {operation_id:?} was deferred by budget {refusal} until {until} and is now \
         rejected; nothing was sent or charged: to ask again, call with arguments that derive a \
         new operation id (docs/approval.md#budgets)"
    )]
    BudgetDeferralExpired {
        /// The operation id.
        operation_id: String,
        /// The refusal it was deferred on.
        refusal: Box<effect_core::BudgetRefusal>,
        /// The bound that passed (ISO-8601 UTC, ledger clock).
        until: String,
    },
    /// A compensation handler was registered for a contract that names no
    /// compensation.
    #[error("contract {contract:?} names no compensation")]
    NoCompensation {
        /// The contract name.
        contract: String,
    },
    /// [`EffectExecutor::compensate`](crate::EffectExecutor::compensate)
    /// refused: the operation is not one this contract can undo now.
    /// Nothing was written.
    #[error("operation {operation_id:?} cannot be compensated: {refusal}")]
    CompensationRefused {
        /// The original's operation id.
        operation_id: String,
        /// Why.
        refusal: CompensationRefusal,
    },
    /// The running contract weakens the safety terms the operation was
    /// claimed under (docs/spec.md §3.1): it would allow what they forbid
    /// (a key newly claimed as guaranteed for an operation claimed without,
    /// a shorter settle time, a dropped budget, ...). Nothing was written or
    /// dispatched. Either deploy the stored terms again under this version,
    /// or give the new terms a new contract version and keep a handler of
    /// the old version registered until its operations are settled
    /// (docs/recovering-work.md#deploying-a-new-contract-version).
    #[error(
        "operation {operation_id:?} was claimed under contract {contract:?} version {version:?}          with stronger terms than the running contract: {}; restore the stored terms for this          version, or give the new terms a new contract version and keep the old version's          handler until its operations are settled",
        weakenings.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ContractWeakened {
        /// The operation id.
        operation_id: String,
        /// The contract name.
        contract: String,
        /// The contract version both share.
        version: String,
        /// Each weakened term, with its stored and its running value.
        weakenings: Vec<effect_core::terms::Weakening>,
    },
    /// The safety terms stored with the operation cannot be read (a later
    /// stored form, or a damaged event): nothing is decided on it. Nothing
    /// was written or dispatched.
    #[error("operation {operation_id:?}: {message}; upgrade to a build that reads them")]
    ContractTermsUnreadable {
        /// The operation id.
        operation_id: String,
        /// What could not be read.
        message: String,
    },
    /// The async runtime could not run a blocking ledger step.
    #[error("async execution of operation {operation_id:?} was interrupted: {message}")]
    Runtime {
        /// The operation id.
        operation_id: String,
        /// What happened.
        message: String,
    },
}

/// Why an operation cannot be compensated
/// ([`ExecError::CompensationRefused`]): only a confirmed effect is undone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompensationRefusal {
    /// Its outcome is uncertain (`outcome_unknown` or `quarantined`): it may
    /// or may not have happened, so there may be nothing to undo.
    #[error(
        "its outcome is uncertain ({status}); reconcile or resolve it first, an uncertain \
         effect is never undone"
    )]
    Uncertain {
        /// Its status.
        status: EffectStatus,
    },
    /// The provider (or an operator) rejected it: nothing happened to undo.
    #[error("it was rejected, so nothing happened to undo")]
    Rejected,
    /// It was never dispatched (`prepared` or `awaiting_approval`).
    #[error("it was never dispatched ({status})")]
    NeverDispatched {
        /// Its status.
        status: EffectStatus,
    },
    /// A dispatch is in flight: its outcome is not known yet.
    #[error("it is being dispatched; its outcome is not known yet")]
    InFlight,
    /// Its contract names no compensation.
    #[error("its contract {contract:?} names no compensation")]
    NoCompensation {
        /// The contract's name.
        contract: String,
    },
    /// It was recorded under another contract (name or version) than the
    /// one given.
    #[error("it was recorded under contract {contract_name:?} version {contract_version:?}")]
    OtherContract {
        /// The recorded contract's name.
        contract_name: String,
        /// The recorded contract's version.
        contract_version: String,
    },
}

impl CompensationRefusal {
    /// Why an operation in `status` cannot be compensated, or `None` when it
    /// is confirmed.
    pub(crate) fn of_status(status: EffectStatus) -> Option<Self> {
        match status {
            EffectStatus::Confirmed => None,
            EffectStatus::Rejected => Some(CompensationRefusal::Rejected),
            EffectStatus::OutcomeUnknown | EffectStatus::Quarantined => {
                Some(CompensationRefusal::Uncertain { status })
            }
            EffectStatus::Prepared | EffectStatus::AwaitingApproval => {
                Some(CompensationRefusal::NeverDispatched { status })
            }
            EffectStatus::Dispatched => Some(CompensationRefusal::InFlight),
        }
    }
}

impl ExecError {
    /// The error of a ledger step on `operation_id`: [`ExecError::Conflict`]
    /// for a conflict, [`ExecError::Ledger`] for anything else.
    pub(crate) fn ledger(operation_id: &str, source: LedgerError) -> Self {
        let operation_id = operation_id.to_owned();
        if source.kind() == LedgerErrorKind::Conflict {
            ExecError::Conflict {
                operation_id,
                source,
            }
        } else {
            ExecError::Ledger {
                operation_id,
                source,
            }
        }
    }

    /// The ledger error kind, when the ledger failed or refused a conflict.
    pub fn ledger_kind(&self) -> Option<LedgerErrorKind> {
        match self {
            ExecError::Ledger { source, .. } | ExecError::Conflict { source, .. } => {
                Some(source.kind())
            }
            _ => None,
        }
    }

    /// A short, stable name of this error's kind (`ledger`, `conflict`,
    /// `budget_exceeded`, …): low-cardinality, fit for an `error.type`
    /// attribute or a metric label, and never carrying a value.
    pub fn kind_name(&self) -> &'static str {
        match self {
            ExecError::InvalidArguments { .. } => "invalid_arguments",
            ExecError::Contract { .. } => "contract",
            ExecError::Conflict { .. } => "conflict",
            ExecError::Ledger { .. } => "ledger",
            ExecError::ArgumentsDecode { .. } => "arguments_decode",
            ExecError::OutputDecode { .. } => "output_decode",
            ExecError::LeaseTooShort { .. } => "lease_too_short",
            ExecError::IntentNotStored { .. } => "intent_not_stored",
            ExecError::SecretsNeedSealing { .. } => "secrets_need_sealing",
            ExecError::Seal { .. } => "seal",
            ExecError::NoKeyring { .. } => "no_keyring",
            ExecError::ForeignPreparation { .. } => "foreign_preparation",
            ExecError::BudgetExceeded { .. } => "budget_exceeded",
            ExecError::BudgetDeferred { .. } => "budget_deferred",
            ExecError::BudgetDeferralExpired { .. } => "budget_deferral_expired",
            ExecError::NoCompensation { .. } => "no_compensation",
            ExecError::CompensationRefused { .. } => "compensation_refused",
            ExecError::ContractWeakened { .. } => "contract_weakened",
            ExecError::ContractTermsUnreadable { .. } => "contract_terms_unreadable",
            ExecError::Runtime { .. } => "runtime",
        }
    }

    /// True when a budget refused the dispatch, terminally or not:
    /// [`ExecError::BudgetExceeded`], [`ExecError::BudgetDeferred`] or
    /// [`ExecError::BudgetDeferralExpired`]. Nothing was sent or charged.
    pub fn is_budget_exceeded(&self) -> bool {
        matches!(
            self,
            ExecError::BudgetExceeded { .. }
                | ExecError::BudgetDeferred { .. }
                | ExecError::BudgetDeferralExpired { .. }
        )
    }

    /// True when a budget deferred the dispatch: [`ExecError::BudgetDeferred`].
    pub fn is_budget_deferred(&self) -> bool {
        matches!(self, ExecError::BudgetDeferred { .. })
    }

    /// What a budget's refusal made of `record`, when one did: rejected
    /// (the record's `resolution` says by a budget), or deferred (a
    /// `budget_deferral` in its evidence while it waits).
    pub(crate) fn budget_refusal(record: &effect_core::EffectRecord) -> Option<Self> {
        use effect_core::EffectStatus as S;
        use effect_core::evidence as e;
        let refusal = record.evidence.get(e::BUDGET_EXCEEDED)?;
        let refusal = Box::new(effect_core::BudgetRefusal::from_value(refusal)?);
        let operation_id = record.operation_id.clone();
        let deferral = record.evidence.get(e::BUDGET_DEFERRAL);
        let until = deferral
            .and_then(|d| d.get("deferred_until"))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned);
        let resolution = record
            .evidence
            .get(e::RESOLUTION)
            .and_then(serde_json::Value::as_str);
        match record.status {
            S::Rejected if resolution == Some(e::RESOLUTION_BUDGET_EXCEEDED) => {
                Some(ExecError::BudgetExceeded {
                    operation_id,
                    refusal,
                })
            }
            S::Rejected if resolution == Some(e::RESOLUTION_BUDGET_DEFERRAL_EXPIRED) => {
                Some(ExecError::BudgetDeferralExpired {
                    operation_id,
                    refusal,
                    until: until.unwrap_or_default(),
                })
            }
            S::Prepared | S::AwaitingApproval if deferral.is_some() => {
                Some(ExecError::BudgetDeferred {
                    operation_id,
                    refusal,
                    until,
                })
            }
            _ => None,
        }
    }

    /// True when the operation id exists with a different identity
    /// (docs/spec.md §1): [`ExecError::Conflict`].
    pub fn is_conflict(&self) -> bool {
        matches!(self, ExecError::Conflict { .. })
    }
}

/// How a handler fails, named by what it tells the executor.
///
/// - [`HandlerError::unknown`]: the request may have reached the provider (a
///   timeout, a lost response, a reset after the request was written, a
///   5xx). The outcome is uncertain and is reconciled through the probe or a
///   guaranteed key, never retried blindly.
/// - [`HandlerError::rejected`]: the provider definitively refused without
///   applying the effect. Terminal.
/// - [`HandlerError::not_sent`]: the handler failed before anything left the
///   process (a connection refused, a DNS failure, a request it could not
///   build). A retry is safe; claim it only when it is certain.
///
/// A handler's `?` converts a boxed error, an `anyhow::Error` (feature
/// `anyhow`, on by default), an I/O error, a JSON error or a message into
/// [`HandlerError::Unknown`], keeping the error's chain of causes in the
/// message; any other error converts with [`HandlerError::from_error`]. Only
/// a deliberate [`HandlerError::rejected`] or [`HandlerError::not_sent`] says
/// more than "unknown".
///
/// It is a [`std::error::Error`] itself, so it also travels inside other
/// error types.
///
/// ```
/// use effect_exec::HandlerError;
///
/// fn send(body: &str) -> Result<u32, HandlerError> {
///     let parsed: serde_json::Value = serde_json::from_str(body)?;
///     let id = parsed["id"].as_u64().ok_or("the provider answered without an id")?;
///     Ok(u32::try_from(id).map_err(HandlerError::from_error)?)
/// }
///
/// assert_eq!(send(r#"{"id": 7}"#), Ok(7));
/// assert!(matches!(send("{"), Err(HandlerError::Unknown { .. })));
/// let err: Box<dyn std::error::Error> = Box::new(HandlerError::unknown("timed out"));
/// assert_eq!(err.to_string(), "timed out");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandlerError {
    /// The provider refused without applying the effect, with reliable evidence.
    /// Timeouts, connection resets and 5xx responses are **not** rejections.
    Rejected {
        /// The provider's refusal.
        reason: String,
    },
    /// Anything else: the outcome is unknown.
    Unknown {
        /// What went wrong.
        message: String,
    },
    /// Nothing left the process: the request was never sent.
    NotSent {
        /// Why it was not sent.
        message: String,
    },
}

impl HandlerError {
    /// A definitive rejection.
    pub fn rejected(reason: impl Into<String>) -> Self {
        HandlerError::Rejected {
            reason: reason.into(),
        }
    }

    /// A failure with an unknown outcome: the request may have reached the
    /// provider.
    pub fn unknown(message: impl Into<String>) -> Self {
        HandlerError::Unknown {
            message: message.into(),
        }
    }

    /// A failure before anything left the process: a retry is safe.
    pub fn not_sent(message: impl Into<String>) -> Self {
        HandlerError::NotSent {
            message: message.into(),
        }
    }

    /// The former name of [`HandlerError::unknown`].
    #[deprecated(
        since = "0.3.0",
        note = "use HandlerError::unknown: the outcome is unknown"
    )]
    pub fn failed(message: impl Into<String>) -> Self {
        HandlerError::unknown(message)
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandlerError::Rejected { reason } => write!(f, "rejected: {reason}"),
            HandlerError::Unknown { message } => f.write_str(message),
            HandlerError::NotSent { message } => write!(f, "not sent: {message}"),
        }
    }
}

impl std::error::Error for HandlerError {}

impl HandlerError {
    /// A failure with an unknown outcome, from any error: its message and
    /// its chain of causes, `: `-separated.
    pub fn from_error(err: impl std::error::Error) -> Self {
        HandlerError::unknown(chain(&err))
    }
}

use effect_core::error_chain as chain;

impl From<Box<dyn std::error::Error + Send + Sync>> for HandlerError {
    fn from(err: Box<dyn std::error::Error + Send + Sync>) -> Self {
        HandlerError::unknown(chain(err.as_ref()))
    }
}

impl From<Box<dyn std::error::Error>> for HandlerError {
    fn from(err: Box<dyn std::error::Error>) -> Self {
        HandlerError::unknown(chain(err.as_ref()))
    }
}

#[cfg(feature = "anyhow")]
#[cfg_attr(docsrs, doc(cfg(feature = "anyhow")))]
impl From<anyhow::Error> for HandlerError {
    /// The error and its context chain, as `{:#}` prints them.
    fn from(err: anyhow::Error) -> Self {
        HandlerError::unknown(format!("{err:#}"))
    }
}

impl From<std::io::Error> for HandlerError {
    fn from(err: std::io::Error) -> Self {
        HandlerError::from_error(err)
    }
}

impl From<serde_json::Error> for HandlerError {
    fn from(err: serde_json::Error) -> Self {
        HandlerError::from_error(err)
    }
}

impl From<String> for HandlerError {
    fn from(message: String) -> Self {
        HandlerError::unknown(message)
    }
}

impl From<&str> for HandlerError {
    fn from(message: &str) -> Self {
        HandlerError::unknown(message)
    }
}

#[cfg(test)]
mod tests;
