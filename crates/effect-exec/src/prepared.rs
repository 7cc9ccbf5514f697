//! [`PreparedEffect`]: one call's identity, derived once before anything is
//! written, for a caller that needs the operation id before the dispatch.

use std::fmt;
use std::sync::Arc;

use effect_core::{EffectContract, EffectResult, FingerprintForm, NewOperation};
use serde::Serialize;
use serde_json::Value;

use crate::call::Call;
use crate::context::HandlerContext;
use crate::dispatch::SyncInvoke;
use crate::error::{ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::{Identified, Identity, Keys};
use crate::options::CallOptions;

/// One call's identity under its contract (operation id, request
/// fingerprint, provider key, the intent to store), derived once by
/// [`EffectExecutor::prepare`] and executed by
/// [`EffectExecutor::execute_prepared`] (or, feature `tokio`,
/// `execute_prepared_async`). Nothing is written until it is executed.
///
/// For a caller that must know the operation id before the dispatch: an
/// agent runtime that checkpoints it, so that a resume after a crash
/// reconciles that operation. The handler's
/// [`HandlerContext::operation_id`] and the result's `operation_id` are this
/// same id: nothing derives it again.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectContract, MemoryLedger};
/// use effect_exec::{CallOptions, EffectExecutor, HandlerContext, HandlerError};
/// use serde_json::{json, Value};
///
/// let contract = EffectContract::builder("capture_payment", |args| {
///     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
/// })
/// .build()?;
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let prepared = executor.prepare(&contract, &json!({"invoice_id": "INV-1"}))?;
/// assert_eq!(prepared.operation_id(), "invoice:INV-1:capture");
/// // Nothing is recorded yet: save the id where a resume will find it, then execute.
/// assert!(executor.ledger().get(prepared.operation_id())?.is_none());
/// let result = executor.execute_prepared(&prepared, CallOptions::default(), |_args: Value, ctx: HandlerContext| {
///     Ok::<_, HandlerError>(json!({"captured": ctx.operation_id()}))
/// })?;
/// assert_eq!(result.operation_id, "invoice:INV-1:capture");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct PreparedEffect {
    pub(crate) contract: EffectContract,
    pub(crate) identified: Identified,
    /// The executor settings the identity was derived with.
    derived_with: Derivation,
}

/// What of an executor shapes an identity: the fingerprint form and the keys.
#[derive(Clone)]
struct Derivation {
    form: FingerprintForm,
    keys: Keys,
}

impl Derivation {
    fn of(executor: &EffectExecutor) -> Self {
        Derivation {
            form: executor.options.fingerprint_form,
            keys: executor.keys.clone(),
        }
    }

    /// True when `executor` derives identities as this one did: the same
    /// fingerprint form and the same keys (an executor and its clones).
    fn matches(&self, executor: &EffectExecutor) -> bool {
        fn same<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
        }
        self.form == executor.options.fingerprint_form
            && same(self.keys.keyring.as_ref(), executor.keys.keyring.as_ref())
            && same(
                self.keys.fingerprint.as_ref(),
                executor.keys.fingerprint.as_ref(),
            )
    }
}

impl fmt::Debug for PreparedEffect {
    // The canonical arguments may hold revealed secrets: never printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreparedEffect")
            .field("operation_id", &self.identified.identity.operation_id)
            .field("contract", &self.contract.name())
            .field("version", &self.contract.version())
            .finish_non_exhaustive()
    }
}

impl PreparedEffect {
    /// The operation's stable id, as the contract derived it.
    pub fn operation_id(&self) -> &str {
        &self.identified.identity.operation_id
    }

    /// The contract.
    pub fn contract(&self) -> &EffectContract {
        &self.contract
    }

    /// Makes this operation wait for a human approval before each dispatch,
    /// as if its contract had
    /// [`requires_approval(true)`](effect_core::EffectContractBuilder::requires_approval):
    /// for a caller's own rule (the agent runtime's permission policy, by
    /// tool and risk) applied before anything is recorded. It is the same
    /// ledger approval: a new operation is recorded `awaiting_approval`,
    /// and only an [`Approval`](effect_core::Approval) of its fingerprint
    /// lets one dispatch through. An operation recorded earlier keeps what it
    /// was recorded with (docs/approval.md).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, EffectStatus, MemoryLedger};
    /// use effect_exec::{CallOptions, EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let refund = EffectContract::builder("refund", |args| {
    ///     Ok(format!("order:{}:refund", args["order"].as_str().ok_or("missing order")?))
    /// })
    /// .build()?;
    /// let prepared = executor.prepare(&refund, &json!({"order": "A-1"}))?.require_approval();
    /// let result = executor.execute_prepared(&prepared, CallOptions::default(), |_: Value, _: HandlerContext| {
    ///     Ok::<_, HandlerError>(json!({"refunded": true}))
    /// })?;
    /// assert_eq!(result.status, EffectStatus::AwaitingApproval);
    /// assert_eq!(result.attempts, 0);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn require_approval(mut self) -> Self {
        self.identified.require_approval();
        self
    }

    /// Whether a new operation is recorded waiting for an approval: its
    /// contract requires one, or [`require_approval`](Self::require_approval) was called.
    pub fn requires_approval(&self) -> bool {
        self.identified.operation.requires_approval
    }

    /// The provider idempotency key the contract derived, if any.
    pub fn provider_idempotency_key(&self) -> Option<&str> {
        self.identified
            .operation
            .provider_idempotency_key
            .as_deref()
    }
}

impl EffectExecutor {
    /// Derives the identity of `arguments` under `contract` (operation id,
    /// fingerprint, provider key, stored intent) with this executor's
    /// fingerprint form and keys, without writing anything. A contract
    /// callback that panics is an error, as in
    /// [`execute`](Self::execute).
    ///
    /// # Errors
    ///
    /// [`ExecError::InvalidArguments`], [`ExecError::Contract`],
    /// [`ExecError::SecretsNeedSealing`] or [`ExecError::Seal`], as
    /// [`execute`](Self::execute) would return them before anything is written.
    pub fn prepare<A: Serialize + ?Sized>(
        &self,
        contract: &EffectContract,
        arguments: &A,
    ) -> Result<PreparedEffect, ExecError> {
        Ok(PreparedEffect {
            contract: contract.clone(),
            identified: self.identity_of(contract, arguments)?,
            derived_with: Derivation::of(self),
        })
    }

    /// [`execute_with`](Self::execute_with) for a call that
    /// [`prepare`](Self::prepare) derived: the same semantics, under the
    /// prepared operation id.
    ///
    /// # Errors
    ///
    /// As [`execute_with`](Self::execute_with), plus
    /// [`ExecError::ForeignPreparation`] when another executor (other keys or
    /// fingerprint form) prepared the call.
    pub fn execute_prepared<O, H>(
        &self,
        prepared: &PreparedEffect,
        options: CallOptions,
        handler: H,
    ) -> Result<EffectResult, ExecError>
    where
        O: Serialize + Send + 'static,
        H: Fn(Value, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        self.check_prepared(prepared)?;
        self.execute_identity(
            &prepared.contract,
            &prepared.identified.identity,
            prepared.identified.operation.clone(),
            options,
            handler,
        )
    }

    /// Refuses a call prepared by an executor that derives identities
    /// differently: its fingerprint would not be the one this executor records.
    pub(crate) fn check_prepared(&self, prepared: &PreparedEffect) -> Result<(), ExecError> {
        if prepared.derived_with.matches(self) {
            Ok(())
        } else {
            Err(ExecError::ForeignPreparation {
                operation_id: prepared.identified.identity.operation_id.clone(),
            })
        }
    }

    /// Runs a synchronous handler under an identity already derived, the
    /// first round preparing `operation`.
    pub(crate) fn execute_identity<O, H>(
        &self,
        contract: &EffectContract,
        identity: &Identity,
        operation: NewOperation,
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
        let call = Call {
            contract,
            identity,
            deadline: options.deadline.or(self.options.default_deadline),
            invoke: &invoke,
        };
        self.run(&call, operation)
    }
}
