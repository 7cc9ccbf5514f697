//! `--matrix`: the table and the JSON report.

use effect_test_support::snapshots;
use serde_json::Value;

use crate::{agent_effect, stderr, stdout};

#[test]
fn matrix_table_shows_every_cell_and_the_naive_baseline() {
    // --ledger is the earlier spelling of --db, still accepted.
    let output = agent_effect(&["--matrix", "--ledger", "memory:"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let table = stdout(&output);
    assert!(table.contains("with the ledger: 1 capture; naive retry: 2 captures"));
    snapshots::settings().bind(|| insta::assert_snapshot!("matrix_table", table));
}

#[test]
fn matrix_json_on_sqlite_keeps_the_guarantee() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out/matrix.json");
    let output = agent_effect(&[
        "--matrix",
        "--format",
        "json",
        "--output",
        file.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(report["guarantee_kept"], true);
    assert_eq!(report["cells"].as_array().unwrap().len(), 40);
    for cell in report["cells"].as_array().unwrap() {
        if cell["guarantee"]["claimed"] == true {
            assert!(
                cell["committed_effect_count"].as_u64().unwrap() <= 1,
                "{cell}"
            );
        }
    }
    let after_ack = report["baselines"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["fault"] == "after-commit-before-ack")
        .unwrap();
    assert_eq!(after_ack["naive"]["committed_effect_count"], 2);
    assert_eq!(stdout(&output), std::fs::read_to_string(&file).unwrap());
}
