//! Compensation: undo a confirmed effect with another effect, durably
//! (docs/compensation.md).
//!
//! [`EffectExecutor::compensate`] runs the compensation a contract names
//! ([`EffectContractBuilder::compensation`](effect_core::EffectContractBuilder::compensation))
//! for one confirmed operation. The compensation is an operation of its own,
//! under its own contract, operation id (derived from the original's) and
//! provider key, executed by the same rules as any effect: a lost
//! acknowledgement of a refund is reconciled through its probe or its key,
//! never sent again blindly, and a second call replays the first result.
//!
//! Before anything is dispatched, three durable writes link the two: the
//! compensation is prepared and records the original it undoes
//! (`compensation_of`), and the original records the compensation
//! (`compensation_started`). Once the compensation settles, the original
//! records it (`compensated` or `compensation_rejected`). A crash between any
//! two of them is repaired by the next call (each step is idempotent), or by
//! a [`RecoveryWorker`](crate::RecoveryWorker) holding the compensation's
//! handler ([`RecoveryWorker::register_compensation`](crate::RecoveryWorker::register_compensation)),
//! which also runs the compensations an operator requested
//! ([`Operator::request_compensation`](crate::Operator::request_compensation), `agent-effect-ops compensate`).

use std::sync::Arc;
use std::time::Duration;

use effect_core::compensation::{Compensated, CompensationStep};
use effect_core::{EffectContract, EffectRecord, EffectResult, EffectStatus, Transition, intent};
use serde::Serialize;
use serde_json::Value;

use crate::call::Call;
use crate::context::HandlerContext;
use crate::dispatch::{Invoke, SyncInvoke, call_guarded};
use crate::error::{CompensationRefusal, ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::Identified;
use crate::options::CallOptions;

impl EffectExecutor {
    /// Runs the compensation `contract` names for its confirmed operation
    /// `operation_id`, with `handler` as the compensation's handler, and
    /// returns the compensation's result (its own operation id, status and
    /// output).
    ///
    /// The handler receives the compensation's arguments: what the
    /// compensation derives from the original's stored output, provider
    /// operation id and (when the original's contract stores it) stored
    /// intent, plus `compensates`, the original's operation id.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, MemoryLedger, compensation};
    /// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let refund = EffectContract::builder("refund_payment", compensation::operation_id)
    ///     .provider_idempotency_key(|args| {
    ///         let payment = args["payment_id"].as_str().ok_or("missing payment_id")?;
    ///         Ok(Some(format!("refund:{payment}")))
    ///     })
    ///     .build()?;
    /// let capture = EffectContract::builder("capture_payment", |args| {
    ///     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
    /// })
    /// .compensation(refund, |original| Ok(json!({"payment_id": original.output["payment_id"]})))
    /// .build()?;
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// executor.execute(&capture, &json!({"invoice_id": "INV-1"}), |_args: Value, _ctx| {
    ///     Ok::<_, HandlerError>(json!({"payment_id": "pay-1"}))
    /// })?;
    ///
    /// let refund_handler = |args: Value, ctx: HandlerContext| {
    ///     Ok::<_, HandlerError>(json!({"refunded": args["payment_id"], "key": ctx.provider_key()}))
    /// };
    /// let undone = executor.compensate(&capture, "invoice:INV-1:capture", refund_handler)?;
    /// assert!(undone.is_confirmed());
    /// assert_eq!(undone.operation_id, "invoice:INV-1:capture:compensation");
    /// assert_eq!(undone.output, Some(json!({"refunded": "pay-1", "key": "refund:pay-1"})));
    /// let again = executor.compensate(&capture, "invoice:INV-1:capture", refund_handler)?;
    /// assert!(again.duplicate_suppressed);
    /// let original = executor.ledger().get("invoice:INV-1:capture")?.ok_or("not recorded")?;
    /// assert_eq!(original.compensation().map(|link| link.state), Some("confirmed".into()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`ExecError::CompensationRefused`] unless the operation is confirmed
    /// under `contract` (name and version) and the contract names a
    /// compensation: nothing is written. [`ExecError::Ledger`] with kind
    /// `NotFound` for an unknown id; [`ExecError::Contract`] when the
    /// compensation's arguments, id or key cannot be derived (or its id is
    /// the original's); [`ExecError::Conflict`] when another compensation
    /// was started for it; otherwise as [`execute`](Self::execute). An
    /// uncertain compensation is a result, not an error, as for any effect.
    pub fn compensate<O, H>(
        &self,
        contract: &EffectContract,
        operation_id: &str,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        self.compensate_with(contract, operation_id, CallOptions::default(), handler)
    }

    /// [`compensate`](Self::compensate) with per-call options (a deadline
    /// for the compensation's handler).
    ///
    /// # Errors
    ///
    /// As [`compensate`](Self::compensate).
    pub fn compensate_with<O, H>(
        &self,
        contract: &EffectContract,
        operation_id: &str,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        let invoke = SyncInvoke {
            handler: Arc::new(handler),
        };
        let deadline = options.deadline.or(self.options.default_deadline);
        self.compensate_call(contract, operation_id, deadline, &invoke)
    }

    /// The whole compensation, for any way of invoking the handler.
    pub(crate) fn compensate_call(
        &self,
        contract: &EffectContract,
        operation_id: &str,
        deadline: Option<Duration>,
        invoke: &dyn Invoke,
    ) -> Result<EffectResult, ExecError> {
        let refused = |refusal| ExecError::CompensationRefused {
            operation_id: operation_id.to_owned(),
            refusal,
        };
        let original = self.get(operation_id)?;
        if original.contract_name != contract.name()
            || original.contract_version != contract.version()
        {
            return Err(refused(CompensationRefusal::OtherContract {
                contract_name: original.contract_name,
                contract_version: original.contract_version,
            }));
        }
        if let Some(refusal) = CompensationRefusal::of_status(original.status) {
            return Err(refused(refusal));
        }
        let Some(compensation) = contract.compensation() else {
            return Err(refused(CompensationRefusal::NoCompensation {
                contract: contract.name().to_owned(),
            }));
        };
        let undo = compensation.contract();
        let identified = self.compensation_identity(contract, &original)?;
        let undo_id = identified.identity.operation_id.clone();
        if undo_id == operation_id {
            return Err(ExecError::Contract {
                contract: undo.name().to_owned(),
                source: effect_core::CallbackError::new(
                    "the compensation derives the original's own operation id",
                ),
            });
        }
        let span = tracing::info_span!(
            "effect.compensate",
            operation_id,
            compensation = undo_id.as_str(),
        );
        let _entered = span.enter();
        // The link both ways before any dispatch: the compensation exists
        // and names its original, and the original names its compensation.
        self.apply(&undo_id, Transition::Prepare(identified.operation.clone()))?;
        self.apply(
            &undo_id,
            Transition::Compensation(CompensationStep::Of {
                original: operation_id.to_owned(),
            }),
        )?;
        self.apply(
            operation_id,
            Transition::Compensation(CompensationStep::Start {
                operation_id: undo_id.clone(),
                contract_name: undo.name().to_owned(),
                contract_version: undo.version().to_owned(),
            }),
        )?;
        let call = Call {
            contract: undo,
            identity: &identified.identity,
            deadline,
            invoke,
        };
        let result = self.run(&call, identified.operation.clone())?;
        if matches!(
            result.status,
            EffectStatus::Confirmed | EffectStatus::Rejected
        ) {
            self.apply(
                operation_id,
                Transition::Compensation(CompensationStep::Finish {
                    operation_id: undo_id,
                    status: result.status,
                }),
            )?;
        }
        Ok(result)
    }

    /// The compensation's identity for the confirmed `original`: its
    /// arguments derived from the original's record and stored intent.
    fn compensation_identity(
        &self,
        contract: &EffectContract,
        original: &EffectRecord,
    ) -> Result<Identified, ExecError> {
        let id = original.operation_id.as_str();
        let compensation =
            contract
                .compensation()
                .ok_or_else(|| ExecError::CompensationRefused {
                    operation_id: id.to_owned(),
                    refusal: CompensationRefusal::NoCompensation {
                        contract: contract.name().to_owned(),
                    },
                })?;
        let events = self
            .ledger
            .events(id)
            .map_err(|source| ExecError::ledger(id, source))?;
        let arguments = intent::stored(&events)
            .map(|stored| self.open_intent(id, stored))
            .transpose()?;
        let view = Compensated::new(original, arguments.as_ref());
        let derived = call_guarded(|| compensation.arguments(&view)).map_err(|source| {
            ExecError::Contract {
                contract: compensation.contract().name().to_owned(),
                source,
            }
        })?;
        self.identity_of(compensation.contract(), &derived)
    }
}
