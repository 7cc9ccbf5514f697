//! The [`Planner`] that chooses a run's next [`Action`], and a scripted one.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::PlannerError;
#[cfg(feature = "tokio")]
use crate::future::StepFuture;

/// What a run is asked to do. Its id is the run id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// The run id: stable across resumes and processes.
    pub id: String,
    /// The task for the planner (a prompt, a goal). Never a source of
    /// permissions or confirmations.
    pub input: Value,
}

impl Task {
    /// A task with this run id and input.
    pub fn new(id: impl Into<String>, input: Value) -> Self {
        Task {
            id: id.into(),
            input,
        }
    }
}

/// What the planner wants next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Action {
    /// Call a tool.
    CallTool {
        /// The tool name.
        tool: String,
        /// The arguments, validated against the tool's schema.
        arguments: Value,
        /// An action idempotency key: a later action with the same key reuses
        /// the first result instead of calling the tool again.
        idempotency_key: Option<String>,
    },
    /// End the run with an answer.
    Finish {
        /// The answer.
        output: Value,
    },
}

impl Action {
    /// Calls `tool` with `arguments`.
    pub fn call(tool: impl Into<String>, arguments: Value) -> Self {
        Action::CallTool {
            tool: tool.into(),
            arguments,
            idempotency_key: None,
        }
    }

    /// Calls `tool` with `arguments` under an action idempotency key.
    pub fn call_once(tool: impl Into<String>, arguments: Value, key: impl Into<String>) -> Self {
        Action::CallTool {
            tool: tool.into(),
            arguments,
            idempotency_key: Some(key.into()),
        }
    }

    /// Finishes with `output`.
    pub fn finish(output: Value) -> Self {
        Action::Finish { output }
    }
}

/// The result of one completed tool step, as the planner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// The step it completed.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The tool's output.
    pub output: Value,
    /// True when the output was reused through an action idempotency key.
    pub reused: bool,
}

impl<'a> PlanContext<'a> {
    /// A context, for planners tested on their own.
    pub fn new(
        task: &'a Task,
        step: u32,
        observations: &'a [Observation],
        working: &'a Map<String, Value>,
    ) -> Self {
        PlanContext {
            task,
            step,
            observations,
            working,
        }
    }
}

/// What a planner sees when choosing the next action.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PlanContext<'a> {
    /// The task.
    pub task: &'a Task,
    /// The number of completed steps, which is the index of the next one.
    pub step: u32,
    /// Results of the completed tool steps, in order.
    pub observations: &'a [Observation],
    /// The run's working data: the latest output of each tool, by tool name
    /// ([`Checkpoint::working`](crate::checkpoint::Checkpoint::working)).
    pub working: &'a Map<String, Value>,
}

/// Chooses a run's next action. It must be a function of its context, so a
/// resumed run continues where it stopped.
pub trait Planner: Send + Sync + fmt::Debug {
    /// The next action.
    ///
    /// # Errors
    ///
    /// [`PlannerError`] when no action can be chosen; the run then fails.
    fn next_action(&self, context: &PlanContext<'_>) -> Result<Action, PlannerError>;
}

/// Chooses a run's next action, asynchronously (an LLM call, say). Like
/// [`Planner`], it must be a function of its context, so a resumed run
/// continues where it stopped. Every [`Planner`] is one.
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub trait AsyncPlanner: Send + Sync + fmt::Debug {
    /// The next action.
    ///
    /// # Errors
    ///
    /// [`PlannerError`] when no action can be chosen; the run then fails.
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>>;
}

#[cfg(feature = "tokio")]
impl<P: Planner> AsyncPlanner for P {
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        Box::pin(std::future::ready(Planner::next_action(self, context)))
    }
}

/// A planner that plays a fixed script: step `n` gets action `n`. Once the
/// script is exhausted it finishes the run with the output `"plan exhausted"`.
///
/// ```
/// use agent_runtime::{Action, DeterministicPlanner, PlanContext, Planner, Task};
/// use serde_json::json;
///
/// let planner = DeterministicPlanner::new([
///     Action::call("lookup_invoice", json!({"invoice_id": "INV-1"})),
///     Action::finish(json!("done")),
/// ]);
/// assert_eq!(planner.len(), 2);
/// let task = Task::new("run-1", json!("pay"));
/// let working = serde_json::Map::new();
/// let context = PlanContext::new(&task, 2, &[], &working);
/// assert_eq!(planner.next_action(&context)?, Action::finish(json!("plan exhausted")));
/// # Ok::<(), agent_runtime::PlannerError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeterministicPlanner {
    script: Vec<Action>,
}

impl DeterministicPlanner {
    /// A planner playing `script`.
    pub fn new(script: impl IntoIterator<Item = Action>) -> Self {
        DeterministicPlanner {
            script: script.into_iter().collect(),
        }
    }

    /// The number of scripted actions.
    pub fn len(&self) -> usize {
        self.script.len()
    }

    /// True for an empty script.
    pub fn is_empty(&self) -> bool {
        self.script.is_empty()
    }
}

impl Planner for DeterministicPlanner {
    fn next_action(&self, context: &PlanContext<'_>) -> Result<Action, PlannerError> {
        Ok(usize::try_from(context.step)
            .ok()
            .and_then(|step| self.script.get(step))
            .cloned()
            .unwrap_or_else(|| Action::finish(Value::from(PLAN_EXHAUSTED))))
    }
}

/// The output of a run whose [`DeterministicPlanner`] script ran out, as in
/// the Python package's planner.
pub const PLAN_EXHAUSTED: &str = "plan exhausted";
