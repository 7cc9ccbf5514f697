//! The rounds of one execution (docs/spec.md §5 step 2): prepare and claim,
//! dispatch at most once, reconcile what is uncertain, and the ledger writes
//! they make.

use std::sync::Arc;

use effect_core::evidence::{
    DISPATCH_INTERRUPTION, HANDLER_MAY_STILL_BE_RUNNING, INTERRUPTED_BEFORE_SENDING,
    INTERRUPTED_BY_HANDLER_EXCEPTION, INTERRUPTED_BY_HANDLER_TIMEOUT,
    INTERRUPTED_BY_UNSTORABLE_OUTPUT, POSTCONDITION, SOURCE, SOURCE_HANDLER_RETURN,
};
use effect_core::{
    Claim, Confirmation, EffectContract, EffectLedger, EffectRecord, EffectResult, EffectStatus,
    Evidence, NewOperation, Transition, TransitionOutcome, WriteDurability,
};
use serde_json::Value;

use crate::call::{Call, contract_ref, evidence_of, settled_result};
use crate::dispatch::{HandlerOutcome, call_guarded};
use crate::error::ExecError;
use crate::executor::EffectExecutor;
use crate::identity::Identity;
use crate::observe::{self, EffectEvent, ExecutionStart, ExecutionTrace, Step};
use crate::reconcile::{Reconciled, is_unstorable};
#[cfg(feature = "metrics")]
use crate::telemetry;

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
                EffectStatus::Prepared | EffectStatus::AwaitingApproval => {
                    // Awaiting approval, claimed only when an approval landed
                    // since the record was read: the claim checks and
                    // consumes it in the store's transaction (or drops it as
                    // expired, and the next pass reports the wait).
                    if record.status == EffectStatus::AwaitingApproval
                        && (retry_after_dispatch.is_some() || record.approval().is_none())
                    {
                        tracing::info!(operation_id = call.id(), "waiting for approval");
                        return Ok(Round::Done(EffectResult::from_record(&record)));
                    }
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
