//! `cancel` through the binary: an operation never dispatched (deferred by
//! a budget, waiting for its caller, awaiting approval) ends `rejected`
//! with an audited `cancelled` event, and no recovery worker sends it; one
//! dispatched or settled is refused with exit 4, the command to use
//! instead, and nothing written.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use effect_core::{Budget, BudgetDeferral, EffectContract, EffectLedger, EffectStatus};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError, RecoveryWorker};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

use crate::support::{bin_on, failure, success};

const AUDIT: [&str; 6] = [
    "--actor",
    "ops@example.com",
    "--reason",
    "the customer paid by wire",
    "--evidence-reference",
    "TICKET-9",
];

/// Captures of at most one a day, stored intent, deferred for two days
/// when refused; `approval` requires a human's approval of each.
fn capture(approval: bool) -> EffectContract {
    EffectContract::builder("capture", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice"].as_str().ok_or("missing invoice")?
        ))
    })
    .budget(
        Budget::per_day("captures")
            .max_count(1)
            .defer(BudgetDeferral::For(Duration::from_secs(2 * 86_400))),
    )
    .requires_approval(approval)
    .store_intent(true)
    .build()
    .unwrap()
}

fn counting(
    sent: &Arc<AtomicUsize>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static + Clone {
    let sent = Arc::clone(sent);
    move |args: Value, _ctx: HandlerContext| {
        sent.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"captured": args["invoice"]}))
    }
}

fn event_types(ledger: &dyn EffectLedger, id: &str) -> Vec<String> {
    ledger
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

#[test]
fn cancel_ends_a_deferred_capture_before_any_worker_sends_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let sent = Arc::new(AtomicUsize::new(0));
    let contract = capture(false);
    let first = executor
        .execute(&contract, &json!({"invoice": "INV-1"}), counting(&sent))
        .unwrap();
    assert!(first.is_confirmed());
    let deferred = executor
        .execute(&contract, &json!({"invoice": "INV-2"}), counting(&sent))
        .unwrap_err();
    assert!(deferred.is_budget_deferred(), "{deferred}");
    let id = "invoice:INV-2:capture";

    let stats: Value = serde_json::from_str(&success(&bin_on(&db, &["stats"]))).unwrap();
    assert_eq!(
        (
            &stats["waiting_for_budget"],
            &stats["waiting_for_recovery_worker"]
        ),
        (&json!(1), &json!(0)),
        "{stats}"
    );
    // A deferral waits by design: the oldest waiting operation an alert
    // watches (docs/production.md) is another's, here none.
    assert_eq!(stats["oldest_waiting_since"], Value::Null, "{stats}");
    assert!(stats["oldest_deferred_since"].is_string(), "{stats}");
    assert!(stats["oldest_deferred_age_seconds"].is_u64(), "{stats}");
    let table = success(&bin_on(&db, &["stats", "--format", "table"]));
    assert!(table.contains("deferred by a budget: 1"), "{table}");
    assert!(
        table.contains("oldest deferred by a budget: since"),
        "{table}"
    );
    assert!(!table.contains("oldest waiting:"), "{table}");
    let listed: Value =
        serde_json::from_str(&success(&bin_on(&db, &["list", "--status", "prepared"]))).unwrap();
    assert_eq!(listed[0]["operation_id"], id);
    assert_eq!(listed[0]["deferred_by_budget"]["budget"], "captures");
    assert!(
        listed[0]["deferred_by_budget"]["until"].is_string(),
        "{listed}"
    );

    let mut args = vec!["cancel", id];
    args.extend(AUDIT);
    let report: Value = serde_json::from_str(&success(&bin_on(&db, &args))).unwrap();
    assert_eq!(
        (&report["status"], &report["resolved"], &report["action"]),
        (&json!("rejected"), &json!(true), &json!("cancel")),
        "{report}"
    );
    assert_eq!(report["event"]["event_type"], "cancelled");
    assert_eq!(
        report["event"]["data"]["evidence"]["actor"],
        "ops@example.com"
    );
    assert_eq!(
        report["event"]["data"]["evidence"]["evidence_reference"],
        "TICKET-9"
    );
    assert_eq!(
        event_types(ledger.as_ref(), id),
        ["prepared", "budget_deferred", "cancelled"]
    );

    // A worker with the durable handler, tomorrow or not, has nothing to send.
    let worker = RecoveryWorker::new(EffectExecutor::new(Arc::clone(&ledger)))
        .register(contract.clone(), counting(&sent))
        .unwrap()
        .min_age(Duration::ZERO);
    let report = worker.run_once().unwrap();
    assert_eq!((report.examined, report.deferred), (0, 0), "{report:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 1, "only INV-1 was sent");
    let stats: Value = serde_json::from_str(&success(&bin_on(&db, &["stats"]))).unwrap();
    assert_eq!(stats["waiting_for_budget"], 0, "{stats}");
    assert_eq!(stats["oldest_deferred_since"], Value::Null, "{stats}");
}

#[test]
fn cancel_ends_an_operation_awaiting_approval() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let sent = Arc::new(AtomicUsize::new(0));
    let contract = capture(true);
    let waiting = executor
        .execute(&contract, &json!({"invoice": "INV-1"}), counting(&sent))
        .unwrap();
    assert_eq!(waiting.status, EffectStatus::AwaitingApproval);
    let id = "invoice:INV-1:capture";
    let mut args = vec!["cancel", id];
    args.extend(AUDIT);
    let report: Value = serde_json::from_str(&success(&bin_on(&db, &args))).unwrap();
    assert_eq!(report["status"], "rejected", "{report}");
    // An approval now is refused: the operation is over.
    let (code, message) = failure(&bin_on(
        &db,
        &["approve", id, "--actor", "lead", "--reason", "ok"],
    ));
    assert_eq!(code, 4, "{message}");
    let again = executor
        .execute(&contract, &json!({"invoice": "INV-1"}), counting(&sent))
        .unwrap();
    assert_eq!((again.status, again.attempts), (EffectStatus::Rejected, 0));
    assert_eq!(sent.load(Ordering::SeqCst), 0, "nothing was sent");
}

#[test]
fn cancel_of_dispatched_or_settled_work_names_the_command_to_use_instead() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let sent = Arc::new(AtomicUsize::new(0));
    let contract = capture(false);
    executor
        .execute(&contract, &json!({"invoice": "INV-1"}), counting(&sent))
        .unwrap();
    let lost = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::unknown("connection reset after sending"))
    };
    let uncertain = EffectContract::builder("notify", |args| {
        Ok(format!(
            "notify:{}",
            args["to"].as_str().ok_or("missing to")?
        ))
    })
    .build()
    .unwrap();
    let result = executor
        .execute(&uncertain, &json!({"to": "ada"}), lost)
        .unwrap();
    assert!(result.status.is_uncertain(), "{result:?}");
    for (id, instead) in [
        ("invoice:INV-1:capture", "compensate invoice:INV-1:capture"),
        ("notify:ada", "reject notify:ada"),
    ] {
        let before = event_types(ledger.as_ref(), id);
        let mut args = vec!["cancel", id];
        args.extend(AUDIT);
        let (code, message) = failure(&bin_on(&db, &args));
        assert_eq!(code, 4, "{message}");
        assert!(
            message.contains("cannot cancel") && message.contains(instead),
            "{message}"
        );
        assert_eq!(event_types(ledger.as_ref(), id), before, "nothing written");
    }
    let mut args = vec!["cancel", "nobody"];
    args.extend(AUDIT);
    assert_eq!(failure(&bin_on(&db, &args)).0, 3);
    let (code, message) = failure(&bin_on(
        &db,
        &[
            "cancel",
            "notify:ada",
            "--actor",
            " ",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
    ));
    assert_eq!(code, 2, "{message}");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}
