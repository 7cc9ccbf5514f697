//! [`Checkpoint`]: everything needed to resume a run.

use std::collections::BTreeMap;

use effect_core::EffectStatus;
use effect_core::RequestFingerprint;
use effect_core::canonical::canonical_json;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::planner::{Observation, Task};
use crate::status::RunStatus;

/// A run's state after its last step. Saved after every step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Checkpoint {
    /// The run.
    pub run_id: String,
    /// The task.
    pub task: Task,
    /// The run status.
    pub status: RunStatus,
    /// Completed steps.
    pub step: u32,
    /// Results of the completed tool steps.
    pub observations: Vec<Observation>,
    /// First results by action idempotency key.
    pub results_by_key: BTreeMap<String, Value>,
    /// Free-form working data of the run, kept across checkpoints and
    /// resumes: the latest output of each tool, under the tool's name.
    #[serde(default)]
    pub working: Map<String, Value>,
    /// A step that started and has not finished: it awaits a confirmation or
    /// the reconciliation of an effect.
    pub pending: Option<PendingStep>,
    /// The answer of a completed run.
    pub output: Option<Value>,
    /// Why the run failed or waits.
    pub error: Option<String>,
    /// The last trace sequence written.
    pub last_event_sequence: u64,
    /// The last audit sequence written.
    pub last_audit_sequence: u64,
    /// 1 for the first save, then +1 per save.
    pub revision: u64,
}

impl Checkpoint {
    /// The state of a run that has not started.
    pub fn new(task: Task) -> Self {
        Checkpoint {
            run_id: task.id.clone(),
            task,
            status: RunStatus::Created,
            step: 0,
            observations: Vec::new(),
            results_by_key: BTreeMap::new(),
            working: Map::new(),
            pending: None,
            output: None,
            error: None,
            last_event_sequence: 0,
            last_audit_sequence: 0,
            revision: 0,
        }
    }
}

/// A tool step that started but did not finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PendingStep {
    /// The step.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The arguments.
    pub arguments: Value,
    /// The action idempotency key.
    pub idempotency_key: Option<String>,
    /// The invocation, which a confirmation names.
    pub invocation_id: String,
    /// Where it stopped.
    pub stage: PendingStage,
}

/// Where a pending step stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "stage", rename_all = "snake_case")]
#[non_exhaustive]
pub enum PendingStage {
    /// A mutation waits for a confirmation of `invocation_id`.
    AwaitingConfirmation,
    /// An effect was handed to the executor; if the process stopped here its
    /// outcome is unknown, and a resume reconciles it.
    EffectDispatching {
        /// The effect's operation id.
        operation_id: String,
    },
    /// The effect's outcome is uncertain; a resume reconciles it.
    EffectUncertain {
        /// The effect's operation id.
        operation_id: String,
        /// Its status in the ledger.
        status: EffectStatus,
        /// The ledger's last error.
        error: Option<String>,
    },
}

/// The id of one tool invocation: run, step, tool and a digest of the
/// arguments. A confirmation names it, so it covers these exact arguments.
///
/// ```
/// use agent_runtime::invocation_id;
/// use serde_json::json;
///
/// let id = invocation_id("run-1", 2, "capture_payment", &json!({"invoice_id": "INV-1"}));
/// assert!(id.starts_with("run-1/2/capture_payment/"));
/// assert_ne!(id, invocation_id("run-1", 2, "capture_payment", &json!({"invoice_id": "INV-2"})));
/// ```
pub fn invocation_id(run_id: &str, step: u32, tool: &str, arguments: &Value) -> String {
    let digest = RequestFingerprint::of_canonical(&canonical_json(arguments));
    let hex = digest.blake3_hex();
    format!("{run_id}/{step}/{tool}/{}", hex.get(..16).unwrap_or(hex))
}
