//! What the Python package `production-agent-systems` 1.0.1 sees of an
//! operation waiting for approval (docs/approval.md): it cannot read it
//! (an unknown status) and cannot claim it, so it never dispatches it
//! without the approval; other operations of the same file read as before,
//! and once approved and dispatched the operation reads in Python again.
//!
//! Runs the Python named by `EFFECT_TEST_PYTHON`; skipped without it unless
//! `EFFECT_REQUIRE_PYTHON=1`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use production_agent_systems::effect_core::{Approval, Clock as _, SystemClock};
use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, HandlerContext, HandlerError,
    SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

/// Reads and claims operations with the Python package, printing one JSON
/// object: each id's status, or the error reading it raised, and whether
/// its claim succeeded.
const PYTHON: &str = r#"
import json, sys
from production_agent_systems.effect_ledger import SQLiteEffectLedger
ledger = SQLiteEffectLedger(sys.argv[1])
seen = {}
for op in sys.argv[2:]:
    try:
        seen[op] = {"status": ledger.get(op).status.value}
    except Exception as err:
        seen[op] = {"error": type(err).__name__}
    seen[op]["claimed"] = ledger.claim_dispatch(op, "python-worker", 30.0)
print(json.dumps(seen))
"#;

fn python() -> Option<PathBuf> {
    match std::env::var_os("EFFECT_TEST_PYTHON") {
        Some(path) => Some(PathBuf::from(path)),
        None if std::env::var("EFFECT_REQUIRE_PYTHON").is_ok_and(|v| v == "1") => {
            panic!("EFFECT_TEST_PYTHON is not set and EFFECT_REQUIRE_PYTHON=1")
        }
        None => {
            eprintln!("skipped: set EFFECT_TEST_PYTHON to run the Python approval test");
            None
        }
    }
}

fn python_sees(python: &Path, db: &Path, ids: &[&str]) -> Value {
    let output = Command::new(python)
        .arg("-c")
        .arg(PYTHON)
        .arg(db)
        .args(ids)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn python_never_dispatches_an_operation_waiting_for_approval() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ledger.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let contract = |name: &str, approval: bool| {
        EffectContract::builder(name, |args| {
            Ok(format!(
                "order:{}",
                args["order"].as_str().ok_or("missing order")?
            ))
        })
        .requires_approval(approval)
        .build()
        .unwrap()
    };
    let (refund, note) = (contract("refund", true), contract("note", false));
    let handler = |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Ok(json!({"done": args["order"]}))
    };
    let waiting = executor
        .execute(&refund, &json!({"order": "A-1"}), handler)
        .unwrap();
    assert_eq!(waiting.status, EffectStatus::AwaitingApproval);
    let plain = executor
        .execute(&note, &json!({"order": "B-1"}), handler)
        .unwrap();
    assert!(plain.is_confirmed());

    let seen = python_sees(&python, &db, &["order:A-1", "order:B-1"]);
    assert_eq!(
        seen["order:A-1"],
        json!({"error": "ValueError", "claimed": false})
    );
    assert_eq!(
        seen["order:B-1"],
        json!({"status": "confirmed", "claimed": false})
    );
    let record = ledger.get("order:A-1").unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts),
        (EffectStatus::AwaitingApproval, 0)
    );

    executor
        .operator()
        .approve(
            "order:A-1",
            Approval {
                request_fingerprint: record.request_fingerprint,
                actor: "lead@example.com".into(),
                reason: "checked".into(),
                expires_at: SystemClock.now() + Duration::from_secs(3600),
            },
        )
        .unwrap();
    let done = executor
        .execute(&refund, &json!({"order": "A-1"}), handler)
        .unwrap();
    assert!(done.is_confirmed());
    let seen = python_sees(&python, &db, &["order:A-1"]);
    assert_eq!(
        seen["order:A-1"],
        json!({"status": "confirmed", "claimed": false})
    );
    assert_eq!(ledger.get("order:A-1").unwrap().unwrap().attempts, 1);
}
