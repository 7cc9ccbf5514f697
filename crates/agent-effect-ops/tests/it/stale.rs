//! Stuck work through the real binary, parsed as a script would: `stats`
//! counts stale dispatches, `list --stale` lists them, `list --after` pages
//! through every operation, and `expire` turns a stale dispatch into an
//! uncertain one that can then be resolved.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_effect_ops::Exit;
use effect_core::{Claim, EffectLedgerExt, NewOperation, RequestFingerprint};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::Value;
use tempfile::TempDir;

use crate::support::{bin_on, failure, success};

const AUDIT: [&str; 6] = [
    "--actor",
    "alice",
    "--reason",
    "worker host was decommissioned",
    "--evidence-reference",
    "INC-9",
];

/// A ledger with `prepared` operations `op-000`.., one stale dispatch and one
/// live dispatch.
fn ledger(prepared: usize) -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let op = |id: &str| {
        NewOperation::new("capture_payment", "1", RequestFingerprint::of_canonical(id))
            .with_provider_idempotency_key(Some(format!("key:{id}")))
    };
    for i in 0..prepared {
        let id = format!("op-{i:03}");
        ledger.prepare(&id, &op(&id)).unwrap();
    }
    for (id, lease) in [
        ("stale", Duration::ZERO),
        ("live", Duration::from_secs(3600)),
    ] {
        ledger.prepare(id, &op(id)).unwrap();
        let claim = Claim::new(format!("worker-{id}"), lease);
        assert!(ledger.claim_dispatch(id, &claim).unwrap());
    }
    (dir, db)
}

/// Runs the binary and parses its stdout as JSON.
fn json(db: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&success(&bin_on(db, args))).unwrap()
}

fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .expect("list prints a JSON array")
        .iter()
        .map(|op| op["operation_id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn stats_counts_stale_dispatches_and_list_stale_lists_them() {
    let (_dir, db) = ledger(2);
    let stats = json(&db, &["stats"]);
    assert_eq!(stats["stale"], 1);
    assert_eq!(stats["counts"]["dispatched"], 2);
    assert_eq!(ids(&json(&db, &["list", "--stale"])), ["stale"]);
    let table = success(&bin_on(&db, &["list", "--stale", "--format", "table"]));
    assert!(
        table.contains("stale") && !table.contains("live"),
        "{table}"
    );
    let (exit, stderr) = failure(&bin_on(
        &db,
        &["list", "--stale", "--status", "quarantined"],
    ));
    assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
}

#[test]
fn list_after_pages_through_more_than_a_thousand_operations() {
    let (_dir, db) = ledger(1203);
    let mut seen: Vec<String> = Vec::new();
    loop {
        let mut args = vec!["list", "--limit", "1000"];
        let cursor = seen.last().cloned();
        if let Some(last) = &cursor {
            args.extend(["--after", last.as_str()]);
        }
        let page = ids(&json(&db, &args));
        if page.is_empty() {
            break;
        }
        seen.extend(page);
    }
    assert_eq!(seen.len(), 1205);
    let mut unique = seen.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 1205, "no operation listed twice");
    // A table says how to get the next page.
    let table = success(&bin_on(&db, &["list", "--limit", "2", "--format", "table"]));
    assert!(
        table.ends_with(&format!("next page: --after {}\n", seen[1])),
        "{table}"
    );
    let (exit, stderr) = failure(&bin_on(&db, &["list", "--after", "no-such-op"]));
    assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
}

#[test]
fn expire_makes_a_stale_dispatch_resolvable_and_refuses_a_live_one() {
    let (_dir, db) = ledger(0);
    let mut args = vec!["expire", "live"];
    args.extend(AUDIT);
    let (exit, stderr) = failure(&bin_on(&db, &args));
    assert_eq!(exit, i32::from(Exit::NotAllowed.code()));
    assert!(
        stderr.contains("lease") && stderr.contains("live until"),
        "{stderr}"
    );
    assert_eq!(json(&db, &["show", "live"])["status"], "dispatched");

    let mut args = vec!["expire", "stale"];
    args.extend(AUDIT);
    let expired = json(&db, &args);
    assert_eq!(expired["operation_id"], "stale");
    assert_eq!(expired["status"], "outcome_unknown");
    assert!(expired.get("provider_operation_id").is_some());
    let shown = json(&db, &["show", "stale"]);
    assert_eq!(shown["evidence"]["handler_may_still_be_running"], true);
    assert_eq!(shown["evidence"]["expired_by"], "alice");
    assert_eq!(shown["evidence"]["expire_evidence_reference"], "INC-9");
    // Expiring again is refused: it is no longer a dispatch.
    let (exit, _) = failure(&bin_on(&db, &args));
    assert_eq!(exit, i32::from(Exit::NotAllowed.code()));

    // A retry while the evidence says the old handler may still run is
    // refused, naming the flag, and writes nothing.
    let mut args = vec!["authorize-retry", "stale"];
    args.extend(AUDIT);
    let bytes = std::fs::read(&db).unwrap();
    let (exit, stderr) = failure(&bin_on(&db, &args));
    assert_eq!(exit, i32::from(Exit::NotAllowed.code()), "{stderr}");
    assert!(
        stderr.contains("a previous handler may still be running")
            && stderr.contains("--handler-stopped"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "a refused retry wrote");
    assert_eq!(json(&db, &["show", "stale"])["status"], "outcome_unknown");

    // With the operator's statement it is authorized; the fields scripts
    // read are there, and the event keeps what was known.
    args.push("--handler-stopped");
    let retried = json(&db, &args);
    let evidence = &retried["event"]["data"]["evidence"];
    assert_eq!(evidence["handler_stopped_asserted"], true);
    assert_eq!(
        evidence["evidence_before_resolution"]["handler_may_still_be_running"],
        true
    );
    assert_eq!(
        evidence["evidence_before_resolution"]["expired_by"],
        "alice"
    );
    assert_eq!(
        (
            &retried["operation_id"],
            &retried["status"],
            &retried["retry_authorized"]
        ),
        (
            &Value::from("stale"),
            &Value::from("prepared"),
            &Value::from(true)
        )
    );
    assert!(retried.get("resolved").is_none());
}

#[test]
fn events_print_a_json_array_and_resolutions_the_python_fields() {
    let (_dir, db) = ledger(0);
    let events = json(&db, &["events", "stale"]);
    let types: Vec<&str> = events
        .as_array()
        .expect("events prints a JSON array")
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["prepared", "dispatched"]);

    let mut args = vec!["expire", "stale"];
    args.extend(AUDIT);
    success(&bin_on(&db, &args));
    let mut args = vec![
        "confirm",
        "stale",
        "--output-json",
        "{\"payment_id\":\"pay-1\"}",
        "--provider-operation-id",
        "pay-1",
    ];
    args.extend(AUDIT);
    let confirmed = json(&db, &args);
    assert_eq!(confirmed["operation_id"], "stale");
    assert_eq!(confirmed["status"], "confirmed");
    assert_eq!(confirmed["resolved"], true);
    assert_eq!(confirmed["provider_operation_id"], "pay-1");
    assert!(confirmed.get("retry_authorized").is_none());
}

/// An uncertain operation whose record still holds a live dispatch lease
/// (its worker may still be running): `authorize-retry` is refused in one
/// line that says so, exit code 4, and the file is not written; the
/// operator's `--handler-stopped` authorizes it.
#[test]
fn authorize_retry_is_refused_while_the_dispatch_lease_is_live() {
    let (_dir, db) = ledger(0);
    {
        let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
        assert!(
            ledger
                .mark_outcome_unknown(
                    "stale",
                    Some("worker-stale"),
                    "connection reset",
                    &effect_core::Evidence::new(),
                )
                .unwrap()
        );
    }
    // As a writer that keeps the lease on an uncertain record leaves it,
    // live until 2100-01-01.
    let until = 4_102_444_800.0_f64;
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute(
            "UPDATE effect_operations SET lease_until = ?1 WHERE operation_id = 'stale'",
            [until],
        )
        .unwrap();
    let shown = json(&db, &["show", "stale"]);
    assert_eq!(shown["status"], "outcome_unknown");
    assert!(
        shown["evidence"]
            .get("handler_may_still_be_running")
            .is_none()
    );

    let mut args = vec!["authorize-retry", "stale"];
    args.extend(AUDIT);
    let bytes = std::fs::read(&db).unwrap();
    let events = json(&db, &["events", "stale"]).as_array().unwrap().len();
    let (exit, stderr) = failure(&bin_on(&db, &args));
    assert_eq!(exit, i32::from(Exit::NotAllowed.code()), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: cannot authorize a retry of operation \"stale\": its dispatch lease is live until 2100-01-01T00:00:00"
        ) && stderr.ends_with(
            ", so a retry could send the request twice; pass --handler-stopped once you know it stopped"
        ),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&db).unwrap(), bytes, "a refused retry wrote");
    assert_eq!(
        json(&db, &["events", "stale"]).as_array().unwrap().len(),
        events
    );

    args.push("--handler-stopped");
    let retried = json(&db, &args);
    assert_eq!(retried["status"], "prepared");
    assert_eq!(
        retried["event"]["data"]["evidence"]["handler_stopped_asserted"],
        true
    );
}
