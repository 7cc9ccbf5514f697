//! The executor's deferred-outcomes mode when a deferred outcome is lost
//! (`Fault::LoseWrite`, what a power loss does to it): the record is back
//! to `dispatched`, and once its lease has expired it reconciles to one
//! effect; a contract without a safe basis never has its outcome deferred.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use effect_core::{Clock, EffectContract, EffectLedger, EffectStatus, ManualClock, MemoryLedger};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError, Sweeper};
use effect_testkit::faults::{CallKind, Fault, FaultyLedger};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};

const LEASE: Duration = Duration::from_secs(30);
const ID: &str = "invoice:INV-5:capture";

/// Which basis the contract has for reconciling a lost outcome.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Basis {
    Probe,
    GuaranteedKey,
    Neither,
}

fn contract(basis: Basis, provider: &Arc<FakePaymentProvider>) -> EffectContract {
    let provider = Arc::clone(provider);
    let builder = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice"].as_str().ok_or("missing invoice")?
        ))
    })
    .provider_idempotency_key(|args| Ok(args["invoice"].as_str().map(|i| format!("capture:{i}"))));
    match basis {
        Basis::Probe => builder.outcome_probe(move |_, key| {
            let key = key.ok_or("missing key")?;
            Ok(
                match provider.lookup_by_key(key).map_err(|e| e.to_string())? {
                    Some(capture) => effect_core::OutcomeProbeResult::committed(
                        json!({"payment_id": capture.payment_id}),
                    ),
                    None => effect_core::OutcomeProbeResult::not_committed(),
                },
            )
        }),
        Basis::GuaranteedKey => builder.provider_idempotency_guaranteed(true),
        Basis::Neither => builder,
    }
    .build()
    .unwrap()
}

struct Setup {
    clock: Arc<ManualClock>,
    ledger: Arc<FaultyLedger<MemoryLedger>>,
    provider: Arc<FakePaymentProvider>,
    calls: Arc<AtomicUsize>,
    executor: EffectExecutor,
    contract: EffectContract,
}

fn setup(basis: Basis, deferred: bool) -> Setup {
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000),
    ));
    // The claim is the first transition, the outcome the second: lose it.
    let ledger = Arc::new(
        FaultyLedger::new(MemoryLedger::with_clock(clock.clone() as Arc<dyn Clock>)).fail(
            CallKind::Transition,
            2,
            Fault::LoseWrite,
        ),
    );
    let options = ExecutorOptions::default()
        .dispatch_lease(LEASE)
        .deferred_outcomes(deferred);
    let executor = EffectExecutor::with_options(ledger.clone() as Arc<dyn EffectLedger>, options);
    let provider = Arc::new(FakePaymentProvider::new());
    Setup {
        clock,
        contract: contract(basis, &provider),
        ledger,
        provider,
        calls: Arc::new(AtomicUsize::new(0)),
        executor,
    }
}

impl Setup {
    fn execute(&self) -> effect_core::EffectResult {
        let provider = Arc::clone(&self.provider);
        let calls = Arc::clone(&self.calls);
        let capture = move |_: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
            calls.fetch_add(1, Ordering::SeqCst);
            let capture = provider
                .capture("INV-5", 500, ctx.provider_key())
                .map_err(|e| HandlerError::unknown(e.to_string()))?;
            Ok(json!({"payment_id": capture.payment_id}))
        };
        self.executor
            .execute(&self.contract, &json!({"invoice": "INV-5"}), capture)
            .unwrap()
    }

    fn status(&self) -> EffectStatus {
        self.ledger.get(ID).unwrap().unwrap().status
    }

    fn effects(&self) -> usize {
        self.provider.committed_count().unwrap()
    }
}

#[test]
fn a_lost_outcome_with_a_probe_is_reconciled_by_the_sweep_without_dispatching_again() {
    let s = setup(Basis::Probe, true);
    let answered = s.execute();
    assert!(
        answered.is_confirmed(),
        "the caller was answered: {answered:?}"
    );
    assert_eq!(s.ledger.injected().len(), 1, "the outcome was lost");
    assert_eq!(s.status(), EffectStatus::Dispatched, "back to the claim");

    // While the lease may be live, the sweep leaves it alone.
    let sweeper = Sweeper::new(s.executor.clone()).register(s.contract.clone());
    assert_eq!(sweeper.sweep().unwrap().examined, 0);
    s.clock.advance(LEASE + Duration::from_secs(1));
    let report = sweeper.sweep().unwrap();
    assert_eq!((report.examined, report.confirmed), (1, 1), "{report:?}");
    assert_eq!(s.status(), EffectStatus::Confirmed);
    assert_eq!(s.calls.load(Ordering::SeqCst), 1, "never dispatched again");
    assert_eq!(s.effects(), 1, "exactly one effect");
    // A later call replays the reconciled outcome.
    let replay = s.execute();
    assert!(replay.duplicate_suppressed && replay.is_confirmed());
    assert_eq!(replay.output, answered.output);
}

#[test]
fn a_lost_outcome_with_a_guaranteed_key_is_retried_under_the_same_key() {
    let s = setup(Basis::GuaranteedKey, true);
    assert!(s.execute().is_confirmed());
    assert_eq!(s.status(), EffectStatus::Dispatched, "the outcome was lost");
    // The next call finds the live lease: nothing is dispatched.
    let early = s.execute();
    assert!(early.in_progress, "{early:?}");
    assert_eq!(s.calls.load(Ordering::SeqCst), 1);

    s.clock.advance(LEASE + Duration::from_secs(1));
    let again = s.execute();
    assert!(again.is_confirmed(), "{again:?}");
    assert_eq!(s.status(), EffectStatus::Confirmed);
    assert_eq!(
        s.calls.load(Ordering::SeqCst),
        2,
        "retried, under the guaranteed key"
    );
    assert_eq!(s.effects(), 1, "the provider kept one effect");
}

#[test]
fn an_outcome_without_a_safe_basis_is_never_deferred() {
    let s = setup(Basis::Neither, true);
    let answered = s.execute();
    assert!(answered.is_confirmed());
    assert!(
        s.ledger.injected().is_empty(),
        "the outcome was durable: a power loss cannot lose it"
    );
    assert_eq!(s.status(), EffectStatus::Confirmed);
    s.clock.advance(LEASE + Duration::from_secs(1));
    let replay = s.execute();
    assert!(replay.duplicate_suppressed, "{replay:?}");
    assert_eq!(s.calls.load(Ordering::SeqCst), 1, "never dispatched again");
    assert_eq!(s.effects(), 1);
}

#[test]
fn without_the_mode_every_outcome_is_durable() {
    for basis in [Basis::Probe, Basis::GuaranteedKey] {
        let s = setup(basis, false);
        assert!(s.execute().is_confirmed());
        assert!(s.ledger.injected().is_empty(), "{basis:?}");
        assert_eq!(s.status(), EffectStatus::Confirmed, "{basis:?}");
    }
}
