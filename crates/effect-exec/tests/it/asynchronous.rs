//! The async API follows the same docs/spec.md §7 rows.
#![cfg(feature = "tokio")]

use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectResult, EffectStatus, OutcomeProbeResult};
use effect_exec::HandlerContext;
use effect_exec::{CallOptions, HandlerError};
use serde_json::Value;

use crate::provider::{
    BOTH, FakeProvider, Fault, GUARANTEED_ONLY, NEITHER, PROBE_ONLY, Variant, contract, invoice,
};
use crate::{executor, ledger};

type HandlerFuture = std::pin::Pin<Box<dyn Future<Output = Result<Value, HandlerError>> + Send>>;

fn async_handler(
    provider: &Arc<FakeProvider>,
) -> impl Fn(Value, HandlerContext) -> HandlerFuture + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |args, key| {
        let provider = Arc::clone(&provider);
        Box::pin(async move {
            tokio::task::yield_now().await;
            provider.capture(&args, key.provider_key())
        })
    }
}

/// Executes one capture asynchronously on a fresh ledger.
async fn run(provider: &Arc<FakeProvider>, variant: Variant, id: &str) -> EffectResult {
    let ledger = ledger();
    executor(&ledger)
        .execute_async(
            &contract(provider, variant),
            &invoice(id),
            CallOptions::default(),
            async_handler(provider),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_ack_lost_is_confirmed_by_the_probe() {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let result = run(&provider, PROBE_ONLY, "A-1").await;
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[tokio::test(flavor = "current_thread")]
async fn async_works_on_a_current_thread_runtime_with_an_async_probe() {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let p = Arc::clone(&provider);
    let c = effect_test_support::contracts::capture_payment()
        .outcome_probe_async(move |_args, key| {
            let p = Arc::clone(&p);
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                p.probe(key.as_deref())
            }
        })
        .build()
        .unwrap();
    let ledger = ledger();
    let result = executor(&ledger)
        .execute_async(
            &c,
            &invoice("A-2"),
            CallOptions::default(),
            async_handler(&provider),
        )
        .await
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(provider.probe_calls(), 1);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_failure_before_commit_retries_once() {
    let provider = FakeProvider::new(false).script(&[Fault::BeforeCommit]);
    let result = run(&provider, PROBE_ONLY, "A-3").await;
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_timeout_without_probe_or_guarantee_is_quarantined() {
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let result = run(&provider, NEITHER, "A-4").await;
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_guaranteed_key_replays_with_the_same_key() {
    let provider = FakeProvider::new(true).script(&[Fault::AfterCommit]);
    let result = run(&provider, GUARANTEED_ONLY, "A-5").await;
    assert!(result.is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_deadline_drops_the_future_and_records_that_it_may_still_run() {
    let provider = FakeProvider::new(true);
    let p = Arc::clone(&provider);
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, BOTH);
    let result = exec
        .execute_async(
            &c,
            &invoice("A-6"),
            CallOptions::deadline(Duration::from_millis(20)),
            move |args: Value, key| {
                let p = Arc::clone(&p);
                let first = calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0;
                async move {
                    if first {
                        // Never reaches the provider: dropped at the deadline.
                        tokio::time::sleep(Duration::from_secs(5)).await;
                    }
                    p.capture(&args, key.provider_key())
                }
            },
        )
        .await
        .unwrap();
    // The dropped future never sent; the guaranteed key makes the retry safe.
    assert!(result.is_confirmed(), "{result:?}");
    let events = ledger.events("invoice:A-6:capture").unwrap();
    assert_eq!(
        events[2].data["evidence"]["dispatch_interruption"],
        "handler_timeout"
    );
    assert_eq!(
        events[2].data["evidence"]["handler_may_still_be_running"],
        true
    );
    assert_eq!(provider.committed(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_concurrent_caller_gets_in_progress() {
    let provider = FakeProvider::new(false);
    let p = Arc::clone(&provider);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    // The first handler says it is inside, then waits until it is released.
    let (entered, mut inside) = tokio::sync::mpsc::channel::<()>(1);
    let release = Arc::new(tokio::sync::Notify::new());
    let slow = {
        let (exec, c, release) = (exec.clone(), c.clone(), Arc::clone(&release));
        tokio::spawn(async move {
            exec.execute_async(
                &c,
                &invoice("A-7"),
                CallOptions::default(),
                move |args: Value, key| {
                    let (p, entered, release) =
                        (Arc::clone(&p), entered.clone(), Arc::clone(&release));
                    async move {
                        entered.send(()).await.expect("the test listens");
                        release.notified().await;
                        p.capture(&args, key.provider_key())
                    }
                },
            )
            .await
            .unwrap()
        })
    };
    inside.recv().await.expect("the first handler runs");
    let second = exec
        .execute_async(
            &c,
            &invoice("A-7"),
            CallOptions::default(),
            async_handler(&provider),
        )
        .await
        .unwrap();
    assert!(second.in_progress);
    release.notify_one();
    assert!(slow.await.unwrap().is_confirmed());
    assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
    let _ = OutcomeProbeResult::pending();
}
