//! Executor settings.

use std::time::Duration;

use effect_core::FingerprintForm;

/// How an [`EffectExecutor`](crate::EffectExecutor) dispatches and waits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecutorOptions {
    /// How long a dispatch lease lasts without renewal. A caller that finds an
    /// expired lease treats the dispatch as interrupted (the handler may still
    /// be running). Default 30 s.
    pub dispatch_lease: Duration,
    /// How often a running handler's lease is renewed. Must be well below
    /// `dispatch_lease`. Default 10 s.
    pub lease_heartbeat: Duration,
    /// Deadline for handlers when a call sets none. `None` (the default) waits
    /// for the handler to return. A deadline is **not** cancellation.
    pub default_deadline: Option<Duration>,
    /// When another live caller holds the dispatch, wait up to this long for its
    /// outcome instead of returning `in_progress` at once. Default `None`.
    pub wait_for_in_progress: Option<Duration>,
    /// How often a waiting caller re-reads the ledger. Default 25 ms.
    pub poll_interval: Duration,
    /// The request fingerprint new operations store. Default
    /// [`FingerprintForm::Blake3`]; set [`FingerprintForm::Sha256`] for a
    /// ledger shared with Python workers (`production-agent-systems` 1.x),
    /// which cannot read any other form. Either form is accepted on read.
    pub fingerprint_form: FingerprintForm,
    /// Deferred outcomes (default false): the outcome of a dispatch is
    /// written as [`WriteDurability::Deferrable`](effect_core::WriteDurability::Deferrable)
    /// when the contract can reconcile its loss, so the caller is answered
    /// before that commit reaches stable storage. See
    /// [`deferred_outcomes`](Self::deferred_outcomes).
    pub deferred_outcomes: bool,
}

impl Default for ExecutorOptions {
    fn default() -> Self {
        ExecutorOptions {
            dispatch_lease: Duration::from_secs(30),
            lease_heartbeat: Duration::from_secs(10),
            default_deadline: None,
            wait_for_in_progress: None,
            poll_interval: Duration::from_millis(25),
            fingerprint_form: FingerprintForm::default(),
            deferred_outcomes: false,
        }
    }
}

impl ExecutorOptions {
    /// Sets the dispatch lease, and the heartbeat to a third of it.
    #[must_use]
    pub fn dispatch_lease(mut self, lease: Duration) -> Self {
        self.dispatch_lease = lease;
        self.lease_heartbeat = lease / 3;
        self
    }

    /// Sets the lease heartbeat.
    #[must_use]
    pub fn lease_heartbeat(mut self, heartbeat: Duration) -> Self {
        self.lease_heartbeat = heartbeat;
        self
    }

    /// Sets the default handler deadline.
    #[must_use]
    pub fn default_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.default_deadline = deadline;
        self
    }

    /// Waits up to `wait` for a live owner's outcome.
    #[must_use]
    pub fn wait_for_in_progress(mut self, wait: Option<Duration>) -> Self {
        self.wait_for_in_progress = wait;
        self
    }

    /// Sets the poll interval of waiting callers.
    #[must_use]
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the fingerprint form new operations store.
    ///
    /// ```
    /// use effect_core::FingerprintForm;
    /// use effect_exec::ExecutorOptions;
    ///
    /// // A ledger shared with Python workers during a migration.
    /// let options = ExecutorOptions::default().fingerprint_form(FingerprintForm::Sha256);
    /// # assert_eq!(options.fingerprint_form, FingerprintForm::Sha256);
    /// ```
    #[must_use]
    pub fn fingerprint_form(mut self, form: FingerprintForm) -> Self {
        self.fingerprint_form = form;
        self
    }

    /// Answers the caller before the outcome of its dispatch is durable
    /// (default off: every outcome is durable first).
    ///
    /// The claim is always committed durably before the handler runs. With
    /// this on, the write that records what the handler returned (confirmed,
    /// rejected, or an uncertain outcome) asks the store for
    /// [`WriteDurability::Deferrable`](effect_core::WriteDurability::Deferrable),
    /// **only** when the contract has an outcome probe or a guaranteed
    /// provider idempotency key: if a crash loses that write, the record is
    /// back to `dispatched`, its lease expires, and it is reconciled through
    /// the probe or the key like any interrupted dispatch, with no second
    /// effect. Outcomes of contracts with neither stay durable (their lost
    /// outcome would need an operator), as do reconciliations and manual
    /// resolutions. What a crash can cost is in docs/production.md.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use effect_core::{EffectContract, EffectLedger, MemoryLedger};
    /// use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
    /// use serde_json::{json, Value};
    ///
    /// let ledger = Arc::new(MemoryLedger::new());
    /// let options = ExecutorOptions::default().deferred_outcomes(true);
    /// let executor = EffectExecutor::with_options(ledger.clone(), options);
    /// let contract = EffectContract::builder("capture_payment", |args| {
    ///     Ok(format!("invoice:{}:capture", args["invoice"].as_str().ok_or("missing invoice")?))
    /// })
    /// .provider_idempotency_key(|args| Ok(args["invoice"].as_str().map(|i| format!("capture:{i}"))))
    /// .provider_idempotency_guaranteed(true)
    /// .build()?;
    /// let capture = |_: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
    ///     Ok(json!({"payment_id": format!("pay-{}", ctx.provider_key().unwrap_or_default())}))
    /// };
    /// let result = executor.execute(&contract, &json!({"invoice": "INV-1"}), capture)?;
    /// assert!(result.is_confirmed());
    /// // Before reading the ledger from elsewhere (or shutting down), make the
    /// // deferred outcomes durable; dropping the ledger does so too.
    /// ledger.sync()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn deferred_outcomes(mut self, enabled: bool) -> Self {
        self.deferred_outcomes = enabled;
        self
    }
}

/// Settings of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CallOptions {
    /// Handler deadline; overrides [`ExecutorOptions::default_deadline`].
    pub deadline: Option<Duration>,
}

impl CallOptions {
    /// A call with this handler deadline.
    pub fn deadline(deadline: Duration) -> Self {
        CallOptions {
            deadline: Some(deadline),
        }
    }
}
