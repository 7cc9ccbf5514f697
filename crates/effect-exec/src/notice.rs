//! [`UncertainOutcome`]: what a model is told when an effect is not confirmed.
//!
//! An agent framework hands a tool's answer back to the model. When the
//! executor cannot confirm an effect, telling the model "failed" invites it
//! to call the tool again (or to report success anyway), which is how a lost
//! acknowledgement turns into a second charge. The notice says instead that
//! the outcome is not known, that the call must not be repeated, and which
//! operation id is being reconciled. The tool adapters (`effect-rig`,
//! `effect-mcp`) return it as a successful tool result, so a framework's
//! automatic retry of failed tools does not fire either.

use effect_core::{EffectResult, EffectStatus};
use serde::{Deserialize, Serialize};

/// The model-visible answer for an effect whose outcome is not known.
///
/// ```
/// use effect_core::{EffectResult, EffectStatus};
/// use effect_exec::UncertainOutcome;
/// let mut record = effect_core::EffectRecord::new(
///     "invoice:INV-1:capture", "capture_payment", "1", "blake3:00", "2026-01-01T00:00:00+00:00",
/// );
/// record.status = EffectStatus::Quarantined;
/// record.attempts = 1;
/// let result = EffectResult::from_record(&record);
/// let notice = UncertainOutcome::from_result("capture_payment", &result).expect("not confirmed");
/// assert!(!notice.retry);
/// assert!(notice.message.contains("invoice:INV-1:capture"));
/// assert!(!notice.message.contains("fail"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct UncertainOutcome {
    /// `"unknown"`: whether the effect happened is not known yet; or
    /// `"awaiting_approval"`: it was not sent, and is sent once when a human
    /// approves it (docs/approval.md).
    pub outcome: String,
    /// The operation's status (`outcome_unknown`, `quarantined`, `dispatched`
    /// for a call in progress elsewhere, `prepared` for a retry left to
    /// later, `awaiting_approval`).
    pub status: EffectStatus,
    /// The operation id under which the effect is being reconciled.
    pub operation_id: String,
    /// Always `false`: the model must not call the tool again for this.
    pub retry: bool,
    /// The instruction to the model, in words.
    pub message: String,
}

impl UncertainOutcome {
    /// The notice for `result` of tool `tool`, or `None` when the result is
    /// settled (`confirmed` or `rejected`). A call waiting for approval gets
    /// the same kind of notice (a successful tool result, `retry: false`),
    /// saying that nothing was sent.
    pub fn from_result(tool: &str, result: &EffectResult) -> Option<Self> {
        if result.status.is_terminal() {
            return None;
        }
        let operation_id = &result.operation_id;
        if result.status == EffectStatus::AwaitingApproval {
            let message = format!(
                "`{tool}` was not run: this request waits for a human's approval. Do not call \
                 `{tool}` again for it and do not report it as done: it runs once when it is \
                 approved, and a denial cancels it. It is tracked as operation \
                 `{operation_id}`; tell the user it is awaiting approval under that id."
            );
            return Some(UncertainOutcome {
                outcome: "awaiting_approval".to_owned(),
                status: result.status,
                operation_id: operation_id.clone(),
                retry: false,
                message,
            });
        }
        let why = if result.in_progress {
            "another call of the same operation is still in progress"
        } else if result.status == EffectStatus::Quarantined {
            "the request may have taken effect and an operator is reviewing it"
        } else {
            "the request may have taken effect and is being reconciled with the provider"
        };
        let message = format!(
            "The outcome of `{tool}` is not known: {why}. Do not call `{tool}` again for this \
             request and do not report it as done or as not done: repeating it could apply it \
             twice. It is tracked as operation `{operation_id}`; tell the user it is awaiting \
             confirmation under that id."
        );
        Some(UncertainOutcome {
            outcome: "unknown".to_owned(),
            status: result.status,
            operation_id: operation_id.clone(),
            retry: false,
            message,
        })
    }
}

#[cfg(test)]
mod tests;
