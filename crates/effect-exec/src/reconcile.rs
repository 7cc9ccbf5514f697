//! Reconciliation of uncertain operations (docs/spec.md §6); an operator's
//! audited manual resolution is in `operator.rs`.
//!
//! A round of `execute` (`round.rs`) reconciles through it; it settles through
//! the call (`call.rs`) and identity (`identity.rs`) that round derived.

use effect_core::evidence::{POSTCONDITION, PROBE_ERROR, PROBE_STATUS, RETRY_BASIS};
use effect_core::{
    Confirmation, EffectContract, EffectLedgerExt, EffectRecord, EffectResult, EffectStatus,
    Evidence, Guard, LedgerError, ProbeStatus, Transition, UnknownOutcomePolicy,
};
use serde::Serialize;
use serde_json::Value;

use crate::call::{Call, contract_ref, evidence_of, settled_result};
use crate::dispatch::SyncInvoke;
use crate::error::{ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::Identity;
use crate::observe::{self, EffectEvent, Step};
use crate::retry_basis::{Facts, Learned, RetryBasis, retry_basis};

/// How a reconciliation ended.
pub(crate) enum Reconciled {
    /// The record reached a status to report.
    Settled(EffectRecord),
    /// A retry was authorized; the record is `prepared`.
    RetryAuthorized(EffectRecord),
    /// The record changed while the probe was asked (another caller moved
    /// it on), so nothing was applied; this is the current record, and the
    /// caller's round continues from it.
    Stale(EffectRecord),
}

/// How many times [`EffectExecutor::reconcile`] starts again after another
/// caller changed the record under it, before it reports what it sees.
const RECONCILE_ROUNDS: usize = 16;

const NO_BASIS: &str =
    "no authoritative outcome probe or provider idempotency guarantee is available";

impl EffectExecutor {
    /// Reconciles an operation whose outcome is uncertain, without dispatching
    /// (docs/spec.md §6): asks the contract's probe, confirms a committed effect, or
    /// authorizes a retry only when the probe or a guaranteed provider key makes
    /// it safe; otherwise applies the unknown-outcome policy. A `dispatched`
    /// operation whose lease has expired is first recorded as uncertain (its
    /// handler may still be running); a live dispatch and operations in any
    /// other status are returned as they are.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute); `NotFound` when the operation was never prepared.
    pub fn reconcile<A: Serialize + ?Sized>(
        &self,
        contract: &EffectContract,
        arguments: &A,
    ) -> Result<EffectResult, ExecError> {
        let identity = self.identity_of(contract, arguments)?.identity;
        self.reconcile_identity(contract, &identity)
    }

    /// [`reconcile`](Self::reconcile) of an identity already derived (the
    /// sweep derives it from the stored record).
    pub(crate) fn reconcile_identity(
        &self,
        contract: &EffectContract,
        identity: &Identity,
    ) -> Result<EffectResult, ExecError> {
        let invoke = SyncInvoke::<Value> {
            handler: std::sync::Arc::new(|_, _| {
                Err(HandlerError::unknown("reconciliation never dispatches"))
            }),
        };
        let call = Call {
            contract,
            identity,
            deadline: None,
            invoke: &invoke,
        };
        let mut record = self.get(call.id())?;
        self.check_terms(contract, &record)?;
        for _ in 0..RECONCILE_ROUNDS {
            if record.status == EffectStatus::Dispatched {
                // A dispatch whose lease ended (a crashed worker) is uncertain too.
                record = self.apply(call.id(), Transition::ExpireLease)?.record;
            }
            if !record.status.is_uncertain() {
                break;
            }
            record = match self.reconcile_record(&call, record, true, true)? {
                Reconciled::Settled(record) => return Ok(settled_result(&record)),
                Reconciled::RetryAuthorized(record) => {
                    return Ok(EffectResult::from_record(&record));
                }
                Reconciled::Stale(current) => current,
            };
        }
        Ok(EffectResult::from_record(&record).in_progress_if_active())
    }

    /// docs/spec.md §6 on a record in `outcome_unknown` or `quarantined`.
    ///
    /// `idempotent_retry_allowed`: a guaranteed provider key may authorize
    /// the retry. `dispatch_follows`: the caller will dispatch the retry it
    /// authorizes. When it will not (its call has used its dispatches), a
    /// retry is not authorized now: the record stays as it is, uncertain, and
    /// the next call reconciles it again, so no call ends holding a
    /// `prepared` record that nobody is dispatching.
    pub(crate) fn reconcile_record(
        &self,
        call: &Call<'_>,
        record: EffectRecord,
        idempotent_retry_allowed: bool,
        dispatch_follows: bool,
    ) -> Result<Reconciled, ExecError> {
        let contract = call.contract;
        // The provider forgets its keys after their lifetime: a key older
        // than that guarantees nothing any more.
        let key_expired = contract
            .provider_key_ttl()
            .is_some_and(|ttl| self.older_than(&record.created_at, ttl));
        let guaranteed = contract.provider_idempotency_guaranteed()
            && record.provider_idempotency_key.is_some()
            && !key_expired;
        let facts = Facts {
            status: record.status,
            handler_may_still_be_running: record.handler_may_still_be_running(),
            guaranteed_key: guaranteed,
            idempotent_retry_allowed,
        };
        // The probe's answer is about the record as it is now: everything
        // applied on its strength is conditional on the record not changing
        // meanwhile (another caller's retry would make the answer stale).
        let read = Decided {
            call,
            guard: Guard::unchanged(&record),
            record: &record,
            dispatch_follows,
            guaranteed,
        };
        // A failed postcondition, or a probe that found a conflicting effect,
        // is quarantined and never re-run or probed again automatically
        // (docs/spec.md §6): the provider holds something other than this
        // operation should have produced, and only an operator can say what
        // to do about it.
        let postcondition_failed =
            record.evidence.get(POSTCONDITION).and_then(Value::as_str) == Some("failed");
        let conflict = record.evidence.get(PROBE_STATUS).and_then(Value::as_str)
            == Some(ProbeStatus::Conflict.as_str());
        if postcondition_failed || conflict {
            if record.status == EffectStatus::Quarantined {
                return Ok(Reconciled::Settled(record.clone()));
            }
            let reason = if postcondition_failed {
                "postcondition_failed"
            } else {
                "probe_conflict"
            };
            self.reconciled(call, reason);
            let error = record
                .error
                .clone()
                .unwrap_or_else(|| "the output fails the contract's postcondition".into());
            return self.settle_because(
                &read,
                Transition::Quarantine {
                    error,
                    evidence: Evidence::new(),
                },
                reason,
            );
        }
        // The handler said nothing left the process: the attempt cannot have
        // committed, so the retry needs no probe (and no handler still runs:
        // the guard re-reads that where the reset is written).
        if record.reported_not_sent()
            && retry_basis(facts, Learned::ReportedNotSent) == Some(RetryBasis::NotSent)
        {
            self.reconciled(call, "not_sent");
            return self.reset(&read, RetryBasis::NotSent, Evidence::new());
        }
        let has_probe =
            contract.outcome_probe().is_some() || contract.outcome_probe_async().is_some();
        if has_probe {
            observe::step_started(Step::Probe);
        }
        let probed = call.invoke.probe(
            contract,
            call.arguments(),
            record.provider_idempotency_key.clone(),
        );
        if has_probe {
            let failed = matches!(probed, Some(Err(_)));
            observe::step_finished(failed.then_some("error"));
        }
        let no_basis_reason = if key_expired {
            "key_expired"
        } else {
            "no_basis"
        };
        let no_basis = if key_expired {
            "the provider's idempotency key has outlived the lifetime the contract gives it, and no probe decides the outcome"
        } else {
            NO_BASIS
        };
        let Some(probed) = probed else {
            self.reconciled(call, if guaranteed { "guaranteed_key" } else { "none" });
            return self.retry_or(
                &read,
                retry_basis(facts, Learned::NoProbe),
                Evidence::new(),
                no_basis,
                no_basis_reason,
            );
        };
        // Evidence nested too deep to read back is no answer: a failed probe.
        let probe = match probed.and_then(storable_evidence) {
            Ok(probe) => probe,
            Err(err) => {
                self.reconciled(call, "failed");
                let evidence = evidence_of([(PROBE_ERROR, err.message().into())]);
                return self.retry_or(
                    &read,
                    retry_basis(facts, Learned::ProbeFailed),
                    evidence,
                    &format!("outcome probe failed: {err}"),
                    "probe_failed",
                );
            }
        };
        tracing::info!(operation_id = call.id(), probe_status = %probe.status, "outcome probed");
        self.reconciled(call, probe.status.as_str());
        let mut evidence = probe.evidence.clone();
        evidence.insert(PROBE_STATUS.into(), probe.status.as_str().into());
        match probe.status {
            ProbeStatus::Committed => {
                let output = probe.output.unwrap_or(Value::Null);
                if let Some(failure) = self.check_postcondition(call, &output) {
                    evidence.insert(POSTCONDITION.into(), "failed".into());
                    return self.settle_because(
                        &read,
                        Transition::Quarantine {
                            error: failure,
                            evidence,
                        },
                        "postcondition_failed",
                    );
                }
                // An output nested too deep to read back is as unstorable as one
                // the store refuses.
                let storable = effect_core::canonical::check_depth(&output);
                let confirmation = Confirmation {
                    output,
                    provider_operation_id: probe.provider_operation_id,
                    evidence,
                };
                let transition = Transition::MarkConfirmed {
                    owner_token: None,
                    confirmation,
                };
                let confirmed = match storable {
                    Ok(()) => {
                        let transition = read.guarded(transition);
                        observe::ledger_write(transition.name(), || {
                            self.ledger.apply(call.id(), &transition)
                        })
                    }
                    Err(err) => Err(LedgerError::InvalidInput {
                        message: err.to_string(),
                    }),
                };
                match confirmed {
                    Ok(confirmed) => Ok(read.reconciled(confirmed, Reconciled::Settled)),
                    // The output could not be stored: keep the operation uncertain
                    // rather than report a result that was never recorded.
                    Err(err) if is_unstorable(&err) => {
                        let evidence = evidence_of([(PROBE_STATUS, "committed".into())]);
                        let message = format!("probe output cannot be stored: {err}");
                        self.settle(
                            &read,
                            Transition::MarkOutcomeUnknown {
                                owner_token: None,
                                error: message,
                                evidence,
                            },
                        )
                    }
                    Err(source) => Err(ExecError::Ledger {
                        operation_id: call.id().to_owned(),
                        source,
                    }),
                }
            }
            ProbeStatus::NotCommitted
                if contract
                    .settle()
                    .is_some_and(|settle| !self.older_than(&record.updated_at, settle)) =>
            {
                // A late commit can still appear: not acted on yet.
                self.settle(
                    &read,
                    Transition::MarkOutcomeUnknown {
                        owner_token: None,
                        error: "provider reports not committed, but the attempt is younger than the contract's settle time; probed again later".into(),
                        evidence,
                    },
                )
            }
            ProbeStatus::NotCommitted => self.retry_or(
                &read,
                retry_basis(facts, Learned::ProbeNotCommitted),
                evidence,
                "provider reports not committed, but a previous handler may still dispatch the request",
                "handler_may_still_run",
            ),
            ProbeStatus::Pending => self.settle(
                &read,
                Transition::MarkOutcomeUnknown {
                    owner_token: None,
                    error: "provider reports that the external operation is still pending".into(),
                    evidence,
                },
            ),
            // The provider holds something else than this request: an
            // operator decides, whatever the key or the policy says.
            ProbeStatus::Conflict => self.settle_because(
                &read,
                Transition::Quarantine {
                    error: "the provider holds an effect that conflicts with this request".into(),
                    evidence,
                },
                "probe_conflict",
            ),
            ProbeStatus::Unknown => self.retry_or(
                &read,
                retry_basis(facts, Learned::ProbeUnknown),
                evidence,
                if key_expired {
                    no_basis
                } else {
                    "outcome probe could not determine the outcome"
                },
                if key_expired {
                    "key_expired"
                } else {
                    "probe_unknown"
                },
            ),
        }
    }

    /// A reset for retry on `basis` when there is one; otherwise a resend
    /// left pending under a guaranteed key this call may not use, or the
    /// contract's unknown-outcome policy with `why`.
    fn retry_or(
        &self,
        read: &Decided<'_, '_>,
        basis: Option<RetryBasis>,
        evidence: Evidence,
        why: &str,
        reason: &'static str,
    ) -> Result<Reconciled, ExecError> {
        match basis {
            Some(basis) => self.reset(read, basis, evidence),
            None if read.guaranteed => self.resend_pending(read, evidence),
            None => self.apply_policy(read, why, evidence, reason),
        }
    }

    /// Resets the record for retry on `basis`, recorded as `retry_basis`
    /// beside `evidence`.
    fn reset(
        &self,
        read: &Decided<'_, '_>,
        basis: RetryBasis,
        mut evidence: Evidence,
    ) -> Result<Reconciled, ExecError> {
        evidence.insert(RETRY_BASIS.into(), basis.as_str().into());
        // A basis that holds only while no previous handler runs is read
        // again where the reset is written.
        let guarded;
        let read = if basis.needs_no_running_handler() {
            guarded = Decided {
                guard: read.guard.clone().no_running_handler(),
                ..*read
            };
            &guarded
        } else {
            read
        };
        if !read.dispatch_follows {
            tracing::info!(
                operation_id = read.call.id(),
                "a retry would be safe; left to the next call"
            );
            return Ok(Reconciled::Settled(read.record.clone()));
        }
        let reset = self.apply(
            read.call.id(),
            read.guarded(Transition::ResetForRetry { evidence }),
        )?;
        Ok(read.reconciled(reset, Reconciled::RetryAuthorized))
    }

    /// A resend under the guaranteed key would be safe, but this call has
    /// used its dispatches: the operation stays `outcome_unknown` (not
    /// quarantined, since no operator is needed) and says so; the next
    /// execution, or the `RecoveryWorker`, resends it under the same key.
    fn resend_pending(
        &self,
        read: &Decided<'_, '_>,
        evidence: Evidence,
    ) -> Result<Reconciled, ExecError> {
        if read.record.status != EffectStatus::OutcomeUnknown {
            return Ok(Reconciled::Settled(read.record.clone()));
        }
        let what = read
            .record
            .error
            .as_deref()
            .unwrap_or("the outcome of the last dispatch is unknown");
        let error = format!(
            "{what}; a resend under the guaranteed provider idempotency key is pending: the next \
             execution sends it"
        );
        self.settle(
            read,
            Transition::MarkOutcomeUnknown {
                owner_token: None,
                error,
                evidence,
            },
        )
    }

    /// Applies a transition that settles the round, if the record is
    /// unchanged. Not a quarantine (those say why, [`Self::settle_because`]).
    fn settle(
        &self,
        read: &Decided<'_, '_>,
        transition: Transition,
    ) -> Result<Reconciled, ExecError> {
        self.settle_because(read, transition, "other")
    }

    /// [`Self::settle`], with the reason a quarantine it applies is counted under.
    fn settle_because(
        &self,
        read: &Decided<'_, '_>,
        transition: Transition,
        reason: &'static str,
    ) -> Result<Reconciled, ExecError> {
        let outcome = self.apply(read.call.id(), read.guarded(transition))?;
        if outcome.applied
            && outcome.record.status == EffectStatus::Quarantined
            && read.record.status != EffectStatus::Quarantined
        {
            self.emit(&EffectEvent::Quarantined {
                contract: contract_ref(read.call.contract),
                reason,
            });
        }
        Ok(read.reconciled(outcome, Reconciled::Settled))
    }

    /// A reconciliation of `call` acted on `answer`.
    fn reconciled(&self, call: &Call<'_>, answer: &'static str) {
        self.emit(&EffectEvent::Reconciled {
            contract: contract_ref(call.contract),
            answer,
        });
    }

    fn apply_policy(
        &self,
        read: &Decided<'_, '_>,
        error: &str,
        evidence: Evidence,
        reason: &'static str,
    ) -> Result<Reconciled, ExecError> {
        let transition = match read.call.contract.unknown_outcome() {
            UnknownOutcomePolicy::Quarantine => Transition::Quarantine {
                error: error.to_owned(),
                evidence,
            },
            UnknownOutcomePolicy::KeepUnknown => Transition::MarkOutcomeUnknown {
                owner_token: None,
                error: error.to_owned(),
                evidence,
            },
        };
        self.settle_because(read, transition, reason)
    }
}

/// A decision taken on one read of a record: applied only while that read holds.
struct Decided<'c, 'a> {
    call: &'c Call<'a>,
    guard: Guard,
    /// The record the decision is made on.
    record: &'c EffectRecord,
    /// Whether the caller dispatches a retry this decision authorizes.
    dispatch_follows: bool,
    /// Whether a guaranteed provider key covers a resend.
    guaranteed: bool,
}

impl Decided<'_, '_> {
    /// `transition`, applied only while the read holds, with the call's
    /// secrets scrubbed from what it writes.
    fn guarded(&self, transition: Transition) -> Transition {
        Transition::Guarded(self.guard.clone(), Box::new(self.call.scrub(transition)))
    }

    /// `applied` as `done`; a guard that no longer held as [`Reconciled::Stale`].
    fn reconciled(
        &self,
        outcome: effect_core::TransitionOutcome,
        done: fn(EffectRecord) -> Reconciled,
    ) -> Reconciled {
        if outcome.applied {
            done(outcome.record)
        } else {
            tracing::info!(
                operation_id = self.call.id(),
                status = %outcome.record.status,
                attempt = outcome.record.attempts,
                "record changed while reconciling; starting the round again"
            );
            Reconciled::Stale(outcome.record)
        }
    }
}

/// The probe's answer, unless its evidence nests too deep to be stored.
fn storable_evidence(
    probe: effect_core::OutcomeProbeResult,
) -> Result<effect_core::OutcomeProbeResult, effect_core::CallbackError> {
    match probe
        .evidence
        .values()
        .try_for_each(effect_core::canonical::check_depth)
    {
        Ok(()) => Ok(probe),
        Err(err) => Err(format!("probe evidence cannot be stored: {err}").into()),
    }
}

/// The store refused a value it cannot hold (too large, too deep): nothing
/// was written, and the outcome must be recorded as uncertain instead.
pub(crate) fn is_unstorable(err: &LedgerError) -> bool {
    err.kind() == effect_core::LedgerErrorKind::InvalidInput
}
