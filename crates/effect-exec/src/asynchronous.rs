//! `execute_async`: the same state machine, with async handlers and probes.
//!
//! The ledger is synchronous (its commits wait for fsync), so the execution runs
//! on tokio's blocking pool and drives the async handler and probe from there.
//! A runtime worker thread is never blocked on a commit.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use effect_core::{BoxFuture, CallbackError, EffectContract, EffectResult, OutcomeProbeResult};
use serde::Serialize;
use serde_json::Value;
use tokio::runtime::Handle;

use crate::call::Call;
use crate::context::HandlerContext;
use crate::dispatch::{HandlerOutcome, Invoke, call_guarded};
use crate::error::{ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::Identified;
use crate::options::CallOptions;
use crate::prepared::PreparedEffect;

type AsyncHandler = Arc<dyn Fn(Value, HandlerContext) -> BoxFuture<HandlerOutcome> + Send + Sync>;

struct AsyncInvoke {
    runtime: Handle,
    handler: AsyncHandler,
}

/// A handler future polled inside its step's trace scope (entered on every
/// poll, on whichever worker polls it).
struct Scoped {
    scope: HandlerContext,
    future: BoxFuture<HandlerOutcome>,
}

impl Future for Scoped {
    type Output = HandlerOutcome;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<HandlerOutcome> {
        let _scope = self.scope.enter_trace();
        self.future.as_mut().poll(cx)
    }
}

impl Invoke for AsyncInvoke {
    fn handler(
        &self,
        arguments: Value,
        context: HandlerContext,
        deadline: Option<Duration>,
    ) -> HandlerOutcome {
        // The future runs as its own task so that a panic is contained; on a
        // deadline it is dropped. Dropping is not cancellation at the provider:
        // the request may already be on the wire, so the outcome is unknown.
        let scope = context.clone();
        let future = {
            let _scope = scope.enter_trace();
            (self.handler)(arguments, context)
        };
        let task = self.runtime.spawn(Scoped { scope, future });
        let abort = task.abort_handle();
        let joined = self.runtime.block_on(async move {
            match deadline {
                Some(deadline) => tokio::time::timeout(deadline, task).await.ok(),
                None => Some(task.await),
            }
        });
        match joined {
            None => {
                abort.abort();
                HandlerOutcome::TimedOut
            }
            Some(Ok(outcome)) => outcome,
            Some(Err(err)) => HandlerOutcome::Failed(format!("handler task failed: {err}")),
        }
    }

    fn probe(
        &self,
        contract: &EffectContract,
        arguments: Value,
        key: Option<String>,
    ) -> Option<Result<OutcomeProbeResult, CallbackError>> {
        if let Some(probe) = contract.outcome_probe_async() {
            let task = self.runtime.spawn(probe(arguments, key));
            return Some(match self.runtime.block_on(task) {
                Ok(result) => result,
                Err(err) => Err(CallbackError::new(format!("probe task failed: {err}"))),
            });
        }
        let probe = contract.outcome_probe()?;
        Some(call_guarded(|| probe(&arguments, key.as_deref())))
    }
}

impl EffectExecutor {
    /// The async form of [`execute`](Self::execute): the same semantics, with an
    /// async handler and, when the contract has one, its async probe.
    ///
    /// A handler future that misses its deadline is dropped, which does **not**
    /// undo a request it may already have sent: it is recorded like a timed-out
    /// thread (`handler_may_still_be_running=true`).
    ///
    /// Must be called within a tokio runtime. Ledger commits run on the blocking
    /// pool, so they never stall the runtime's workers.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, MemoryLedger};
    /// use effect_exec::{CallOptions, EffectExecutor, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let contract = EffectContract::builder("create_ticket", |args| {
    ///     Ok(format!("ticket:{}", args["title"].as_str().ok_or("missing title")?))
    /// })
    /// .build()?;
    /// let result = executor
    ///     .execute_async(&contract, &json!({"title": "disk full"}), CallOptions::default(), |args: Value, _ctx| async move {
    ///         Ok::<_, HandlerError>(json!({"ticket_id": "T-1", "title": args["title"]}))
    ///     })
    ///     .await?;
    /// assert!(result.is_confirmed());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute), plus [`ExecError::Runtime`] when the
    /// blocking task cannot run.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn execute_async<A, O, H, Fut>(
        &self,
        contract: &EffectContract,
        arguments: &A,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        A: Serialize + ?Sized,
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        let prepared = self.prepare(contract, arguments)?;
        self.run_async(prepared, options, handler).await
    }

    /// [`execute_async`](Self::execute_async) for a call that
    /// [`prepare`](Self::prepare) derived: the same semantics, under the
    /// prepared operation id.
    ///
    /// # Errors
    ///
    /// As [`execute_async`](Self::execute_async), plus
    /// [`ExecError::ForeignPreparation`] when another executor (other keys or
    /// fingerprint form) prepared the call.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn execute_prepared_async<O, H, Fut>(
        &self,
        prepared: &PreparedEffect,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        self.check_prepared(prepared)?;
        self.run_async(prepared.clone(), options, handler).await
    }

    /// Runs the state machine on the blocking pool, driving the async
    /// handler and probe from there.
    async fn run_async<O, H, Fut>(
        &self,
        prepared: PreparedEffect,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        let PreparedEffect {
            contract,
            identified:
                Identified {
                    identity,
                    operation,
                },
            ..
        } = prepared;
        let operation_id = identity.operation_id.clone();
        let executor = self.clone();
        let deadline = options.deadline.or(self.options.default_deadline);
        let handler: AsyncHandler = Arc::new(move |arguments, context| {
            let future = handler(arguments, context);
            Box::pin(async move { HandlerOutcome::from_result(future.await) })
        });
        let runtime = Handle::current();
        // Started here, on the caller's task, so that it joins the caller's trace.
        let trace = self.start_trace(&contract, &identity);
        tokio::task::spawn_blocking(move || {
            let invoke = AsyncInvoke { runtime, handler };
            let call = Call {
                contract: &contract,
                identity: &identity,
                deadline,
                invoke: &invoke,
            };
            executor.run_traced(&call, operation, trace)
        })
        .await
        .map_err(|err| ExecError::Runtime {
            operation_id,
            message: err.to_string(),
        })?
    }

    /// [`compensate_with`](Self::compensate_with) with an async handler
    /// (and the compensation's async probe, when it has one): the ledger's
    /// commits run on tokio's blocking pool.
    ///
    /// # Errors
    ///
    /// As [`compensate`](Self::compensate), plus [`ExecError::Runtime`]
    /// when the blocking task cannot run.
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub async fn compensate_async<O, H, Fut>(
        &self,
        contract: &EffectContract,
        operation_id: &str,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        let executor = self.clone();
        let contract = contract.clone();
        let id = operation_id.to_owned();
        let deadline = options.deadline.or(self.options.default_deadline);
        let handler: AsyncHandler = Arc::new(move |arguments, context| {
            let future = handler(arguments, context);
            Box::pin(async move { HandlerOutcome::from_result(future.await) })
        });
        let runtime = Handle::current();
        tokio::task::spawn_blocking(move || {
            let invoke = AsyncInvoke { runtime, handler };
            executor.compensate_call(&contract, &id, deadline, &invoke)
        })
        .await
        .map_err(|err| ExecError::Runtime {
            operation_id: operation_id.to_owned(),
            message: err.to_string(),
        })?
    }
}
