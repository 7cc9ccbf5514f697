//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663)
//! backed by the ledger: a task is an operation, its id the operation id,
//! and its status is read from the operation's record on every `tasks/get`,
//! so a server restarted on the same ledger answers for the tasks of the
//! process that died.

use std::time::Duration;

use effect_core::{EffectRecord, EffectStatus};
use rmcp::model::{DetailedTask, InputRequests, JsonObject, Task, TaskPayload};
use serde_json::{Value, json};

/// The JSON-RPC error code of a failed task whose effect the provider
/// refused (`rejected`): `-32000`, in the range JSON-RPC leaves to servers.
pub const REJECTED_ERROR_CODE: i64 = -32000;

/// The actor a `tasks/cancel` records when it denies an operation waiting
/// for approval.
pub const CANCEL_ACTOR: &str = "mcp-client";

/// The reason a `tasks/cancel` records when it denies an operation waiting
/// for approval.
pub const CANCEL_REASON: &str = "cancelled by the MCP client through tasks/cancel";

/// How a server with tasks answers task-augmented calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskOptions {
    /// The polling interval the server suggests (`pollIntervalMs`).
    pub poll_interval: Duration,
}

impl Default for TaskOptions {
    /// A suggested polling interval of one second.
    fn default() -> Self {
        TaskOptions {
            poll_interval: Duration::from_secs(1),
        }
    }
}

impl TaskOptions {
    /// Sets the polling interval the server suggests.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }
}

/// True when `record` was denied by a `tasks/cancel`.
fn cancelled_by_client(record: &EffectRecord) -> bool {
    let says =
        |key: &str, value: &str| record.evidence.get(key).and_then(Value::as_str) == Some(value);
    record.status == EffectStatus::Rejected
        && says(effect_core::evidence::RESOLUTION, "approval_denied")
        && says("actor", CANCEL_ACTOR)
        && says("reason", CANCEL_REASON)
}

/// The task `record` is at `now` (seconds since the Unix epoch), with
/// `completed` the tool result of a confirmed record and `options` the
/// server's.
pub(crate) fn detailed(
    record: &EffectRecord,
    now: f64,
    completed: impl FnOnce() -> JsonObject,
    options: TaskOptions,
) -> DetailedTask {
    let (payload, message) = payload(record, now, completed);
    let task = Task::new(
        record.operation_id.clone(),
        payload.status(),
        record.created_at.clone(),
        record.updated_at.clone(),
    )
    .with_status_message(message);
    // The ledger keeps the record until it is pruned: no TTL (`ttlMs: null`).
    let task = if payload.status().is_terminal() {
        task
    } else {
        task.with_poll_interval_ms(millis(options.poll_interval))
    };
    DetailedTask::new(task, payload)
}

/// `value`'s fields, when it is an object.
pub(crate) fn object(value: Value) -> JsonObject {
    match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn payload(
    record: &EffectRecord,
    now: f64,
    completed: impl FnOnce() -> JsonObject,
) -> (TaskPayload, String) {
    let id = &record.operation_id;
    let waiting = || TaskPayload::InputRequired {
        input_requests: InputRequests::new(),
    };
    match record.status {
        EffectStatus::Confirmed => (
            TaskPayload::Completed {
                result: completed(),
            },
            "the effect is confirmed".to_owned(),
        ),
        EffectStatus::Rejected if cancelled_by_client(record) => (
            TaskPayload::Cancelled,
            "cancelled before it was approved: nothing was sent".to_owned(),
        ),
        EffectStatus::Rejected => {
            let reason = record.error.as_deref().unwrap_or("no reason given");
            let error = json!({
                "code": REJECTED_ERROR_CODE,
                "message": format!("the effect was refused: {reason}"),
                "data": {"operation_id": id, "status": record.status},
            });
            (
                TaskPayload::Failed {
                    error: object(error),
                },
                "the effect was refused".to_owned(),
            )
        }
        EffectStatus::AwaitingApproval if record.approval().is_some() => (
            TaskPayload::Working,
            format!(
                "approved, not sent yet: the next call of this tool with the same arguments (or \
                 a RecoveryWorker) dispatches operation `{id}` once"
            ),
        ),
        EffectStatus::AwaitingApproval => (
            waiting(),
            format!(
                "waiting for a human's approval of exactly this request; nothing was sent \
                 (approve or deny operation `{id}` with agent-effect-ops or \
                 EffectExecutor::approve; tasks/cancel denies it)"
            ),
        ),
        EffectStatus::Quarantined => (
            waiting(),
            format!(
                "the outcome is not known and nothing can settle it automatically: an \
                 operator decides operation `{id}` (agent-effect-ops); do not call again"
            ),
        ),
        EffectStatus::OutcomeUnknown => (
            TaskPayload::Working,
            format!(
                "the outcome is not known: the next call of this tool with the same arguments, \
                 or a RecoveryWorker, reconciles operation `{id}` with the provider"
            ),
        ),
        EffectStatus::Dispatched if record.is_stale_at(now) => (
            TaskPayload::Working,
            format!(
                "the process that dispatched operation `{id}` stopped renewing its lease: the \
                 next call of this tool with the same arguments records the outcome as unknown \
                 and reconciles it"
            ),
        ),
        EffectStatus::Dispatched => (
            TaskPayload::Working,
            format!(
                "operation `{id}` was dispatched: its handler is running, or its process died \
                 and its lease has not run out yet"
            ),
        ),
        EffectStatus::Prepared => (
            TaskPayload::Working,
            format!("operation `{id}` is recorded and waits for its dispatch"),
        ),
    }
}
