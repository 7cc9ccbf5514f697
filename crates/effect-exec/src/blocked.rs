//! Why a recovery worker or a sweeper cannot act on an operation, recorded
//! once as a `recovery_blocked` event (docs/spec.md §5c) and read back by
//! [`waiting`](crate::waiting).

use effect_core::{EffectRecord, LedgerEvent, Transition, event};
use serde_json::Value;

use crate::executor::EffectExecutor;

/// What the last `recovery_blocked` event of an operation says.
pub(crate) struct Blocked<'a> {
    pub(crate) reason: &'a str,
    pub(crate) error: &'a str,
}

/// Why a recovery worker or a sweeper last found the operation blocked,
/// when that is its last event: any later event (a dispatch, a resolution)
/// supersedes it.
pub(crate) fn blocked(events: &[LedgerEvent]) -> Option<Blocked<'_>> {
    let last = events.last()?;
    if last.event_type != event::RECOVERY_BLOCKED {
        return None;
    }
    Some(Blocked {
        reason: last
            .data
            .get("reason")
            .and_then(Value::as_str)
            .unwrap_or(""),
        error: last.data.get("error").and_then(Value::as_str).unwrap_or(""),
    })
}

/// What to record about a blocked operation.
pub(crate) struct Block<'a> {
    /// [`event::BLOCKED_INTENT_UNREADABLE`] or
    /// [`event::BLOCKED_CONTRACT_WEAKENED`].
    pub(crate) reason: &'static str,
    /// What the event says (without the operation's arguments).
    pub(crate) recorded: &'a str,
    /// What the log says (may carry a cause the event leaves out).
    pub(crate) logged: &'a str,
    /// The version of the contract that was run.
    pub(crate) contract_version: &'a str,
}

/// Records why `record` cannot be acted on (a `recovery_blocked` event),
/// unless its last event already says so: once per reason, not once per
/// pass. The record itself does not change; a failure to record is logged.
pub(crate) fn record(
    executor: &EffectExecutor,
    record: &EffectRecord,
    events: &[LedgerEvent],
    block: &Block<'_>,
) {
    let id = record.operation_id.as_str();
    let reason = block.reason;
    if let Some(known) = blocked(events)
        && known.reason == reason
        && known.error == block.recorded
    {
        tracing::debug!(
            operation_id = id,
            reason,
            error = block.logged,
            "still blocked"
        );
        return;
    }
    tracing::warn!(
        operation_id = id,
        reason,
        error = block.logged,
        "blocked; recorded for an operator"
    );
    let transition = Transition::RecordRecoveryBlocked {
        reason,
        error: block.recorded.to_owned(),
        contract_version: block.contract_version.to_owned(),
    };
    if let Err(err) = executor.apply(id, transition) {
        tracing::warn!(operation_id = id, error = %err, "why the operation is blocked could not be recorded");
    }
}
