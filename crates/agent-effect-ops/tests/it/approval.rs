//! `approve`, `deny` and `list --waiting-approval` through the real binary
//! (docs/approval.md): exit codes, one-line errors, and nothing written when
//! a decision is refused.

use std::path::{Path, PathBuf};

use effect_core::{EffectLedger, EffectLedgerExt, NewOperation, RequestFingerprint};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};
use tempfile::TempDir;

use crate::support::{bin_on, failure, success};

const DECISION: [&str; 4] = [
    "--actor",
    "lead@example.com",
    "--reason",
    "matches ticket T-9",
];

fn with_decision<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter().copied().chain(DECISION).collect()
}

/// A ledger with `refund:A-1` and `refund:A-2` awaiting approval, and
/// `plain` prepared under a contract without approval.
fn ledger() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let op = |id: &str, requires_approval: bool| {
        NewOperation::new(
            "refund",
            "1",
            RequestFingerprint::of_value(&json!({"order": id, "cents": 4200})),
        )
        .with_provider_idempotency_key(Some(format!("refund:{id}")))
        .with_requires_approval(requires_approval)
    };
    for id in ["refund:A-1", "refund:A-2"] {
        ledger.prepare(id, &op(id, true)).unwrap();
    }
    ledger.prepare("plain", &op("plain", false)).unwrap();
    (dir, db)
}

fn json_of(db: &Path, args: &[&str]) -> Value {
    serde_json::from_str(&success(&bin_on(db, args))).unwrap()
}

fn ids(list: &Value) -> Vec<&str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|op| op["operation_id"].as_str().unwrap())
        .collect()
}

/// What the ledger in `dir` holds: every record and its events, read
/// through a read-only handle. (The files' bytes are no measure of a write:
/// SQLite may checkpoint its write-ahead log into the file whenever a
/// connection closes, which moves data without writing any.)
fn written(dir: &Path) -> String {
    let db = dir.join("effects.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().read_only(true)).unwrap();
    let records = ledger.list(&effect_core::ListQuery::new(1000)).unwrap();
    let mut held = Vec::new();
    for record in records {
        let events = ledger.events(&record.operation_id).unwrap();
        held.push(format!("{record:?}\n{events:?}"));
    }
    held.sort_unstable();
    assert_eq!(held.len(), 3, "the three operations of `ledger`");
    held.join("\n")
}

fn open(db: &Path) -> SqliteLedger {
    SqliteLedger::open(db, SqliteOptions::default()).unwrap()
}

#[test]
fn list_waiting_approval_lists_only_operations_awaiting_approval() {
    let (_dir, db) = ledger();
    let listed = json_of(&db, &["list", "--waiting-approval"]);
    let mut waiting = ids(&listed);
    waiting.sort_unstable();
    assert_eq!(waiting, ["refund:A-1", "refund:A-2"]);
    let by_status = json_of(&db, &["list", "--status", "awaiting_approval"]);
    assert_eq!(by_status.as_array().unwrap().len(), 2);
    let stats = json_of(&db, &["stats"]);
    assert_eq!(stats["counts"]["awaiting_approval"], 2);
    assert_eq!(stats["counts"]["prepared"], 1);
    let (code, message) = failure(&bin_on(&db, &["list", "--waiting-approval", "--stale"]));
    assert_eq!(code, 2, "{message}");
}

#[test]
fn approve_records_a_single_use_approval_of_the_fingerprint() {
    let (_dir, db) = ledger();
    let fingerprint = open(&db)
        .get("refund:A-1")
        .unwrap()
        .unwrap()
        .request_fingerprint;
    let approved = json_of(
        &db,
        &with_decision(&[
            "approve",
            "refund:A-1",
            "--expires",
            "30m",
            "--fingerprint",
            &fingerprint,
        ]),
    );
    assert_eq!(approved["action"], "approve");
    assert_eq!(approved["status"], "awaiting_approval");
    assert_eq!(approved["approval"]["actor"], "lead@example.com");
    assert_eq!(
        approved["approval"]["request_fingerprint"],
        fingerprint.as_str()
    );
    assert_eq!(approved["event"]["event_type"], "approved");
    assert_eq!(approved["event"]["data"]["reason"], "matches ticket T-9");
    // The approval stands: a second one is refused (exit 4), writing nothing.
    let dir = db.parent().unwrap();
    let before = written(dir);
    let (code, message) = failure(&bin_on(&db, &with_decision(&["approve", "refund:A-1"])));
    assert_eq!(code, 4, "{message}");
    assert!(message.contains("unused approval"), "{message}");
    assert!(written(dir) == before, "a refused approve wrote");
    // One claim uses it up; the operation cannot be approved again.
    let ledger = open(&db);
    let claim = effect_core::Claim::new("worker", std::time::Duration::from_secs(60));
    assert!(ledger.claim_dispatch("refund:A-1", &claim).unwrap());
    assert!(!ledger.claim_dispatch("refund:A-1", &claim).unwrap());
    drop(ledger);
    let (code, message) = failure(&bin_on(&db, &with_decision(&["approve", "refund:A-1"])));
    assert_eq!(code, 4, "{message}");
    assert!(message.contains("dispatched"), "{message}");
}

#[test]
fn refused_approvals_exit_with_their_code_and_write_nothing() {
    let (dir, db) = ledger();
    let before = written(dir.path());
    let cases: [(&[&str], i32, &str); 6] = [
        (
            &["approve", "refund:A-1", "--fingerprint", "blake3:other"],
            4,
            "request fingerprint",
        ),
        (&["approve", "plain"], 4, "prepared"),
        (&["approve", "missing"], 3, "not found"),
        (
            &["approve", "refund:A-1", "--expires", "0s"],
            2,
            "--expires",
        ),
        (&["deny", "plain"], 4, "prepared"),
        (&["deny", "missing"], 3, "not found"),
    ];
    for (args, expected, words) in cases {
        let (code, message) = failure(&bin_on(&db, &with_decision(args)));
        assert_eq!(code, expected, "{args:?}: {message}");
        assert!(message.contains(words), "{args:?}: {message}");
    }
    for args in [
        ["approve", "refund:A-1", "--actor", " ", "--reason", "ok"],
        ["deny", "refund:A-1", "--actor", "lead", "--reason", ""],
    ] {
        let (code, message) = failure(&bin_on(&db, &args));
        assert_eq!(code, 2, "{args:?}: {message}");
    }
    assert!(written(dir.path()) == before, "a refused decision wrote");
}

#[test]
fn deny_rejects_the_operation_terminally() {
    let (_dir, db) = ledger();
    let denied = json_of(&db, &with_decision(&["deny", "refund:A-2"]));
    assert_eq!(denied["action"], "deny");
    assert_eq!(denied["status"], "rejected");
    assert_eq!(denied["resolved"], true);
    assert_eq!(denied["event"]["event_type"], "approval_denied");
    assert_eq!(denied["event"]["data"]["actor"], "lead@example.com");
    let (code, message) = failure(&bin_on(&db, &with_decision(&["approve", "refund:A-2"])));
    assert_eq!(code, 4, "{message}");
    let events = json_of(&db, &["events", "refund:A-2"]);
    let types: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(types, ["prepared", "approval_denied"]);
    assert_eq!(
        ids(&json_of(&db, &["list", "--waiting-approval"])),
        ["refund:A-1"]
    );
}
