//! The README's quick start is the example files, verbatim, and they run in a
//! fresh directory as they would in a new project: confirmed on the first run,
//! replayed from the ledger file on the second.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

use std::path::{Path, PathBuf};

use production_agent_systems::{EffectLedger, EffectStatus, SqliteLedger, SqliteOptions};

/// The example's items; `run` calls its private `main`.
mod quick_start {
    include!("../examples/quick_start.rs");

    pub(crate) fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

mod quick_start_async {
    include!("../examples/quick_start_async.rs");

    pub(crate) fn run() -> Result<(), Box<dyn std::error::Error>> {
        main()
    }
}

const README: &str = include_str!("../../../README.md");

/// The fenced block that follows `<!-- verbatim: PATH -->` in the README.
fn quoted(path: &str) -> String {
    let marker = format!("<!-- verbatim: {path} -->");
    let after = README
        .split_once(&marker)
        .unwrap_or_else(|| panic!("the README quotes {path} after {marker}"))
        .1;
    let body = after
        .split_once("```rust\n")
        .expect("a rust block follows the marker")
        .1;
    body.split_once("```\n")
        .expect("the block is closed")
        .0
        .to_owned()
}

#[test]
fn the_readme_quotes_the_examples_verbatim() {
    for (path, text) in [
        (
            "crates/production-agent-systems/examples/quick_start.rs",
            include_str!("../examples/quick_start.rs"),
        ),
        (
            "crates/production-agent-systems/examples/quick_start_async.rs",
            include_str!("../examples/quick_start_async.rs"),
        ),
    ] {
        assert_eq!(quoted(path), text, "README.md must quote {path} verbatim");
    }
}

#[test]
fn the_quick_start_runs_in_a_new_project_and_replays_on_a_second_run() {
    let dir = tempfile::tempdir().unwrap();
    // The examples open `effects.sqlite3` in the working directory.
    std::env::set_current_dir(dir.path()).unwrap();
    quick_start::run().unwrap();
    assert!(dir.path().join("effects.sqlite3").is_file());
    quick_start::run().unwrap();
    quick_start_async::run().unwrap();
    quick_start_async::run().unwrap();

    let path = dir.path().join("effects.sqlite3");
    let ledger = SqliteLedger::open(path, SqliteOptions::default()).unwrap();
    let capture = ledger.get("invoice:INV-1042:capture").unwrap().unwrap();
    assert_eq!(capture.status, EffectStatus::Confirmed);
    // One dispatch: the probe confirmed it, the second run replayed it.
    assert_eq!(capture.attempts, 1);
    let email = ledger
        .get("email:ada@example.com:welcome")
        .unwrap()
        .unwrap();
    assert_eq!(email.status, EffectStatus::Confirmed);
    assert_eq!(email.attempts, 1);
}

/// The example binary, built by `cargo test` beside the test binaries (or
/// built here when a filtered run did not build examples).
fn quick_start_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().and_then(Path::parent).unwrap();
    let binary = debug
        .join("examples")
        .join(format!("quick_start{}", std::env::consts::EXE_SUFFIX));
    if !binary.exists() {
        // In the package's directory: the other test moves this process's
        // working directory.
        let status = std::process::Command::new(env!("CARGO"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "build",
                "--quiet",
                "-p",
                "production-agent-systems",
                "--example",
                "quick_start",
            ])
            .status()
            .unwrap();
        assert!(status.success(), "building the quick start failed");
    }
    binary
}

#[test]
fn the_quick_start_says_replayed_on_its_second_run() {
    let dir = tempfile::tempdir().unwrap();
    let binary = quick_start_binary();
    let mut lines = Vec::new();
    for _ in 0..2 {
        let output = std::process::Command::new(&binary)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        lines.push(String::from_utf8(output.stdout).unwrap());
    }
    assert_eq!(
        lines,
        [
            "invoice:INV-1042:capture is confirmed\n",
            "invoice:INV-1042:capture is confirmed (replayed)\n"
        ]
    );
    // One capture dispatched; the second run read the ledger only.
    let ledger =
        SqliteLedger::open(dir.path().join("effects.sqlite3"), SqliteOptions::default()).unwrap();
    let capture = ledger.get("invoice:INV-1042:capture").unwrap().unwrap();
    assert_eq!(capture.attempts, 1);
}
