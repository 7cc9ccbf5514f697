//! Budget refusals and cancellations under a recovery worker running on a
//! manual clock past the next budget window (docs/approval.md#budgets,
//! docs/recovering-work.md): a refused capture is never dispatched by
//! anyone, a deferred one only within its bound, an expired or cancelled
//! one never; and passes that change nothing write nothing.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Budget, BudgetDeferral, Clock as _, EffectContract, EffectLedger, EffectStatus};
use effect_exec::{Audit, ExecError, RecoveryReport, RecoveryWorker, WaitingFor, waiting};

use crate::provider::{handler, invoice};
use crate::world::{World, worlds};

const HOUR: Duration = Duration::from_secs(3600);

impl World {
    /// The capture contract, storing its intent, with one capture a day;
    /// `defer` makes its refusals wait instead of ending the capture.
    fn daily_capture(&self, defer: Option<BudgetDeferral>) -> EffectContract {
        let mut budget = Budget::per_day("captures").max_count(1);
        if let Some(bound) = defer {
            budget = budget.defer(bound);
        }
        let provider = Arc::clone(&self.provider);
        effect_test_support::contracts::capture_payment()
            .outcome_probe(move |_args, key| provider.probe(key))
            .budget(budget)
            .store_intent(true)
            .build()
            .unwrap()
    }

    /// INV-1 uses the day's one capture; INV-2 is then refused.
    fn fill_the_day(&self, contract: &EffectContract) -> Result<(), ExecError> {
        let executor = self.executor();
        let first = executor
            .execute(contract, &invoice("INV-1"), handler(&self.provider))
            .unwrap();
        assert!(first.is_confirmed(), "{}: {first:?}", self.store);
        executor
            .execute(contract, &invoice("INV-2"), handler(&self.provider))
            .map(|result| panic!("{}: INV-2 was not refused: {result:?}", self.store))
    }

    /// Runs a pass every `every` until the clock has moved `span`, and
    /// returns the reports.
    fn passes(
        &self,
        worker: &RecoveryWorker,
        every: Duration,
        span: Duration,
    ) -> Vec<RecoveryReport> {
        let until = self.clock.now() + span;
        let mut reports = Vec::new();
        while self.clock.now() < until {
            reports.push(worker.run_once().unwrap());
            self.clock.advance(every);
        }
        reports
    }
}

fn sum(reports: &[RecoveryReport], field: fn(&RecoveryReport) -> u64) -> u64 {
    reports.iter().map(field).sum()
}

const ID: &str = "invoice:INV-2:capture";

#[test]
fn a_refused_capture_is_rejected_and_never_dispatched_past_the_next_window() {
    for w in worlds() {
        let contract = w.daily_capture(None);
        let refused = w.fill_the_day(&contract).unwrap_err();
        assert!(
            matches!(refused, ExecError::BudgetExceeded { .. }),
            "{}: {refused}",
            w.store
        );
        let said = refused.to_string();
        assert!(
            said.contains("is rejected")
                && said.contains("nothing was sent or charged")
                && said.contains("new operation id"),
            "{}: the caller is told what happened and how to ask again: {said}",
            w.store
        );
        let record = w.ledger.get(ID).unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts),
            (EffectStatus::Rejected, 0),
            "{}",
            w.store
        );
        // A worker every six hours for two days on the manual clock:
        // past midnight the budget has room, and still nothing goes out.
        let worker = w.worker(&contract);
        let reports = w.passes(&worker, 6 * HOUR, 48 * HOUR);
        assert!(reports.len() >= 8, "{}", w.store);
        assert_eq!(sum(&reports, |r| r.examined), 0, "{}: {reports:?}", w.store);
        assert_eq!(sum(&reports, |r| r.failed), 0, "{}", w.store);
        // Its caller calling again is told the same, and nothing is sent.
        let again = w
            .executor()
            .execute(&contract, &invoice("INV-2"), handler(&w.provider))
            .unwrap_err();
        assert!(
            matches!(again, ExecError::BudgetExceeded { .. }),
            "{}: {again}",
            w.store
        );
        assert_eq!(
            w.event_types(ID),
            ["prepared", "budget_exceeded"],
            "{}",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}: only INV-1 reached the provider",
            w.store
        );
    }
}

#[test]
fn a_deferred_capture_waits_silently_and_goes_out_in_the_next_window() {
    for w in worlds() {
        let contract = w.daily_capture(Some(BudgetDeferral::For(36 * HOUR)));
        let deferred = w.fill_the_day(&contract).unwrap_err();
        assert!(deferred.is_budget_deferred(), "{}: {deferred}", w.store);
        let listed = waiting(w.ledger.as_ref()).unwrap();
        assert_eq!(listed.len(), 1, "{}", w.store);
        assert_eq!(
            (listed[0].operation_id.as_str(), listed[0].waiting_for),
            (ID, WaitingFor::Budget),
            "{}",
            w.store
        );
        assert_eq!(
            listed[0].deferred_until.as_deref(),
            Some("2027-01-16T20:00:00.000000+00:00"),
            "{}",
            w.store
        );
        let worker = w.worker(&contract);
        // Passes every ten minutes until midnight: each one counts the
        // deferral, none fails, none writes.
        let today = w.passes(&worker, Duration::from_secs(600), 16 * HOUR);
        assert_eq!(today.len(), 96, "{}", w.store);
        assert!(
            today
                .iter()
                .all(|r| (r.examined, r.deferred, r.failed) == (1, 1, 0)),
            "{}: {today:?}",
            w.store
        );
        assert_eq!(
            w.event_types(ID),
            ["prepared", "budget_deferred"],
            "{}: no pass wrote an event",
            w.store
        );
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
        // Past midnight the window has room: the next pass captures it, once.
        let tomorrow = w.passes(&worker, HOUR, 3 * HOUR);
        assert_eq!(
            sum(&tomorrow, |r| r.confirmed),
            1,
            "{}: {tomorrow:?}",
            w.store
        );
        assert_eq!(sum(&tomorrow, |r| r.deferred), 0, "{}", w.store);
        assert_eq!(
            w.event_types(ID),
            ["prepared", "budget_deferred", "dispatched", "confirmed"],
            "{}",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (2, 2),
            "{}",
            w.store
        );
    }
}

#[test]
fn a_deferral_past_its_bound_is_rejected_by_the_worker_not_dispatched() {
    for w in worlds() {
        let contract = w.daily_capture(Some(BudgetDeferral::For(HOUR)));
        assert!(w.fill_the_day(&contract).unwrap_err().is_budget_deferred());
        let worker = w.worker(&contract);
        let reports = w.passes(&worker, Duration::from_secs(600), 48 * HOUR);
        assert_eq!(sum(&reports, |r| r.deferred), 6, "{}: {reports:?}", w.store);
        assert_eq!(sum(&reports, |r| r.rejected), 1, "{}", w.store);
        assert_eq!(sum(&reports, |r| r.failed), 0, "{}", w.store);
        assert_eq!(sum(&reports, |r| r.confirmed), 0, "{}", w.store);
        let record = w.ledger.get(ID).unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts),
            (EffectStatus::Rejected, 0),
            "{}",
            w.store
        );
        assert_eq!(
            w.event_types(ID),
            ["prepared", "budget_deferred", "budget_deferral_expired"],
            "{}",
            w.store
        );
        let again = w
            .executor()
            .execute(&contract, &invoice("INV-2"), handler(&w.provider))
            .unwrap_err();
        assert!(
            matches!(again, ExecError::BudgetDeferralExpired { .. }),
            "{}: {again}",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}: only INV-1 reached the provider",
            w.store
        );
    }
}

#[test]
fn a_cancelled_deferral_is_never_dispatched() {
    for w in worlds() {
        let contract = w.daily_capture(Some(BudgetDeferral::For(36 * HOUR)));
        assert!(w.fill_the_day(&contract).unwrap_err().is_budget_deferred());
        let record = w
            .executor()
            .operator()
            .cancel(
                ID,
                Audit::new("ops@example.com", "customer paid by wire", "T-1"),
            )
            .unwrap();
        assert_eq!(record.status, EffectStatus::Rejected, "{}", w.store);
        let worker = w.worker(&contract);
        let reports = w.passes(&worker, 6 * HOUR, 48 * HOUR);
        assert_eq!(sum(&reports, |r| r.examined), 0, "{}: {reports:?}", w.store);
        assert_eq!(
            w.event_types(ID),
            ["prepared", "budget_deferred", "cancelled"],
            "{}",
            w.store
        );
        let dispatched = w
            .executor()
            .operator()
            .cancel(
                "invoice:INV-1:capture",
                Audit::new("ops@example.com", "too late", "T-2"),
            )
            .unwrap_err();
        assert_eq!(
            dispatched.ledger_kind(),
            Some(effect_core::LedgerErrorKind::InvalidTransition),
            "{}: {dispatched}",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}",
            w.store
        );
    }
}
