//! Typed effects: contracts, handlers and results over the caller's own serde
//! types, as a thin layer over the `Value` API (see [`TypedContract`]).

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;

use effect_core::canonical::to_json_value;
use effect_core::{
    CallbackError, ContractError, EffectContract, EffectContractBuilder, EffectResult,
    OutcomeProbeResult, UnknownOutcomePolicy,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::HandlerContext;
use crate::error::{ExecError, HandlerError};
use crate::executor::EffectExecutor;
use crate::identity::{operation_id_of, provider_key_of};
use crate::options::CallOptions;

/// An [`EffectContract`] over arguments `A` and outputs `O`.
///
/// Its callbacks see the arguments as `A` and outputs as `O`. [`EffectExecutor::execute_typed`]
/// serializes `A` into the canonical JSON the ledger records, runs a handler
/// taking `A`, and decodes the output, fresh or replayed, back into `O`. A
/// stored output that no longer decodes as `O` (the type changed under a
/// recorded operation) is [`ExecError::OutputDecode`]: it is never taken as a
/// reason to dispatch again.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::MemoryLedger;
/// use effect_exec::{EffectExecutor, HandlerContext, HandlerError, TypedContract};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Sent { message_id: String }
///
/// let contract = TypedContract::<SendEmail, Sent>::builder("send_email", |args| {
///     Ok(format!("email:{}:welcome", args.to))
/// })
/// .build()?;
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let send = |args: SendEmail, _ctx: HandlerContext| -> Result<Sent, HandlerError> {
///     Ok(Sent { message_id: format!("msg-{}", args.to) })
/// };
/// let email = SendEmail { to: "ada@example.com".into() };
/// let first = executor.execute_typed(&contract, &email, send)?;
/// let again = executor.execute_typed(&contract, &email, send)?;
/// assert_eq!(first.output, Some(Sent { message_id: "msg-ada@example.com".into() }));
/// assert!(again.duplicate_suppressed);
/// assert_eq!(again.output, first.output);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// Cloning is cheap: the callbacks are shared.
pub struct TypedContract<A, O> {
    contract: EffectContract,
    types: PhantomData<fn(A) -> O>,
}

/// What [`EffectExecutor::execute_typed`] returns: the untyped
/// [`EffectResult`] (reachable through `Deref`, so `result.status` and
/// `result.operation_id` read as usual) and its output decoded as `O`.
#[derive(Debug, Clone, PartialEq)]
pub struct TypedResult<O> {
    /// The output of a confirmed operation, decoded as `O`.
    pub output: Option<O>,
    /// The untyped result, with the output as stored.
    pub result: EffectResult,
}

/// Builds a [`TypedContract`]; see [`TypedContract::builder`].
pub struct TypedContractBuilder<A, O> {
    builder: EffectContractBuilder,
    types: PhantomData<fn(A) -> O>,
}

impl<A, O> TypedContract<A, O>
where
    A: Serialize + DeserializeOwned + 'static,
    O: Serialize + DeserializeOwned + 'static,
{
    /// Starts a contract named `name` whose operation id derives from the
    /// typed arguments. The version defaults to `"1"`.
    pub fn builder<F>(name: impl Into<String>, operation_id: F) -> TypedContractBuilder<A, O>
    where
        F: Fn(&A) -> Result<String, CallbackError> + Send + Sync + 'static,
    {
        TypedContractBuilder {
            builder: EffectContract::builder(name, move |args| operation_id(&decode_args(args)?)),
            types: PhantomData,
        }
    }

    /// Wraps a `Value` contract: its callbacks keep seeing JSON, while handlers
    /// and results are typed.
    pub fn from_contract(contract: EffectContract) -> Self {
        TypedContract {
            contract,
            types: PhantomData,
        }
    }

    /// The underlying `Value` contract.
    pub fn contract(&self) -> &EffectContract {
        &self.contract
    }

    /// The operation id of `arguments`, as execution derives it (the same
    /// function, so a panicking callback is an error here too). A call needs
    /// no second derivation: its handler reads the id from its
    /// [`HandlerContext`](crate::HandlerContext), and a caller that needs it
    /// before the dispatch uses [`EffectExecutor::prepare`].
    ///
    /// # Errors
    ///
    /// [`ExecError::InvalidArguments`] when `arguments` cannot be canonical
    /// JSON, [`ExecError::Contract`] when the callback fails or panics.
    pub fn operation_id(&self, arguments: &A) -> Result<String, ExecError> {
        let value =
            to_json_value(arguments).map_err(|source| ExecError::InvalidArguments { source })?;
        operation_id_of(&self.contract, &value)
    }

    /// The provider idempotency key of `arguments`, as execution would derive it.
    ///
    /// # Errors
    ///
    /// As [`operation_id`](Self::operation_id).
    pub fn provider_idempotency_key(&self, arguments: &A) -> Result<Option<String>, ExecError> {
        let value =
            to_json_value(arguments).map_err(|source| ExecError::InvalidArguments { source })?;
        provider_key_of(&self.contract, &value)
    }
}

impl<A, O> TypedContractBuilder<A, O>
where
    A: Serialize + DeserializeOwned + 'static,
    O: Serialize + DeserializeOwned + 'static,
{
    /// Sets the version; a change of semantics (or of `O`'s shape) needs a new one.
    #[must_use]
    pub fn version(self, version: impl Into<String>) -> Self {
        self.map(|builder| builder.version(version))
    }

    /// Derives the provider idempotency key, forwarded on every attempt.
    #[must_use]
    pub fn provider_idempotency_key<F>(self, key: F) -> Self
    where
        F: Fn(&A) -> Result<Option<String>, CallbackError> + Send + Sync + 'static,
    {
        self.map(|builder| builder.provider_idempotency_key(move |args| key(&decode_args(args)?)))
    }

    /// See [`EffectContractBuilder::provider_key_ttl`].
    #[must_use]
    pub fn provider_key_ttl(self, ttl: std::time::Duration) -> Self {
        self.map(|builder| builder.provider_key_ttl(ttl))
    }

    /// See [`EffectContractBuilder::settle`].
    #[must_use]
    pub fn settle(self, settle: std::time::Duration) -> Self {
        self.map(|builder| builder.settle(settle))
    }

    /// See [`EffectContractBuilder::store_intent`]: the arguments are stored
    /// with the operation, so a [`RecoveryWorker`](crate::RecoveryWorker)
    /// can dispatch it without its caller.
    #[must_use]
    pub fn store_intent(self, store: bool) -> Self {
        self.map(|builder| builder.store_intent(store))
    }

    /// See [`EffectContractBuilder::requires_approval`]: each dispatch waits
    /// for a human's approval of the exact request (docs/approval.md).
    #[must_use]
    pub fn requires_approval(self, required: bool) -> Self {
        self.map(|builder| builder.requires_approval(required))
    }

    /// See [`EffectContractBuilder::requires_approval_when`]: the calls whose
    /// arguments `rule` selects wait for a human's approval, decided once
    /// per call and recorded with the operation.
    ///
    /// ```
    /// use effect_exec::TypedContract;
    /// use serde::{Deserialize, Serialize};
    /// use serde_json::json;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Refund { order: String, cents: u64 }
    ///
    /// let refund = TypedContract::<Refund, serde_json::Value>::builder("refund", |r: &Refund| {
    ///     Ok(format!("order:{}:refund", r.order))
    /// })
    /// .requires_approval_when(|r: &Refund| Ok(r.cents > 5_000))
    /// .build()?;
    /// let inner = refund.contract();
    /// assert!(inner.approval_required_for(&json!({"order": "A-1", "cents": 8_000}))?);
    /// assert!(!inner.approval_required_for(&json!({"order": "A-2", "cents": 4_200}))?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn requires_approval_when<F>(self, rule: F) -> Self
    where
        F: Fn(&A) -> Result<bool, CallbackError> + Send + Sync + 'static,
    {
        self.map(|builder| builder.requires_approval_when(move |args| rule(&decode_args(args)?)))
    }

    /// See [`EffectContractBuilder::budget`]: each dispatch is charged to
    /// `budget` in the claim's transaction (docs/approval.md#budgets). The
    /// budget's scope and cost callbacks see the arguments' JSON, as the
    /// ledger does.
    ///
    /// ```
    /// use effect_core::Budget;
    /// use effect_exec::TypedContract;
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Refund { order: String, cents: u64 }
    ///
    /// let refund = TypedContract::<Refund, serde_json::Value>::builder("refund", |r| {
    ///     Ok(format!("order:{}:refund", r.order))
    /// })
    /// .budget(Budget::per_day("refunds").max_amount(50_000, |args| {
    ///     Ok(args["cents"].as_u64().ok_or("missing cents")?)
    /// }))
    /// .build()?;
    /// assert_eq!(refund.contract().budgets().len(), 1);
    /// # Ok::<(), effect_core::ContractError>(())
    /// ```
    #[must_use]
    pub fn budget(self, budget: effect_core::Budget) -> Self {
        self.map(|builder| builder.budget(budget))
    }

    /// See [`EffectContractBuilder::redact`]: paths into the arguments' JSON
    /// that never reach the ledger in clear. A [`Secret`](effect_core::secret::Secret)
    /// field needs no path.
    #[must_use]
    pub fn redact<I, S>(self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.map(|builder| builder.redact(paths))
    }

    /// See [`EffectContractBuilder::provider_idempotency_guaranteed`].
    #[must_use]
    pub fn provider_idempotency_guaranteed(self, guaranteed: bool) -> Self {
        self.map(|builder| builder.provider_idempotency_guaranteed(guaranteed))
    }

    /// Asks the provider what became of an operation. Build a committed
    /// verdict with [`TypedProbe::committed`]; return `not_committed` only
    /// with terminal evidence.
    #[must_use]
    pub fn outcome_probe<F>(self, probe: F) -> Self
    where
        F: Fn(&A, Option<&str>) -> Result<TypedProbe<O>, CallbackError> + Send + Sync + 'static,
    {
        self.map(|builder| {
            builder.outcome_probe(move |args, key| probe(&decode_args(args)?, key)?.into_untyped())
        })
    }

    /// The async form of [`outcome_probe`](Self::outcome_probe), preferred by
    /// async execution.
    #[must_use]
    pub fn outcome_probe_async<F, Fut>(self, probe: F) -> Self
    where
        F: Fn(A, Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<TypedProbe<O>, CallbackError>> + Send + 'static,
    {
        let probe = std::sync::Arc::new(probe);
        self.map(|builder| {
            builder.outcome_probe_async(move |args: Value, key| {
                let probe = std::sync::Arc::clone(&probe);
                async move {
                    let args = decode_args(&args)?;
                    probe(args, key).await?.into_untyped()
                }
            })
        })
    }

    /// Checks an output (from the handler or a probe) against the arguments.
    #[must_use]
    pub fn postcondition<F>(self, check: F) -> Self
    where
        F: Fn(&A, &O) -> Result<bool, CallbackError> + Send + Sync + 'static,
    {
        self.map(|builder| {
            builder.postcondition(move |args, output| {
                let output: O = serde_json::from_value(output.clone()).map_err(|err| {
                    CallbackError::new(format!(
                        "output does not decode as {}: {err}",
                        std::any::type_name::<O>()
                    ))
                })?;
                check(&decode_args(args)?, &output)
            })
        })
    }

    /// Sets what happens to an operation whose outcome cannot be settled.
    #[must_use]
    pub fn unknown_outcome(self, policy: UnknownOutcomePolicy) -> Self {
        self.map(|builder| builder.unknown_outcome(policy))
    }

    /// Checks the typed arguments before the first dispatch
    /// ([`EffectContractBuilder::precondition`]).
    #[must_use]
    pub fn precondition<F>(self, check: F) -> Self
    where
        F: Fn(&A) -> Result<Option<String>, CallbackError> + Send + Sync + 'static,
    {
        self.map(|builder| builder.precondition(move |args| check(&decode_args(args)?)))
    }

    /// Names the typed effect that undoes this one
    /// ([`EffectContractBuilder::compensation`]): `arguments` derives the
    /// compensation's typed arguments from the original as the ledger
    /// records it; [`EffectExecutor::compensate_typed`] runs it.
    #[must_use]
    pub fn compensation<CA, CO, F>(self, contract: &TypedContract<CA, CO>, arguments: F) -> Self
    where
        CA: Serialize,
        F: Fn(&effect_core::compensation::Compensated<'_>) -> Result<CA, CallbackError>
            + Send
            + Sync
            + 'static,
    {
        let compensation = contract.contract.clone();
        self.map(move |builder| {
            builder.compensation(compensation, move |original| {
                to_json_value(&arguments(original)?).map_err(|err| {
                    CallbackError::new(format!("compensation arguments cannot be recorded: {err}"))
                })
            })
        })
    }

    /// Declares how this version reads the intent stored by `earlier`, an
    /// earlier version of the same contract
    /// ([`EffectContractBuilder::reads_intent_of`]): `migrate` turns the
    /// earlier version's typed arguments into this version's. The stored
    /// arguments are checked against the operation under `earlier`'s
    /// derivation, decoded as `P`, so that `P`'s
    /// [`Secret`](effect_core::secret::Secret) fields fingerprint as they
    /// did when the operation was claimed
    /// ([`EffectContractBuilder::reads_intent_of_with_secrets`]).
    #[must_use]
    pub fn reads_intent_of<P, PO, F>(self, earlier: &TypedContract<P, PO>, migrate: F) -> Self
    where
        P: Serialize + DeserializeOwned,
        F: Fn(P) -> Result<A, CallbackError> + Send + Sync + 'static,
    {
        let earlier = earlier.contract.clone();
        self.map(move |builder| {
            builder.reads_intent_of_with_secrets(
                earlier,
                |stored| {
                    // Serialized outside a reveal scope: each secret as the
                    // marker, as the earlier callers' arguments were.
                    to_json_value(&decode::<P>(stored)?).map_err(|err| {
                        CallbackError::new(format!("stored arguments cannot be re-encoded: {err}"))
                    })
                },
                move |stored| {
                    let migrated = migrate(decode::<P>(stored)?)?;
                    // In clear: the worker decodes them as `A` for the
                    // handler, and derives from that value which of them
                    // are secrets; they are never stored.
                    effect_core::secret::reveal(|| to_json_value(&migrated)).map_err(|err| {
                        CallbackError::new(format!("migrated arguments cannot be recorded: {err}"))
                    })
                },
            )
        })
    }

    /// Builds the contract.
    ///
    /// # Errors
    ///
    /// As [`EffectContractBuilder::build`].
    pub fn build(self) -> Result<TypedContract<A, O>, ContractError> {
        Ok(TypedContract::from_contract(self.builder.build()?))
    }

    fn map(self, step: impl FnOnce(EffectContractBuilder) -> EffectContractBuilder) -> Self {
        TypedContractBuilder {
            builder: step(self.builder),
            types: PhantomData,
        }
    }
}

/// A typed outcome probe's verdict; see [`OutcomeProbeResult`].
#[derive(Debug, Clone, PartialEq)]
pub struct TypedProbe<O> {
    verdict: OutcomeProbeResult,
    output: Option<O>,
}

impl<O: Serialize> TypedProbe<O> {
    /// The effect happened and produced `output`.
    pub fn committed(output: O) -> Self {
        TypedProbe {
            verdict: OutcomeProbeResult::committed(Value::Null),
            output: Some(output),
        }
    }

    /// Authoritative: the request can never commit later.
    pub fn not_committed() -> Self {
        TypedProbe::untyped(OutcomeProbeResult::not_committed())
    }

    /// The provider is still processing it.
    pub fn pending() -> Self {
        TypedProbe::untyped(OutcomeProbeResult::pending())
    }

    /// The evidence cannot settle it.
    pub fn unknown() -> Self {
        TypedProbe::untyped(OutcomeProbeResult::unknown())
    }

    /// The provider holds something that contradicts the request: the
    /// operation is quarantined, never confirmed or retried
    /// ([`OutcomeProbeResult::conflict`]).
    pub fn conflict() -> Self {
        TypedProbe::untyped(OutcomeProbeResult::conflict())
    }

    /// Sets the provider's id for the effect.
    #[must_use]
    pub fn provider_operation_id(mut self, id: impl Into<String>) -> Self {
        self.verdict = self.verdict.provider_operation_id(id);
        self
    }

    /// Adds one evidence entry.
    #[must_use]
    pub fn evidence(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.verdict = self.verdict.evidence(key, value);
        self
    }

    fn untyped(verdict: OutcomeProbeResult) -> Self {
        TypedProbe {
            verdict,
            output: None,
        }
    }

    /// The `Value` verdict, with the output serialized.
    ///
    /// # Errors
    ///
    /// The output cannot be canonical JSON.
    pub fn into_untyped(self) -> Result<OutcomeProbeResult, CallbackError> {
        let mut verdict = self.verdict;
        if let Some(output) = self.output {
            verdict.output = Some(to_json_value(&output).map_err(|err| {
                CallbackError::new(format!("probe output cannot be recorded: {err}"))
            })?);
        }
        Ok(verdict)
    }
}

impl<O: DeserializeOwned> TypedResult<O> {
    /// Decodes the output of an untyped result (for adapters that run the
    /// `Value` API themselves).
    ///
    /// # Errors
    ///
    /// [`ExecError::OutputDecode`] when the output does not decode as `O`.
    pub fn from_result(result: EffectResult) -> Result<Self, ExecError> {
        decode_result(result)
    }
}

impl<O> TypedResult<O> {
    /// True when the operation is confirmed.
    pub fn is_confirmed(&self) -> bool {
        self.result.is_confirmed()
    }

    /// True for `outcome_unknown` and `quarantined`: nobody knows yet whether
    /// the effect happened, so it must not be retried blindly.
    pub fn is_uncertain(&self) -> bool {
        self.result.status.is_uncertain()
    }
}

impl<O> Deref for TypedResult<O> {
    type Target = EffectResult;

    fn deref(&self) -> &EffectResult {
        &self.result
    }
}

impl EffectExecutor {
    /// [`execute`](Self::execute) over typed arguments, handler and output.
    ///
    /// The handler receives the arguments decoded from the canonical JSON the
    /// ledger recorded, so it sees exactly what a retry or a probe would see.
    ///
    /// # Errors
    ///
    /// As [`execute`](Self::execute); [`ExecError::ArgumentsDecode`] before
    /// anything is written when `A` does not survive its own JSON round trip;
    /// [`ExecError::OutputDecode`] when the output (fresh or stored) does not
    /// decode as `O`. The ledger keeps that output: nothing is dispatched again.
    pub fn execute_typed<A, O, H>(
        &self,
        contract: &TypedContract<A, O>,
        arguments: &A,
        handler: H,
    ) -> Result<TypedResult<O>, ExecError>
    where
        A: Serialize + DeserializeOwned + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        H: Fn(A, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        self.execute_typed_with(contract, arguments, CallOptions::default(), handler)
    }

    /// [`compensate`](Self::compensate) over typed contracts: the
    /// compensation named by `contract`
    /// ([`TypedContractBuilder::compensation`]) runs with its arguments
    /// decoded as `CA`, and its output decodes as `CO`.
    ///
    /// # Errors
    ///
    /// As [`compensate`](Self::compensate), plus
    /// [`ExecError::OutputDecode`] for an output that does not decode.
    pub fn compensate_typed<A, O, CA, CO, H>(
        &self,
        contract: &TypedContract<A, O>,
        operation_id: &str,
        handler: H,
    ) -> Result<TypedResult<CO>, ExecError>
    where
        CA: DeserializeOwned + 'static,
        CO: Serialize + DeserializeOwned + Send + 'static,
        H: Fn(CA, HandlerContext) -> Result<CO, HandlerError> + Send + Sync + 'static,
    {
        let result = self.compensate(&contract.contract, operation_id, move |args, context| {
            handler(decode_dispatched(&args)?, context)
        })?;
        decode_result(result)
    }

    /// [`execute_typed`](Self::execute_typed) with per-call options (see
    /// [`execute_with`](Self::execute_with) on deadlines).
    ///
    /// # Errors
    ///
    /// As [`execute_typed`](Self::execute_typed).
    pub fn execute_typed_with<A, O, H>(
        &self,
        contract: &TypedContract<A, O>,
        arguments: &A,
        options: CallOptions,
        handler: H,
    ) -> Result<TypedResult<O>, ExecError>
    where
        A: Serialize + DeserializeOwned + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        H: Fn(A, HandlerContext) -> Result<O, HandlerError> + Send + Sync + 'static,
    {
        check_round_trip(contract, arguments)?;
        let result = self.execute_with(
            &contract.contract,
            arguments,
            options,
            move |args, context| handler(decode_dispatched(&args)?, context),
        )?;
        decode_result(result)
    }

    /// The async form of [`execute_typed`](Self::execute_typed); see
    /// [`execute_async`](Self::execute_async).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use effect_core::MemoryLedger;
    /// use effect_exec::{CallOptions, EffectExecutor, HandlerError, TypedContract};
    ///
    /// let contract = TypedContract::<String, u32>::builder("create_ticket", |title| {
    ///     Ok(format!("ticket:{title}"))
    /// })
    /// .build()?;
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let result = executor
    ///     .execute_typed_async(&contract, &"disk full".to_owned(), CallOptions::default(), |title, _ctx| async move {
    ///         Ok::<_, HandlerError>(title.len() as u32)
    ///     })
    ///     .await?;
    /// assert_eq!(result.output, Some(9));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`execute_typed`](Self::execute_typed), plus [`ExecError::Runtime`].
    #[cfg(feature = "tokio")]
    pub async fn execute_typed_async<A, O, H, Fut>(
        &self,
        contract: &TypedContract<A, O>,
        arguments: &A,
        options: CallOptions,
        handler: H,
    ) -> Result<TypedResult<O>, ExecError>
    where
        A: Serialize + DeserializeOwned + Send + 'static,
        O: Serialize + DeserializeOwned + Send + 'static,
        H: Fn(A, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, HandlerError>> + Send + 'static,
    {
        check_round_trip(contract, arguments)?;
        let handler = std::sync::Arc::new(handler);
        let result = self
            .execute_async(
                &contract.contract,
                arguments,
                options,
                move |args, context| {
                    let handler = std::sync::Arc::clone(&handler);
                    async move { handler(decode_dispatched(&args)?, context).await }
                },
            )
            .await?;
        decode_result(result)
    }
}

impl<A, O> Clone for TypedContract<A, O> {
    fn clone(&self) -> Self {
        TypedContract {
            contract: self.contract.clone(),
            types: PhantomData,
        }
    }
}

impl<A, O> fmt::Debug for TypedContract<A, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedContract")
            .field("arguments", &std::any::type_name::<A>())
            .field("output", &std::any::type_name::<O>())
            .field("contract", &self.contract)
            .finish()
    }
}

impl<A, O> fmt::Debug for TypedContractBuilder<A, O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedContractBuilder")
            .field("arguments", &std::any::type_name::<A>())
            .field("output", &std::any::type_name::<O>())
            .finish_non_exhaustive()
    }
}

/// Decodes the arguments a contract callback receives.
fn decode_args<A: DeserializeOwned>(args: &Value) -> Result<A, CallbackError> {
    A::deserialize(args).map_err(|err| {
        CallbackError::new(format!(
            "arguments do not decode as {}: {err}",
            std::any::type_name::<A>()
        ))
    })
}

/// Decodes the arguments a handler receives. [`check_round_trip`] ran on the
/// same JSON before anything was written, so this failing means nothing was
/// sent: a rejection, not an unknown outcome.
fn decode_dispatched<A: DeserializeOwned>(args: &Value) -> Result<A, HandlerError> {
    A::deserialize(args).map_err(|err| {
        HandlerError::rejected(format!(
            "arguments do not decode as {}, nothing was sent: {err}",
            std::any::type_name::<A>()
        ))
    })
}

/// The canonical JSON of `arguments`, once it is known to decode back as `A`.
fn check_round_trip<A, O>(contract: &TypedContract<A, O>, arguments: &A) -> Result<Value, ExecError>
where
    A: Serialize + DeserializeOwned,
{
    // With every secret revealed: that is what the handler decodes.
    let value = effect_core::secret::reveal(|| to_json_value(arguments))
        .map_err(|source| ExecError::InvalidArguments { source })?;
    A::deserialize(&value).map_err(|source| ExecError::ArgumentsDecode {
        contract: contract.contract.name().to_owned(),
        type_name: std::any::type_name::<A>(),
        source,
    })?;
    Ok(value)
}

fn decode_result<O: DeserializeOwned>(result: EffectResult) -> Result<TypedResult<O>, ExecError> {
    let output = match &result.output {
        Some(value) => Some(
            O::deserialize(value).map_err(|source| ExecError::OutputDecode {
                operation_id: result.operation_id.clone(),
                type_name: std::any::type_name::<O>(),
                source,
            })?,
        ),
        None => None,
    };
    Ok(TypedResult { output, result })
}

/// Stored arguments decoded as an earlier version's argument type.
fn decode<P: DeserializeOwned>(stored: &Value) -> Result<P, CallbackError> {
    P::deserialize(stored).map_err(|err| {
        CallbackError::new(format!(
            "the stored arguments do not decode as {}: {err}",
            std::any::type_name::<P>()
        ))
    })
}

#[cfg(test)]
mod tests;
