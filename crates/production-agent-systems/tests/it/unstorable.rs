//! What cannot be stored is never reported as stored: the ledger file
//! deleted under a running executor, and an output too large for the store.

use std::sync::Arc;

use production_agent_systems::{
    EffectContract, EffectExecutor, EffectLedger, EffectStatus, HandlerContext, HandlerError,
    SqliteLedger, SqliteOptions,
};
use serde_json::{Value, json};

use crate::provider::{FileProvider, forbidden_handler};

/// A contract with neither a probe nor a guaranteed key: nothing can settle
/// an uncertain outcome but an operator.
fn bare_contract() -> EffectContract {
    EffectContract::builder("send_report", |args| {
        Ok(format!(
            "report:{}",
            args["id"].as_str().ok_or("missing id")?
        ))
    })
    .build()
    .unwrap()
}

#[test]
fn an_output_too_large_for_the_store_is_recorded_uncertain_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = FileProvider::new(&dir.path().join("provider.log"));
    let options = SqliteOptions::default().max_value_bytes(Some(16 * 1024));
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(&db, options).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let p = provider.clone();
    let result = executor
        .execute(&bare_contract(), &json!({"id": "R-1"}), move |_, _| {
            p.capture("report:R-1");
            Ok::<_, HandlerError>(json!({"pdf": "x".repeat(64 * 1024)}))
        })
        .unwrap();
    assert_eq!(
        provider.commits(),
        ["report:R-1"],
        "the effect happened once"
    );
    assert_eq!(result.status, EffectStatus::Quarantined, "{result:?}");
    assert!(!result.in_progress);
    assert_eq!(
        result.evidence["dispatch_interruption"],
        "unstorable_output"
    );
    assert_eq!(
        result.output, None,
        "never report an output that was not stored"
    );
    let record = ledger.get("report:R-1").unwrap().unwrap();
    assert_eq!(record.status, EffectStatus::Quarantined);
    assert_eq!(
        record.owner_token, None,
        "the dispatch lease was released at once"
    );
    // A later call does not dispatch again.
    let again = executor
        .execute(&bare_contract(), &json!({"id": "R-1"}), forbidden_handler)
        .unwrap();
    assert_eq!(again.status, EffectStatus::Quarantined);
    assert_eq!(provider.commits().len(), 1);
}

#[test]
fn a_deleted_ledger_file_fails_the_call_before_any_dispatch() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let provider = FileProvider::new(&dir.path().join("provider.log"));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    let executor = EffectExecutor::new(Arc::new(ledger));
    let send = |provider: &FileProvider, id: &str| {
        let (p, id) = (provider.clone(), id.to_owned());
        move |_: Value, _: HandlerContext| -> Result<Value, HandlerError> {
            Ok(p.capture(&format!("report:{id}")))
        }
    };
    let first = executor
        .execute(
            &bare_contract(),
            &json!({"id": "R-1"}),
            send(&provider, "R-1"),
        )
        .unwrap();
    assert!(first.is_confirmed());
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.path().join(format!("effects.sqlite3{suffix}")));
    }
    let err = executor
        .execute(
            &bare_contract(),
            &json!({"id": "R-2"}),
            send(&provider, "R-2"),
        )
        .expect_err("a call on a deleted ledger must fail");
    let chain = production_agent_systems::effect_core::error_chain(&err);
    assert!(chain.contains("was deleted while open"), "{chain}");
    assert_eq!(
        provider.commits(),
        ["report:R-1"],
        "R-2 was never dispatched"
    );
}

#[test]
fn a_lease_the_ledger_cannot_keep_alive_is_refused_before_anything_is_written() {
    use production_agent_systems::{ExecError, ExecutorOptions};
    use std::time::Duration;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    // A renewal may wait the whole 5 s busy timeout: a 2 s lease could run
    // out under a live handler while another process writes.
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let options = ExecutorOptions::default().dispatch_lease(Duration::from_secs(2));
    let executor = EffectExecutor::with_options(Arc::clone(&ledger), options.clone());
    let err = executor
        .execute(&bare_contract(), &json!({"id": "R-9"}), forbidden_handler)
        .expect_err("a lease shorter than twice the busy timeout is refused");
    assert!(
        matches!(err, ExecError::LeaseTooShort { lock_wait, .. } if lock_wait == Duration::from_secs(5)),
        "{err}"
    );
    assert!(
        ledger.get("report:R-9").unwrap().is_none(),
        "nothing was written"
    );
    // With a busy timeout to match, the same lease is accepted.
    let ledger = SqliteLedger::open(
        &db,
        SqliteOptions::default().busy_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let result = executor
        .execute(&bare_contract(), &json!({"id": "R-9"}), |_, _| {
            Ok::<_, HandlerError>(json!({"sent": true}))
        })
        .unwrap();
    assert!(result.is_confirmed());
}
