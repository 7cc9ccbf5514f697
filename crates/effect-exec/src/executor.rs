//! [`EffectExecutor`]: execute an effect at most once under its contract (docs/spec.md §5).
//!
//! The executor's API and state; a call's identity is derived in `identity.rs`,
//! its rounds run in `round.rs`, reconciliation and manual resolution are in
//! `reconcile.rs`.

use std::sync::Arc;
use std::time::Duration;

use effect_core::canonical::to_json_value;
use effect_core::terms::ContractTerms;
use effect_core::{
    Clock, EffectContract, EffectLedger, EffectRecord, EffectResult, EffectStatus, Sleeper,
    SystemClock, ThreadSleeper,
};
use serde::Serialize;
use serde_json::Value;

use crate::context::HandlerContext;
use crate::error::{ExecError, HandlerError};
use crate::heartbeat::LeaseKeeper;
use crate::identity::{Identified, Keys, Stored, derive, derive_forms, identify};
use crate::observe::EffectObserver;
use crate::options::{CallOptions, ExecutorOptions};
use crate::secrets::{FingerprintKey, Keyring};
use crate::token::TokenSource;

/// Executes effects through a ledger so that each operation is dispatched only
/// when that is safe, and its outcome is recorded durably.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectContract, MemoryLedger};
/// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
/// use serde_json::{json, Value};
///
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let contract = EffectContract::builder("send_email", |args| {
///     Ok(format!("email:{}:welcome", args["to"].as_str().ok_or("missing to")?))
/// })
/// .build()?;
/// let send = |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
///     Ok(json!({"message_id": format!("msg-{}", args["to"].as_str().unwrap_or(""))}))
/// };
/// let first = executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?;
/// let again = executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?;
/// assert!(first.is_confirmed());
/// assert!(again.duplicate_suppressed);
/// assert_eq!(again.output, first.output);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct EffectExecutor {
    pub(crate) ledger: Arc<dyn EffectLedger>,
    pub(crate) options: ExecutorOptions,
    pub(crate) tokens: Arc<TokenSource>,
    pub(crate) keeper: LeaseKeeper,
    /// Times the bounded wait for a live owner, and the observed durations.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sleeper: Arc<dyn Sleeper>,
    pub(crate) keys: Keys,
    /// Told what executions do ([`crate::observe`]); the process's
    /// global observer when `None`.
    pub(crate) observer: Option<Arc<dyn EffectObserver>>,
}

impl EffectExecutor {
    /// An executor with default options.
    pub fn new(ledger: Arc<dyn EffectLedger>) -> Self {
        EffectExecutor::with_options(ledger, ExecutorOptions::default())
    }

    /// An executor with these options.
    pub fn with_options(ledger: Arc<dyn EffectLedger>, options: ExecutorOptions) -> Self {
        EffectExecutor::with_clock(ledger, options, Arc::new(SystemClock))
    }

    /// An executor on `clock`: its bounded wait for a live owner
    /// ([`ExecutorOptions::wait_for_in_progress`]) is timed on it. Owner
    /// tokens do not derive from it: they come from the operating system's
    /// randomness (see [`Claim`](effect_core::Claim)), so that two processes, on one host or many
    /// sharing a ledger, never draw the same one.
    pub fn with_clock(
        ledger: Arc<dyn EffectLedger>,
        options: ExecutorOptions,
        clock: Arc<dyn Clock>,
    ) -> Self {
        EffectExecutor {
            ledger,
            options,
            tokens: Arc::new(TokenSource::new()),
            keeper: LeaseKeeper::default(),
            clock,
            sleeper: Arc::new(ThreadSleeper),
            keys: Keys::default(),
            observer: None,
        }
    }

    /// Tells `observer` what this executor's executions do (metrics and
    /// traces, [`EffectObserver`](crate::EffectObserver)), instead of the process's global
    /// observer ([`set_global_observer`](crate::set_global_observer)).
    #[must_use]
    pub fn observer(mut self, observer: Arc<dyn EffectObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Seals stored intent with `keyring` before it is written (AEAD, the
    /// operation id as associated data), and opens it with the key it names:
    /// old keys the keyring retires still open what they sealed. Required
    /// for a contract that stores intent holding secrets
    /// (docs/security-boundaries.md).
    #[must_use]
    pub fn with_keyring(mut self, keyring: Keyring) -> Self {
        self.keys.keyring = Some(Arc::new(keyring));
        self
    }

    /// Digests secret arguments into the request fingerprint under this key,
    /// so that the stored fingerprint does not let a low-entropy secret (a
    /// card number) be guessed. Keep it stable: changing it changes the
    /// fingerprint of every request with a secret.
    #[must_use]
    pub fn with_fingerprint_key(mut self, key: FingerprintKey) -> Self {
        self.keys.fingerprint = Some(Arc::new(key));
        self
    }

    /// Waits through `sleeper` between polls of a live owner's dispatch and
    /// between the passes of a spawned [`Sweeper`](crate::Sweeper) or
    /// [`RecoveryWorker`](crate::RecoveryWorker) (default: the thread sleeps). A [`ManualClock`](effect_core::ManualClock)
    /// given as both clock and sleeper makes the wait pass without sleeping.
    #[must_use]
    pub fn with_sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// The ledger.
    pub fn ledger(&self) -> &Arc<dyn EffectLedger> {
        &self.ledger
    }

    /// The options.
    pub fn options(&self) -> &ExecutorOptions {
        &self.options
    }

    /// The identity `arguments` derive under `contract`, with this
    /// executor's fingerprint form and keys. Nothing is written.
    pub(crate) fn identity_of<A: Serialize + ?Sized>(
        &self,
        contract: &EffectContract,
        arguments: &A,
    ) -> Result<Identified, ExecError> {
        identify(
            contract,
            arguments,
            self.options.fingerprint_form,
            &self.keys,
        )
    }

    /// [`identity_of`](Self::identity_of) for an operation recorded with its
    /// intent: the intent is not sealed again, and with `known_id` the id
    /// is not derived again.
    pub(crate) fn identity_of_recorded<A: Serialize + ?Sized>(
        &self,
        contract: &EffectContract,
        arguments: &A,
        known_id: Option<&str>,
    ) -> Result<Identified, ExecError> {
        derive(
            contract,
            arguments,
            self.options.fingerprint_form,
            &self.keys,
            known_id.map_or(Stored::Recorded, Stored::RecordedAs),
        )
    }

    /// [`identity_of_recorded`](Self::identity_of_recorded) of stored
    /// arguments (`revealed`, opened) whose callers passed
    /// [`Secret`](effect_core::secret::Secret) fields, with `marked`, the
    /// same arguments each secret as the marker: the request fingerprint
    /// is derived as it was then (a keyed digest of each secret).
    pub(crate) fn identity_of_marked(
        &self,
        contract: &EffectContract,
        revealed: &Value,
        marked: &Value,
    ) -> Result<Identified, ExecError> {
        let marked =
            to_json_value(marked).map_err(|source| ExecError::InvalidArguments { source })?;
        derive_forms(
            contract,
            revealed.clone(),
            Some(&marked),
            self.options.fingerprint_form,
            &self.keys,
            Stored::Recorded,
        )
    }

    /// True when the ledger time `at` (ISO-8601 UTC, docs/spec.md §8) is at
    /// least `age` before the executor's clock. Timestamps of one format
    /// order as text; an unreadable one counts as old.
    pub(crate) fn older_than(&self, at: &str, age: std::time::Duration) -> bool {
        let cutoff = self
            .clock()
            .now()
            .checked_sub(age)
            .unwrap_or(std::time::UNIX_EPOCH);
        at <= effect_core::format_timestamp(cutoff).as_str()
    }

    /// The clock the executor times its waits on.
    pub(crate) fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// What every wait of this executor sleeps through.
    pub(crate) fn sleeper(&self) -> &Arc<dyn Sleeper> {
        &self.sleeper
    }

    /// The arguments a stored intent holds, as the handler receives them.
    pub(crate) fn open_intent(
        &self,
        operation_id: &str,
        stored: &Value,
    ) -> Result<Value, ExecError> {
        if crate::secrets::sealed_info(stored).is_none() {
            return Ok(stored.clone());
        }
        match &self.keys.keyring {
            Some(keyring) => keyring
                .open(stored, operation_id)
                .map_err(|source| ExecError::Seal {
                    operation_id: operation_id.to_owned(),
                    source,
                }),
            None => Err(ExecError::NoKeyring {
                operation_id: operation_id.to_owned(),
            }),
        }
    }

    /// Waits until another caller's operation settles (confirmed, rejected
    /// or quarantined) or `timeout` passes, without dispatching anything:
    /// for a second caller that wants the first one's result. Polls every
    /// [`ExecutorOptions::poll_interval`] on the executor's clock and
    /// sleeper. A result still in flight when the time is up has
    /// `in_progress` set when a dispatch is live or pending.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `NotFound` when the operation was
    /// never recorded, or for a failing store.
    pub fn wait(&self, operation_id: &str, timeout: Duration) -> Result<EffectResult, ExecError> {
        let until = self.clock.now() + timeout;
        loop {
            let record = self.get(operation_id)?;
            let settled = matches!(
                record.status,
                EffectStatus::Confirmed | EffectStatus::Rejected | EffectStatus::Quarantined
            );
            if settled || self.clock.now() >= until {
                return Ok(EffectResult::from_record(&record).in_progress_if_active());
            }
            self.sleeper.sleep(self.options.poll_interval);
        }
    }

    /// Executes `handler` for `arguments` under `contract` (docs/spec.md §5).
    ///
    /// The handler receives its own copy of the canonical arguments and the
    /// provider idempotency key, and returns a serializable output or a
    /// [`HandlerError`]. It runs on the calling thread unless a deadline is set
    /// (see [`execute_with`](Self::execute_with)).
    ///
    /// # Errors
    ///
    /// [`ExecError::InvalidArguments`] and [`ExecError::Contract`] before
    /// anything is written; [`ExecError::Ledger`] for a conflicting identity
    /// (see [`ExecError::is_conflict`]) or a failing store. An uncertain outcome
    /// is not an error: it is a result with status `outcome_unknown` or `quarantined`.
    /// If the store fails *after* the handler ran, the operation stays
    /// `dispatched` in the ledger; once its lease expires, the next execution
    /// (or [`reconcile`](Self::reconcile)) records it as uncertain and
    /// reconciles it, so the effect is never dispatched again blindly.
    pub fn execute<A, O, H>(
        &self,
        contract: &EffectContract,
        arguments: &A,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        A: Serialize + ?Sized,
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        self.execute_with(contract, arguments, CallOptions::default(), handler)
    }

    /// [`execute`](Self::execute) with per-call options.
    ///
    /// With a deadline the handler runs on its own thread and the executor stops
    /// waiting when the deadline passes. **This is not cancellation**: the
    /// handler keeps running and may still send its request. The ledger records
    /// `handler_may_still_be_running=true`, and a later negative probe does not
    /// authorize a retry unless the provider key is guaranteed idempotent.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute).
    pub fn execute_with<A, O, H>(
        &self,
        contract: &EffectContract,
        arguments: &A,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        A: Serialize + ?Sized,
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        let Identified {
            identity,
            operation,
        } = self.identity_of(contract, arguments)?;
        self.execute_identity(contract, &identity, operation, options, handler)
    }

    /// Refuses `contract` for `record` when it weakens the safety terms
    /// stored with the operation (docs/spec.md §3.1). Operations stored
    /// without terms (the Python package, an earlier version) pass: they
    /// are decided under the running contract, as before.
    pub(crate) fn check_terms(
        &self,
        contract: &EffectContract,
        record: &EffectRecord,
    ) -> Result<(), ExecError> {
        let id = record.operation_id.as_str();
        let events = self
            .ledger
            .events(id)
            .map_err(|source| ExecError::ledger(id, source))?;
        let stored = effect_core::terms::stored(&events).map_err(|message| {
            ExecError::ContractTermsUnreadable {
                operation_id: id.to_owned(),
                message,
            }
        })?;
        let Some(stored) = stored else {
            return Ok(());
        };
        let weakenings = stored.weakened_by(&ContractTerms::of(contract));
        if weakenings.is_empty() {
            return Ok(());
        }
        tracing::warn!(
            operation_id = id,
            contract = contract.name(),
            "running contract weakens the stored terms; refused"
        );
        Err(ExecError::ContractWeakened {
            operation_id: id.to_owned(),
            contract: contract.name().to_owned(),
            version: record.contract_version.clone(),
            weakenings,
        })
    }

    pub(crate) fn get(&self, id: &str) -> Result<EffectRecord, ExecError> {
        let ledger_error = |source| ExecError::Ledger {
            operation_id: id.to_owned(),
            source,
        };
        self.ledger.get(id).map_err(ledger_error)?.ok_or_else(|| {
            ledger_error(effect_core::LedgerError::NotFound {
                operation_id: id.to_owned(),
            })
        })
    }

    /// Refuses a dispatch lease the ledger cannot keep alive: a renewal may
    /// wait the ledger's longest lock wait, so the lease must be at least
    /// twice that (see docs/production.md#sizing-leases-and-deadlines).
    pub(crate) fn check_lease(&self) -> Result<(), ExecError> {
        match self.ledger.longest_lock_wait() {
            Some(lock_wait) if self.options.dispatch_lease < lock_wait.saturating_mul(2) => {
                Err(ExecError::LeaseTooShort {
                    lease: self.options.dispatch_lease,
                    lock_wait,
                })
            }
            _ => Ok(()),
        }
    }
}
