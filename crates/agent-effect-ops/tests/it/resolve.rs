//! Manual resolutions in-process: what they print, what they record, and that
//! they follow the executor's rules.

use agent_effect_ops::Exit;
use agent_effect_ops::view::{OperationDetail, Resolution};
use effect_core::EffectStatus;
use effect_test_support::snapshots::settings;
use insta::{assert_json_snapshot, assert_snapshot};

use crate::support::{ops, python_ledger, snapshot_dir};

const AUDIT: [&str; 6] = [
    "--actor",
    "bob",
    "--reason",
    "provider support confirms the request never arrived",
    "--evidence-reference",
    "INC-77",
];

fn with_audit<'a>(args: &[&'a str]) -> Vec<&'a str> {
    args.iter().copied().chain(AUDIT).collect()
}

#[test]
fn reject_is_terminal_and_audited() {
    let (_dir, db) = python_ledger();
    let id = "ticket:T-7:create";
    // The Python file has an older schema: writing to it migrates it, so only
    // with --migrate. Once migrated it needs no flag.
    let rejected: Resolution = ops(&db, &with_audit(&["--migrate", "reject", id])).json();
    assert_eq!(rejected.action, "reject");
    assert_eq!(rejected.operation.status, EffectStatus::Rejected);
    let event = rejected.event.as_ref().unwrap();
    assert_eq!(event.event_type, "manually_rejected");
    assert_eq!(event.data["evidence"]["actor"], "bob");
    settings().bind(|| assert_json_snapshot!("reject", rejected));
    let again = ops(&db, &with_audit(&["reject", id]));
    assert_eq!(again.exit, Exit::NotAllowed);
}

#[test]
fn authorize_retry_prepares_the_operation_for_another_dispatch() {
    let (_dir, db) = python_ledger();
    // outcome_unknown can be resolved as well as quarantined.
    let id = "email:ada@example.com:welcome";
    let authorized = ops(
        &db,
        &with_audit(&["--migrate", "authorize-retry", id, "--format", "table"]),
    );
    assert_eq!(authorized.exit, Exit::Success, "{:?}", authorized.error);
    settings().bind(|| assert_snapshot!("authorize_retry_table", authorized.stdout));
    let detail: OperationDetail = ops(&db, &["show", id]).json();
    assert_eq!(detail.summary.status, EffectStatus::Prepared);
    assert_eq!(detail.evidence["handler_may_still_be_running"], false);
    assert_eq!(detail.evidence["resolution"], "manual_retry_authorization");
    assert_eq!(
        detail.events.last().unwrap().event_type,
        "manual_retry_authorized"
    );
}

#[test]
fn resolutions_migrate_an_older_schema_only_with_migrate() {
    let (dir, db) = python_ledger();
    let before = snapshot_dir(dir.path());
    for args in [
        with_audit(&["reject", "ticket:T-7:create"]),
        with_audit(&["authorize-retry", "email:ada@example.com:welcome"]),
        with_audit(&[
            "confirm",
            "ticket:T-7:create",
            "--output-json",
            r#"{"ticket_id":"JIRA-77"}"#,
        ]),
    ] {
        let refused = ops(&db, &args);
        assert_eq!(refused.exit, Exit::Usage, "{args:?}");
        assert!(
            refused
                .error
                .as_deref()
                .unwrap_or("")
                .contains("re-run with --migrate"),
            "{:?}",
            refused.error
        );
        assert_eq!(
            snapshot_dir(dir.path()),
            before,
            "{args:?} wrote to the file"
        );
    }
}

#[test]
fn confirm_stores_the_given_output_for_replay() {
    let (_dir, db) = python_ledger();
    let id = "ticket:T-7:create";
    let mut args = vec![
        "--migrate",
        "confirm",
        id,
        "--output-json",
        r#"{"ticket_id": "JIRA-7", "labels": ["ü"]}"#,
    ];
    args.extend(AUDIT);
    let confirmed: Resolution = ops(&db, &args).json();
    assert_eq!(confirmed.operation.provider_operation_id, None);
    let detail: OperationDetail = ops(&db, &["show", id, "--include-output"]).json();
    assert_eq!(
        detail.output,
        Some(Some(
            serde_json::json!({"ticket_id": "JIRA-7", "labels": ["ü"]})
        ))
    );
    assert_eq!(detail.summary.status, EffectStatus::Confirmed);
    assert_eq!(detail.summary.error, None);
}

#[test]
fn a_resolution_about_an_older_attempt_is_refused_and_writes_nothing() {
    let (_dir, db) = python_ledger();
    let id = "ticket:T-7:create";
    let detail: OperationDetail = ops(&db, &["show", id]).json();
    let seen = detail.summary.attempts;
    // The operator looked at attempt `seen`; another dispatch happened since,
    // as far as this command knows: its decision is about an older attempt.
    let stale = (seen + 1).to_string();
    let refused = ops(
        &db,
        &with_audit(&["--migrate", "reject", id, "--expect-attempts", &stale]),
    );
    assert_eq!(refused.exit, Exit::NotAllowed, "{:?}", refused.error);
    let message = format!("{:?}", refused.error);
    assert!(message.contains("changed since you looked"), "{message}");
    let after: OperationDetail = ops(&db, &["show", id]).json();
    assert_eq!(
        after.summary.status, detail.summary.status,
        "nothing written"
    );
    assert_eq!(after.events.len(), detail.events.len(), "no event appended");
    // The attempt the operator saw: applied.
    let current = seen.to_string();
    let rejected: Resolution = ops(
        &db,
        &with_audit(&["reject", id, "--expect-attempts", &current]),
    )
    .json();
    assert_eq!(rejected.operation.status, EffectStatus::Rejected);
}
