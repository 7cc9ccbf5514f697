//! A full incident, as an on-call operator meets it: a payment capture timed
//! out after the provider committed it, with no probe and no idempotency
//! guarantee, so the executor quarantined it. The operator finds it, checks the
//! provider, confirms it with evidence through the real binary, and the agent's
//! next attempt replays the confirmed result without charging again.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agent_effect_ops::Exit;
use agent_effect_ops::view::{EventView, OperationDetail, OperationSummary, Resolution};
use effect_core::{EffectContract, EffectStatus};
use effect_exec::HandlerContext;
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_test_support::snapshots::settings;
use insta::{assert_json_snapshot, assert_snapshot};
use serde_json::{Value, json};

use crate::support::{bin_on, failure, success};

const ID: &str = "invoice:INV-1042:capture";

/// A payment provider that counts the captures it committed.
#[derive(Debug, Default)]
struct FakeProvider {
    committed: AtomicUsize,
    handler_calls: AtomicUsize,
}

/// No probe, no provider key: nothing can settle a lost acknowledgement
/// automatically.
fn capture_contract() -> EffectContract {
    effect_test_support::contracts::capture_payment_without_key()
        .build()
        .unwrap()
}

/// Commits the capture, then loses the acknowledgement.
fn capture_then_time_out(
    provider: &Arc<FakeProvider>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |_args, _key| {
        provider.handler_calls.fetch_add(1, Ordering::SeqCst);
        provider.committed.fetch_add(1, Ordering::SeqCst);
        Err(HandlerError::unknown("timeout"))
    }
}

fn executor(db: &Path) -> EffectExecutor {
    let ledger = SqliteLedger::open(db, SqliteOptions::default()).unwrap();
    EffectExecutor::with_options(Arc::new(ledger), ExecutorOptions::default())
}

fn json<T: serde::de::DeserializeOwned>(stdout: &str) -> T {
    serde_json::from_str(stdout).unwrap()
}

#[test]
fn an_operator_confirms_a_quarantined_payment_and_the_agent_replays_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = Arc::new(FakeProvider::default());
    let args = json!({"invoice_id": "INV-1042", "amount_cents": 1999});

    // The agent's attempt: committed at the provider, acknowledgement lost.
    // The agent keeps running (its ledger open) while the operator works.
    let agent = executor(&db);
    let result = agent
        .execute(&capture_contract(), &args, capture_then_time_out(&provider))
        .unwrap();
    assert_eq!(result.status, EffectStatus::Quarantined);
    assert_eq!(provider.committed.load(Ordering::SeqCst), 1);

    // 1. Find it.
    let listed = success(&bin_on(&db, &["list", "--status", "quarantined"]));
    let list: Vec<OperationSummary> = json(&listed);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].operation_id, ID);
    settings().bind(|| assert_json_snapshot!("incident_list", list));

    // 2. Inspect it: why it is quarantined, and its history.
    let shown = success(&bin_on(&db, &["show", ID]));
    let detail: OperationDetail = json(&shown);
    assert_eq!(
        detail.evidence["dispatch_interruption"],
        "handler_exception"
    );
    assert!(!detail.has_output);
    assert_eq!(
        (detail.owner_token.as_deref(), detail.lease_until),
        (None, None)
    );
    settings().bind(|| assert_json_snapshot!("incident_show", detail));

    // 3. The provider's dashboard shows the capture: confirm it, with evidence.
    let confirmed = success(&bin_on(
        &db,
        &[
            "confirm",
            ID,
            "--output-json",
            r#"{"payment_id":"pay-000001","status":"captured"}"#,
            "--provider-operation-id",
            "pay-000001",
            "--actor",
            "alice@example.com",
            "--reason",
            "capture pay-000001 visible in the provider dashboard",
            "--evidence-reference",
            "INC-2042",
        ],
    ));
    let resolution: Resolution = json(&confirmed);
    assert_eq!(resolution.operation.status, EffectStatus::Confirmed);
    settings().bind(|| assert_json_snapshot!("incident_confirm", resolution));

    // A second resolution is refused: the operation is settled.
    let (exit, stderr) = failure(&bin_on(
        &db,
        &[
            "reject",
            ID,
            "--actor",
            "bob",
            "--reason",
            "duplicate ticket",
            "--evidence-reference",
            "INC-2043",
        ],
    ));
    assert_eq!(exit, i32::from(Exit::NotAllowed.code()));
    settings().bind(|| assert_snapshot!("incident_second_resolution", stderr));

    // 4. The history shows the audited decision.
    let events: Vec<EventView> = json(&success(&bin_on(&db, &["events", ID])));
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "quarantined",
            "manually_confirmed"
        ]
    );
    let audit = &events[4].data;
    assert_eq!(audit["evidence"]["actor"], "alice@example.com");
    assert_eq!(
        audit["evidence"]["reason"],
        "capture pay-000001 visible in the provider dashboard"
    );
    assert_eq!(audit["evidence"]["evidence_reference"], "INC-2042");
    assert_eq!(audit["provider_operation_id"], "pay-000001");
    settings().bind(|| assert_json_snapshot!("incident_events", events));

    // 5. The running agent retries: the confirmed result is replayed, the
    // handler is not called, the customer is charged once. So does an agent
    // started afresh on the same file.
    let live = agent
        .execute(&capture_contract(), &args, capture_then_time_out(&provider))
        .unwrap();
    assert!(live.duplicate_suppressed);
    drop(agent);
    let replay = executor(&db)
        .execute(&capture_contract(), &args, capture_then_time_out(&provider))
        .unwrap();
    assert_eq!(replay, live);
    assert!(replay.duplicate_suppressed);
    assert_eq!(replay.status, EffectStatus::Confirmed);
    assert_eq!(
        replay.output,
        Some(json!({"payment_id": "pay-000001", "status": "captured"}))
    );
    assert_eq!(replay.provider_operation_id.as_deref(), Some("pay-000001"));
    assert_eq!(provider.handler_calls.load(Ordering::SeqCst), 1);
    assert_eq!(provider.committed.load(Ordering::SeqCst), 1);
}

/// `confirm` refuses an output that cannot be one of the contract's (another
/// JSON type, or missing top-level keys of its last confirmed output), in
/// one line that says the stored shape, and writes nothing;
/// `--ignore-output-shape` overrides.
#[test]
fn confirm_refuses_an_output_of_another_shape_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = Arc::new(FakeProvider::default());
    {
        let agent = executor(&db);
        let confirmed = agent
            .execute(
                &capture_contract(),
                &json!({"invoice_id": "INV-1"}),
                |_args, _key| Ok(json!({"payment_id": "pay-1", "status": "captured"})),
            )
            .unwrap();
        assert_eq!(confirmed.status, EffectStatus::Confirmed);
        let lost = agent
            .execute(
                &capture_contract(),
                &json!({"invoice_id": "INV-2"}),
                capture_then_time_out(&provider),
            )
            .unwrap();
        assert_eq!(lost.status, EffectStatus::Quarantined);
    }
    let audit = ["--actor", "a", "--reason", "r", "--evidence-reference", "e"];
    let confirm = |output: &'static str, extra: &[&'static str]| {
        let mut args = vec!["confirm", "invoice:INV-2:capture", "--output-json", output];
        args.extend(audit);
        args.extend(extra);
        bin_on(&db, &args)
    };
    let before = std::fs::read(&db).unwrap();
    for (output, given) in [
        ("42", "a number"),
        (
            r#"{"payment_id":"pay-2"}"#,
            "an object with keys payment_id",
        ),
    ] {
        let (exit, stderr) = failure(&confirm(output, &[]));
        assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
        assert_eq!(
            stderr,
            format!(
                "error: --output-json is {given}, but the last confirmed output of capture_payment v1 (\"invoice:INV-1:capture\") is an object with keys payment_id, status; pass an output of that shape, or --ignore-output-shape if this one is right"
            )
        );
    }
    assert_eq!(
        std::fs::read(&db).unwrap(),
        before,
        "a refused confirm wrote"
    );
    let extra_keys = success(&confirm(
        r#"{"payment_id":"pay-2","status":"captured","note":"x"}"#,
        &[],
    ));
    assert!(extra_keys.contains("\"confirmed\""), "{extra_keys}");
    assert_eq!(provider.committed.load(Ordering::SeqCst), 1);
}

/// The override stores a value of another shape.
#[test]
fn confirm_with_ignore_output_shape_stores_any_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = Arc::new(FakeProvider::default());
    {
        let agent = executor(&db);
        agent
            .execute(
                &capture_contract(),
                &json!({"invoice_id": "INV-1"}),
                |_a, _k| Ok(json!({"payment_id": "pay-1"})),
            )
            .unwrap();
        agent
            .execute(
                &capture_contract(),
                &json!({"invoice_id": "INV-2"}),
                capture_then_time_out(&provider),
            )
            .unwrap();
    }
    let out = success(&bin_on(
        &db,
        &[
            "confirm",
            "invoice:INV-2:capture",
            "--output-json",
            "42",
            "--ignore-output-shape",
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
    ));
    let resolution: Resolution = json(&out);
    assert_eq!(resolution.status, EffectStatus::Confirmed);
}
