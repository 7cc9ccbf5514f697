//! Ledgers written by the Python package (docs/spec.md §8), read through the CLI.

use agent_effect_ops::Exit;
use agent_effect_ops::view::{EventView, OperationDetail, OperationSummary, Stats};
use effect_test_support::snapshots::settings;
use insta::{assert_json_snapshot, assert_snapshot};
use serde_json::Value;

use crate::support::{fixture, fixtures_dir, ops, python_ledger, snapshot_dir};

#[test]
fn list_reads_every_status_the_python_package_wrote() {
    let (_dir, db) = python_ledger();
    let list: Vec<OperationSummary> = ops(&db, &["list"]).json();
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("python-ledger-v1.expected.json")).unwrap(),
    )
    .unwrap();
    let expected = expected.as_object().unwrap();
    assert_eq!(list.len(), expected.len());
    for op in &list {
        let want = &expected[&op.operation_id];
        assert_eq!(op.status.as_str(), want["status"], "{}", op.operation_id);
        assert_eq!(op.attempts, want["attempts"], "{}", op.operation_id);
        assert_eq!(
            op.error.as_deref(),
            want["error"].as_str(),
            "{}",
            op.operation_id
        );
        assert_eq!(op.contract_version, want["contract_version"]);
    }
    settings().bind(|| assert_json_snapshot!("python_list", list));
}

#[test]
fn list_filters_by_status_and_limits() {
    let (_dir, db) = python_ledger();
    let confirmed: Vec<OperationSummary> =
        ops(&db, &["list", "--status", "confirmed", "--limit", "2"]).json();
    let ids: Vec<&str> = confirmed
        .iter()
        .map(|op| op.operation_id.as_str())
        .collect();
    // Newest update first.
    assert_eq!(ids, ["vm:zürich-1:create", "ticket:T-8:create"]);
    let quarantined = ops(
        &db,
        &["list", "--status", "quarantined", "--format", "table"],
    );
    assert_eq!(quarantined.exit, Exit::Success);
    settings().bind(|| assert_snapshot!("python_list_quarantined_table", quarantined.stdout));
}

#[test]
fn list_never_prints_outputs_arguments_or_evidence() {
    let (_dir, db) = python_ledger();
    for format in ["json", "table"] {
        let listed = ops(&db, &["list", "--format", format]);
        assert_eq!(listed.exit, Exit::Success);
        // Values that only live in outputs and evidence of the fixture.
        for secret in [
            "captured",
            "vm-1",
            "found in tracker",
            "fake_provider_ledger",
            "evidence",
            "output",
        ] {
            assert!(
                !listed.stdout.contains(secret),
                "{format} list shows {secret:?}"
            );
        }
    }
}

#[test]
fn the_full_table_list_is_readable() {
    let (_dir, db) = python_ledger();
    let listed = ops(&db, &["list", "--format", "table"]);
    settings().bind(|| assert_snapshot!("python_list_table", listed.stdout));
}

#[test]
fn show_prints_evidence_and_history_and_the_output_only_on_request() {
    let (_dir, db) = python_ledger();
    let id = "invoice:INV-1:capture";
    let plain = ops(&db, &["show", id]);
    let detail: OperationDetail = plain.json();
    assert!(detail.has_output);
    assert_eq!(detail.output, None);
    assert!(!plain.stdout.contains("\"output\""));
    assert!(
        !plain
            .stdout
            .contains("pay-000001\",\n    \"status\": \"captured")
    );
    assert_eq!(detail.evidence["probe_status"], "committed");
    let types: Vec<&str> = detail
        .events
        .iter()
        .map(|e| e.event_type.as_str())
        .collect();
    assert_eq!(
        types,
        ["prepared", "dispatched", "outcome_unknown", "confirmed"]
    );
    settings().bind(|| assert_snapshot!("python_show", plain.stdout));

    let with_output: OperationDetail = ops(&db, &["show", id, "--include-output"]).json();
    assert_eq!(
        with_output.output,
        Some(Some(serde_json::json!({
            "invoice_id": "INV-1", "payment_id": "pay-000001", "status": "captured"
        })))
    );
    let none_stored: OperationDetail =
        ops(&db, &["show", "ticket:T-7:create", "--include-output"]).json();
    assert_eq!(none_stored.output, Some(None));
}

#[test]
fn show_as_a_table_keeps_non_ascii_text() {
    let (_dir, db) = python_ledger();
    let shown = ops(
        &db,
        &[
            "show",
            "vm:zürich-1:create",
            "--include-output",
            "--format",
            "table",
        ],
    );
    assert_eq!(shown.exit, Exit::Success);
    settings().bind(|| assert_snapshot!("python_show_table", shown.stdout));
}

#[test]
fn events_lists_the_audited_manual_confirmation() {
    let (_dir, db) = python_ledger();
    let events: Vec<EventView> = ops(&db, &["events", "ticket:T-8:create"]).json();
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "manually_confirmed");
    assert_eq!(last.data["evidence"]["actor"], "on-call");
    assert_eq!(last.data["evidence"]["evidence_reference"], "INC-8");
    let sequences: Vec<u64> = events.iter().map(|e| e.sequence).collect();
    assert_eq!(sequences, [16, 17, 18, 19, 20]);
    settings().bind(|| assert_json_snapshot!("python_events", events));
    let table = ops(&db, &["events", "ticket:T-8:create", "--format", "table"]);
    settings().bind(|| assert_snapshot!("python_events_table", table.stdout));
}

#[test]
fn stats_counts_statuses_and_ages_the_oldest_unresolved() {
    let (_dir, db) = python_ledger();
    let stats: Stats = ops(&db, &["stats"]).json();
    assert_eq!(stats.total, 7);
    assert_eq!(stats.unresolved, 2);
    assert_eq!(
        stats.oldest_unresolved_updated_at.as_deref(),
        Some("2026-11-30T02:24:01.872832+00:00")
    );
    // The injected clock stands one hour later.
    assert_eq!(stats.oldest_unresolved_age_seconds, Some(3600));
    settings().bind(|| assert_json_snapshot!("python_stats", stats));
    let table = ops(&db, &["stats", "--format", "table"]);
    settings().bind(|| assert_snapshot!("python_stats_table", table.stdout));
}

#[test]
fn reading_commands_leave_the_file_untouched() {
    let (dir, db) = python_ledger();
    let before = snapshot_dir(dir.path());
    for args in [
        &["list"][..],
        &["list", "--status", "quarantined"],
        &["show", "ticket:T-7:create", "--include-output"],
        &["events", "ticket:T-7:create"],
        &["stats"],
        &["export"],
    ] {
        assert_eq!(ops(&db, args).exit, Exit::Success, "{args:?}");
    }
    // Same files, same bytes: no migration, no WAL file, no journal.
    assert_eq!(snapshot_dir(dir.path()), before);
}

#[test]
fn a_legacy_ledger_needs_migrate_and_then_reads() {
    let (dir, db) = fixture("python-ledger-legacy.sqlite3");
    let before = snapshot_dir(dir.path());
    let refused = ops(&db, &["list"]);
    assert_eq!(refused.exit, Exit::Usage);
    assert!(refused.error.unwrap().contains("re-run with --migrate"));
    assert_eq!(
        snapshot_dir(dir.path()),
        before,
        "refusing wrote to the file"
    );

    let list: Vec<OperationSummary> = ops(&db, &["--migrate", "list"]).json();
    let detail: OperationDetail = ops(&db, &["show", "legacy-operation"]).json();
    let events: Vec<EventView> = ops(&db, &["events", "legacy-operation"]).json();
    let stats: Stats = ops(&db, &["stats"]).json();
    assert_eq!(list[0].contract_version, "1");
    // Written before the events table existed: an operation with no history.
    assert!(events.is_empty());
    assert_eq!(stats.counts.quarantined, 1);
    settings().bind(|| {
        assert_json_snapshot!("legacy_list", list);
        assert_json_snapshot!("legacy_show", detail);
        assert_json_snapshot!("legacy_stats", stats);
    });
}

#[test]
fn reports_decode_into_strict_schemas() {
    let (_dir, db) = python_ledger();
    let shown = ops(&db, &["show", "invoice:INV-1:capture", "--include-output"]);
    let mut value: Value = serde_json::from_str(&shown.stdout).unwrap();
    // Every field is known to the schema ...
    let detail: OperationDetail = serde_json::from_value(value.clone()).unwrap();
    assert_eq!(serde_json::to_value(&detail).unwrap(), value);
    // ... and an unknown one is refused, so the schema test can fail.
    value["surprise"] = Value::Bool(true);
    assert!(serde_json::from_value::<OperationDetail>(value).is_err());
    let stats = ops(&db, &["stats"]);
    let mut value: Value = serde_json::from_str(&stats.stdout).unwrap();
    value["counts"]["lost"] = 0.into();
    assert!(serde_json::from_value::<Stats>(value).is_err());
}
