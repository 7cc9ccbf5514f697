//! The run-status machine (docs/spec.md §11).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A run-status change that the state machine forbids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("run status cannot change from {from} to {to}")]
#[non_exhaustive]
pub struct TransitionError {
    /// The current status.
    pub from: RunStatus,
    /// The requested status.
    pub to: RunStatus,
}

/// Where a run stands.
///
/// ```text
/// created → running → {waiting, paused, completed, failed}
/// waiting, paused → running | failed
/// failed → running
/// completed is final
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// Known, not started.
    Created,
    /// Executing steps.
    Running,
    /// Stopped until something outside the run happens: a mutation needs a
    /// confirmation, or an effect's outcome is uncertain.
    Waiting,
    /// Stopped on request (`stop_after_steps`); resume continues it.
    Paused,
    /// Finished with an answer. Final.
    Completed,
    /// Stopped by an error; a resume may retry it.
    Failed,
}

impl RunStatus {
    /// Every status, in lifecycle order.
    pub const ALL: [RunStatus; 6] = [
        RunStatus::Created,
        RunStatus::Running,
        RunStatus::Waiting,
        RunStatus::Paused,
        RunStatus::Completed,
        RunStatus::Failed,
    ];

    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Created => "created",
            RunStatus::Running => "running",
            RunStatus::Waiting => "waiting",
            RunStatus::Paused => "paused",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
        }
    }

    /// Whether the machine allows `self → to`.
    pub fn can_transition_to(self, to: RunStatus) -> bool {
        use RunStatus::{Completed, Created, Failed, Paused, Running, Waiting};
        matches!(
            (self, to),
            (Created, Running)
                | (Running, Waiting | Paused | Completed | Failed)
                | (Waiting | Paused, Running | Failed)
                | (Failed, Running)
        )
    }

    /// Checks `self → to` and returns `to`.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] for a change the machine forbids.
    pub fn transition(self, to: RunStatus) -> Result<RunStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError { from: self, to })
        }
    }

    /// True when the run stopped and a resume can continue it.
    pub fn is_resumable(self) -> bool {
        self.can_transition_to(RunStatus::Running)
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests;
