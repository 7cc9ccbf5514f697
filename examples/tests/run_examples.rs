//! Runs what the examples run, so CI fails when an example would.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

use agent_runtime::RunStatus;
use agent_runtime::checkpoint::PendingStage;
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
    let stdout = run_example("effect_assurance_demo");
    assert!(stdout.contains("ok: exactly one payment"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rig_tool_commits_one_payment_and_never_tells_the_model_to_retry() {
    let dir = tempfile::tempdir().unwrap();
    for with_probe in [true, false] {
        let run = examples::rig_tool::run(dir.path(), with_probe)
            .await
            .unwrap();
        run.verdict().unwrap();
        assert_eq!(run.committed_payments, 1);
        assert_eq!(
            run.tool_calls, 1,
            "the model's retry never reached the tool"
        );
        if !with_probe {
            for answer in &run.answers {
                assert_eq!(answer["operation_id"], "invoice:INV-1042:capture");
                let message = answer["message"].as_str().unwrap();
                assert!(!message.to_lowercase().contains("fail"), "{message}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_client_commits_one_payment() {
    let dir = tempfile::tempdir().unwrap();
    let run = examples::mcp_server_client::run(dir.path()).await.unwrap();
    run.verdict().unwrap();
    assert_eq!(run.committed_payments, 1);
    assert_eq!(
        run.capture_requests, 2,
        "the lost acknowledgement was resent with its key"
    );
    assert_eq!(run.annotations, (Some(true), Some(false), Some(false)));
}

#[test]
fn rig_tool_and_mcp_server_client_binaries_exit_zero() {
    let stdout = run_example("rig_tool");
    assert!(
        stdout.contains("ok: exactly one payment per run"),
        "{stdout}"
    );
    let stdout = run_example("mcp_server_client");
    assert!(stdout.contains("ok: exactly one payment"), "{stdout}");
}

/// Runs an example binary and returns its output, failing on a non-zero exit.
fn run_example(name: &str) -> String {
    // `cargo test` builds the examples next to the test binaries; run the real
    // binary when it is there (it is not under a filtered `--test` build).
    let exe = std::env::current_exe().unwrap();
    let examples_dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let binary = examples_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let output = if binary.exists() {
        std::process::Command::new(&binary).output().unwrap()
    } else {
        std::process::Command::new(env!("CARGO"))
            .args(["run", "--quiet", "-p", "examples", "--example", name])
            .output()
            .unwrap()
    };
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
