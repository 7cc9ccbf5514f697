//! Operations the Python package recorded with numbers it writes differently
//! from serde_json (`1e-05`, `1e+16`, `-0.0`, 17-digit doubles) re-execute
//! here without a conflict and replay the stored output bit for bit. The
//! ledger and its expected values were written by the package itself
//! (`fixtures/python/generate_float_ledger.py`).

use std::path::Path;
use std::sync::Arc;

use production_agent_systems::effect_core::canonical::python_json;
use production_agent_systems::{EffectExecutor, EffectLedger, SqliteLedger, SqliteOptions};
use serde_json::Value;

use crate::provider::{FileProvider, capture_contract, forbidden_handler};

#[test]
fn python_recorded_floats_replay_without_conflict() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/python");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("python-ledger-floats.sqlite3");
    std::fs::copy(fixtures.join("python-ledger-floats.sqlite3"), &db).unwrap();
    let expected: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(fixtures.join("python-ledger-floats.expected.json")).unwrap(),
    )
    .unwrap();
    assert!(expected.len() >= 20);
    let ledger = Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    let executor = EffectExecutor::new(Arc::clone(&ledger) as Arc<dyn EffectLedger>);
    let contract = capture_contract(&FileProvider::new(&dir.path().join("provider.log")));
    for entry in &expected {
        let args: Value = serde_json::from_str(entry["arguments"].as_str().unwrap()).unwrap();
        let result = executor
            .execute(&contract, &args, forbidden_handler)
            .unwrap_or_else(|err| panic!("{}: {err:#}", entry["operation_id"]));
        assert!(result.duplicate_suppressed, "{}", entry["operation_id"]);
        // The output Python stored, bit for bit: its own text again.
        assert_eq!(
            python_json(result.output.as_ref().unwrap()),
            entry["output"].as_str().unwrap(),
        );
        let record = ledger.get(&result.operation_id).unwrap().unwrap();
        assert_eq!(record.request_fingerprint, entry["request_fingerprint"]);
    }
}
