//! [`ReplaySummary`]: what a run did, read back from its trace.

use serde::{Deserialize, Serialize};

use crate::status::RunStatus;
use crate::trace::{ToolResultStatus, TraceEvent, TraceEventKind};

/// A summary of a run's trace events.
///
/// ```
/// use agent_runtime::trace::{TraceEvent, TraceEventKind};
/// use agent_runtime::{ReplaySummary, RunStatus};
///
/// let event = |sequence, kind| TraceEvent {
///     run_id: "run-1".into(),
///     sequence,
///     step: 0,
///     timestamp: String::new(),
///     kind,
/// };
/// let summary = ReplaySummary::of(&[
///     event(1, TraceEventKind::StateTransition {
///         from: RunStatus::Created,
///         to: RunStatus::Running,
///         reason: "run started".into(),
///     }),
///     event(2, TraceEventKind::Termination { status: RunStatus::Failed, reason: "x".into() }),
/// ]);
/// assert!(summary.sequence_consistent);
/// assert_eq!(summary.terminal_status, Some(RunStatus::Failed));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ReplaySummary {
    /// The number of events.
    pub events: usize,
    /// Status changes, in order.
    pub transitions: Vec<(RunStatus, RunStatus)>,
    /// Tool results, in order.
    pub tool_calls: Vec<ToolCallSummary>,
    /// Retries of plain tools.
    pub retries: usize,
    /// Resumes from a checkpoint.
    pub recoveries: usize,
    /// The status of the last termination event (`completed` or `failed`).
    pub terminal_status: Option<RunStatus>,
    /// The status after the last transition.
    pub last_status: Option<RunStatus>,
    /// True when sequences run 1, 2, 3, ... without gaps or repeats, every
    /// event names the same run, and each transition starts where the
    /// previous one ended.
    pub sequence_consistent: bool,
}

/// One tool result in a [`ReplaySummary`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ToolCallSummary {
    /// The step.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// How it ended.
    pub result: ToolResultStatus,
    /// The handler attempts.
    pub attempts: u32,
}

impl ReplaySummary {
    /// Summarizes `events`, which should be one run's trace in order.
    pub fn of(events: &[TraceEvent]) -> Self {
        let mut summary = ReplaySummary {
            events: events.len(),
            transitions: Vec::new(),
            tool_calls: Vec::new(),
            retries: 0,
            recoveries: 0,
            terminal_status: None,
            last_status: None,
            sequence_consistent: true,
        };
        let run_id = events.first().map(|e| e.run_id.as_str());
        for (i, event) in events.iter().enumerate() {
            let expected = u64::try_from(i).map_or(u64::MAX, |i| i + 1);
            if event.sequence != expected || Some(event.run_id.as_str()) != run_id {
                summary.sequence_consistent = false;
            }
            match &event.kind {
                TraceEventKind::StateTransition { from, to, .. } => {
                    if summary.last_status.is_some_and(|last| last != *from) {
                        summary.sequence_consistent = false;
                    }
                    summary.transitions.push((*from, *to));
                    summary.last_status = Some(*to);
                }
                TraceEventKind::ToolResult {
                    tool,
                    result,
                    attempts,
                    ..
                } => summary.tool_calls.push(ToolCallSummary {
                    step: event.step,
                    tool: tool.clone(),
                    result: *result,
                    attempts: *attempts,
                }),
                TraceEventKind::Retry { .. } => summary.retries += 1,
                TraceEventKind::Recovery { .. } => summary.recoveries += 1,
                TraceEventKind::Termination { status, .. } => {
                    summary.terminal_status = Some(*status);
                }
                _ => {}
            }
        }
        summary
    }
}
