//! Where the executor's events go: the `metrics` facade (feature
//! `metrics`), the current execution's trace, and the executor's
//! [`EffectObserver`](crate::EffectObserver). The instruments' names are in
//! [`crate::metric`], one table for every path.
//!
//! The `metrics` facade's labels are `contract` and, per instrument,
//! `status`, `probe_status` (a reconciliation's answer), `reason`,
//! `outcome` or `transition`; an application installs any `metrics`
//! recorder to collect them. Without the feature the facade costs nothing.

use std::time::SystemTime;

use crate::executor::EffectExecutor;
use crate::observe::{self, EffectEvent, EffectObserver};

impl EffectExecutor {
    /// The observer of this executor: its own, else the process's.
    pub(crate) fn observing(&self) -> Option<&dyn EffectObserver> {
        match &self.observer {
            Some(observer) => Some(observer.as_ref()),
            None => observe::global_observer().map(AsRef::as_ref),
        }
    }

    /// True when an event's duration is wanted: the clock is read only then.
    pub(crate) fn timing(&self) -> bool {
        cfg!(feature = "metrics") || self.observing().is_some()
    }

    /// The executor's clock, when something times events.
    pub(crate) fn started(&self) -> Option<SystemTime> {
        self.timing().then(|| self.clock.now())
    }

    /// Time since `started`, zero when nothing times events.
    pub(crate) fn since(&self, started: Option<SystemTime>) -> std::time::Duration {
        started
            .and_then(|at| self.clock.now().duration_since(at).ok())
            .unwrap_or_default()
    }

    /// Sends `event` everywhere it goes.
    pub(crate) fn emit(&self, event: &EffectEvent<'_>) {
        facade(event);
        observe::trace_event(event);
        if let Some(observer) = self.observing() {
            observer.record(event);
        }
    }
}

/// `event` through the `metrics` facade.
#[cfg(feature = "metrics")]
fn facade(event: &EffectEvent<'_>) {
    use crate::metric;
    match *event {
        EffectEvent::Executed {
            contract,
            result,
            duration,
        } => {
            let status = result.status.as_str();
            let labels = [
                ("contract", contract.name.to_owned()),
                ("status", status.to_owned()),
            ];
            metrics::counter!(metric::EXECUTIONS.facade, &labels).increment(1);
            metrics::histogram!(metric::EXECUTION_DURATION.facade, &labels)
                .record(duration.as_secs_f64());
            metrics::histogram!(metric::ATTEMPTS.facade, &labels)
                .record(f64::from(result.attempts));
            let contract = [("contract", contract.name.to_owned())];
            if result.duplicate_suppressed {
                metrics::counter!(metric::REPLAYS.facade, &contract).increment(1);
            }
            if result.in_progress {
                metrics::counter!(metric::IN_PROGRESS.facade, &contract).increment(1);
            }
        }
        EffectEvent::Failed {
            contract, duration, ..
        } => {
            let labels = [
                ("contract", contract.name.to_owned()),
                ("status", "error".to_owned()),
            ];
            metrics::counter!(metric::EXECUTIONS.facade, &labels).increment(1);
            metrics::histogram!(metric::EXECUTION_DURATION.facade, &labels)
                .record(duration.as_secs_f64());
        }
        EffectEvent::HandlerCalled {
            contract,
            outcome,
            duration,
        } => metrics::histogram!(
            metric::HANDLER_DURATION.facade,
            "contract" => contract.name.to_owned(),
            "outcome" => outcome,
        )
        .record(duration.as_secs_f64()),
        EffectEvent::Reconciled { contract, answer } => metrics::counter!(
            metric::RECONCILIATIONS.facade,
            "contract" => contract.name.to_owned(),
            "probe_status" => answer,
        )
        .increment(1),
        EffectEvent::Quarantined { contract, reason } => metrics::counter!(
            metric::QUARANTINES.facade,
            "contract" => contract.name.to_owned(),
            "reason" => reason,
        )
        .increment(1),
        EffectEvent::BudgetRefused { contract } => metrics::counter!(
            metric::BUDGET_REFUSALS.facade,
            "contract" => contract.name.to_owned(),
        )
        .increment(1),
        EffectEvent::RecoveryDispatched { contract, outcome } => metrics::counter!(
            metric::RECOVERY_DISPATCHES.facade,
            "contract" => contract.name.to_owned(),
            "outcome" => outcome,
        )
        .increment(1),
    }
}

#[cfg(not(feature = "metrics"))]
fn facade(_event: &EffectEvent<'_>) {}

/// One ledger transition took `elapsed` (only with the feature: timing it
/// reads the clock twice).
#[cfg(feature = "metrics")]
pub(crate) fn transition(name: &'static str, elapsed: std::time::Duration) {
    metrics::histogram!(crate::metric::TRANSITION_DURATION.facade, "transition" => name)
        .record(elapsed.as_secs_f64());
}

/// The last sweep saw this many stale dispatches.
pub(crate) fn stale_dispatches(count: u64) {
    #[cfg(feature = "metrics")]
    #[allow(clippy::cast_precision_loss)] // A gauge of operations, far below 2^52.
    metrics::gauge!(crate::metric::STALE_DISPATCHES.facade).set(count as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = count;
}
