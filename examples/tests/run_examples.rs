//! Runs what the examples run, so CI fails when an example would.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

use agent_runtime::{PendingStage, RunStatus};
use effect_core::EffectStatus;
use examples::effect_assurance;

#[test]
fn effect_assurance_demo_commits_exactly_one_payment() {
    let dir = tempfile::tempdir().unwrap();
    let report = effect_assurance::run(dir.path()).unwrap();
    report.verdict().unwrap();
    assert_eq!(report.committed_payments, 1);
    assert_eq!(report.capture_calls, 1);
    let pending = report.before_restart.pending.as_ref().unwrap();
    assert!(matches!(
        &pending.stage,
        PendingStage::EffectUncertain { operation_id, status: EffectStatus::OutcomeUnknown, .. }
            if operation_id == effect_assurance::OPERATION_ID
    ));
    assert_eq!(report.after_restart.status, RunStatus::Completed);
    assert_eq!(
        report
            .ledger_events
            .iter()
            .filter(|e| *e == "dispatched")
            .count(),
        1,
        "{:?}",
        report.ledger_events
    );
    assert_eq!(
        report.ledger_events.last().map(String::as_str),
        Some("confirmed")
    );
}

#[test]
fn effect_assurance_demo_binary_exits_zero() {
    // `cargo test` builds the examples next to the test binaries; run the real
    // binary when it is there (it is not under a filtered `--test` build).
    let exe = std::env::current_exe().unwrap();
    let examples_dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let binary = examples_dir.join(format!(
        "effect_assurance_demo{}",
        std::env::consts::EXE_SUFFIX
    ));
    let output = if binary.exists() {
        std::process::Command::new(&binary).output().unwrap()
    } else {
        std::process::Command::new(env!("CARGO"))
            .args([
                "run",
                "--quiet",
                "-p",
                "examples",
                "--example",
                "effect_assurance_demo",
            ])
            .output()
            .unwrap()
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("ok: exactly one payment"), "{stdout}");
}
