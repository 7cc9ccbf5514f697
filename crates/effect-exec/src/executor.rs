//! [`EffectExecutor`]: execute an effect at most once under its contract (docs/spec.md §5).

use std::sync::Arc;
use std::time::Duration;

use effect_core::canonical::to_json_value;
use effect_core::evidence::{
    DISPATCH_INTERRUPTION, HANDLER_MAY_STILL_BE_RUNNING, INTERRUPTED_BEFORE_SENDING,
    INTERRUPTED_BY_HANDLER_EXCEPTION, INTERRUPTED_BY_HANDLER_TIMEOUT,
    INTERRUPTED_BY_UNSTORABLE_OUTPUT, POSTCONDITION, SOURCE, SOURCE_HANDLER_RETURN,
};
use effect_core::terms::ContractTerms;
use effect_core::{BudgetCharge, FingerprintKey, Keyring, Redactor};
use effect_core::{
    Claim, Clock, Confirmation, EffectContract, EffectLedger, EffectRecord, EffectResult,
    EffectStatus, Evidence, FingerprintForm, NewOperation, RequestFingerprint, Sleeper,
    SystemClock, ThreadSleeper, Transition, TransitionOutcome, WriteDurability,
};
use serde::Serialize;
use serde_json::Value;

use crate::context::HandlerContext;
use crate::dispatch::{HandlerOutcome, Invoke, call_guarded};
use crate::error::{ExecError, HandlerError};
use crate::heartbeat::LeaseKeeper;
use crate::observe::{
    self, ContractRef, EffectEvent, EffectObserver, ExecutionStart, ExecutionTrace, Step,
};
use crate::options::{CallOptions, ExecutorOptions};
use crate::reconcile::{Reconciled, is_unstorable};
#[cfg(feature = "metrics")]
use crate::telemetry;
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
    tokens: Arc<TokenSource>,
    keeper: LeaseKeeper,
    /// Times the bounded wait for a live owner, and the observed durations.
    pub(crate) clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    pub(crate) keys: Keys,
    /// Told what executions do ([`crate::observe`]); the process's
    /// global observer when `None`.
    pub(crate) observer: Option<Arc<dyn EffectObserver>>,
}

/// The keys that protect secrets: sealing of stored intent, and the keyed
/// digest of secret arguments in the request fingerprint.
#[derive(Debug, Clone, Default)]
pub(crate) struct Keys {
    pub(crate) keyring: Option<Arc<Keyring>>,
    pub(crate) fingerprint: Option<Arc<FingerprintKey>>,
}

/// Who one call is: what every round of it needs.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) operation_id: String,
    /// The canonical arguments, secrets revealed; every callback gets its
    /// own clone.
    pub(crate) arguments: Value,
    /// Scrubs the call's secrets from what is written, when it has any.
    pub(crate) redactor: Option<Arc<Redactor>>,
    /// The arguments as the ledger may store them (secrets and redacted
    /// fields replaced by the marker), when they differ from `arguments`.
    pub(crate) redacted: Option<Value>,
    /// What each claim of the call is charged (docs/approval.md#budgets).
    pub(crate) budgets: Vec<BudgetCharge>,
}

/// A call's identity and the operation its first round prepares, derived
/// from its arguments before anything is written.
#[derive(Debug, Clone)]
pub(crate) struct Identified {
    pub(crate) identity: Identity,
    pub(crate) operation: NewOperation,
}

impl Identity {
    /// What an approver is shown of the call: its arguments as the ledger
    /// may store them.
    pub(crate) fn shown(&self) -> Value {
        self.redacted
            .clone()
            .unwrap_or_else(|| self.arguments.clone())
    }
}

impl Identified {
    /// Marks the operation as waiting for a human's approval when it is
    /// created, with what the approver is shown of it.
    pub(crate) fn require_approval(&mut self) {
        self.operation.requires_approval = true;
        if self.operation.redacted_arguments.is_none() {
            self.operation.redacted_arguments = Some(self.identity.shown());
        }
    }

    /// True when these arguments derive the stored `record`: its operation
    /// id and its request fingerprint.
    pub(crate) fn describes(&self, record: &EffectRecord) -> bool {
        self.identity.operation_id == record.operation_id
            && self
                .operation
                .fingerprint
                .matches(&record.request_fingerprint)
    }
}

/// One execution in flight.
pub(crate) struct Call<'a> {
    pub(crate) contract: &'a EffectContract,
    pub(crate) identity: &'a Identity,
    pub(crate) deadline: Option<Duration>,
    pub(crate) invoke: &'a dyn Invoke,
}

impl Call<'_> {
    pub(crate) fn id(&self) -> &str {
        &self.identity.operation_id
    }

    pub(crate) fn arguments(&self) -> Value {
        self.identity.arguments.clone()
    }

    /// `transition` with this call's secrets scrubbed from everything it
    /// writes in clear: error text, evidence, outputs.
    pub(crate) fn scrub(&self, transition: Transition) -> Transition {
        match &self.identity.redactor {
            Some(redactor) => scrub(redactor, transition),
            None => transition,
        }
    }

    /// What the handler is told about the dispatch of `record`.
    pub(crate) fn context(&self, record: &EffectRecord) -> HandlerContext {
        HandlerContext::new(
            self.id(),
            self.contract.name(),
            self.contract.version(),
            record.attempts,
            record.provider_idempotency_key.clone(),
        )
    }
}

/// How many times a round may find the record moved on by others before it
/// reports what it sees.
const MAX_PASSES: u32 = 64;

/// What a dispatch round ended with.
enum Round {
    Done(EffectResult),
    /// An automatic retry was authorized; the record is `prepared`.
    Retry(EffectRecord),
    /// After this round's dispatch, another caller moved the record on; the
    /// round continues from the current record without dispatching again.
    /// `retry_next`: the way the dispatch ended would allow the next round.
    Again {
        record: EffectRecord,
        retry_next: bool,
    },
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
    /// randomness (see [`Claim`]), so that two processes, on one host or many
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
        at <= effect_core::clock::format_timestamp(cutoff).as_str()
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
        if effect_core::sealed_info(stored).is_none() {
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

    /// The whole of docs/spec.md §5 step 2, for any way of invoking user code.
    pub(crate) fn run(
        &self,
        call: &Call<'_>,
        operation: NewOperation,
    ) -> Result<EffectResult, ExecError> {
        let trace = self.start_trace(call.contract, call.identity);
        self.run_traced(call, operation, trace)
    }

    /// The trace of an execution, when an observer traces it: started on
    /// the caller's thread, before anything is written.
    pub(crate) fn start_trace(
        &self,
        contract: &EffectContract,
        identity: &Identity,
    ) -> Option<Box<dyn ExecutionTrace>> {
        let observer = self.observing()?;
        let recovery = observe::take_recovery();
        observer.execution(&ExecutionStart {
            contract: contract_ref(contract),
            operation_id: &identity.operation_id,
            recovery: recovery.is_some(),
            linked_trace: recovery.as_ref().and_then(Option::as_deref),
            arguments: &identity.arguments,
            redactor: identity.redactor.as_deref(),
        })
    }

    /// [`run`](Self::run) under a trace started already (the async API
    /// starts it on the caller's task).
    pub(crate) fn run_traced(
        &self,
        call: &Call<'_>,
        mut operation: NewOperation,
        trace: Option<Box<dyn ExecutionTrace>>,
    ) -> Result<EffectResult, ExecError> {
        let started = self.started();
        if let Some(trace) = &trace {
            operation.trace_context = trace.trace_context();
        }
        let entered = observe::enter(trace);
        let answer = self.run_logged(call, operation);
        let contract = contract_ref(call.contract);
        let duration = self.since(started);
        match &answer {
            Ok(result) => self.emit(&EffectEvent::Executed {
                contract,
                result,
                duration,
            }),
            Err(error) => self.emit(&EffectEvent::Failed {
                contract,
                error,
                duration,
            }),
        }
        if let Some(trace) = entered.exit() {
            trace.finished(answer.as_ref());
        }
        answer
    }

    fn run_logged(
        &self,
        call: &Call<'_>,
        operation: NewOperation,
    ) -> Result<EffectResult, ExecError> {
        let span = tracing::info_span!(
            "effect.execute",
            operation_id = call.id(),
            contract = call.contract.name(),
            version = call.contract.version(),
            status = tracing::field::Empty,
        );
        let _entered = span.enter();
        let result = self.run_rounds(call, operation)?;
        span.record("status", result.status.as_str());
        Ok(result)
    }

    fn run_rounds(
        &self,
        call: &Call<'_>,
        operation: NewOperation,
    ) -> Result<EffectResult, ExecError> {
        self.check_lease()?;
        let claim = self.new_claim(call);
        // A precondition is asked before the first claim: the operation is
        // only prepared here, and the round claims it once the check passed.
        let checked = call.contract.precondition().is_some();
        let first = if checked {
            self.apply(call.id(), Transition::Prepare(operation))?
        } else {
            self.apply(
                call.id(),
                Transition::PrepareAndClaim(operation, claim.clone()),
            )?
        };
        if !first.applied {
            // The operation existed (or waits for an approval, or a budget
            // refused it): nothing is decided on it before the running
            // contract is checked against the terms it was claimed under.
            self.check_terms(call.contract, &first.record)?;
        }
        if !matches!(
            first.record.status,
            EffectStatus::Prepared | EffectStatus::AwaitingApproval
        ) {
            // A claim still to come (the round's) reports its own refusal.
            self.refused_by_budget(call, &first)?;
        }
        let mut record = first.record;
        let mut owned = (first.applied && !checked).then_some(claim);
        for round in 0..2 {
            match self.round(call, record, owned.take(), round == 0)? {
                Round::Done(result) => return Ok(result),
                Round::Retry(next) | Round::Again { record: next, .. } => record = next,
            }
        }
        // Both rounds used: leave the authorized retry for a later execution.
        Ok(EffectResult::from_record(&record))
    }

    /// One dispatch round: settle what the record says, dispatching at most once.
    fn round(
        &self,
        call: &Call<'_>,
        mut record: EffectRecord,
        mut owned: Option<Claim>,
        first_round: bool,
    ) -> Result<Round, ExecError> {
        let waiting_until = self
            .options
            .wait_for_in_progress
            .map(|wait| self.clock.now() + wait);
        let mut waited = false;
        // Each pass either returns or moves the record forward; the bound guards
        // against a ledger that keeps changing under concurrent callers.
        // Set once this round has dispatched (or authorized a retry after
        // its dispatch): it never dispatches a second time.
        let mut retry_after_dispatch: Option<bool> = None;
        let mut passes = 0;
        while passes < MAX_PASSES {
            passes += 1;
            if let Some(claim) = owned.take() {
                match self.dispatch(call, &record, &claim, first_round)? {
                    Round::Again {
                        record: current,
                        retry_next,
                    } => {
                        retry_after_dispatch = Some(retry_next);
                        record = current;
                        continue;
                    }
                    round => return Ok(round),
                }
            }
            match record.status {
                EffectStatus::Confirmed => {
                    let mut result = EffectResult::from_record(&record);
                    result.duplicate_suppressed = true;
                    tracing::info!(operation_id = call.id(), "stored result replayed");
                    return Ok(Round::Done(result));
                }
                EffectStatus::Rejected => {
                    return Ok(Round::Done(EffectResult::from_record(&record)));
                }
                EffectStatus::Dispatched => {
                    let expired = self.apply(call.id(), Transition::ExpireLease)?;
                    if expired.applied || expired.record.status != EffectStatus::Dispatched {
                        record = expired.record;
                        continue;
                    }
                    match waiting_until {
                        Some(until) if self.clock.now() < until => {
                            waited = true;
                            self.sleeper.sleep(self.options.poll_interval);
                            record = self.get(call.id())?;
                            // Waiting for the live owner is bounded by the
                            // deadline, not by the passes.
                            passes -= 1;
                        }
                        _ => {
                            let mut result = EffectResult::from_record(&expired.record);
                            result.in_progress = true;
                            tracing::info!(
                                operation_id = call.id(),
                                waited,
                                "dispatch in progress elsewhere"
                            );
                            return Ok(Round::Done(result));
                        }
                    }
                }
                EffectStatus::OutcomeUnknown | EffectStatus::Quarantined => {
                    let retry_allowed = retry_after_dispatch.unwrap_or(true);
                    match self.reconcile_record(call, record, retry_allowed, retry_allowed)? {
                        Reconciled::Settled(settled) => {
                            return Ok(Round::Done(settled_result(&settled)));
                        }
                        Reconciled::RetryAuthorized(prepared) => record = prepared,
                        Reconciled::Stale(current) => record = current,
                    }
                }
                EffectStatus::Prepared if retry_after_dispatch.is_some() => {
                    // This round already dispatched: a further dispatch is the
                    // next round's (when a retry is allowed) or a later call's.
                    return Ok(if retry_after_dispatch == Some(true) {
                        Round::Retry(record)
                    } else {
                        Round::Done(EffectResult::from_record(&record).in_progress_if_active())
                    });
                }
                EffectStatus::Prepared => {
                    if let Some(rejected) = self.refused_by_precondition(call, &record)? {
                        match rejected {
                            Ok(done) => return Ok(Round::Done(done)),
                            Err(current) => {
                                record = current;
                                continue;
                            }
                        }
                    }
                    let claim = self.new_claim(call);
                    let claimed = self.apply(call.id(), Transition::Claim(claim.clone()))?;
                    self.refused_by_budget(call, &claimed)?;
                    record = claimed.record;
                    if claimed.applied {
                        owned = Some(claim);
                    }
                }
                EffectStatus::AwaitingApproval
                    if retry_after_dispatch.is_none() && record.approval().is_some() =>
                {
                    // An approval landed since the record was read: the claim
                    // checks and consumes it in the store's transaction (or
                    // drops it as expired, and the next pass reports the wait).
                    if let Some(rejected) = self.refused_by_precondition(call, &record)? {
                        match rejected {
                            Ok(done) => return Ok(Round::Done(done)),
                            Err(current) => {
                                record = current;
                                continue;
                            }
                        }
                    }
                    let claim = self.new_claim(call);
                    let claimed = self.apply(call.id(), Transition::Claim(claim.clone()))?;
                    self.refused_by_budget(call, &claimed)?;
                    record = claimed.record;
                    if claimed.applied {
                        owned = Some(claim);
                    }
                }
                EffectStatus::AwaitingApproval => {
                    tracing::info!(operation_id = call.id(), "waiting for approval");
                    return Ok(Round::Done(EffectResult::from_record(&record)));
                }
            }
        }
        Ok(Round::Done(
            EffectResult::from_record(&record).in_progress_if_active(),
        ))
    }

    /// Invokes the handler under a claimed lease and records what happened.
    fn dispatch(
        &self,
        call: &Call<'_>,
        record: &EffectRecord,
        claim: &Claim,
        first_round: bool,
    ) -> Result<Round, ExecError> {
        let id = call.id();
        let token = claim.owner_token.as_str();
        tracing::info!(operation_id = id, attempt = record.attempts, "dispatching");
        let context = call.context(record);
        // What the handler records through its context: the context itself
        // goes to the handler.
        let recorded = context.recorded();
        let started = self.started();
        observe::step_started(Step::Handler {
            attempt: record.attempts,
        });
        // What the handler traces joins its step, on whatever thread runs it.
        let context = context.with_scope(observe::step_scope());
        let outcome = {
            let _heartbeat = self.keeper.hold(
                Arc::clone(&self.ledger),
                id.to_owned(),
                claim.owner_token.clone(),
                self.options.dispatch_lease,
                self.options.lease_heartbeat,
            );
            call.invoke
                .handler(call.arguments(), context, call.deadline)
        };
        let kind = outcome.kind();
        observe::step_finished((kind != "returned").then_some(kind));
        self.emit(&EffectEvent::HandlerCalled {
            contract: contract_ref(call.contract),
            outcome: kind,
            duration: self.since(started),
        });
        // What the handler recorded, under the executor's own evidence.
        let with_handler_evidence = |own: Evidence| -> Evidence {
            let mut merged = recorded.evidence();
            merged.extend(own);
            merged
        };
        let durability = self.outcome_durability(call, record);
        let (error, evidence, retry_allowed) = match outcome {
            HandlerOutcome::Rejected(reason) => {
                let error = format!("provider definitively rejected the effect: {reason}");
                let rejected = self.apply_with(
                    id,
                    call.scrub(Transition::MarkRejected {
                        owner_token: token.to_owned(),
                        error: error.clone(),
                    }),
                    durability,
                )?;
                if !rejected.applied {
                    self.record_late(
                        call,
                        token,
                        record.attempts,
                        kind,
                        evidence_of([("error", error.into())]),
                    );
                }
                return Ok(Round::Done(EffectResult::from_record(&rejected.record)));
            }
            HandlerOutcome::Returned(Ok(output)) => match self.check_postcondition(call, &output) {
                None => {
                    let confirmation = Confirmation {
                        output,
                        provider_operation_id: recorded.provider_operation_id(),
                        evidence: with_handler_evidence(evidence_of([(
                            SOURCE,
                            SOURCE_HANDLER_RETURN.into(),
                        )])),
                    };
                    let transition = call.scrub(Transition::MarkConfirmed {
                        owner_token: Some(token.to_owned()),
                        confirmation,
                    });
                    let confirmed = observe::ledger_write(transition.name(), || {
                        self.ledger.apply_with(id, &transition, durability)
                    });
                    match confirmed {
                        Ok(confirmed) => {
                            if !confirmed.applied
                                && let Transition::MarkConfirmed { confirmation, .. } = transition
                            {
                                self.record_late(
                                    call,
                                    token,
                                    record.attempts,
                                    kind,
                                    evidence_of([
                                        ("output", confirmation.output),
                                        ("evidence", Value::Object(confirmation.evidence)),
                                    ]),
                                );
                            }
                            return Ok(self.after_finalize(call, confirmed));
                        }
                        // The store refused the output (too large for it): the
                        // effect happened, so record it as uncertain at once
                        // rather than leave the dispatch to its lease.
                        Err(err) if is_unstorable(&err) => (
                            format!("handler output cannot be stored: {err}"),
                            evidence_of([(
                                DISPATCH_INTERRUPTION,
                                INTERRUPTED_BY_UNSTORABLE_OUTPUT.into(),
                            )]),
                            false,
                        ),
                        Err(source) => {
                            return Err(ExecError::Ledger {
                                operation_id: id.to_owned(),
                                source,
                            });
                        }
                    }
                }
                Some(failure) => (
                    failure,
                    evidence_of([(POSTCONDITION, "failed".into())]),
                    false,
                ),
            },
            HandlerOutcome::Returned(Err(err)) => (
                format!("handler output cannot be stored as JSON: {err}"),
                evidence_of([(
                    DISPATCH_INTERRUPTION,
                    INTERRUPTED_BY_UNSTORABLE_OUTPUT.into(),
                )]),
                false,
            ),
            HandlerOutcome::Failed(message) => (
                message,
                evidence_of([(
                    DISPATCH_INTERRUPTION,
                    INTERRUPTED_BY_HANDLER_EXCEPTION.into(),
                )]),
                first_round,
            ),
            // Nothing left the process: a retry is always safe. A later round
            // leaves it to the next call (the record stays `outcome_unknown`
            // with this evidence), rather than quarantine an attempt that
            // cannot have committed.
            HandlerOutcome::NotSent(message) => (
                if first_round {
                    format!("nothing was sent: {message}")
                } else {
                    format!(
                        "nothing was sent: {message}; a resend is pending: the next execution sends it"
                    )
                },
                evidence_of([(DISPATCH_INTERRUPTION, INTERRUPTED_BEFORE_SENDING.into())]),
                true,
            ),
            HandlerOutcome::TimedOut => (
                format!(
                    "handler missed its deadline of {:?}; it may still be running",
                    call.deadline.unwrap_or_default()
                ),
                evidence_of([
                    (HANDLER_MAY_STILL_BE_RUNNING, true.into()),
                    (DISPATCH_INTERRUPTION, INTERRUPTED_BY_HANDLER_TIMEOUT.into()),
                ]),
                first_round,
            ),
        };
        let transition = call.scrub(Transition::MarkOutcomeUnknown {
            owner_token: Some(token.to_owned()),
            error,
            evidence: with_handler_evidence(evidence),
        });
        let unknown = self.apply_with(id, transition.clone(), durability)?;
        if !unknown.applied {
            if let Transition::MarkOutcomeUnknown {
                error, evidence, ..
            } = transition
            {
                self.record_late(
                    call,
                    token,
                    record.attempts,
                    kind,
                    evidence_of([
                        ("error", error.into()),
                        ("evidence", Value::Object(evidence)),
                    ]),
                );
            }
            return Ok(self.after_finalize(call, unknown));
        }
        // A retry is dispatched only by the first round; a later one leaves it
        // to the next call.
        let retry_next = retry_allowed && first_round;
        Ok(
            match self.reconcile_record(call, unknown.record, retry_allowed, retry_next)? {
                Reconciled::Settled(settled) => Round::Done(settled_result(&settled)),
                Reconciled::RetryAuthorized(prepared) => Round::Retry(prepared),
                Reconciled::Stale(record) => Round::Again { record, retry_next },
            },
        )
    }

    /// Asks the contract's precondition before the first dispatch of
    /// `record` (never before a retry: an earlier attempt may have changed
    /// what it checks). `None`: go on and claim. `Some(Ok(result))`: it
    /// refused, and the operation is rejected with its reason, nothing
    /// sent. `Some(Err(current))`: the record changed meanwhile; the round
    /// continues from `current`.
    fn refused_by_precondition(
        &self,
        call: &Call<'_>,
        record: &EffectRecord,
    ) -> Result<Option<Result<EffectResult, EffectRecord>>, ExecError> {
        let Some(check) = call.contract.precondition() else {
            return Ok(None);
        };
        if record.attempts > 0 {
            return Ok(None);
        }
        let arguments = call.arguments();
        let refusal = call_guarded(|| check(&arguments)).map_err(|source| ExecError::Contract {
            contract: call.contract.name().to_owned(),
            source,
        })?;
        let Some(reason) = refusal else {
            return Ok(None);
        };
        tracing::info!(
            operation_id = call.id(),
            "precondition failed; rejected, nothing sent"
        );
        let outcome = self.apply(
            call.id(),
            Transition::Guarded(
                effect_core::Guard::unchanged(record),
                Box::new(call.scrub(Transition::RejectByPrecondition { reason })),
            ),
        )?;
        Ok(Some(if outcome.applied {
            Ok(EffectResult::from_record(&outcome.record))
        } else {
            Err(outcome.record)
        }))
    }

    /// Keeps what this attempt's handler returned after its claim was lost
    /// (its lease expired and another caller moved the record on): a
    /// `late_observation` event, redacted like everything else, never a
    /// status change (docs/spec.md §4). A failure to record it is logged,
    /// not returned: the caller's answer is the record as it stands.
    fn record_late(
        &self,
        call: &Call<'_>,
        token: &str,
        attempt: u32,
        outcome: &str,
        fields: Evidence,
    ) {
        let mut observation =
            evidence_of([("attempt", attempt.into()), ("outcome", outcome.into())]);
        observation.extend(fields);
        let transition = call.scrub(Transition::RecordLateObservation {
            owner_token: token.to_owned(),
            observation,
        });
        match self.apply(call.id(), transition) {
            Ok(_) => tracing::warn!(
                operation_id = call.id(),
                attempt,
                outcome,
                "handler returned after its claim was lost; kept as a late observation"
            ),
            Err(err) => tracing::warn!(
                operation_id = call.id(),
                error = %err,
                "a late observation could not be recorded"
            ),
        }
    }

    /// After a finalizing write by the owner: report it, or, when the lease was
    /// taken over meanwhile, report what the ledger now says.
    fn after_finalize(&self, call: &Call<'_>, outcome: TransitionOutcome) -> Round {
        if !outcome.applied {
            tracing::warn!(
                operation_id = call.id(),
                status = %outcome.record.status,
                "dispatch lease was taken over; this caller cannot finalize"
            );
        }
        Round::Done(EffectResult::from(outcome.record).in_progress_if_active())
    }

    /// `None` when the output satisfies the postcondition (or there is none),
    /// else why not.
    pub(crate) fn check_postcondition(&self, call: &Call<'_>, output: &Value) -> Option<String> {
        let check = call.contract.postcondition()?;
        let arguments = call.arguments();
        match call_guarded(|| check(&arguments, output)) {
            Ok(true) => None,
            Ok(false) => Some("the output fails the contract's postcondition".to_owned()),
            Err(err) => Some(format!("the postcondition could not be evaluated: {err}")),
        }
    }

    /// How durable the outcome of this dispatch must be before the caller is
    /// answered: deferrable only in the deferred-outcomes mode, and only when
    /// a lost outcome can be reconciled without an operator (an outcome probe,
    /// or a guaranteed provider key the record carries). A lost outcome leaves
    /// the record `dispatched`; its lease expires and the probe or the key
    /// settles it, so an `outcome_unknown` write is deferrable on the same
    /// basis as a confirmation (and the reconciliation that follows it is
    /// durable, which makes it durable too).
    fn outcome_durability(&self, call: &Call<'_>, record: &EffectRecord) -> WriteDurability {
        let contract = call.contract;
        let probe = contract.outcome_probe().is_some() || contract.outcome_probe_async().is_some();
        let safe_basis = probe
            || (contract.provider_idempotency_guaranteed()
                && record.provider_idempotency_key.is_some());
        if self.options.deferred_outcomes && safe_basis {
            WriteDurability::Deferrable
        } else {
            WriteDurability::Durable
        }
    }

    /// Applies a transition durably, logging status changes.
    pub(crate) fn apply(
        &self,
        id: &str,
        transition: Transition,
    ) -> Result<TransitionOutcome, ExecError> {
        self.apply_with(id, transition, WriteDurability::Durable)
    }

    /// Applies a transition as durably as asked, logging status changes.
    pub(crate) fn apply_with(
        &self,
        id: &str,
        transition: Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, ExecError> {
        let name = transition.name();
        #[cfg(feature = "metrics")]
        let started = self.clock.now();
        let outcome =
            observe::ledger_write(name, || self.ledger.apply_with(id, &transition, durability))
                .map_err(|source| ExecError::ledger(id, source))?;
        #[cfg(feature = "metrics")]
        telemetry::transition(
            name,
            self.clock.now().duration_since(started).unwrap_or_default(),
        );
        if outcome.applied {
            tracing::info!(
                operation_id = id,
                transition = name,
                status = %outcome.record.status,
                attempt = outcome.record.attempts,
                "effect transition"
            );
        } else {
            tracing::debug!(operation_id = id, transition = name, status = %outcome.record.status, "transition not applied");
        }
        Ok(outcome)
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

    /// The budget error of a claim's `outcome` that dispatched nothing
    /// because of a budget: the operation is rejected by one (this claim's
    /// refusal, or an earlier one: every call of it is told alike) or
    /// deferred by one.
    fn refused_by_budget(
        &self,
        call: &Call<'_>,
        outcome: &TransitionOutcome,
    ) -> Result<(), ExecError> {
        match ExecError::budget_refusal(&outcome.record) {
            Some(refusal) if !outcome.applied => {
                self.emit(&EffectEvent::BudgetRefused {
                    contract: contract_ref(call.contract),
                });
                Err(refusal)
            }
            _ => Ok(()),
        }
    }

    fn new_claim(&self, call: &Call<'_>) -> Claim {
        Claim::new(self.tokens.next(), self.options.dispatch_lease)
            .with_budgets(call.identity.budgets.clone())
    }
}

/// Derives the identity of a call (docs/spec.md §5 step 1). Nothing is written.
///
/// The arguments are serialized twice: once revealing every
/// [`Secret`](effect_core::Secret) (what the handler, the probe and the
/// contract's callbacks see, and what sealed intent holds) and once as the
/// ledger may store them, secrets and the contract's redacted fields
/// replaced by a marker. When the two differ the request fingerprint is
/// taken over the redacted form with a digest of each secret.
pub(crate) fn identify<A: Serialize + ?Sized>(
    contract: &EffectContract,
    arguments: &A,
    form: FingerprintForm,
    keys: &Keys,
) -> Result<Identified, ExecError> {
    derive(contract, arguments, form, keys, Stored::New)
}

/// What [`derive`] knows of the operation it derives.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stored<'a> {
    /// Maybe not recorded yet: everything is derived, and the intent sealed
    /// for the operation the first round may create.
    New,
    /// Recorded with its intent (a recovery worker's dispatch): everything
    /// is derived, and the intent, stored already, is not sealed again.
    Recorded,
    /// Recorded under this id by an earlier version of the contract: the
    /// id is not derived again, and the intent is not sealed.
    RecordedAs(&'a str),
}

/// [`identify`] for an operation `stored` says may be recorded already.
pub(crate) fn derive<A: Serialize + ?Sized>(
    contract: &EffectContract,
    arguments: &A,
    form: FingerprintForm,
    keys: &Keys,
    stored: Stored<'_>,
) -> Result<Identified, ExecError> {
    let invalid = |source| ExecError::InvalidArguments { source };
    let (revealed, any_secret) = effect_core::secret::reveal_counted(|| to_json_value(arguments));
    let revealed = revealed.map_err(invalid)?;
    // Without a Secret field or a redaction path the two forms are one:
    // the common call serializes once.
    let marked = if any_secret || !contract.redaction().is_empty() {
        Some(to_json_value(arguments).map_err(invalid)?)
    } else {
        None
    };
    derive_forms(contract, revealed, marked.as_ref(), form, keys, stored)
}

/// [`derive`] from the arguments' two forms: `revealed`, secrets in clear,
/// and `marked`, each [`Secret`](effect_core::secret::Secret) field as the
/// marker (`None`: the same as `revealed`).
pub(crate) fn derive_forms(
    contract: &EffectContract,
    revealed: Value,
    marked: Option<&Value>,
    form: FingerprintForm,
    keys: &Keys,
    stored: Stored<'_>,
) -> Result<Identified, ExecError> {
    let redacted = marked
        .map(|marked| contract.redaction().apply(marked))
        .filter(|redacted| *redacted != revealed);
    let secrets = redacted.is_some();
    let operation_id = match stored {
        Stored::RecordedAs(id) => id.to_owned(),
        Stored::New | Stored::Recorded => operation_id_of(contract, &revealed)?,
    };
    let key = provider_key_of(contract, &revealed)?;
    let budgets = budget_charges_of(contract, &revealed)?;
    let requires_approval =
        call_guarded(|| contract.approval_required_for(&revealed)).map_err(|source| {
            ExecError::Contract {
                contract: contract.name().to_owned(),
                source,
            }
        })?;
    let fingerprint = match &redacted {
        Some(redacted) => RequestFingerprint::of_value(&effect_core::redaction::fingerprint_view(
            &revealed,
            redacted,
            keys.fingerprint.as_deref(),
        )),
        None => RequestFingerprint::of_value(&revealed),
    };
    let intent = if contract.stores_intent() && matches!(stored, Stored::New) {
        Some(match &keys.keyring {
            Some(keyring) => {
                keyring
                    .seal(&revealed, &operation_id)
                    .map_err(|source| ExecError::Seal {
                        operation_id: operation_id.clone(),
                        source,
                    })?
            }
            None if secrets => {
                return Err(ExecError::SecretsNeedSealing {
                    contract: contract.name().to_owned(),
                });
            }
            None => revealed.clone(),
        })
    } else {
        None
    };
    let mut identified = Identified {
        identity: Identity {
            operation_id,
            redactor: redacted
                .as_ref()
                .map(|redacted| Arc::new(Redactor::new(&revealed, redacted))),
            redacted,
            arguments: revealed,
            budgets,
        },
        operation: NewOperation::new(
            contract.name().to_owned(),
            contract.version().to_owned(),
            fingerprint.with_form(form),
        )
        .with_provider_idempotency_key(key)
        .with_intent(intent)
        .with_requires_approval(requires_approval)
        .with_contract_terms(Some(ContractTerms::of(contract))),
    };
    if requires_approval {
        identified.require_approval();
    }
    Ok(identified)
}

/// The operation id `contract` derives from the canonical `arguments`: the
/// one derivation, a panicking callback an error like a failing one.
pub(crate) fn operation_id_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<String, ExecError> {
    call_guarded(|| contract.operation_id(arguments)).map_err(|source| ExecError::Contract {
        contract: contract.name().to_owned(),
        source,
    })
}

/// What a call with the canonical `arguments` is charged to each budget of
/// `contract`, its scope and cost callbacks guarded like [`operation_id_of`].
pub(crate) fn budget_charges_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<Vec<BudgetCharge>, ExecError> {
    contract
        .budgets()
        .iter()
        .map(|budget| {
            call_guarded(|| budget.charge(arguments)).map_err(|source| ExecError::Contract {
                contract: contract.name().to_owned(),
                source,
            })
        })
        .collect()
}

/// A contract by name and version, as observers see it.
pub(crate) fn contract_ref(contract: &EffectContract) -> ContractRef<'_> {
    ContractRef {
        name: contract.name(),
        version: contract.version(),
    }
}

/// The provider idempotency key `contract` derives from the canonical
/// `arguments`, guarded like [`operation_id_of`].
pub(crate) fn provider_key_of(
    contract: &EffectContract,
    arguments: &Value,
) -> Result<Option<String>, ExecError> {
    call_guarded(|| contract.provider_idempotency_key(arguments)).map_err(|source| {
        ExecError::Contract {
            contract: contract.name().to_owned(),
            source,
        }
    })
}

/// The result of a call that a reconciliation settled. A confirmation there
/// (the probe found an earlier attempt's effect, or another caller had
/// confirmed it) is an effect this call did not dispatch again:
/// `duplicate_suppressed`, as for a replay.
pub(crate) fn settled_result(record: &EffectRecord) -> EffectResult {
    let mut result = EffectResult::from_record(record);
    result.duplicate_suppressed = record.status == EffectStatus::Confirmed;
    result
}

/// `transition` with `redactor`'s secrets replaced by the marker.
fn scrub(redactor: &Redactor, transition: Transition) -> Transition {
    let evidence = |evidence: Evidence| -> Evidence {
        evidence
            .into_iter()
            .map(|(key, value)| (redactor.scrub_str(&key), redactor.scrub_value(&value)))
            .collect()
    };
    match transition {
        Transition::MarkOutcomeUnknown {
            owner_token,
            error,
            evidence: found,
        } => Transition::MarkOutcomeUnknown {
            owner_token,
            error: redactor.scrub_str(&error),
            evidence: evidence(found),
        },
        Transition::MarkConfirmed {
            owner_token,
            confirmation,
        } => Transition::MarkConfirmed {
            owner_token,
            confirmation: Confirmation {
                output: redactor.scrub_value(&confirmation.output),
                provider_operation_id: confirmation
                    .provider_operation_id
                    .map(|id| redactor.scrub_str(&id)),
                evidence: evidence(confirmation.evidence),
            },
        },
        Transition::MarkRejected { owner_token, error } => Transition::MarkRejected {
            owner_token,
            error: redactor.scrub_str(&error),
        },
        Transition::Quarantine {
            error,
            evidence: found,
        } => Transition::Quarantine {
            error: redactor.scrub_str(&error),
            evidence: evidence(found),
        },
        Transition::ResetForRetry { evidence: found } => Transition::ResetForRetry {
            evidence: evidence(found),
        },
        Transition::RejectByPrecondition { reason } => Transition::RejectByPrecondition {
            reason: redactor.scrub_str(&reason),
        },
        Transition::RecordLateObservation {
            owner_token,
            observation,
        } => Transition::RecordLateObservation {
            owner_token,
            observation: evidence(observation),
        },
        Transition::Guarded(guard, inner) => {
            Transition::Guarded(guard, Box::new(scrub(redactor, *inner)))
        }
        other => other,
    }
}

pub(crate) fn evidence_of<const N: usize>(entries: [(&str, Value); N]) -> Evidence {
    entries
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
}
