//! A recovery after a kill: a caller in a child process claims a capture
//! under its agent's trace and dies before sending it; a recovery worker
//! in this process finishes it in a trace of its own, linked to the
//! caller's through the trace context stored with the operation.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectContract, EffectLedger, EffectStatus};
use effect_exec::{EffectExecutor, ExecutorOptions, RecoveryWorker};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_test_support::time::past_every_lease;
use effect_testkit::provider::FakePaymentProvider;
use serde_json::json;

use crate::{
    Fate, assert_no_card, children, execution, handler, in_agent_run, keyed, point, probe,
    telemetry,
};

const CHILD_ENV: &str = "EFFECT_OTEL_RECOVERY_DIR";
const LEASE: Duration = Duration::from_secs(10);
const OPERATION: &str = "otel_recovery:INV-K";

fn provider(dir: &Path) -> Arc<FakePaymentProvider> {
    Arc::new(FakePaymentProvider::open(dir.join("provider.log")).unwrap())
}

/// Stored intent (the worker dispatches without the caller), a probe, and
/// a guaranteed key: after a dead caller's expired lease the handler may
/// still be running, so a negative probe alone never authorizes a retry.
fn capture(provider: &Arc<FakePaymentProvider>) -> EffectContract {
    keyed("otel_recovery")
        .provider_idempotency_guaranteed(true)
        .outcome_probe(probe(provider))
        .store_intent(true)
        .build()
        .unwrap()
}

fn ledger(dir: &Path, options: SqliteOptions) -> Arc<dyn EffectLedger> {
    Arc::new(SqliteLedger::open(dir.join("ledger.db"), options.busy_timeout(LEASE / 3)).unwrap())
}

/// The caller, in a child process: it claims the capture and dies.
#[test]
fn recovery_caller_role() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    // Installed as in the test process: the claim stores its trace context.
    let _ = telemetry();
    let provider = provider(dir);
    let executor = EffectExecutor::with_options(
        ledger(dir, SqliteOptions::default()),
        ExecutorOptions::default().dispatch_lease(LEASE),
    );
    let (answer, _) = in_agent_run(|| {
        executor.execute(
            &capture(&provider),
            &json!({"invoice_id": "INV-K", "amount_cents": 1250}),
            handler(&provider, Fate::AbortBeforeSend),
        )
    });
    panic!("the handler aborts the process, yet execute answered {answer:?}");
}

#[test]
fn a_recovery_after_a_kill_is_its_own_trace_linked_to_the_claiming_run() {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "recovery::recovery_caller_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .status()
        .unwrap();
    assert!(!status.success(), "the caller must die by abort");
    let provider = provider(dir.path());
    assert_eq!(
        provider.committed_count().unwrap(),
        0,
        "it died before sending"
    );

    // The service restarts past the dead caller's lease.
    let ledger = ledger(
        dir.path(),
        SqliteOptions::default().clock(past_every_lease(LEASE)),
    );
    let left = ledger.get(OPERATION).unwrap().unwrap();
    assert_eq!(
        left.status,
        EffectStatus::Dispatched,
        "the claim was durable"
    );
    let events = ledger.events(OPERATION).unwrap();
    let stored = effect_core::trace::stored(&events).expect("the claim stored its trace context");
    let parts: Vec<&str> = stored.split('-').collect();
    let (caller_trace, caller_span) = (hex(parts[1]), hex(parts[2]));

    let telemetry = telemetry();
    let executor =
        EffectExecutor::with_options(ledger, ExecutorOptions::default().dispatch_lease(LEASE));
    let worker = RecoveryWorker::new(executor)
        .register(capture(&provider), handler(&provider, Fate::Answered))
        .unwrap();
    let report = worker.run_once().unwrap();
    assert_eq!(report.confirmed, 1, "{report:?}");
    assert_eq!(
        provider.committed_count().unwrap(),
        1,
        "captured once, by the worker"
    );

    let (spans, points) = telemetry.flushed();
    let span = execution(&spans, OPERATION);
    assert_eq!(span.attr("effect.recovery"), Some("true"));
    assert_eq!(span.attr("effect.status"), Some("confirmed"));
    assert_eq!(span.attr("effect.attempt"), Some("2"));
    assert_eq!(
        span.attr("effect.reconciliation.answer"),
        Some("not_committed")
    );
    assert!(span.parent_span_id.is_empty(), "a trace of its own");
    assert_ne!(span.trace_id, caller_trace);
    assert_eq!(
        span.links,
        [(caller_trace, caller_span)],
        "linked to the claiming run"
    );
    assert_eq!(
        children(&spans, span),
        [
            "effect.handler",
            "effect.ledger_write:claim dispatch",
            "effect.ledger_write:expire lease",
            "effect.ledger_write:mark confirmed",
            "effect.ledger_write:prepare and claim",
            "effect.ledger_write:reset for retry",
            "effect.probe",
        ]
    );
    let recovered = [
        ("effect.contract.name", "otel_recovery"),
        ("effect.contract.version", "1"),
        ("effect.outcome", "confirmed"),
    ];
    assert_eq!(
        point(&points, "effect.recovery.dispatches", &recovered),
        1.0
    );
    assert_no_card("INV-K");
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}
