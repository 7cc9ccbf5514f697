//! Trace events and audit records: two separate streams.
//!
//! Trace events describe everything a run did, in order, for debugging and
//! replay. Audit records are the few decisions an operator or auditor must be
//! able to find without reading traces: denied tools, mutations that needed a
//! confirmation, mutations that ran, effects left uncertain. They go to their
//! own [`AuditStore`](crate::store::AuditStore) and are never mixed into the trace.

use effect_core::EffectStatus;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::planner::Action;
use crate::policy::PolicyDecision;
use crate::status::RunStatus;

/// One ordered event of a run's trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    /// The run.
    pub run_id: String,
    /// 1, 2, 3, ... within the run, across resumes.
    pub sequence: u64,
    /// The step the run was at.
    pub step: u32,
    /// ISO-8601 UTC time.
    pub timestamp: String,
    /// What happened.
    pub kind: TraceEventKind,
}

/// What a trace event records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum TraceEventKind {
    /// A fresh run began.
    RunStarted {
        /// The task input.
        task: Value,
    },
    /// The planner chose an action.
    Decision {
        /// The action.
        action: Action,
    },
    /// The permission policy decided an invocation.
    PolicyDecision {
        /// The tool.
        tool: String,
        /// The invocation.
        invocation_id: String,
        /// The decision.
        decision: PolicyDecision,
    },
    /// A tool was invoked (after validation and policy).
    ToolRequest {
        /// The tool.
        tool: String,
        /// The invocation.
        invocation_id: String,
        /// True when it runs through the effect executor.
        effect_backed: bool,
    },
    /// What a tool invocation ended with.
    ToolResult {
        /// The tool.
        tool: String,
        /// The invocation.
        invocation_id: String,
        /// The result.
        result: ToolResultStatus,
        /// The output, when it succeeded.
        output: Option<Value>,
        /// The error kind (`invalid_arguments`, `timeout`, `circuit_open`, ...).
        error_kind: Option<String>,
        /// The error message.
        error: Option<String>,
        /// The effect operation id, for effect-backed tools.
        operation_id: Option<String>,
        /// Handler attempts made by this invocation.
        attempts: u32,
    },
    /// The run status changed.
    StateTransition {
        /// The old status.
        from: RunStatus,
        /// The new status.
        to: RunStatus,
        /// Why.
        reason: String,
    },
    /// A plain tool failed with a retryable error and is retried after a delay.
    Retry {
        /// The tool.
        tool: String,
        /// The invocation.
        invocation_id: String,
        /// The attempt that failed (1-based).
        attempt: u32,
        /// The delay before the next attempt, in milliseconds.
        delay_ms: u64,
        /// The error.
        error: String,
    },
    /// The run state was checkpointed.
    Checkpoint {
        /// The checkpoint's revision.
        revision: u64,
    },
    /// A stopped run was resumed from its checkpoint.
    Recovery {
        /// The status it stopped in.
        from: RunStatus,
        /// The step it resumes at.
        resumed_step: u32,
        /// The uncertain effect being reconciled, if any.
        operation_id: Option<String>,
        /// The effect status after reconciliation, if any.
        effect_status: Option<EffectStatus>,
    },
    /// The run reached `completed` or `failed`.
    Termination {
        /// The final status.
        status: RunStatus,
        /// Why.
        reason: String,
    },
}

impl TraceEventKind {
    /// The snake_case name of the kind (`run_started`, `decision`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            TraceEventKind::RunStarted { .. } => "run_started",
            TraceEventKind::Decision { .. } => "decision",
            TraceEventKind::PolicyDecision { .. } => "policy_decision",
            TraceEventKind::ToolRequest { .. } => "tool_request",
            TraceEventKind::ToolResult { .. } => "tool_result",
            TraceEventKind::StateTransition { .. } => "state_transition",
            TraceEventKind::Retry { .. } => "retry",
            TraceEventKind::Checkpoint { .. } => "checkpoint",
            TraceEventKind::Recovery { .. } => "recovery",
            TraceEventKind::Termination { .. } => "termination",
        }
    }
}

/// How a tool invocation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolResultStatus {
    /// The tool returned an output (or the effect was confirmed).
    Succeeded,
    /// An earlier result was reused through the action idempotency key.
    Reused,
    /// The invocation failed; nothing uncertain is left behind.
    Failed,
    /// The effect's outcome is uncertain; the run waits.
    Uncertain,
}

/// One audited decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// The run.
    pub run_id: String,
    /// 1, 2, 3, ... within the run's audit stream.
    pub sequence: u64,
    /// The step.
    pub step: u32,
    /// ISO-8601 UTC time.
    pub timestamp: String,
    /// The tool.
    pub tool: String,
    /// The invocation.
    pub invocation_id: String,
    /// What was decided or done.
    pub kind: AuditKind,
    /// The effect operation id, for effect-backed tools.
    pub operation_id: Option<String>,
    /// A human-readable explanation.
    pub detail: String,
}

/// What an audit record is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AuditKind {
    /// The policy refused the tool; nothing ran.
    PermissionDenied,
    /// A mutation had no confirmation; the run waits for one.
    ConfirmationRequired,
    /// A confirmed mutation was allowed to run.
    MutationAuthorized,
    /// A mutation finished (succeeded, failed or rejected). Written by
    /// earlier versions; every tool now gets [`AuditKind::ToolSucceeded`] or
    /// [`AuditKind::ToolFailed`] instead.
    MutationFinished,
    /// A tool was invoked (read or mutation), after policy and validation.
    ToolRequested,
    /// A tool invocation succeeded, or reused an earlier result through its
    /// action idempotency key.
    ToolSucceeded,
    /// A tool invocation failed (or its arguments were refused); nothing
    /// uncertain is left behind.
    ToolFailed,
    /// An effect's outcome is uncertain; the run waits for reconciliation.
    EffectUncertain,
}
