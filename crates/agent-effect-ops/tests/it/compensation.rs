//! `compensate`, and the compensation links `show` and `events` print
//! (docs/compensation.md), through the real binary: the CLI records the
//! request, a recovery worker with the refund's handler runs it once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use effect_core::{EffectContract, EffectLedger, compensation};
use effect_exec::{EffectExecutor, HandlerError, RecoveryWorker};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_testkit::provider::FakePaymentProvider;
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{bin_on, failure, success};

const CAPTURE: &str = "invoice:INV-1:capture";
const REFUND: &str = "invoice:INV-1:capture:compensation";
const REQUEST: [&str; 6] = [
    "--actor",
    "ops@example.com",
    "--reason",
    "customer cancelled the order",
    "--evidence",
    "TICKET-7",
];

/// The capture contract, compensated by a refund keyed by the capture's id.
fn capture() -> EffectContract {
    let refund = EffectContract::builder("refund_payment", compensation::operation_id)
        .provider_idempotency_key(|args| {
            Ok(args[compensation::ARGUMENT]
                .as_str()
                .map(|original| format!("refund:{original}")))
        })
        .provider_idempotency_guaranteed(true)
        .build()
        .unwrap();
    effect_test_support::contracts::capture_payment()
        .provider_idempotency_guaranteed(true)
        .compensation(refund, |original| {
            Ok(json!({"payment_id": original.output["payment_id"]}))
        })
        .build()
        .unwrap()
}

fn executor(db: &Path) -> EffectExecutor {
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(db, SqliteOptions::default()).unwrap());
    EffectExecutor::new(ledger)
}

/// A ledger with INV-1 captured (confirmed) and INV-2 quarantined: its
/// acknowledgement lost, under a contract without a key or a probe.
fn ledger(captures: &Arc<FakePaymentProvider>) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let executor = executor(&db);
    let without_key = effect_test_support::contracts::capture_payment_without_key()
        .build()
        .unwrap();
    for (contract, invoice, lose_ack) in [(capture(), "INV-1", false), (without_key, "INV-2", true)]
    {
        let captures = Arc::clone(captures);
        let result = executor
            .execute(
                &contract,
                &json!({"invoice_id": invoice}),
                move |args: Value, ctx| {
                    let invoice = args["invoice_id"].as_str().unwrap_or_default();
                    let capture = captures.capture(invoice, 1250, ctx.provider_key())?;
                    if lose_ack {
                        return Err(HandlerError::unknown("timed out"));
                    }
                    Ok(json!({"payment_id": capture.payment_id}))
                },
            )
            .unwrap();
        assert_eq!(result.is_confirmed(), !lose_ack, "{result:?}");
    }
    (dir, db)
}

fn json_of(db: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&success(&bin_on(db, args))).unwrap()
}

fn with_request<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter().copied().chain(REQUEST).collect()
}

/// Every record and its events, through a read-only handle.
fn held(db: &Path) -> String {
    let ledger = SqliteLedger::open(db, SqliteOptions::default().read_only(true)).unwrap();
    let mut held = Vec::new();
    for record in ledger.list(&effect_core::ListQuery::new(1000)).unwrap() {
        let events = ledger.events(&record.operation_id).unwrap();
        held.push(format!("{record:?}\n{events:?}"));
    }
    held.sort_unstable();
    held.join("\n")
}

#[test]
fn compensate_records_a_request_that_a_recovery_worker_runs_once() {
    let captures = Arc::new(FakePaymentProvider::new());
    let refunds = Arc::new(FakePaymentProvider::new());
    let (_dir, db) = ledger(&captures);
    let requested = json_of(&db, &with_request(&["compensate", CAPTURE]));
    assert_eq!(requested["action"], "compensate");
    assert_eq!(requested["status"], "confirmed");
    assert_eq!(requested["compensation_requested"], true);
    assert_eq!(requested["event"]["event_type"], "compensation_requested");
    assert_eq!(requested["event"]["data"]["actor"], "ops@example.com");
    assert_eq!(requested["event"]["data"]["evidence_reference"], "TICKET-7");
    // Nothing was refunded by the CLI: it has no handler.
    assert_eq!(refunds.committed_count().unwrap(), 0);
    let shown = json_of(&db, &["show", CAPTURE]);
    assert_eq!(
        shown["compensation"]["requested"]["reason"],
        "customer cancelled the order"
    );
    // A repeat writes nothing.
    let before = held(&db);
    let again = json_of(&db, &with_request(&["compensate", CAPTURE]));
    assert_eq!(again["compensation_requested"], true);
    assert_eq!(held(&db), before);

    // The service's recovery worker holds the refund's handler.
    let worker = {
        let refunds = Arc::clone(&refunds);
        RecoveryWorker::new(executor(&db))
            .register_compensation(
                capture(),
                move |args: Value, ctx: effect_exec::HandlerContext| {
                    let refund = refunds.capture(
                        args["payment_id"].as_str().unwrap_or_default(),
                        1250,
                        ctx.provider_key(),
                    )?;
                    Ok::<_, HandlerError>(json!({"refund_id": refund.payment_id}))
                },
            )
            .unwrap()
            .min_age(Duration::ZERO)
    };
    let report = worker.run_once().unwrap();
    assert_eq!(report.compensated, 1, "{report:?}");
    assert_eq!(worker.run_once().unwrap().compensated, 0);
    assert_eq!(refunds.committed_count().unwrap(), 1);
    assert_eq!(captures.committed_count().unwrap(), 2);

    let shown = json_of(&db, &["show", CAPTURE]);
    assert_eq!(shown["status"], "confirmed");
    assert_eq!(
        shown["compensation"]["compensated_by"]["operation_id"],
        REFUND
    );
    assert_eq!(
        shown["compensation"]["compensated_by"]["state"],
        "confirmed"
    );
    assert!(shown["compensation"].get("requested").is_none());
    let refund = json_of(&db, &["show", REFUND]);
    assert_eq!(refund["compensation"]["compensates"], CAPTURE);
    assert_eq!(refund["status"], "confirmed");
    let events = json_of(&db, &["events", CAPTURE]);
    let types: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "prepared",
            "dispatched",
            "confirmed",
            "compensation_requested",
            "compensation_started",
            "compensated"
        ]
    );
    assert_eq!(events[4]["data"]["compensation_operation_id"], REFUND);
    let refund_events = json_of(&db, &["events", REFUND]);
    assert_eq!(refund_events[1]["event_type"], "compensation_of");
    assert_eq!(refund_events[1]["data"]["compensates"], CAPTURE);
    // After the compensation settled, a request writes nothing and says so.
    let before = held(&db);
    let settled = json_of(&db, &with_request(&["compensate", CAPTURE]));
    assert_eq!(settled["compensation_requested"], false);
    assert_eq!(held(&db), before);
    let table = success(&bin_on(&db, &["--format", "table", "show", CAPTURE]));
    assert!(
        table.contains(&format!("compensated_by: {REFUND} (confirmed)")),
        "{table}"
    );
}

#[test]
fn compensate_refuses_what_is_not_confirmed_and_writes_nothing() {
    let captures = Arc::new(FakePaymentProvider::new());
    let (_dir, db) = ledger(&captures);
    let before = held(&db);
    let (code, message) = failure(&bin_on(
        &db,
        &with_request(&["compensate", "invoice:INV-2:capture"]),
    ));
    assert_eq!(code, 4, "{message}");
    assert!(message.contains("quarantined"), "{message}");
    let (code, message) = failure(&bin_on(&db, &with_request(&["compensate", "nope"])));
    assert_eq!(code, 3, "{message}");
    let (code, message) = failure(&bin_on(
        &db,
        &[
            "compensate",
            CAPTURE,
            "--actor",
            " ",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
    ));
    assert_eq!(code, 2, "{message}");
    assert!(message.contains("--actor"), "{message}");
    assert_eq!(held(&db), before);
    assert_eq!(captures.committed_count().unwrap(), 2);
}
