//! [`ScenarioReport`]: what one scenario did, counted at the provider.

use effect_core::{EffectStatus, LedgerEvent};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ContractVariant;

/// What a scenario did. Serializes to the JSON report of docs/spec.md §10, plus the
/// counts of the fault matrix and the naive baseline.
///
/// `passed` is true when the operation ended as expected (by default:
/// confirmed, exactly one committed effect), no caller is left in progress, and
/// the library's guarantee held wherever it claims one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScenarioReport {
    /// The scenario's name.
    pub scenario: String,
    /// Which contract variant ran.
    pub contract: ContractVariant,
    /// The operation id.
    pub operation_id: String,
    /// The final status in the ledger.
    pub status: EffectStatus,
    /// Whether the final status is `confirmed`.
    pub confirmed: bool,
    /// Whether, after every caller returned, the operation is still
    /// `dispatched`: a dispatch nobody finalized.
    pub in_progress: bool,
    /// Dispatches claimed (the ledger's attempt count).
    pub attempts: u32,
    /// Executions started: every caller, every resume.
    pub executions: usize,
    /// Callers that returned `in_progress` instead of dispatching.
    pub in_progress_callers: usize,
    /// Times the handler reached the provider's `perform`.
    pub handler_calls: usize,
    /// Times the outcome probe reached the provider's lookup.
    pub probe_calls: usize,
    /// Effects the provider committed (duplicates included).
    pub committed_effect_count: usize,
    /// The committed count the scenario expects, if it states one.
    pub expected_committed_effects: Option<usize>,
    /// The final status the scenario expects, if it states one.
    pub expected_status: Option<EffectStatus>,
    /// More than one effect committed.
    pub duplicate_effect_detected: bool,
    /// The stored output (the provider's result) of a confirmed operation.
    pub provider_result: Option<Value>,
    /// The operation's ledger event types, in order.
    pub event_types: Vec<String>,
    /// Whether the library's guarantee applies and held.
    pub guarantee: GuaranteeCheck,
    /// The same provider and faults under plain retry-on-error, if run.
    pub naive_baseline: Option<NaiveReport>,
    /// See the type docs.
    pub passed: bool,
}

/// The library's guarantee, checked: at most one committed effect, and no
/// dispatch after an uncertain outcome without a probe's negative answer or a
/// guaranteed provider key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuaranteeCheck {
    /// Whether the library claims the guarantee here. It does not when the
    /// contract claims `provider_idempotency_guaranteed` for a provider that
    /// ignores the key: the guarantee rests on that claim being true.
    pub claimed: bool,
    /// Whether an uncertain write was dispatched again without a basis.
    pub blind_retry: bool,
    /// At most one effect committed and no blind retry.
    pub held: bool,
}

impl GuaranteeCheck {
    /// Checks the guarantee from the committed count and the ledger's events.
    pub fn check(claimed: bool, committed_effects: usize, events: &[LedgerEvent]) -> Self {
        let blind_retry = has_blind_retry(events);
        GuaranteeCheck {
            claimed,
            blind_retry,
            held: committed_effects <= 1 && !blind_retry,
        }
    }

    /// True unless the guarantee is claimed and broken.
    pub fn kept(&self) -> bool {
        !self.claimed || self.held
    }
}

/// The naive baseline: the same provider and faults driven by plain
/// retry-on-error, without a ledger and without a stable idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct NaiveReport {
    /// How the baseline retries.
    pub strategy: String,
    /// How many callers ran.
    pub callers: usize,
    /// Requests sent, over all callers.
    pub attempts: usize,
    /// Whether every caller finally got a success.
    pub succeeded: bool,
    /// Effects the provider committed.
    pub committed_effect_count: usize,
    /// More than one effect committed.
    pub duplicate_effect_detected: bool,
}

/// True when an event history dispatches again after an uncertain outcome
/// without a `retry_authorized` event whose evidence names a basis (a probe's
/// `not_committed` or a guaranteed provider key) or an operator's
/// `manual_retry_authorized`.
///
/// ```
/// use effect_core::LedgerEvent;
/// use effect_testkit::scenario::has_blind_retry;
/// use serde_json::json;
///
/// let event = |sequence, event_type: &str, data| LedgerEvent {
///     sequence,
///     operation_id: "op".into(),
///     event_type: event_type.into(),
///     data,
///     timestamp: String::new(),
/// };
/// let blind = [
///     event(1, "dispatched", json!({"attempt": 1})),
///     event(2, "outcome_unknown", json!({"error": "timeout", "evidence": {}})),
///     event(3, "retry_authorized", json!({"evidence": {}})),
///     event(4, "dispatched", json!({"attempt": 2})),
/// ];
/// assert!(has_blind_retry(&blind));
/// let mut justified = blind.clone();
/// justified[2].data = json!({"evidence": {"retry_basis": "probe_not_committed"}});
/// assert!(!has_blind_retry(&justified));
/// ```
pub fn has_blind_retry(events: &[LedgerEvent]) -> bool {
    use effect_core::event;
    use effect_core::evidence::{
        RETRY_BASIS, RETRY_BASIS_GUARANTEED_KEY, RETRY_BASIS_PROBE_NOT_COMMITTED,
    };
    let mut uncertain = false;
    let mut justified = false;
    for event in events {
        match event.event_type.as_str() {
            event::OUTCOME_UNKNOWN | event::QUARANTINED => {
                uncertain = true;
                justified = false;
            }
            event::RETRY_AUTHORIZED => {
                let basis = event.data["evidence"][RETRY_BASIS].as_str();
                justified = matches!(
                    basis,
                    Some(RETRY_BASIS_PROBE_NOT_COMMITTED | RETRY_BASIS_GUARANTEED_KEY)
                );
            }
            event::MANUAL_RETRY_AUTHORIZED => justified = true,
            event::DISPATCHED => {
                if uncertain && !justified {
                    return true;
                }
                uncertain = false;
                justified = false;
            }
            event::CONFIRMED
            | event::REJECTED
            | event::MANUALLY_CONFIRMED
            | event::MANUALLY_REJECTED => {
                uncertain = false;
                justified = false;
            }
            _ => {}
        }
    }
    false
}
