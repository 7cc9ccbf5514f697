//! Error types of the runtime layer.

use effect_core::BoxError;

pub use crate::status::TransitionError;
pub use effect_schema::SchemaError;

/// A tool registration that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The name is empty or only whitespace.
    #[error("tool name must not be blank")]
    BlankName,
    /// A tool with this name is already registered.
    #[error("tool {name:?} is already registered")]
    DuplicateTool {
        /// The name.
        name: String,
    },
    /// The tool's input schema cannot be used.
    #[error("tool {name:?} has an unusable input schema")]
    InvalidSchema {
        /// The tool name.
        name: String,
        /// Why.
        #[source]
        source: SchemaError,
    },
}

/// How a tool handler failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolErrorKind {
    /// The dependency did not answer in time; retried by the default retry policy.
    Timeout,
    /// The dependency refused definitively, with reliable evidence that nothing
    /// was applied. For effect-backed tools this marks the operation `rejected`.
    Rejected,
    /// Any other failure.
    Failed,
}

impl ToolErrorKind {
    /// The lowercase name used in traces: `timeout`, `rejected`, `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolErrorKind::Timeout => "timeout",
            ToolErrorKind::Rejected => "rejected",
            ToolErrorKind::Failed => "failed",
        }
    }
}

/// What a tool handler returns when it fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("tool failed ({}): {message}", kind.as_str())]
#[non_exhaustive]
pub struct ToolError {
    /// The kind, which decides retries.
    pub kind: ToolErrorKind,
    /// What went wrong.
    pub message: String,
}

impl ToolError {
    /// A timeout (retryable for plain tools; an unknown outcome for effect-backed ones).
    pub fn timeout(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Timeout, message)
    }

    /// A definitive refusal.
    pub fn rejected(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Rejected, message)
    }

    /// Any other failure.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::new(ToolErrorKind::Failed, message)
    }

    /// A failure of this kind.
    pub fn new(kind: ToolErrorKind, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
        }
    }

    /// True for [`ToolErrorKind::Timeout`], the kind the default
    /// [`RetryPolicy`](crate::RetryPolicy) retries.
    pub fn is_retryable(&self) -> bool {
        self.kind == ToolErrorKind::Timeout
    }
}

/// A planner that could not choose the next action.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("planner failed: {message}")]
#[non_exhaustive]
pub struct PlannerError {
    /// What went wrong.
    pub message: String,
}

impl PlannerError {
    /// A planner error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        PlannerError {
            message: message.into(),
        }
    }
}

/// A trace, audit or checkpoint store that failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The backend failed while doing something.
    #[error("store failed while trying to {doing}")]
    Backend {
        /// What the store was doing.
        doing: String,
        /// The backend's error.
        #[source]
        source: BoxError,
    },
    /// A stored checkpoint cannot be decoded.
    #[error("stored checkpoint of run {run_id:?} cannot be decoded")]
    Corrupt {
        /// The run.
        run_id: String,
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl StoreError {
    /// A backend failure.
    pub fn backend(doing: impl Into<String>, source: impl Into<BoxError>) -> Self {
        StoreError::Backend {
            doing: doing.into(),
            source: source.into(),
        }
    }
}

/// Why [`AgentRuntime::run`](crate::AgentRuntime::run) could not do its job.
///
/// A run that ends `failed` or `waiting` is not an error: it is reported in the
/// [`RunReport`](crate::RunReport). A `RunError` means the runtime itself could
/// not proceed (a store failed, a forbidden transition was requested, ...).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The run-status machine forbids the requested change.
    #[error("run {run_id:?} cannot change status")]
    InvalidTransition {
        /// The run.
        run_id: String,
        /// The forbidden change.
        #[source]
        source: TransitionError,
    },
    /// `resume` was requested but no checkpoint exists.
    #[error("run {run_id:?} has no checkpoint to resume from")]
    NoCheckpoint {
        /// The run.
        run_id: String,
    },
    /// A fresh run was requested for a run id that already has a checkpoint.
    #[error("run {run_id:?} already exists; resume it instead")]
    AlreadyExists {
        /// The run.
        run_id: String,
    },
    /// The resumed checkpoint belongs to a different task.
    #[error("checkpoint of run {run_id:?} was written for a different task input")]
    TaskMismatch {
        /// The run.
        run_id: String,
    },
    /// The run id is blank.
    #[error("run id must not be blank")]
    BlankRunId,
    /// A tool with an effect contract is registered but no effect executor is set.
    #[error("tool {tool:?} has an effect contract but the runtime has no effect executor")]
    NoEffectExecutor {
        /// The tool.
        tool: String,
    },
    /// The permission policy requires a human approval of a tool that has
    /// no effect contract: approval is recorded on the tool's effect
    /// operation in the ledger, so a plain tool cannot wait for one.
    #[error(
        "the permission policy requires approval of tool {tool:?}, which has no effect contract to record it on"
    )]
    ApprovalNeedsEffectContract {
        /// The tool.
        tool: String,
    },
    /// Waiting for the approval of a run's pending effect failed: the
    /// operation is unknown to the ledger, or the ledger failed.
    #[cfg(feature = "effects")]
    #[error("run {run_id:?}: cannot wait for the approval of operation {operation_id:?}")]
    ApprovalWait {
        /// The run.
        run_id: String,
        /// The operation that waits for approval.
        operation_id: String,
        /// The executor's error.
        #[source]
        source: Box<effect_exec::ExecError>,
    },
    /// A tool has an async handler, which only the async runtime can run.
    #[error("tool {tool:?} has an async handler: run it with AsyncAgentRuntime")]
    AsyncToolInSyncRuntime {
        /// The tool.
        tool: String,
    },
    /// A resume found that the tool of the run's pending effect no longer
    /// derives the operation id the checkpoint recorded (its contract, or
    /// the tool's registration, changed while the run waited). Nothing was
    /// written or dispatched for this call; the recorded operation is left as
    /// it is, for the old contract or an operator to settle.
    #[error(
        "run {run_id:?} cannot resume: tool {tool:?} now derives {}, but the checkpoint recorded operation {checkpointed:?}; its effect contract changed since the run stopped",
        derived.as_ref().map_or_else(|| "no operation id (it is no longer effect-backed)".to_owned(), |id| format!("operation {id:?}"))
    )]
    OperationIdChanged {
        /// The run.
        run_id: String,
        /// The tool of the pending step.
        tool: String,
        /// The operation id in the checkpoint.
        checkpointed: String,
        /// The operation id the tool derives now, `None` when it derives none.
        derived: Option<String>,
    },
    /// A store failed.
    #[error("run {run_id:?}: a store failed")]
    Store {
        /// The run.
        run_id: String,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}
