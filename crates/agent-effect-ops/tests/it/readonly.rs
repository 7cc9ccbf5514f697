//! Read commands on a ledger this user can read but not write: a directory
//! owned by someone else, or -wal/-shm files another user's agent holds.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use effect_core::{EffectLedgerExt as _, NewOperation, RequestFingerprint};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};

/// Runs the binary as a user who cannot write `dir`: as root, the `nobody`
/// user (root ignores permission bits); otherwise this user, with `dir` and
/// `readable` (files in it) made read-only for the run.
fn list_as_reader(dir: &Path, db: &Path, readable: &[&Path]) -> Output {
    let bin = env!("CARGO_BIN_EXE_agent-effect-ops");
    let db = db.to_str().unwrap();
    let as_root = is_root();
    std::fs::set_permissions(
        dir,
        std::fs::Permissions::from_mode(if as_root { 0o755 } else { 0o555 }),
    )
    .unwrap();
    for file in readable {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o444)).unwrap();
    }
    let output = if as_root {
        // setpriv is util-linux, on every Debian system.
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", bin])
            .args(["--db", db, "list"])
            .output()
            .expect("running the CLI as nobody needs setpriv (util-linux)")
    } else {
        Command::new(bin)
            .args(["--db", db, "list"])
            .output()
            .unwrap()
    };
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    output
}

fn is_root() -> bool {
    // The owner of a file this process just created is its effective user.
    let probe = tempfile::NamedTempFile::new().unwrap();
    std::os::unix::fs::MetadataExt::uid(&probe.as_file().metadata().unwrap()) == 0
}

fn ids(output: &Output) -> Vec<String> {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    let list: Vec<serde_json::Value> = serde_json::from_slice(&output.stdout).unwrap();
    let mut ids: Vec<String> = list
        .iter()
        .map(|op| op["operation_id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    ids
}

fn prepare(ledger: &SqliteLedger, ids: impl IntoIterator<Item = usize>) {
    for i in ids {
        let op = NewOperation::new(
            "capture",
            "1",
            RequestFingerprint::of_value(&serde_json::json!({ "n": i })),
        );
        ledger.prepare(&format!("op:{i}"), &op).unwrap();
    }
}

#[test]
fn a_ledger_in_a_directory_this_user_cannot_write_is_listed_as_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    {
        let ledger = SqliteLedger::open(&db, SqliteOptions::default()).unwrap();
        prepare(&ledger, 0..3);
    } // Closed: the WAL is checkpointed and removed.
    let before = std::fs::read(&db).unwrap();

    let output = list_as_reader(dir.path(), &db, &[&db]);

    assert_eq!(ids(&output), ["op:0", "op:1", "op:2"]);
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr:?}");
    assert!(
        stderr.starts_with("warning: ") && stderr.contains("snapshot"),
        "{stderr:?}"
    );
    // Nothing was written: no -wal or -shm beside it, the file unchanged.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["effects.sqlite3"]);
    assert_eq!(std::fs::read(&db).unwrap(), before);
}

#[test]
fn a_ledger_another_user_is_writing_shows_its_latest_commits() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    // An agent holds the ledger open: its last commits are only in the WAL.
    let ledger = Arc::new(SqliteLedger::open(&db, SqliteOptions::default()).unwrap());
    prepare(&ledger, 0..2);
    let wal = dir.path().join("effects.sqlite3-wal");
    let shm = dir.path().join("effects.sqlite3-shm");
    assert!(std::fs::metadata(&wal).unwrap().len() > 0);

    let output = list_as_reader(dir.path(), &db, &[&db, &wal, &shm]);

    assert_eq!(ids(&output), ["op:0", "op:1"]);
    assert!(output.stderr.is_empty(), "{output:?}");
    // The agent goes on writing.
    for file in [&db, &wal, &shm] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    prepare(&ledger, [9]);
}
