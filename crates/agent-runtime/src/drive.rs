//! The seam between the run logic, written once as async code, and its two
//! flavours: the synchronous runtime drives it with `block_on` over a
//! driver whose futures are already complete; the async runtime (feature
//! `tokio`) awaits it on tokio.

use crate::error::PlannerError;
use crate::executor::{Blocking, InvocationReport, PreparedCall, ToolExecutor};
use crate::future::StepFuture;
use crate::planner::{Action, PlanContext, Planner};

/// What a run awaits: the planner's next action and a tool invocation.
pub(crate) trait Driver: Sync {
    /// The planner's next action.
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>>;

    /// Runs a prepared invocation.
    fn invoke<'a>(
        &'a self,
        tools: &'a ToolExecutor,
        call: &'a PreparedCall<'a>,
    ) -> StepFuture<'a, InvocationReport>;
}

/// The synchronous driver: a [`Planner`] and blocking invocations.
pub(crate) struct SyncDriver<'p>(pub(crate) &'p dyn Planner);

impl Driver for SyncDriver<'_> {
    fn next_action<'a>(
        &'a self,
        context: &'a PlanContext<'a>,
    ) -> StepFuture<'a, Result<Action, PlannerError>> {
        Box::pin(std::future::ready(self.0.next_action(context)))
    }

    fn invoke<'a>(
        &'a self,
        tools: &'a ToolExecutor,
        call: &'a PreparedCall<'a>,
    ) -> StepFuture<'a, InvocationReport> {
        Box::pin(tools.invoke_with(call, &Blocking))
    }
}
