//! Operations a recovery worker cannot dispatch: `stats` counts them and
//! `events` shows why, as the worker recorded it once.

use std::sync::Arc;
use std::time::Duration;

use agent_effect_ops::view::{EventView, Stats};
use effect_core::{EffectContract, EffectLedger, EffectStatus};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError, RecoveryWorker};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

use crate::support::ops;

fn capture(version: &str) -> EffectContract {
    EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .version(version)
    .store_intent(true)
    .build()
    .unwrap()
}

#[test]
fn an_operation_no_registered_version_reads_is_counted_and_explained() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let left = executor
        .execute(
            &capture("1"),
            &json!({"invoice_id": "INV-1"}),
            |_: Value, _| {
                Err::<Value, _>(HandlerError::not_sent("the agent stopped before sending"))
            },
        )
        .unwrap();
    assert_eq!(left.status, EffectStatus::OutcomeUnknown);
    // Version 2 declares no migration from version 1.
    let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&sent);
    let worker = RecoveryWorker::new(executor)
        .register(capture("2"), move |_: Value, _: HandlerContext| {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, HandlerError>(json!({}))
        })
        .unwrap()
        .min_age(Duration::ZERO);
    for _ in 0..3 {
        assert_eq!(worker.run_once().unwrap().unusable_intent, 1);
    }
    assert_eq!(sent.load(std::sync::atomic::Ordering::SeqCst), 0);
    drop(worker);
    drop(ledger);

    let stats: Stats = ops(&db, &["stats"]).json();
    assert_eq!(
        (
            stats.recovery_blocked,
            stats.counts.outcome_unknown,
            stats.waiting_for_recovery_worker
        ),
        (1, 1, 0)
    );
    let table = ops(&db, &["stats", "--format", "table"]).stdout;
    assert!(
        table.contains(
            "blocked for a recovery worker (intent no version reads, or weakened terms): 1\n"
        ),
        "{table}"
    );
    let events: Vec<EventView> = ops(&db, &["events", &left.operation_id]).json();
    let blocked: Vec<&EventView> = events
        .iter()
        .filter(|event| event.event_type == "recovery_blocked")
        .collect();
    assert_eq!(
        blocked.len(),
        1,
        "recorded once over three passes: {events:?}"
    );
    assert_eq!(blocked[0].data["reason"], "intent_unreadable");
    assert_eq!(
        blocked[0].data["error"],
        "no registered version reads the intent of version \"1\""
    );
    assert_eq!(blocked[0].data["contract_version"], "2");
}
