//! `export`: every event after a sequence, as JSON Lines.

use agent_effect_ops::Exit;
use agent_effect_ops::view::EventView;
use effect_core::EffectLedgerExt as _;
use effect_test_support::snapshots::settings;
use insta::assert_snapshot;

use crate::support::{ops, python_ledger};

fn lines(stdout: &str) -> Vec<EventView> {
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn export_writes_every_event_as_one_json_line() {
    let (_dir, db) = python_ledger();
    let all = ops(&db, &["export"]);
    assert_eq!(all.exit, Exit::Success);
    let events = lines(&all.stdout);
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, (1..=28).collect::<Vec<u64>>());
}

#[test]
fn since_means_strictly_after_that_sequence() {
    let (_dir, db) = python_ledger();
    let tail = ops(&db, &["export", "--since", "25"]);
    let sequences: Vec<u64> = lines(&tail.stdout).iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [26, 27, 28]);
    settings().bind(|| assert_snapshot!("export_since_25", tail.stdout));
    let table = ops(&db, &["export", "--since", "25", "--format", "table"]);
    settings().bind(|| assert_snapshot!("export_since_25_table", table.stdout));
    // Past the end: nothing, successfully; a pipeline polls with its last sequence.
    let done = ops(&db, &["export", "--since", "28"]);
    assert_eq!((done.exit, done.stdout.as_str()), (Exit::Success, ""));
}

#[test]
fn export_pages_through_large_ledgers() {
    use effect_core::{NewOperation, RequestFingerprint};
    use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("many.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
    for i in 0..1005 {
        let op = NewOperation::new(
            "send_email",
            "1",
            RequestFingerprint::of_value(&serde_json::json!({ "n": i })),
        );
        ledger.prepare(&format!("email:{i}"), &op).unwrap();
    }
    drop(ledger);
    let events = lines(&ops(&db, &["export", "--since", "2"]).stdout);
    assert_eq!(events.len(), 1003);
    assert_eq!(events.first().unwrap().sequence, 3);
    assert_eq!(events.last().unwrap().sequence, 1005);
    assert!(
        events
            .windows(2)
            .all(|w| w[0].sequence + 1 == w[1].sequence)
    );
}

#[test]
fn since_a_timestamp_means_stamped_at_or_after_it() {
    let (_dir, db) = python_ledger();
    // Event 26 of the fixture is stamped 2026-11-30T02:24:01.916222+00:00.
    let from = ops(
        &db,
        &["export", "--since", "2026-11-30T02:24:01.916222+00:00"],
    );
    let sequences: Vec<u64> = lines(&from.stdout).iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [26, 27, 28]);
    // The same instant in another offset.
    let shifted = ops(
        &db,
        &["export", "--since", "2026-11-30T03:24:01.916222+01:00"],
    );
    assert_eq!(shifted.stdout, from.stdout);
    let everything = ops(&db, &["export", "--since", "2026-01-01T00:00:00Z"]);
    assert_eq!(lines(&everything.stdout).len(), 28);
}

#[test]
fn since_refuses_what_is_neither_a_sequence_nor_a_timestamp() {
    use agent_effect_ops::Cli;
    use clap::Parser as _;
    for bad in ["-1.5", "yesterday", "2026-11-30", "2026-11-30T02:24:01"] {
        let err = Cli::try_parse_from([
            "agent-effect-ops",
            "--db",
            "x",
            "export",
            &format!("--since={bad}"),
        ])
        .unwrap_err();
        assert_eq!(err.exit_code(), 2, "{bad}");
        assert!(err.to_string().contains("ISO-8601"), "{bad}: {err}");
    }
}
