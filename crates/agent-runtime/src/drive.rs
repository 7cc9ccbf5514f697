//! The seam between the run logic, written once as async code, and its two
//! flavours: the synchronous runtime drives it with [`block_on`] over a
//! driver whose futures are already complete; the async runtime (feature
//! `tokio`) awaits it on tokio.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

use crate::error::PlannerError;
use crate::executor::{Blocking, InvocationReport, PreparedCall, ToolExecutor};
use crate::planner::{Action, PlanContext, Planner};

/// A boxed, sendable future borrowed for `'a`: what an
/// [`AsyncPlanner`](crate::AsyncPlanner) returns.
pub type StepFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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

/// Runs `future` to completion on this thread. The synchronous flavour's
/// futures never wait on anything, so this returns after the first poll; a
/// pending future parks the thread until woken.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => thread::park(),
        }
    }
}
