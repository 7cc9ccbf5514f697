//! [`HandlerContext`]: what a handler is told about the dispatch it performs.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use effect_core::Evidence;
use serde_json::Value;

use crate::observe::{ScopeGuard, StepScope};

/// What the executor tells a handler about the dispatch it performs: the
/// operation's id, its contract, which attempt this is, and the provider
/// idempotency key to send with the request.
///
/// Every handler, sync, async or typed, receives one. The id is derived once
/// per call, before anything is written; adapters (rig, MCP) forward it
/// instead of deriving it again.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectContract, MemoryLedger};
/// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
/// use serde_json::{json, Value};
///
/// let contract = EffectContract::builder("capture_payment", |args| {
///     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
/// })
/// .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
/// .build()?;
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let result = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), |_args: Value, ctx: HandlerContext| {
///     assert_eq!(ctx.operation_id(), "invoice:INV-1:capture");
///     assert_eq!(ctx.attempt(), 1);
///     // Send the key with the request on every attempt.
///     Ok::<_, HandlerError>(json!({"sent_with": ctx.provider_key()}))
/// })?;
/// assert_eq!(result.output, Some(json!({"sent_with": "capture:INV-1"})));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerContext {
    operation_id: String,
    contract_name: String,
    contract_version: String,
    attempt: u32,
    provider_key: Option<String>,
    evidence: EvidenceSink,
    scope: Scope,
}

/// The trace scope of the handler step, when an observer traces it. Like
/// the evidence sink, not part of a context's identity.
#[derive(Clone, Default)]
struct Scope(Option<Arc<dyn StepScope>>);

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Scope(traced)"
        } else {
            "Scope(none)"
        })
    }
}

impl PartialEq for Scope {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for Scope {}

/// What a handler recorded, shared by every clone of its context. Two
/// contexts compare equal whatever they recorded: it is not their identity.
#[derive(Debug, Clone, Default)]
pub(crate) struct EvidenceSink(Arc<Mutex<Evidence>>, Arc<Mutex<Option<String>>>);

impl EvidenceSink {
    /// What was recorded so far.
    pub(crate) fn evidence(&self) -> Evidence {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The provider's id for the effect, if the handler reported one.
    pub(crate) fn provider_operation_id(&self) -> Option<String> {
        self.1
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl PartialEq for EvidenceSink {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for EvidenceSink {}

impl HandlerContext {
    /// A context, for code that calls a handler itself (a test, an adapter's
    /// own dispatch loop). The executor builds one for every dispatch.
    pub fn new(
        operation_id: impl Into<String>,
        contract_name: impl Into<String>,
        contract_version: impl Into<String>,
        attempt: u32,
        provider_key: Option<String>,
    ) -> Self {
        HandlerContext {
            operation_id: operation_id.into(),
            contract_name: contract_name.into(),
            contract_version: contract_version.into(),
            attempt,
            provider_key,
            evidence: EvidenceSink::default(),
            scope: Scope::default(),
        }
    }

    /// The operation's stable id, derived from the arguments by the contract.
    pub fn operation_id(&self) -> &str {
        &self.operation_id
    }

    /// The contract's name.
    pub fn contract_name(&self) -> &str {
        &self.contract_name
    }

    /// The contract's version.
    pub fn contract_version(&self) -> &str {
        &self.contract_version
    }

    /// Which dispatch of this operation this is: 1 for the first, 2 for the
    /// first retry, and so on, across processes.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The provider idempotency key to send with the request, the same on
    /// every attempt; `None` when the contract derives none.
    pub fn provider_key(&self) -> Option<&str> {
        self.provider_key.as_deref()
    }

    /// The provider key, owned.
    pub fn into_provider_key(self) -> Option<String> {
        self.provider_key
    }

    /// Records `value` under `key` in the evidence of this dispatch's
    /// outcome (confirmed or `outcome_unknown`), for an operator or an
    /// audit: that the provider replayed a stored answer, the status it
    /// answered, how long it asked to wait. A later value under the same key
    /// replaces an earlier one. The executor's own keys
    /// (`effect_core::evidence`, which its safety rules read) are written
    /// after the handler's and take precedence; a rejection records no
    /// evidence. Evidence is stored as the output is: in clear, except that
    /// the value of every secret the call's arguments mark (`Secret<T>`,
    /// `redact([...])`) is scrubbed from it before it is written
    /// (docs/security-boundaries.md). Never record an unmarked secret.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, MemoryLedger};
    /// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let contract = EffectContract::builder("capture_payment", |args| {
    ///     Ok(format!("capture:{}", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
    /// })
    /// .build()?;
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let result = executor.execute(&contract, &json!({"invoice_id": "INV-1"}), |_args: Value, ctx: HandlerContext| {
    ///     ctx.record_evidence("http.idempotent_replayed", true);
    ///     Ok::<_, HandlerError>(json!({"payment_id": "pay-1"}))
    /// })?;
    /// assert_eq!(result.evidence["http.idempotent_replayed"], json!(true));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_evidence(&self, key: impl Into<String>, value: impl Into<Value>) {
        // A poisoned lock only means another clone's holder panicked between
        // two plain map operations: the map is still whole.
        self.evidence
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.into(), value.into());
    }

    /// Reports the provider's own id for the effect (a charge id, a message
    /// id), stored with the confirmed operation as its
    /// `provider_operation_id` (`agent-effect-ops list` shows it, a
    /// compensation derives from it). Sync, async and typed handlers report
    /// it alike, through their context; a later call replaces an earlier
    /// one. Scrubbed of the call's marked secrets like everything written.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, EffectLedger, MemoryLedger};
    /// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let contract = EffectContract::builder("send_email", |args| {
    ///     Ok(format!("email:{}", args["to"].as_str().ok_or("missing to")?))
    /// })
    /// .build()?;
    /// let ledger = Arc::new(MemoryLedger::new());
    /// let executor = EffectExecutor::new(ledger.clone());
    /// let result = executor.execute(&contract, &json!({"to": "ada@example.com"}), |_args: Value, ctx: HandlerContext| {
    ///     ctx.set_provider_operation_id("msg_42");
    ///     Ok::<_, HandlerError>(json!({"queued": true}))
    /// })?;
    /// assert_eq!(result.provider_operation_id.as_deref(), Some("msg_42"));
    /// let stored = ledger.get("email:ada@example.com")?.expect("recorded");
    /// assert_eq!(stored.provider_operation_id.as_deref(), Some("msg_42"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_provider_operation_id(&self, id: impl Into<String>) {
        *self
            .evidence
            .1
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(id.into());
    }

    /// What the handler has recorded so far.
    pub fn evidence(&self) -> Evidence {
        self.evidence.evidence()
    }

    /// Makes the handler step's trace context current on this thread until
    /// the guard drops. The executor enters it on the thread that runs the
    /// handler (and on every poll of an async handler); call it on a thread
    /// or task the handler starts itself so that what runs there joins the
    /// handler's span. Enters nothing when no observer traces the call.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, MemoryLedger};
    /// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let contract = EffectContract::builder("send_email", |args| {
    ///     Ok(format!("email:{}", args["to"].as_str().ok_or("missing to")?))
    /// })
    /// .build()?;
    /// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
    /// let send = |_args: Value, ctx: HandlerContext| {
    ///     let sender = std::thread::spawn(move || {
    ///         // Spans started on this thread join the handler's span.
    ///         let _scope = ctx.enter_trace();
    ///         json!({"message_id": "msg-1"})
    ///     });
    ///     sender.join().map_err(|_| HandlerError::unknown("sender thread panicked"))
    /// };
    /// let result = executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?;
    /// assert!(result.is_confirmed());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn enter_trace(&self) -> ScopeGuard {
        match &self.scope.0 {
            Some(scope) => scope.enter(),
            None => ScopeGuard::none(),
        }
    }

    /// The context with the handler step's trace scope.
    pub(crate) fn with_scope(mut self, scope: Option<Arc<dyn StepScope>>) -> Self {
        self.scope = Scope(scope);
        self
    }

    /// Where this context's recordings go, shared with it: the executor
    /// keeps this and hands the context itself to the handler.
    pub(crate) fn recorded(&self) -> EvidenceSink {
        self.evidence.clone()
    }
}
