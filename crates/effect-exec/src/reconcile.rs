//! Reconciliation of uncertain operations (docs/spec.md §6) and audited manual resolution.

use effect_core::{
    Confirmation, EffectContract, EffectRecord, EffectResult, Evidence, LedgerError, ManualAction,
    ManualResolution, ProbeStatus, Transition, UnknownOutcomePolicy,
};
use serde::Serialize;
use serde_json::Value;

use crate::dispatch::SyncInvoke;
use crate::error::{ExecError, HandlerError};
use crate::executor::{Call, EffectExecutor, evidence_of, identify};

/// How a reconciliation ended.
pub(crate) enum Reconciled {
    /// The record reached a status to report.
    Settled(EffectRecord),
    /// A retry was authorized; the record is `prepared`.
    RetryAuthorized(EffectRecord),
}

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
        let identity = identify(contract, arguments)?;
        let invoke = SyncInvoke::<Value> {
            handler: std::sync::Arc::new(|_, _| {
                Err(HandlerError::failed("reconciliation never dispatches"))
            }),
        };
        let call = Call {
            contract,
            identity: &identity,
            deadline: None,
            invoke: &invoke,
        };
        let mut record = self.get(call.id())?;
        if record.status == effect_core::EffectStatus::Dispatched {
            // A dispatch whose lease ended (a crashed worker) is uncertain too.
            record = self.apply(call.id(), Transition::ExpireLease)?.record;
        }
        if !record.status.is_uncertain() {
            return Ok(EffectResult::from_record(&record));
        }
        let settled = match self.reconcile_record(&call, record, true)? {
            Reconciled::Settled(record) | Reconciled::RetryAuthorized(record) => record,
        };
        Ok(EffectResult::from_record(&settled))
    }

    /// docs/spec.md §6 on a record in `outcome_unknown` or `quarantined`.
    pub(crate) fn reconcile_record(
        &self,
        call: &Call<'_>,
        record: EffectRecord,
        idempotent_retry_allowed: bool,
    ) -> Result<Reconciled, ExecError> {
        let contract = call.contract;
        let guaranteed =
            contract.provider_idempotency_guaranteed() && record.provider_idempotency_key.is_some();
        let guaranteed_retry = guaranteed && idempotent_retry_allowed;
        let retry_basis = evidence_of([("retry_basis", "provider_idempotency_guaranteed".into())]);
        let probed = call.invoke.probe(
            contract,
            call.arguments(),
            record.provider_idempotency_key.clone(),
        );
        let Some(probed) = probed else {
            return if guaranteed_retry {
                self.reset(call, retry_basis)
            } else {
                self.apply_policy(call, NO_BASIS, Evidence::new())
            };
        };
        let probe = match probed {
            Ok(probe) => probe,
            Err(err) => {
                let mut evidence = evidence_of([("probe_error", err.message().into())]);
                return if guaranteed_retry {
                    evidence.extend(retry_basis);
                    self.reset(call, evidence)
                } else {
                    self.apply_policy(call, &format!("outcome probe failed: {err}"), evidence)
                };
            }
        };
        tracing::info!(operation_id = call.id(), probe_status = %probe.status, "outcome probed");
        let mut evidence = probe.evidence.clone();
        evidence.insert("probe_status".into(), probe.status.as_str().into());
        match probe.status {
            ProbeStatus::Committed => {
                let output = probe.output.unwrap_or(Value::Null);
                if let Some(failure) = self.check_postcondition(call, &output) {
                    evidence.insert("postcondition".into(), "failed".into());
                    let quarantined = self.apply(
                        call.id(),
                        Transition::Quarantine {
                            error: failure,
                            evidence,
                        },
                    )?;
                    return Ok(Reconciled::Settled(quarantined.record));
                }
                let confirmation = Confirmation {
                    output,
                    provider_operation_id: probe.provider_operation_id,
                    evidence,
                };
                let transition = Transition::MarkConfirmed {
                    owner_token: None,
                    confirmation,
                };
                match self.ledger.apply(call.id(), &transition) {
                    Ok(confirmed) => Ok(Reconciled::Settled(confirmed.record)),
                    // The output could not be stored: keep the operation uncertain
                    // rather than report a result that was never recorded.
                    Err(err) if is_unstorable(&err) => {
                        let evidence = evidence_of([("probe_status", "committed".into())]);
                        let message = format!("probe output cannot be stored: {err}");
                        let unknown = self.apply(
                            call.id(),
                            Transition::MarkOutcomeUnknown {
                                owner_token: None,
                                error: message,
                                evidence,
                            },
                        )?;
                        Ok(Reconciled::Settled(unknown.record))
                    }
                    Err(source) => Err(ExecError::Ledger {
                        operation_id: call.id().to_owned(),
                        source,
                    }),
                }
            }
            ProbeStatus::NotCommitted => {
                let may_still_run = record
                    .evidence
                    .get("handler_may_still_be_running")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                if may_still_run && !guaranteed {
                    self.apply_policy(
                        call,
                        "provider reports not committed, but a previous handler may still dispatch the request",
                        evidence,
                    )
                } else {
                    evidence.insert("retry_basis".into(), "probe_not_committed".into());
                    self.reset(call, evidence)
                }
            }
            ProbeStatus::Pending => {
                let unknown = self.apply(
                    call.id(),
                    Transition::MarkOutcomeUnknown {
                        owner_token: None,
                        error: "provider reports that the external operation is still pending"
                            .into(),
                        evidence,
                    },
                )?;
                Ok(Reconciled::Settled(unknown.record))
            }
            ProbeStatus::Unknown => {
                if guaranteed_retry {
                    evidence.extend(retry_basis);
                    self.reset(call, evidence)
                } else {
                    self.apply_policy(
                        call,
                        "outcome probe could not determine the outcome",
                        evidence,
                    )
                }
            }
        }
    }

    fn reset(&self, call: &Call<'_>, evidence: Evidence) -> Result<Reconciled, ExecError> {
        let reset = self.apply(call.id(), Transition::ResetForRetry { evidence })?;
        Ok(if reset.applied {
            Reconciled::RetryAuthorized(reset.record)
        } else {
            // Someone else settled it meanwhile; report what it is now.
            Reconciled::Settled(reset.record)
        })
    }

    fn apply_policy(
        &self,
        call: &Call<'_>,
        error: &str,
        evidence: Evidence,
    ) -> Result<Reconciled, ExecError> {
        let transition = match call.contract.unknown_outcome() {
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
        Ok(Reconciled::Settled(
            self.apply(call.id(), transition)?.record,
        ))
    }

    /// Applies an operator's audited decision: only from `outcome_unknown` or
    /// `quarantined`, with a non-empty actor, reason and evidence reference.
    ///
    /// # Errors
    ///
    /// [`ExecError::Ledger`] with kind `InvalidInput` (blank fields),
    /// `InvalidTransition` (wrong status) or `NotFound`; nothing is written then.
    pub fn resolve(
        &self,
        operation_id: &str,
        resolution: &ManualResolution,
    ) -> Result<EffectRecord, ExecError> {
        let span = tracing::info_span!("effect.resolve", operation_id, actor = %resolution.actor);
        let _entered = span.enter();
        Ok(self
            .apply(operation_id, Transition::Resolve(resolution.clone()))?
            .record)
    }

    /// Manually confirms an uncertain operation with the output the provider shows.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn confirm_manually(
        &self,
        operation_id: &str,
        output: Value,
        provider_operation_id: Option<String>,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &audit.into_resolution(ManualAction::Confirm {
                output,
                provider_operation_id,
            }),
        )
    }

    /// Manually rejects an uncertain operation: it did not happen and must not be retried.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn reject_manually(
        &self,
        operation_id: &str,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(operation_id, &audit.into_resolution(ManualAction::Reject))
    }

    /// Authorizes another dispatch of an uncertain operation.
    ///
    /// # Errors
    ///
    /// As [`resolve`](Self::resolve).
    pub fn authorize_retry(
        &self,
        operation_id: &str,
        audit: Audit,
    ) -> Result<EffectRecord, ExecError> {
        self.resolve(
            operation_id,
            &audit.into_resolution(ManualAction::AuthorizeRetry),
        )
    }
}

/// Who resolved an operation, why, and where the evidence is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// Who decided (not authenticated by the library).
    pub actor: String,
    /// Why.
    pub reason: String,
    /// Where the evidence is: a ticket, a provider dashboard reference.
    pub evidence_reference: String,
}

impl Audit {
    /// An audit trail entry.
    pub fn new(
        actor: impl Into<String>,
        reason: impl Into<String>,
        evidence_reference: impl Into<String>,
    ) -> Self {
        Audit {
            actor: actor.into(),
            reason: reason.into(),
            evidence_reference: evidence_reference.into(),
        }
    }

    fn into_resolution(self, action: ManualAction) -> ManualResolution {
        ManualResolution {
            action,
            actor: self.actor,
            reason: self.reason,
            evidence_reference: self.evidence_reference,
        }
    }
}

fn is_unstorable(err: &LedgerError) -> bool {
    matches!(
        err.kind(),
        effect_core::LedgerErrorKind::InvalidInput | effect_core::LedgerErrorKind::Backend
    )
}
