//! MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663)
//! backed by the ledger: a task is an operation, its id the operation id,
//! and its status is read from the operation's record on every `tasks/get`,
//! so a server restarted on the same ledger answers for the tasks of the
//! process that died.

use std::time::Duration;

use effect_core::{EffectRecord, EffectStatus};
use rmcp::model::{
    DetailedTask, ElicitRequest, ElicitResult, ElicitationAction, InputRequest, InputRequests,
    JsonObject, Task, TaskPayload,
};
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

/// The suffix of the actor an elicited approval or denial records, after
/// the name the human gave: the library does not authenticate it.
pub const ELICITED_ACTOR_SUFFIX: &str = " (via MCP elicitation)";

/// The prefix of the `inputRequests` key of an approval question; the
/// request fingerprint follows, so an answer approves only the request it
/// was asked about.
pub const APPROVAL_KEY_PREFIX: &str = "approval:";

/// How a server with tasks answers task-augmented calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TaskOptions {
    /// The polling interval the server suggests (`pollIntervalMs`).
    pub poll_interval: Duration,
    /// When `Some`, a task waiting for approval asks its client, through
    /// an elicitation in `inputRequests`, and an approval answered through
    /// `tasks/update` is valid this long. `None` (the default) leaves
    /// approvals to operators.
    pub elicit_approvals: Option<Duration>,
}

impl Default for TaskOptions {
    /// A suggested polling interval of one second; approvals are left to
    /// operators.
    fn default() -> Self {
        TaskOptions {
            poll_interval: Duration::from_secs(1),
            elicit_approvals: None,
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

    /// Asks for approvals through MCP elicitation: a task waiting for
    /// approval carries, in `inputRequests`, a form asking whether to
    /// approve exactly this request, who decides and why, to a client that
    /// declared the elicitation capability; its answer through
    /// `tasks/update` records an approval valid for `valid_for` (or a
    /// denial), bound to the request fingerprint and used once.
    ///
    /// Enable it only for hosts that put elicitations to a human: whoever
    /// answers the form approves the effect, and the name given is not
    /// authenticated (it is recorded with [`ELICITED_ACTOR_SUFFIX`]).
    #[must_use]
    pub fn elicit_approvals(mut self, valid_for: Duration) -> Self {
        self.elicit_approvals = Some(valid_for);
        self
    }
}

/// The key of the approval question for `record`.
pub(crate) fn approval_key(record: &EffectRecord) -> String {
    format!("{APPROVAL_KEY_PREFIX}{}", record.request_fingerprint)
}

/// The elicitation asking to approve `record`'s request.
fn approval_question(record: &EffectRecord) -> Option<InputRequest> {
    let message = format!(
        "Approve operation `{}` ({} {})? Nothing has been sent. An approval lets it run once, \
         with exactly the arguments it was called with.",
        record.operation_id, record.contract_name, record.contract_version
    );
    let request = json!({
        "method": "elicitation/create",
        "params": {
            "mode": "form",
            "message": message,
            "requestedSchema": {
                "type": "object",
                "properties": {
                    "decision": {"type": "string", "enum": ["approve", "deny"], "title": "Decision"},
                    "actor": {"type": "string", "minLength": 1, "title": "Your name"},
                    "reason": {"type": "string", "minLength": 1, "title": "Why"}
                },
                "required": ["decision", "actor", "reason"]
            }
        }
    });
    match serde_json::from_value::<ElicitRequest>(request) {
        Ok(request) => Some(InputRequest::Elicitation(request)),
        Err(err) => {
            tracing::warn!(error = %err, "the approval question does not parse as an elicitation");
            None
        }
    }
}

/// What a human answered to an approval question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    Approve {
        actor: String,
        reason: String,
    },
    Deny {
        actor: String,
        reason: String,
    },
    /// Declined or dismissed: nothing is recorded; the question stands.
    None,
}

/// Reads an elicitation answer.
pub(crate) fn decision(answer: &Value) -> Result<Decision, String> {
    let result: ElicitResult = serde_json::from_value(answer.clone())
        .map_err(|err| format!("the answer is not an elicitation result: {err}"))?;
    if result.action != ElicitationAction::Accept {
        return Ok(Decision::None);
    }
    let content = result.content.unwrap_or(Value::Null);
    let field = |name: &str| {
        content
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("the answer has no {name}"))
    };
    let actor = format!("{}{ELICITED_ACTOR_SUFFIX}", field("actor")?);
    let reason = field("reason")?;
    match field("decision")?.as_str() {
        "approve" => Ok(Decision::Approve { actor, reason }),
        "deny" => Ok(Decision::Deny { actor, reason }),
        other => Err(format!(
            "the decision {other:?} is neither approve nor deny"
        )),
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
///
/// With `ask` (approvals are elicited and the client can answer), a task
/// waiting for approval carries the approval question.
pub(crate) fn detailed(
    record: &EffectRecord,
    now: f64,
    completed: impl FnOnce() -> JsonObject,
    options: TaskOptions,
    ask: bool,
) -> DetailedTask {
    let (mut payload, mut message) = payload(record, now, completed);
    if ask
        && let TaskPayload::InputRequired { input_requests } = &mut payload
        && record.status == EffectStatus::AwaitingApproval
        && let Some(question) = approval_question(record)
    {
        input_requests.insert(approval_key(record), question);
        message.push_str("; answer the approval question in inputRequests through tasks/update");
    }
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
                 EffectExecutor::operator().approve; tasks/cancel denies it)"
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
