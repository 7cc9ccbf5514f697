//! Decide-by: a provider key's lifetime and a settle time for late commits,
//! on a manual clock shared by the ledger and the executor.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use effect_core::{EffectStatus, ManualClock, MemoryLedger, OutcomeProbeResult};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use serde_json::{Value, json};

fn world() -> (Arc<ManualClock>, EffectExecutor) {
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let ledger = Arc::new(MemoryLedger::with_clock(clock.clone()));
    let executor = EffectExecutor::with_clock(ledger, ExecutorOptions::default(), clock.clone())
        .with_sleeper(clock.clone());
    (clock, executor)
}

fn builder() -> effect_core::EffectContractBuilder {
    effect_test_support::contracts::capture_payment()
}

#[test]
fn a_not_committed_probe_is_not_acted_on_before_the_settle_time() {
    let (clock, executor) = world();
    let contract = builder()
        .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
        .settle(Duration::from_secs(60))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |_args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
            // The first attempt times out; a retry succeeds.
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(HandlerError::unknown("timed out"))
            } else {
                Ok(json!({"attempt": ctx.attempt()}))
            }
        }
    };
    let args = json!({"invoice_id": "INV-1"});
    let first = executor.execute(&contract, &args, handler.clone()).unwrap();
    assert_eq!(first.status, EffectStatus::OutcomeUnknown);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no retry inside the settle time"
    );

    clock.advance(Duration::from_secs(30));
    let early = executor.execute(&contract, &args, handler.clone()).unwrap();
    assert_eq!(early.status, EffectStatus::OutcomeUnknown);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "still inside the settle time"
    );

    clock.advance(Duration::from_secs(31));
    let late = executor.execute(&contract, &args, handler).unwrap();
    assert!(late.is_confirmed(), "{late:?}");
    assert_eq!(late.output, Some(json!({"attempt": 2})));
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one retry once settled");
}

#[test]
fn a_key_past_its_lifetime_authorizes_no_retry() {
    let (clock, executor) = world();
    let contract = builder()
        .provider_idempotency_guaranteed(true)
        .provider_key_ttl(Duration::from_secs(24 * 3600))
        .build()
        .unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let handler = {
        let calls = Arc::clone(&calls);
        move |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(HandlerError::unknown("timed out"))
        }
    };
    let args = json!({"invoice_id": "INV-2"});
    // Within the key's lifetime the key authorizes the retry: the first
    // attempt and its keyed retry, then parked for the next call.
    let first = executor.execute(&contract, &args, handler.clone()).unwrap();
    assert!(first.status.is_uncertain(), "{first:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    clock.advance(Duration::from_secs(3600));
    let again = executor.execute(&contract, &args, handler.clone()).unwrap();
    assert!(again.status.is_uncertain(), "{again:?}");
    let within = calls.load(Ordering::SeqCst);
    assert!(within > 2, "the key still authorizes a retry an hour later");

    // A day after the first send the provider may have forgotten the key.
    clock.advance(Duration::from_secs(24 * 3600));
    let after = executor.execute(&contract, &args, handler).unwrap();
    assert_eq!(after.status, EffectStatus::Quarantined, "{after:?}");
    assert!(
        after
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("lifetime"),
        "{after:?}"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        within,
        "no dispatch on an expired key"
    );
}
