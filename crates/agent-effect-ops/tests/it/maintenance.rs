//! `prune` and `backup` through the real binary (and `prune --policy` in
//! process, on the tests' clock).

use std::sync::Arc;

use agent_effect_ops::Exit;
use clap::Parser as _;
use effect_core::ArchivedOperation;
use serde_json::Value;

use crate::support::{bin_on, failure, python_ledger, snapshot_dir, success};

const BEFORE: &str = "2026-12-01T00:00:00+00:00";

fn json(output: &std::process::Output) -> Value {
    serde_json::from_str(&success(output)).unwrap()
}

fn statuses(db: &std::path::Path) -> Vec<String> {
    let list = json(&bin_on(db, &["list", "--limit", "1000"]));
    let mut statuses: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["status"].as_str().unwrap().to_owned())
        .collect();
    statuses.sort();
    statuses
}

#[test]
fn prune_archives_then_deletes_terminal_operations_and_a_dry_run_changes_nothing() {
    let (dir, db) = python_ledger();
    let before_files = snapshot_dir(dir.path());
    let before = statuses(&db);
    let terminal = before
        .iter()
        .filter(|s| matches!(s.as_str(), "confirmed" | "rejected"))
        .count();
    assert!(terminal > 0 && terminal < before.len());

    let dry = json(&bin_on(
        &db,
        &[
            "prune",
            "--ignore-min-retention",
            "--before",
            BEFORE,
            "--dry-run",
        ],
    ));
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["operations"], terminal);
    assert_eq!(dry["archive"], Value::Null);
    assert_eq!(
        snapshot_dir(dir.path()),
        before_files,
        "a dry run writes nothing"
    );

    // Unresolved and active operations are never pruned: asking is a usage
    // error in one line, and nothing is written.
    for status in ["quarantined", "outcome_unknown", "prepared", "dispatched"] {
        let unresolved = bin_on(
            &db,
            &[
                "prune",
                "--ignore-min-retention",
                "--before",
                BEFORE,
                "--status",
                status,
            ],
        );
        let (code, stderr) = failure(&unresolved);
        assert_eq!(code, i32::from(Exit::Usage.code()), "{status}: {stderr}");
        assert!(stderr.contains(status), "{status}: {stderr}");
        assert_eq!(snapshot_dir(dir.path()), before_files, "{status}: written");
    }

    let archive = dir.path().join("archive.jsonl");
    let archive_arg = archive.to_str().unwrap();
    let prune = [
        "prune",
        "--ignore-min-retention",
        "--before",
        BEFORE,
        "--archive",
        archive_arg,
    ];
    // Pruning writes, and the Python package's file is an older schema:
    // without --migrate it is refused, and neither migrated nor archived.
    let (code, stderr) = failure(&bin_on(&db, &prune));
    assert_eq!(code, i32::from(Exit::Usage.code()), "{stderr}");
    assert!(stderr.contains("re-run with --migrate"), "{stderr}");
    assert_eq!(
        snapshot_dir(dir.path()),
        before_files,
        "a refused prune writes nothing"
    );
    let migrate_and_prune: Vec<&str> = ["--migrate"].into_iter().chain(prune).collect();
    let pruned = json(&bin_on(&db, &migrate_and_prune));
    assert_eq!(pruned["operations"], terminal);
    assert_eq!(pruned["archive"], archive_arg);
    let lines: Vec<ArchivedOperation> = std::fs::read_to_string(&archive)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(lines.len(), terminal);
    assert!(lines.iter().all(|a| !a.events.is_empty()));
    let after = statuses(&db);
    assert_eq!(after.len(), before.len() - terminal);
    assert!(after.iter().all(|s| s != "confirmed" && s != "rejected"));

    // An existing archive is never overwritten.
    let again = bin_on(&db, &prune);
    assert_eq!(failure(&again).0, i32::from(Exit::Failure.code()));
    let bad = bin_on(
        &db,
        &[
            "prune",
            "--ignore-min-retention",
            "--before",
            "2026-02-31T00:00:00+00:00",
        ],
    );
    assert_eq!(failure(&bad).0, i32::from(Exit::Usage.code()));
}

#[test]
fn backup_copies_the_ledger_and_never_overwrites() {
    let (dir, db) = python_ledger();
    let copy = dir.path().join("copy.sqlite3");
    let copy_arg = copy.to_str().unwrap();
    let report = json(&bin_on(&db, &["backup", copy_arg]));
    assert_eq!(report["destination"], copy_arg);
    assert_eq!(
        success(&bin_on(&copy, &["list", "--limit", "1000"])),
        success(&bin_on(&db, &["list", "--limit", "1000"]))
    );
    let again = failure(&bin_on(&db, &["backup", copy_arg]));
    assert_eq!(again.0, i32::from(Exit::Usage.code()), "{}", again.1);
}

/// A cutoff in the future, or younger than the minimum retention, is refused
/// with one line naming the fix, and nothing is written; `--older-than`
/// takes an age.
#[test]
fn prune_refuses_a_future_or_recent_cutoff_and_writes_nothing() {
    let (dir, db) = python_ledger();
    let before_files = snapshot_dir(dir.path());
    for (args, says) in [
        (
            &[
                "prune",
                "--before",
                "2099-01-01T00:00:00+00:00",
                "--dry-run",
            ][..],
            "is in the future",
        ),
        (
            &["prune", "--before", "2099-01-01T00:00:00+00:00"][..],
            "is in the future",
        ),
        (
            &["prune", "--older-than", "1h"][..],
            "younger than the minimum retention of 24h",
        ),
        (
            &["prune", "--older-than", "3d", "--min-retention", "7d"][..],
            "younger than the minimum retention of 168h",
        ),
    ] {
        let (exit, stderr) = failure(&bin_on(&db, args));
        assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(stderr.contains("--"), "names a fix: {stderr}");
    }
    let (exit, stderr) = failure(&bin_on(&db, &["prune", "--older-than", "soon"]));
    assert_eq!(exit, i32::from(Exit::Usage.code()), "{stderr}");
    assert!(stderr.contains("such as 30d"), "{stderr}");
    assert_eq!(
        snapshot_dir(dir.path()),
        before_files,
        "a refused prune wrote"
    );
    // An age far enough back is accepted (nothing is that old here).
    let dry = json(&bin_on(
        &db,
        &["prune", "--older-than", "3650d", "--dry-run"],
    ));
    assert_eq!(dry["operations"], 0);
    assert_eq!(snapshot_dir(dir.path()), before_files, "a dry run wrote");
}

/// `--batch-size` splits the prune into that many operations per write
/// transaction; `--resume` goes on with an existing archive (and needs one
/// named), appending nothing when nothing is left.
#[test]
fn prune_in_batches_and_resume_into_the_same_archive() {
    let (dir, db) = python_ledger();
    let terminal = statuses(&db)
        .iter()
        .filter(|s| matches!(s.as_str(), "confirmed" | "rejected"))
        .count();
    let archive = dir.path().join("archive.jsonl");
    let archive_arg = archive.to_str().unwrap();
    let args = |extra: &[&'static str]| -> Vec<&str> {
        let mut args = vec![
            "--migrate",
            "prune",
            "--ignore-min-retention",
            "--before",
            BEFORE,
            "--archive",
            archive_arg,
        ];
        args.extend_from_slice(extra);
        args
    };
    let (code, stderr) = failure(&bin_on(&db, &["prune", "--older-than", "30d", "--resume"]));
    assert_eq!(code, i32::from(Exit::Usage.code()), "{stderr}");
    assert!(stderr.contains("--archive"), "{stderr}");

    let pruned = json(&bin_on(&db, &args(&["--batch-size", "1"])));
    assert_eq!(pruned["operations"], terminal);
    assert_eq!(pruned["batches"], terminal, "one operation per batch");
    assert_eq!(pruned["complete"], true);
    let written = std::fs::read(&archive).unwrap();
    assert_eq!(written.iter().filter(|b| **b == b'\n').count(), terminal);

    let resumed = json(&bin_on(&db, &args(&["--resume"])));
    assert_eq!(resumed["operations"], 0);
    assert_eq!(resumed["resumed"], 0);
    assert_eq!(resumed["archive"], archive_arg);
    assert_eq!(
        std::fs::read(&archive).unwrap(),
        written,
        "nothing appended"
    );
}

/// A ledger whose operations were settled 100, 40 and 10 days before the
/// in-process clock: a confirmed and a rejected one each time, and an
/// unresolved (quarantined) one 100 days ago.
fn aged_ledger() -> (tempfile::TempDir, std::path::PathBuf) {
    use effect_core::{EffectLedgerExt, ManualClock, NewOperation, RequestFingerprint};
    use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
    use std::time::{Duration, UNIX_EPOCH};

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    let now = UNIX_EPOCH + Duration::from_micros(crate::support::NOW_MICROS);
    let clock = Arc::new(ManualClock::new(now - Duration::from_secs(100 * 86_400)));
    let ledger = SqliteLedger::open(&db, SqliteOptions::default().clock(clock.clone())).unwrap();
    let op = |id: &str| {
        NewOperation::new(
            "capture_payment",
            "1",
            RequestFingerprint::of_value(&serde_json::json!({ "id": id })),
        )
    };
    let claim = effect_core::Claim::new("w", Duration::from_secs(60));
    let confirmation = effect_core::Confirmation {
        output: serde_json::json!({"ok": true}),
        provider_operation_id: None,
        evidence: effect_core::Evidence::new(),
    };
    for (age, advance) in [(100, 60), (40, 30), (10, 0)] {
        let confirmed = format!("confirmed {age}d");
        ledger.prepare(&confirmed, &op(&confirmed)).unwrap();
        ledger
            .mark_confirmed(&confirmed, None, &confirmation)
            .unwrap();
        let rejected = format!("rejected {age}d");
        ledger.prepare(&rejected, &op(&rejected)).unwrap();
        ledger.claim_dispatch(&rejected, &claim).unwrap();
        ledger.mark_rejected(&rejected, "w", "declined").unwrap();
        if age == 100 {
            ledger.prepare("quarantined 100d", &op("q")).unwrap();
            ledger.claim_dispatch("quarantined 100d", &claim).unwrap();
            let none = effect_core::Evidence::new();
            ledger
                .mark_outcome_unknown("quarantined 100d", Some("w"), "timeout", &none)
                .unwrap();
            ledger
                .quarantine("quarantined 100d", "no probe", &none)
                .unwrap();
        }
        clock.advance(Duration::from_secs(advance * 86_400));
    }
    drop(ledger);
    (dir, db)
}

fn ids(db: &std::path::Path) -> Vec<String> {
    let list: Value = crate::support::ops(db, &["list", "--limit", "1000"]).json();
    let mut ids: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|op| op["operation_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

/// `--policy` prunes each terminal status past its own age, archives each
/// operation once, reports per rule, and never touches unresolved work;
/// a rule shorter than --min-retention is refused before anything is opened.
#[test]
fn prune_by_policy_keeps_each_status_its_own_age() {
    use crate::support::ops;
    let (dir, db) = aged_ledger();
    let archive = dir.path().join("policy.jsonl");
    let archive_arg = archive.to_str().unwrap();

    let short = ops(&db, &["prune", "--policy", "confirmed=30d,rejected=12h"]);
    assert_eq!(short.exit, Exit::Usage, "{:?}", short.error);
    assert!(
        short
            .error
            .as_deref()
            .unwrap()
            .contains("keeps rejected operations 12h"),
        "{:?}",
        short.error
    );
    for conflicting in [
        &["prune", "--policy", "confirmed=30d", "--older-than", "30d"][..],
        &[
            "prune",
            "--policy",
            "confirmed=30d",
            "--status",
            "confirmed",
        ][..],
        &["prune", "--policy", "quarantined=30d"][..],
    ] {
        let argv = ["agent-effect-ops", "--db", "x"]
            .into_iter()
            .chain(conflicting.iter().copied());
        assert!(
            agent_effect_ops::Cli::try_parse_from(argv).is_err(),
            "{conflicting:?}"
        );
    }
    assert_eq!(ids(&db).len(), 7, "refusals write nothing");

    let policy = [
        "prune",
        "--policy",
        "confirmed=30d,rejected=90d",
        "--archive",
        archive_arg,
    ];
    let dry: Value = ops(&db, &[&policy[..], &["--dry-run"]].concat()).json();
    assert_eq!(dry["operations"], 3);
    assert!(!archive.exists(), "a dry run writes no archive");
    assert_eq!(ids(&db).len(), 7);

    let pruned: Value = ops(&db, &[&policy[..], &["--batch-size", "1"]].concat()).json();
    assert_eq!(pruned["operations"], 3, "{pruned}");
    assert_eq!(pruned["batches"], 3, "{pruned}");
    assert_eq!(pruned["before"], Value::Null);
    assert_eq!(pruned["policy"], "confirmed=30d,rejected=90d");
    assert_eq!(pruned["rules"][0]["status"], "confirmed");
    assert_eq!(pruned["rules"][0]["operations"], 2);
    assert_eq!(pruned["rules"][1]["status"], "rejected");
    assert_eq!(pruned["rules"][1]["operations"], 1);
    assert_eq!(
        ids(&db),
        [
            "confirmed 10d",
            "quarantined 100d",
            "rejected 10d",
            "rejected 40d"
        ]
    );
    let archived: Vec<String> = std::fs::read_to_string(&archive)
        .unwrap()
        .lines()
        .map(|line| {
            serde_json::from_str::<ArchivedOperation>(line)
                .unwrap()
                .operation
                .operation_id
        })
        .collect();
    assert_eq!(
        archived,
        ["confirmed 100d", "confirmed 40d", "rejected 100d"]
    );

    let table = ops(
        &db,
        &[
            "--format",
            "table",
            "prune",
            "--policy",
            "confirmed=30d",
            "--dry-run",
        ],
    );
    assert_eq!(table.exit, Exit::Success, "{:?}", table.error);
    assert!(
        table.stdout.starts_with("would prune 0 operations and 0 events by the retention policy confirmed=30d\n  confirmed: 0 operations last updated before "),
        "{}",
        table.stdout
    );
}
