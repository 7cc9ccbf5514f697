//! Runs that wait for a human approval (docs/approval.md): the runtime's
//! helper that waits for the approval through the effect executor's clock and
//! sleeper, then resumes the run from its checkpoint.

use std::time::Duration;

use crate::error::RunError;
use crate::flavour::{Blocking, Flavour};
use crate::future::block_on;
use crate::planner::Task;
use crate::run::{Engine, RunOptions, RunReport};
use crate::runtime::AgentRuntime;

impl AgentRuntime {
    /// Resumes `task` once the approval its run waits for has landed.
    ///
    /// When the run's checkpoint waits on an effect `awaiting_approval`
    /// ([`RunReport::awaiting_approval`]), this polls the ledger through the
    /// effect executor ([`EffectExecutor::wait_for_approval`](effect_exec::EffectExecutor::wait_for_approval):
    /// its clock, sleeper and poll interval) until an approval is recorded or
    /// the operation is denied, for at most `timeout`, then resumes the run as
    /// [`run`](Self::run) with [`RunOptions::resume`] does: an approved call is
    /// dispatched once and the run goes on; a denied one ends the tool call
    /// `rejected` (`error_kind: "rejected"` in its trace, the actor and
    /// reason in the error) and the run fails. When the time is up with no
    /// decision, it returns the run's report as it stands (`waiting`) and
    /// writes nothing. A run waiting for anything else is resumed at once.
    /// `options.resume` is implied.
    ///
    /// # Errors
    ///
    /// Those of [`run`](Self::run), and [`RunError::ApprovalWait`] when the
    /// ledger cannot be read.
    pub fn resume_when_approved(
        &self,
        task: Task,
        options: RunOptions,
        timeout: Duration,
    ) -> Result<RunReport, RunError> {
        if let Some(waiting) = block_on(undecided(self.engine(), &Blocking, &task, timeout))? {
            return Ok(waiting);
        }
        self.run(task, RunOptions::resume_with(options))
    }
}

#[cfg(feature = "tokio")]
impl crate::AsyncAgentRuntime {
    /// The async form of
    /// [`AgentRuntime::resume_when_approved`](crate::AgentRuntime::resume_when_approved):
    /// the wait runs on tokio's blocking pool (the executor's sleeper
    /// blocks its thread), then the run resumes as
    /// [`run`](Self::run) does.
    ///
    /// # Errors
    ///
    /// As [`AgentRuntime::resume_when_approved`](crate::AgentRuntime::resume_when_approved).
    pub async fn resume_when_approved(
        &self,
        task: Task,
        options: RunOptions,
        timeout: Duration,
    ) -> Result<RunReport, RunError> {
        let flavour = crate::flavour::on_tokio::Tokio;
        if let Some(waiting) = undecided(self.engine(), &flavour, &task, timeout).await? {
            return Ok(waiting);
        }
        self.run(task, RunOptions::resume_with(options)).await
    }
}

/// Waits (in the flavour's store call) for the decision on the approval the
/// run of `task` waits for; the run's report when none came within
/// `timeout`, `None` when the run should resume now.
async fn undecided<F: Flavour>(
    engine: &Engine,
    flavour: &F,
    task: &Task,
    timeout: Duration,
) -> Result<Option<RunReport>, RunError> {
    let run_id = task.id.clone();
    let (engine, task) = (engine.clone(), task.clone());
    flavour
        .store(move || Ok(wait_for_decision(&engine, &task, timeout)))
        .await
        .map_err(|source| RunError::Store { run_id, source })?
}

fn wait_for_decision(
    engine: &Engine,
    task: &Task,
    timeout: Duration,
) -> Result<Option<RunReport>, RunError> {
    let run_id = task.id.clone();
    let checkpoint = engine
        .checkpoints
        .load(&run_id)
        .map_err(|source| RunError::Store {
            run_id: run_id.clone(),
            source,
        })?;
    let Some(checkpoint) = checkpoint else {
        return Err(RunError::NoCheckpoint { run_id });
    };
    if checkpoint.task != *task {
        return Err(RunError::TaskMismatch { run_id });
    }
    let waiting = RunReport::of(&checkpoint);
    let (Some(operation_id), Some(effects)) = (waiting.awaiting_approval(), engine.tools.effects())
    else {
        return Ok(None);
    };
    let record = effects
        .wait_for_approval(operation_id, timeout)
        .map_err(|source| RunError::ApprovalWait {
            run_id: run_id.clone(),
            operation_id: operation_id.to_owned(),
            source: Box::new(source),
        })?;
    let undecided =
        record.status == effect_core::EffectStatus::AwaitingApproval && record.approval().is_none();
    Ok(undecided.then_some(waiting))
}
