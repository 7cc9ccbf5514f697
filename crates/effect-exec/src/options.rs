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
