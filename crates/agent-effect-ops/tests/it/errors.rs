//! The real binary: exit codes, one-line errors on stderr, and nothing written
//! when a command is refused.

use agent_effect_ops::Exit;
use effect_test_support::snapshots::settings;
use insta::assert_snapshot;

use crate::support::{bin, bin_on, failure, ops, python_ledger, snapshot_dir, success};

const AUDIT: [&str; 6] = [
    "--actor",
    "alice",
    "--reason",
    "checked the provider",
    "--evidence-reference",
    "INC-1",
];

fn code(exit: Exit) -> i32 {
    i32::from(exit.code())
}

/// Runs a command that must be refused, and returns its exit code and error
/// line, after checking that it changed no file.
fn refused(args: &[&str]) -> (i32, String) {
    let (dir, db) = python_ledger();
    let before = snapshot_dir(dir.path());
    let output = bin_on(&db, args);
    let refusal = failure(&output);
    assert_eq!(
        snapshot_dir(dir.path()),
        before,
        "{args:?} wrote to the ledger"
    );
    refusal
}

#[test]
fn a_missing_ledger_file_is_refused_and_not_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("missing.sqlite3");
    for args in [
        &["list"][..],
        &[
            "reject",
            "x",
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
    ] {
        let (exit, stderr) = failure(&bin_on(&db, args));
        assert_eq!(exit, code(Exit::Usage));
        settings().bind(|| assert_snapshot!("missing_ledger", stderr));
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "a file was created"
    );
}

#[test]
fn an_unknown_operation_exits_3() {
    let missing = "invoice:NOPE:capture";
    let resolve = |command: &'static str, extra: &[&'static str]| -> Vec<&'static str> {
        let mut args = vec![command, missing];
        args.extend(extra);
        args.extend(AUDIT);
        args
    };
    for args in [
        vec!["show", missing],
        vec!["events", missing],
        resolve("confirm", &["--output-json", "{}"]),
        resolve("reject", &[]),
        resolve("authorize-retry", &[]),
    ] {
        let (exit, stderr) = refused(&args);
        assert_eq!(exit, code(Exit::NotFound), "{args:?}");
        assert_eq!(
            stderr,
            "error: operation \"invoice:NOPE:capture\" not found"
        );
    }
}

#[test]
fn a_transition_from_a_settled_status_exits_4() {
    let confirmed = "invoice:INV-1:capture";
    let mut lines = Vec::new();
    for command in ["confirm", "reject", "authorize-retry"] {
        let mut args = vec![command, confirmed];
        if command == "confirm" {
            args.extend(["--output-json", r#"{"payment_id":"pay-2"}"#]);
        }
        args.extend(AUDIT);
        let (exit, stderr) = refused(&args);
        assert_eq!(exit, code(Exit::NotAllowed), "{args:?}");
        lines.push(stderr);
    }
    // `prepared` is not uncertain either: an operator cannot skip the dispatch.
    let mut args = vec!["reject", "ticket:T-9:create"];
    args.extend(AUDIT);
    let (exit, stderr) = refused(&args);
    assert_eq!(exit, code(Exit::NotAllowed));
    lines.push(stderr);
    settings().bind(|| assert_snapshot!("transition_not_allowed", lines.join("\n")));
}

#[test]
fn invalid_input_exits_2_before_the_ledger_is_touched() {
    let quarantined = "ticket:T-7:create";
    // Nested deeper than the ledger stores (effect_core::canonical::MAX_DEPTH).
    let deep = format!("{}{}", "[".repeat(65), "]".repeat(65));
    let cases: Vec<Vec<&str>> = vec![
        vec![
            "confirm",
            quarantined,
            "--output-json",
            "{not json",
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
        vec![
            "confirm",
            quarantined,
            "--output-json",
            "{}",
            "--actor",
            " ",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
        vec![
            "reject",
            quarantined,
            "--actor",
            "a",
            "--reason",
            "",
            "--evidence-reference",
            "e",
        ],
        vec![
            "authorize-retry",
            quarantined,
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "\t",
        ],
        vec![
            "confirm",
            quarantined,
            "--output-json",
            "{}",
            "--provider-operation-id",
            "",
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
        vec!["show", " "],
        vec![
            "confirm",
            quarantined,
            "--output-json",
            &deep,
            "--actor",
            "a",
            "--reason",
            "r",
            "--evidence-reference",
            "e",
        ],
    ];
    let mut lines = Vec::new();
    for args in &cases {
        let (exit, stderr) = refused(args);
        assert_eq!(exit, code(Exit::Usage), "{args:?}");
        lines.push(stderr);
    }
    settings().bind(|| assert_snapshot!("invalid_input", lines.join("\n")));
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let (_dir, db) = python_ledger();
    let db = db.to_str().unwrap();
    for args in [
        &["list"][..],
        &["--db", db],
        &["--db", db, "list", "--status", "lost"],
        &["--db", db, "list", "--limit", "0"],
        &["--db", db, "list", "--limit", "1001"],
        &["--db", db, "reject", "ticket:T-7:create", "--actor", "a"],
        &["--db", db, "export", "--since", "-1"],
    ] {
        let output = bin(args);
        assert_eq!(output.status.code(), Some(code(Exit::Usage)), "{args:?}");
        assert!(output.stdout.is_empty());
        assert!(String::from_utf8_lossy(&output.stderr).starts_with("error: "));
    }
    let help = success(&bin(&["--help"]));
    settings().bind(|| assert_snapshot!("help", help));
    let short = success(&bin(&["-h"]));
    assert!(short.contains("Exit codes: 0 ok, 1 ledger failure, 2 usage or invalid input, 3 not found, 4 transition not allowed"));
}

#[test]
fn a_file_that_is_not_a_ledger_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.txt");
    std::fs::write(
        &db,
        "this is not a database, it is a text file of some length ...",
    )
    .unwrap();
    let (exit, stderr) = failure(&bin_on(&db, &["list"]));
    assert_eq!(exit, code(Exit::Usage));
    // In the CLI's words, once: no library option, no repeated SQLite text.
    assert_eq!(
        stderr,
        format!("error: {db:?} is not a ledger: not a SQLite database")
    );
}

#[test]
fn a_broken_pipe_is_not_a_failure() {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let (_dir, db) = python_ledger();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent-effect-ops"))
        .args(["--db", db.to_str().unwrap(), "export"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Close the read end at once, like `| head -0`.
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(status.success(), "exit {status:?}: {stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

#[test]
fn a_ledger_locked_past_the_busy_timeout_exits_1_in_the_cli_words() {
    let (_dir, db) = python_ledger();
    assert_eq!(ops(&db, &["--migrate", "stats"]).exit, Exit::Success);
    // Another process holds the write lock for longer than the busy timeout.
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut args = vec!["reject", "ticket:T-7:create"];
    args.extend(AUDIT);
    let (exit, stderr) = failure(&bin_on(&db, &args));
    holder.execute_batch("ROLLBACK").unwrap();
    assert_eq!(exit, code(Exit::Failure), "{stderr}");
    assert!(stderr.contains("locked"), "{stderr}");
    assert!(stderr.contains("retry"), "{stderr}");
    assert!(!stderr.contains("SqliteOptions"), "{stderr}");
    // Nothing was written: the operation is still quarantined.
    let show: serde_json::Value = ops(&db, &["show", "ticket:T-7:create"]).json();
    assert_eq!(show["status"], "quarantined", "{show}");
}

/// Global flags work before or after the command, and a usage error names
/// the fix in one line.
#[test]
fn global_flags_work_in_any_position_and_usage_errors_name_the_fix() {
    let (_dir, db) = crate::support::python_ledger();
    let db = db.to_str().unwrap();
    let before = success(&bin(&["--db", db, "list", "--limit", "2"]));
    for args in [
        &["list", "--db", db, "--limit", "2"][..],
        &["list", "--limit", "2", "--db", db],
        &["--format", "json", "list", "--db", db, "--limit", "2"],
    ] {
        assert_eq!(success(&bin(args)), before, "{args:?}");
    }
    for (args, says) in [
        (
            &["list", "--db", db, "--limit", "-1"][..],
            "--limit <N>': must be between 1 and 1000",
        ),
        (
            &["list", "--db", db, "--limit", "1001"],
            "must be between 1 and 1000",
        ),
        (
            &["list"],
            "--db is required: pass the path of a ledger file or a postgres:// URL",
        ),
    ] {
        let output = bin(args);
        let stderr = String::from_utf8(output.stderr.clone()).unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
