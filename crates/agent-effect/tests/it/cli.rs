//! Scenarios, listing, exit codes and `--output`.

use clap::CommandFactory;
use effect_test_support::snapshots;
use serde_json::Value;

use crate::{agent_effect, stderr, stdout};

/// Runs a scenario, checks its exit code, snapshots its report.
fn check(args: &[&str], expected_exit: i32, snapshot: &str) -> Value {
    let output = agent_effect(args);
    assert_eq!(
        output.status.code(),
        Some(expected_exit),
        "{}",
        stderr(&output)
    );
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    snapshots::settings().bind(|| insta::assert_json_snapshot!(snapshot, report));
    report
}

#[test]
fn clap_definition_is_consistent() {
    agent_effect::Cli::command().debug_assert();
}

#[test]
fn the_main_job_passes_with_one_capture() {
    let report = check(
        &["--scenario", "after-commit-before-ack"],
        0,
        "scenario_after_commit_before_ack",
    );
    assert_eq!(report["committed_effect_count"], 1);
    assert_eq!(report["naive_baseline"]["committed_effect_count"], 2);
    assert_eq!(report["passed"], true);
}

#[test]
fn the_spec_section_10_scenarios_pass() {
    for (name, snapshot) in [
        ("none", "scenario_none"),
        ("before-commit", "scenario_before_commit"),
    ] {
        let report = check(&["--scenario", name], 0, snapshot);
        assert_eq!(
            (
                report["status"].as_str(),
                report["committed_effect_count"].as_u64()
            ),
            (Some("confirmed"), Some(1))
        );
    }
}

#[test]
fn every_listed_scenario_passes_with_the_default_contract() {
    let listing = agent_effect(&["--list"]);
    for line in stdout(&listing).lines() {
        let name = line.split_whitespace().next().unwrap();
        if name == "crash-after-commit" {
            continue; // Runs a child process; see crash.rs.
        }
        let output = agent_effect(&["--scenario", name, "--db", "memory:"]);
        assert_eq!(output.status.code(), Some(0), "{name}: {}", stdout(&output));
    }
}

#[test]
fn db_takes_a_file_memory_or_a_url_and_the_old_spellings_still_work() {
    let scenario = ["--scenario", "after-commit-before-ack"];
    // A path names the ledger file, as for agent-effect-ops: a file, not a
    // directory, with its missing parent created.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("runs/x.sqlite3");
    let output = agent_effect(&[&scenario[..], &["--db", file.to_str().unwrap()]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(file.is_file(), "{} is not a file", file.display());
    assert!(
        !stderr(&output).contains("deprecated"),
        "{}",
        stderr(&output)
    );
    // A ledger file holding the one confirmed capture.
    let ledger = production_agent_systems::SqliteLedger::open(
        &file,
        production_agent_systems::SqliteOptions::default(),
    )
    .unwrap();
    let operations =
        effect_core::EffectLedger::list(&ledger, &effect_core::ListQuery::new(10)).unwrap();
    assert_eq!(operations.len(), 1, "{operations:?}");
    assert_eq!(operations[0].status, effect_core::EffectStatus::Confirmed);

    // The same file again: a scenario starts on a fresh ledger.
    let output = agent_effect(&[&scenario[..], &["--db", file.to_str().unwrap()]].concat());
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("already exists; name a new ledger file"),
        "{}",
        stderr(&output)
    );

    // The old directory form still works, keeps DIR/ledger.sqlite3, and says
    // it is deprecated.
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    let output = agent_effect(&[&scenario[..], &["--db", kept.to_str().unwrap()]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(kept.join("ledger.sqlite3").is_file());
    assert!(
        stderr(&output).contains(&format!(
            "warning: --db {} is deprecated; write --dir {}",
            kept.display(),
            kept.display()
        )),
        "{}",
        stderr(&output)
    );

    // memory: runs in memory; the bare words are refused, saying what to write.
    let output = agent_effect(&[&scenario[..], &["--db", "memory:"]].concat());
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["committed_effect_count"], 1, "{report}");
    for (db, hint) in [("memory", "--db memory:"), ("sqlite", "leave --db out")] {
        let output = agent_effect(&[&scenario[..], &["--db", db]].concat());
        assert_eq!(output.status.code(), Some(2), "{db}: {}", stderr(&output));
        assert!(stdout(&output).is_empty(), "{db}: nothing ran");
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{db}: one line: {err}");
        assert!(err.contains(hint), "{db}: {err}");
    }
}

#[test]
fn the_crash_scenario_and_the_matrix_keep_their_ledgers_beside_the_db_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("crash.sqlite3");
    let output = agent_effect(&[
        "--scenario",
        "crash-after-commit",
        "--db",
        file.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["committed_effect_count"], 1, "{report}");
    assert!(file.is_file());

    let file = dir.path().join("matrix.sqlite3");
    let output = agent_effect(&["--matrix", "--db", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(file.is_file());
    assert!(dir.path().join("matrix-2.sqlite3").is_file());
}

#[test]
fn a_scenario_that_does_not_pass_exits_1() {
    // Without probe or key guarantee the lost acknowledgement is quarantined.
    let report = check(
        &[
            "--scenario",
            "after-commit-before-ack",
            "--contract",
            "neither",
        ],
        1,
        "scenario_after_commit_before_ack_neither",
    );
    assert_eq!(report["status"], "quarantined");
    assert_eq!(report["passed"], false);
}

#[test]
fn list_names_each_scenario_with_a_description() {
    let output = agent_effect(&["--list"]);
    assert!(output.status.success());
    snapshots::settings().bind(|| insta::assert_snapshot!("list", stdout(&output)));
}

#[test]
fn an_unknown_scenario_is_a_one_line_error_with_exit_2() {
    let output = agent_effect(&["--scenario", "double-charge"]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(output.stdout.is_empty());
    snapshots::settings().bind(|| insta::assert_snapshot!("unknown_scenario", err));
}

#[test]
fn output_into_a_missing_directory_creates_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reports/today/none.json");
    let output = agent_effect(&["--scenario", "none", "--output", file.to_str().unwrap()]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), stdout(&output));
}

#[test]
fn an_unwritable_output_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let blocker = dir.path().join("not-a-directory");
    std::fs::write(&blocker, "a file").unwrap();
    let file = blocker.join("report.json");
    let output = agent_effect(&["--scenario", "none", "--output", file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(3));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: could not create directory "),
        "{err}"
    );
    snapshots::settings().bind(|| insta::assert_snapshot!("unwritable_output", err));
}

#[test]
fn a_directory_that_already_holds_a_ledger_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().join("run");
    let run = run_dir.to_str().unwrap();
    assert!(
        agent_effect(&["--scenario", "none", "--dir", run])
            .status
            .success()
    );
    assert!(run_dir.join("ledger.sqlite3").exists());
    let again = agent_effect(&["--scenario", "none", "--dir", run]);
    assert_eq!(again.status.code(), Some(3));
    assert!(
        stderr(&again).contains("already holds a ledger"),
        "{}",
        stderr(&again)
    );
}

#[test]
fn usage_errors_are_one_line_with_exit_2() {
    for args in [
        &["--bogus"][..],
        &["--scenario"],
        &["--matrix", "--scenario", "none"],
    ] {
        let output = agent_effect(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let err = stderr(&output);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err:?}");
        assert!(err.starts_with("error: "), "{args:?}: {err:?}");
        assert!(!err.contains("--help"), "{args:?}: {err:?}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn without_arguments_it_runs_the_main_job_as_the_python_cli_does() {
    let output = agent_effect(&[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["scenario"], "after-commit-before-ack");
    assert_eq!(report["committed_effect_count"], 1);
    assert_eq!(report["duplicate_effect_detected"], false);
    assert_eq!(report["passed"], true);
    assert!(
        report.get("duplicate_detected").is_none(),
        "the Python name only"
    );
}

#[test]
fn the_hidden_worker_mode_is_not_in_the_usage() {
    let help = agent_effect(&["--help"]);
    let text = stdout(&help);
    assert!(!text.contains("--worker"), "{text}");
    let usage = stderr(&agent_effect(&["--bogus"]));
    assert!(!usage.contains("worker"), "{usage}");
}
