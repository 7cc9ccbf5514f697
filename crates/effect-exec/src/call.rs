//! One execution in flight ([`Call`]) and what every path of it shares: its
//! secrets scrubbed from what it writes, the contract as observers see it,
//! the result of a call that a reconciliation settled.

use std::time::Duration;

use effect_core::{
    Confirmation, EffectContract, EffectRecord, EffectResult, EffectStatus, Evidence, Transition,
};
use serde_json::Value;

use crate::context::HandlerContext;
use crate::dispatch::Invoke;
use crate::identity::Identity;
use crate::observe::ContractRef;
use crate::secrets::Redactor;

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

/// A contract by name and version, as observers see it.
pub(crate) fn contract_ref(contract: &EffectContract) -> ContractRef<'_> {
    ContractRef {
        name: contract.name(),
        version: contract.version(),
    }
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
