//! [`EffectContract`]: how an operation is identified, keyed and checked (docs/spec.md §3).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::budget::Budget;
use crate::compensation::{Compensated, Compensation};
use crate::error::{CallbackError, ContractError};
use crate::record::OutcomeProbeResult;
use crate::redaction::Redaction;
use crate::status::UnknownOutcomePolicy;

/// Derives the operation id from the arguments.
pub type OperationIdFn = Arc<dyn Fn(&Value) -> Result<String, CallbackError> + Send + Sync>;
/// Derives the provider idempotency key from the arguments.
pub type KeyFn = Arc<dyn Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync>;
/// Asks the provider what became of an operation: arguments and stored provider key.
pub type ProbeFn =
    Arc<dyn Fn(&Value, Option<&str>) -> Result<OutcomeProbeResult, CallbackError> + Send + Sync>;
/// A boxed, sendable future.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
/// The async form of [`ProbeFn`], taking owned copies.
pub type AsyncProbeFn = Arc<
    dyn Fn(Value, Option<String>) -> BoxFuture<Result<OutcomeProbeResult, CallbackError>>
        + Send
        + Sync,
>;
/// Decides from the arguments whether one call waits for a human's approval
/// ([`EffectContractBuilder::requires_approval_when`]).
pub type ApprovalRuleFn = Arc<dyn Fn(&Value) -> Result<bool, CallbackError> + Send + Sync>;
/// Checks, before the first dispatch, that the effect should still be sent
/// (the invoice is still open): `Ok(None)` to go on, `Ok(Some(reason))` to
/// reject the operation with that reason, nothing sent.
pub type PreconditionFn =
    Arc<dyn Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync>;
/// Reads the arguments an earlier version of a contract stored as this
/// version's arguments ([`EffectContractBuilder::reads_intent_of`]): pure and
/// deterministic, JSON in, JSON out.
pub type IntentMigrationFn = Arc<dyn Fn(&Value) -> Result<Value, CallbackError> + Send + Sync>;
/// Checks that an output is what the effect should have produced: arguments, output.
pub type PostconditionFn = Arc<dyn Fn(&Value, &Value) -> Result<bool, CallbackError> + Send + Sync>;

/// The contract of one kind of effect.
///
/// Cloning is cheap: callbacks are shared.
#[derive(Clone)]
pub struct EffectContract {
    name: String,
    version: String,
    operation_id: OperationIdFn,
    provider_idempotency_key: Option<KeyFn>,
    provider_idempotency_guaranteed: bool,
    outcome_probe: Option<ProbeFn>,
    outcome_probe_async: Option<AsyncProbeFn>,
    postcondition: Option<PostconditionFn>,
    precondition: Option<PreconditionFn>,
    unknown_outcome: UnknownOutcomePolicy,
    stores_intent: bool,
    requires_approval: bool,
    approval_rule: Option<ApprovalRuleFn>,
    // Budgets (docs/approval.md#budgets), grouped here.
    budgets: Vec<Budget>,
    redaction: Redaction,
    provider_key_ttl: Option<std::time::Duration>,
    settle: Option<std::time::Duration>,
    compensation: Option<Arc<Compensation>>,
    reads_intent_of: Vec<Arc<IntentMigration>>,
}

/// How a contract version reads the intent an earlier version of the same
/// contract stored (docs/spec.md §5c): the earlier contract, whose
/// derivation checks that the stored arguments are the operation's, and a
/// migration of those arguments into this version's. The stored bytes are
/// never rewritten; the operation keeps the id, request fingerprint and
/// provider key it was claimed with.
#[derive(Clone)]
pub struct IntentMigration {
    earlier: EffectContract,
    migrate: IntentMigrationFn,
    mark_secrets: Option<IntentMigrationFn>,
}

impl fmt::Debug for IntentMigration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntentMigration")
            .field("earlier", &self.earlier.version)
            .field("marks_secrets", &self.mark_secrets.is_some())
            .finish_non_exhaustive()
    }
}

impl IntentMigration {
    /// The earlier version's contract.
    pub fn earlier(&self) -> &EffectContract {
        &self.earlier
    }

    /// The earlier version's stored arguments as this version's.
    ///
    /// # Errors
    ///
    /// The migration's error: the stored arguments cannot be read as this
    /// version's.
    pub fn migrate(&self, stored: &Value) -> Result<Value, CallbackError> {
        (self.migrate)(stored)
    }

    /// The earlier version's stored arguments as its callers serialized
    /// them, each [`Secret`](crate::secret::Secret) field as the marker
    /// ([`EffectContractBuilder::reads_intent_of_with_secrets`]): what the
    /// request fingerprint of an operation whose arguments held secrets
    /// was derived from. `None` when the migration does not declare it:
    /// the stored arguments are then fingerprinted as plain JSON.
    ///
    /// # Errors
    ///
    /// The declared function's error: the stored arguments cannot be read
    /// as the earlier version's.
    pub fn mark_secrets(&self, stored: &Value) -> Option<Result<Value, CallbackError>> {
        self.mark_secrets.as_ref().map(|mark| mark(stored))
    }
}

impl fmt::Debug for EffectContract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EffectContract")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("has_provider_key", &self.provider_idempotency_key.is_some())
            .field(
                "provider_idempotency_guaranteed",
                &self.provider_idempotency_guaranteed,
            )
            .field("has_probe", &self.has_probe())
            .field("has_postcondition", &self.postcondition.is_some())
            .field("has_precondition", &self.precondition.is_some())
            .field("unknown_outcome", &self.unknown_outcome)
            .field("stores_intent", &self.stores_intent)
            .field("requires_approval", &self.requires_approval)
            .field("has_approval_rule", &self.approval_rule.is_some())
            .field("budgets", &self.budgets)
            .field("redaction", &self.redaction)
            .field("provider_key_ttl", &self.provider_key_ttl)
            .field("settle", &self.settle)
            .field(
                "compensation",
                &self.compensation.as_ref().map(|c| c.contract().name()),
            )
            .field(
                "reads_intent_of",
                &self
                    .reads_intent_of
                    .iter()
                    .map(|m| m.earlier.version.as_str())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl EffectContract {
    /// Starts a contract named `name` whose operation id `operation_id` derives
    /// from the arguments. The version defaults to `"1"`.
    pub fn builder<F>(name: impl Into<String>, operation_id: F) -> EffectContractBuilder
    where
        F: Fn(&Value) -> Result<String, CallbackError> + Send + Sync + 'static,
    {
        EffectContractBuilder {
            contract: EffectContract {
                name: name.into(),
                version: "1".to_owned(),
                operation_id: Arc::new(operation_id),
                provider_idempotency_key: None,
                provider_idempotency_guaranteed: false,
                outcome_probe: None,
                outcome_probe_async: None,
                postcondition: None,
                precondition: None,
                unknown_outcome: UnknownOutcomePolicy::default(),
                stores_intent: false,
                requires_approval: false,
                approval_rule: None,
                budgets: Vec::new(),
                redaction: Redaction::default(),
                provider_key_ttl: None,
                settle: None,
                compensation: None,
                reads_intent_of: Vec::new(),
            },
            invalid_redaction: None,
        }
    }

    /// The contract name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The contract version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// Whether the provider's documented key semantics make repeated sends safe.
    pub fn provider_idempotency_guaranteed(&self) -> bool {
        self.provider_idempotency_guaranteed
    }

    /// The unknown-outcome policy.
    pub fn unknown_outcome(&self) -> UnknownOutcomePolicy {
        self.unknown_outcome
    }

    /// Whether the operation's arguments are stored with it, so that a
    /// recovery worker can dispatch it without its caller.
    pub fn stores_intent(&self) -> bool {
        self.stores_intent
    }

    /// The budgets each dispatch is charged to (docs/approval.md#budgets).
    pub fn budgets(&self) -> &[Budget] {
        &self.budgets
    }

    /// Whether each dispatch waits for a human's approval of the exact
    /// request ([`EffectContractBuilder::requires_approval`]).
    pub fn requires_approval(&self) -> bool {
        self.requires_approval
    }

    /// Whether a call with these canonical `arguments` waits for a human's
    /// approval: always when [`requires_approval`](Self::requires_approval),
    /// else what the contract's rule
    /// ([`EffectContractBuilder::requires_approval_when`]) says of them, else
    /// never. The executor asks once per call, before anything is written,
    /// and records the answer with the operation.
    ///
    /// # Errors
    ///
    /// The rule's own error (missing field, wrong type): the call is refused.
    pub fn approval_required_for(&self, arguments: &Value) -> Result<bool, CallbackError> {
        if self.requires_approval {
            return Ok(true);
        }
        match &self.approval_rule {
            Some(rule) => rule(arguments),
            None => Ok(false),
        }
    }

    /// Whether the contract may require approval at all: always, or by a
    /// rule over the arguments.
    pub fn may_require_approval(&self) -> bool {
        self.requires_approval || self.approval_rule.is_some()
    }

    /// How long the provider honours an idempotency key, if it says
    /// ([`EffectContractBuilder::provider_key_ttl`]).
    pub fn provider_key_ttl(&self) -> Option<std::time::Duration> {
        self.provider_key_ttl
    }

    /// How long after an attempt a commit can still appear
    /// ([`EffectContractBuilder::settle`]).
    pub fn settle(&self) -> Option<std::time::Duration> {
        self.settle
    }

    /// The argument fields that never reach the ledger in clear (besides any
    /// [`Secret`](crate::secret::Secret) in typed arguments).
    pub fn redaction(&self) -> &Redaction {
        &self.redaction
    }

    /// Whether the contract has a sync or async outcome probe.
    pub fn has_probe(&self) -> bool {
        self.outcome_probe.is_some() || self.outcome_probe_async.is_some()
    }

    /// The sync outcome probe, if any.
    pub fn outcome_probe(&self) -> Option<&ProbeFn> {
        self.outcome_probe.as_ref()
    }

    /// The async outcome probe, if any.
    pub fn outcome_probe_async(&self) -> Option<&AsyncProbeFn> {
        self.outcome_probe_async.as_ref()
    }

    /// The postcondition, if any.
    pub fn postcondition(&self) -> Option<&PostconditionFn> {
        self.postcondition.as_ref()
    }

    /// The precondition, if any ([`EffectContractBuilder::precondition`]).
    pub fn precondition(&self) -> Option<&PreconditionFn> {
        self.precondition.as_ref()
    }

    /// The effect that undoes this one, if the contract names it
    /// ([`EffectContractBuilder::compensation`]).
    pub fn compensation(&self) -> Option<&Compensation> {
        self.compensation.as_deref()
    }

    /// How this version reads the intent `version` of the same contract
    /// stored, if it declares it ([`EffectContractBuilder::reads_intent_of`]).
    pub fn intent_migration(&self, version: &str) -> Option<&IntentMigration> {
        self.reads_intent_of
            .iter()
            .find(|migration| migration.earlier.version == version)
            .map(Arc::as_ref)
    }

    /// The earlier versions whose stored intent this version reads.
    pub fn reads_intent_of_versions(&self) -> impl Iterator<Item = &str> {
        self.reads_intent_of
            .iter()
            .map(|migration| migration.earlier.version.as_str())
    }

    /// Derives and validates the operation id.
    ///
    /// # Errors
    ///
    /// The callback's error, or an error when the id is blank.
    pub fn operation_id(&self, arguments: &Value) -> Result<String, CallbackError> {
        let id = (self.operation_id)(arguments)?;
        if id.trim().is_empty() {
            return Err(CallbackError::new(format!(
                "contract {:?}: operation id must not be blank",
                self.name
            )));
        }
        Ok(id)
    }

    /// Derives and validates the provider idempotency key.
    ///
    /// # Errors
    ///
    /// The callback's error; an empty key; no key from a contract that claims
    /// `provider_idempotency_guaranteed`.
    pub fn provider_idempotency_key(
        &self,
        arguments: &Value,
    ) -> Result<Option<String>, CallbackError> {
        let key = match &self.provider_idempotency_key {
            Some(key_fn) => key_fn(arguments)?,
            None => None,
        };
        match &key {
            Some(key) if key.is_empty() => Err(CallbackError::new(format!(
                "contract {:?}: provider idempotency key must not be empty",
                self.name
            ))),
            None if self.provider_idempotency_guaranteed => Err(CallbackError::new(format!(
                "contract {:?} guarantees provider idempotency but produced no provider key",
                self.name
            ))),
            _ => Ok(key),
        }
    }
}

/// Builds an [`EffectContract`]; see [`EffectContract::builder`].
#[derive(Debug)]
pub struct EffectContractBuilder {
    contract: EffectContract,
    invalid_redaction: Option<crate::error::RedactionError>,
}

impl EffectContractBuilder {
    /// Sets the version; a change of semantics needs a new one.
    #[must_use]
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.contract.version = version.into();
        self
    }

    /// Derives the provider idempotency key, forwarded on every attempt.
    #[must_use]
    pub fn provider_idempotency_key<F>(mut self, key: F) -> Self
    where
        F: Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync + 'static,
    {
        self.contract.provider_idempotency_key = Some(Arc::new(key));
        self
    }

    /// Claims that the provider's *documented* key semantics make repeated sends
    /// with the same key safe. Not the mere presence of a key parameter.
    #[must_use]
    pub fn provider_idempotency_guaranteed(mut self, guaranteed: bool) -> Self {
        self.contract.provider_idempotency_guaranteed = guaranteed;
        self
    }

    /// Asks the provider what became of an operation. Return `not_committed`
    /// only with terminal evidence.
    #[must_use]
    pub fn outcome_probe<F>(mut self, probe: F) -> Self
    where
        F: Fn(&Value, Option<&str>) -> Result<OutcomeProbeResult, CallbackError>
            + Send
            + Sync
            + 'static,
    {
        self.contract.outcome_probe = Some(Arc::new(probe));
        self
    }

    /// The async form of [`outcome_probe`](Self::outcome_probe), preferred by
    /// async execution.
    #[must_use]
    pub fn outcome_probe_async<F, Fut>(mut self, probe: F) -> Self
    where
        F: Fn(Value, Option<String>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<OutcomeProbeResult, CallbackError>> + Send + 'static,
    {
        self.contract.outcome_probe_async =
            Some(Arc::new(move |args, key| Box::pin(probe(args, key))));
        self
    }

    /// Checks, before the operation's first dispatch, that it should still
    /// be sent (docs/spec.md §5): asked before the first claim, and so
    /// again once an approval or a budget deferral let it go, never before
    /// a retry (an earlier attempt may have changed what it checks). `Ok(None)`
    /// lets the dispatch go on; `Ok(Some(reason))` rejects the operation
    /// with that reason and sends nothing; an error leaves it as it is and
    /// fails the call.
    #[must_use]
    pub fn precondition<F>(mut self, check: F) -> Self
    where
        F: Fn(&Value) -> Result<Option<String>, CallbackError> + Send + Sync + 'static,
    {
        self.contract.precondition = Some(Arc::new(check));
        self
    }

    /// Checks an output (from the handler or a probe) against the arguments.
    #[must_use]
    pub fn postcondition<F>(mut self, check: F) -> Self
    where
        F: Fn(&Value, &Value) -> Result<bool, CallbackError> + Send + Sync + 'static,
    {
        self.contract.postcondition = Some(Arc::new(check));
        self
    }

    /// Redacts these argument fields (JSON Pointers, `*` matching every
    /// member or element) from everything the ledger stores in clear:
    /// outputs, evidence, error text and event data are scrubbed of their
    /// values, and the request fingerprint covers them through a digest
    /// (docs/security-boundaries.md). Stored intent that holds them must be
    /// sealed (effect-exec's `EffectExecutor::with_keyring`).
    /// An invalid path fails [`build`](Self::build).
    #[must_use]
    pub fn redact<I, S>(mut self, paths: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        match Redaction::new(paths) {
            Ok(redaction) => self.contract.redaction = redaction,
            Err(err) => self.invalid_redaction = Some(err),
        }
        self
    }

    /// How long the provider honours an idempotency key (Stripe documents
    /// 24 hours). Once the operation is that old, an automatic retry on the
    /// key alone is refused: the key may be forgotten and the repeat charged
    /// again, so the operation is quarantined with that reason unless an
    /// authoritative probe decides it. Measured from the operation's
    /// creation, when the key was first sent.
    #[must_use]
    pub fn provider_key_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.contract.provider_key_ttl = Some(ttl);
        self
    }

    /// How long after an attempt a commit can still appear at the provider
    /// (a late commit of a slow request). A probe's `not_committed` is not
    /// acted on before the last attempt is that old: the operation stays
    /// `outcome_unknown` and is probed again later.
    #[must_use]
    pub fn settle(mut self, settle: std::time::Duration) -> Self {
        self.contract.settle = Some(settle);
        self
    }

    /// Stores the operation's arguments with it (its *intent*), so that a
    /// later process can dispatch it without the original caller: a recovery
    /// worker with a handler registered for this contract finishes an
    /// operation whose caller died (docs/recovering-work.md). The stored
    /// arguments count toward the same canonical-JSON limits as everything
    /// else the ledger holds; secrets in them must be sealed (see
    /// docs/security-boundaries.md).
    #[must_use]
    pub fn store_intent(mut self, store: bool) -> Self {
        self.contract.stores_intent = store;
        self
    }

    /// Requires a human's approval before each dispatch (docs/approval.md):
    /// a new operation is recorded `awaiting_approval` and nothing is sent
    /// until an approval of its exact request fingerprint is recorded (an
    /// operator's `agent-effect-ops approve`, or effect-exec's
    /// `EffectExecutor::operator().approve`). The claim that dispatches it consumes the
    /// approval, so a retry after an uncertain outcome waits for a new one.
    /// The requirement is recorded when an operation is created: turning it on
    /// for a contract is a semantic change that takes a new version.
    #[must_use]
    pub fn requires_approval(mut self, required: bool) -> Self {
        self.contract.requires_approval = required;
        self
    }

    /// Requires a human's approval for the calls whose arguments `rule`
    /// selects ("approve refunds above 50.00"), with the same effect as
    /// [`requires_approval`](Self::requires_approval) on those calls and
    /// none on the others. The rule sees the canonical arguments (secrets
    /// revealed, as the operation id callback does), is asked once per call
    /// before anything is written, and its answer is recorded with the
    /// operation: it cannot change between the call and the dispatch, and a
    /// retry of an approved operation waits for a new approval. A rule that
    /// fails refuses the call, writing nothing. On a compensation's contract
    /// it sees the compensation's derived arguments.
    ///
    /// ```
    /// use effect_core::EffectContract;
    /// use serde_json::json;
    ///
    /// let refund = EffectContract::builder("refund_order", |args| {
    ///     Ok(format!("order:{}:refund", args["order_id"].as_str().ok_or("missing order_id")?))
    /// })
    /// .requires_approval_when(|args| Ok(args["cents"].as_u64().ok_or("missing cents")? > 5_000))
    /// .build()?;
    /// assert!(refund.approval_required_for(&json!({"order_id": "A-1", "cents": 8_000}))?);
    /// assert!(!refund.approval_required_for(&json!({"order_id": "A-2", "cents": 4_200}))?);
    /// assert!(refund.approval_required_for(&json!({"order_id": "A-3"})).is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn requires_approval_when<F>(mut self, rule: F) -> Self
    where
        F: Fn(&Value) -> Result<bool, CallbackError> + Send + Sync + 'static,
    {
        self.contract.approval_rule = Some(Arc::new(rule));
        self
    }

    /// Charges each dispatch to `budget` (docs/approval.md#budgets): the
    /// claim that first dispatches an operation checks the budget's use in
    /// its window and charges it, in the store's transaction, or refuses
    /// the dispatch when the limit would be exceeded. May be called more
    /// than once, for several budgets (a per-tenant amount and a global
    /// count, say).
    #[must_use]
    pub fn budget(mut self, budget: Budget) -> Self {
        self.contract.budgets.push(budget);
        self
    }

    /// Names the effect that undoes this one once it is confirmed (a refund
    /// for a capture, a delete for a create; docs/compensation.md): the
    /// compensation's `contract`, and how its `arguments` derive from the
    /// original as the ledger records it (output, provider operation id, and
    /// the stored intent when this contract stores it). effect-exec's
    /// `EffectExecutor::compensate` runs it as an effect of its own, under an
    /// operation id derived from the original's.
    #[must_use]
    pub fn compensation<F>(mut self, contract: EffectContract, arguments: F) -> Self
    where
        F: Fn(&Compensated<'_>) -> Result<Value, CallbackError> + Send + Sync + 'static,
    {
        self.contract.compensation = Some(Arc::new(Compensation::new(contract, arguments)));
        self
    }

    /// Declares how this version reads the intent stored by `earlier`, an
    /// earlier version of the same contract (docs/spec.md §5c): a recovery
    /// worker with only this version's handler registered recovers the
    /// earlier version's operations. The worker checks that the stored
    /// arguments derive the operation's id and request fingerprint under
    /// `earlier`, then runs this version's handler, probe and checks on
    /// `migrate`'s output, under the id, fingerprint and provider key the
    /// operation was claimed with. `migrate` must be pure and deterministic;
    /// its error leaves the operation unreadable, surfaced in
    /// `effect_exec::waiting`. The stored terms still govern: a version
    /// that weakens them is refused. A later declaration for the same
    /// earlier version replaces the first.
    #[must_use]
    pub fn reads_intent_of<F>(self, earlier: EffectContract, migrate: F) -> Self
    where
        F: Fn(&Value) -> Result<Value, CallbackError> + Send + Sync + 'static,
    {
        self.declare_migration(earlier, Arc::new(migrate), None)
    }

    /// [`reads_intent_of`](Self::reads_intent_of) for an earlier version
    /// whose callers passed arguments with
    /// [`Secret`](crate::secret::Secret) fields: their request fingerprint
    /// holds a keyed digest of each secret, not the secret, so the stored
    /// arguments (opened with the executor's keyring) derive it only when
    /// the worker knows which fields were secrets. `mark_secrets` returns
    /// the stored arguments as those callers serialized them, each secret
    /// as the marker (decode them as the earlier argument type and
    /// serialize that); it must be pure and deterministic, and its error
    /// leaves the operation unreadable. The typed builder declares it
    /// itself (`TypedContractBuilder::reads_intent_of` in effect-exec).
    #[must_use]
    pub fn reads_intent_of_with_secrets<M, F>(
        self,
        earlier: EffectContract,
        mark_secrets: M,
        migrate: F,
    ) -> Self
    where
        M: Fn(&Value) -> Result<Value, CallbackError> + Send + Sync + 'static,
        F: Fn(&Value) -> Result<Value, CallbackError> + Send + Sync + 'static,
    {
        self.declare_migration(earlier, Arc::new(migrate), Some(Arc::new(mark_secrets)))
    }

    fn declare_migration(
        mut self,
        earlier: EffectContract,
        migrate: IntentMigrationFn,
        mark_secrets: Option<IntentMigrationFn>,
    ) -> Self {
        let version = earlier.version.clone();
        self.contract
            .reads_intent_of
            .retain(|migration| migration.earlier.version != version);
        self.contract
            .reads_intent_of
            .push(Arc::new(IntentMigration {
                earlier,
                migrate,
                mark_secrets,
            }));
        self
    }

    /// Sets what happens to an operation whose outcome cannot be settled.
    #[must_use]
    pub fn unknown_outcome(mut self, policy: UnknownOutcomePolicy) -> Self {
        self.contract.unknown_outcome = policy;
        self
    }

    /// Builds the contract.
    ///
    /// # Errors
    ///
    /// A blank name or version; a guarantee without a key function; a
    /// budget without a name or a limit, declared twice, or with a sliding
    /// window shorter than a second; an intent migration from a contract of
    /// another name, of this version, or that does not store its intent.
    pub fn build(self) -> Result<EffectContract, ContractError> {
        let contract = self.contract;
        if let Some(source) = self.invalid_redaction {
            return Err(ContractError::InvalidRedaction {
                name: contract.name,
                source,
            });
        }
        if contract.name.trim().is_empty() {
            return Err(ContractError::BlankName);
        }
        if contract.version.trim().is_empty() {
            return Err(ContractError::BlankVersion {
                name: contract.name,
            });
        }
        if contract.provider_idempotency_guaranteed && contract.provider_idempotency_key.is_none() {
            return Err(ContractError::GuaranteeWithoutKey {
                name: contract.name,
            });
        }
        for migration in &contract.reads_intent_of {
            let earlier = &migration.earlier;
            let why = if earlier.name != contract.name {
                Some("the earlier contract has another name")
            } else if earlier.version == contract.version {
                Some("the earlier contract is this version")
            } else if !earlier.stores_intent {
                Some("the earlier contract does not store its intent")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(ContractError::InvalidIntentMigration {
                    name: contract.name,
                    earlier: earlier.version.clone(),
                    why,
                });
            }
        }
        for (i, budget) in contract.budgets.iter().enumerate() {
            let why = budget.invalid().or_else(|| {
                contract.budgets[..i]
                    .iter()
                    .any(|earlier| earlier.name() == budget.name())
                    .then_some("the contract declares this budget twice")
            });
            if let Some(why) = why {
                return Err(ContractError::InvalidBudget {
                    name: contract.name,
                    budget: budget.name().to_owned(),
                    why,
                });
            }
        }
        Ok(contract)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn id(args: &Value) -> Result<String, CallbackError> {
        Ok(args["id"].as_str().ok_or("missing id")?.to_owned())
    }

    #[test]
    fn construction_errors_of_spec_section_3() {
        assert_eq!(
            EffectContract::builder(" ", id).build().unwrap_err(),
            ContractError::BlankName
        );
        assert!(matches!(
            EffectContract::builder("c", id).version("").build(),
            Err(ContractError::BlankVersion { .. })
        ));
        assert!(matches!(
            EffectContract::builder("c", id)
                .provider_idempotency_guaranteed(true)
                .build(),
            Err(ContractError::GuaranteeWithoutKey { .. })
        ));
    }

    #[test]
    fn blank_ids_and_missing_guaranteed_keys_fail_at_run_time() {
        let contract = EffectContract::builder("c", id)
            .provider_idempotency_key(|args| Ok(args["key"].as_str().map(str::to_owned)))
            .provider_idempotency_guaranteed(true)
            .build()
            .unwrap();
        assert!(contract.operation_id(&json!({"id": "  "})).is_err());
        assert!(contract.operation_id(&json!({})).is_err());
        assert!(
            contract
                .provider_idempotency_key(&json!({"id": "a"}))
                .is_err()
        );
        assert!(
            contract
                .provider_idempotency_key(&json!({"key": ""}))
                .is_err()
        );
        assert_eq!(
            contract
                .provider_idempotency_key(&json!({"key": "k"}))
                .unwrap()
                .as_deref(),
            Some("k")
        );
    }
}
