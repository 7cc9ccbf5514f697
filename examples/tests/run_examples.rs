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

/// The path of an example binary, built when a filtered run did not build it.
fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let examples_dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let binary = examples_dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if !binary.exists() {
        let status = std::process::Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "examples", "--example", name])
            .status()
            .unwrap();
        assert!(status.success(), "building {name} failed");
    }
    binary
}

/// Starts `mcp_stdio_server` on `db` as a host does, and connects to it.
async fn start_stdio_server(
    db: &std::path::Path,
) -> (
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tokio::process::Child,
) {
    use rmcp::ServiceExt;
    let mut child = tokio::process::Command::new(example_binary("mcp_stdio_server"))
        .arg("--db")
        .arg(db)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take().unwrap();
    let client = ().serve((stdout, stdin)).await.unwrap();
    (client, child)
}

async fn capture(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    arguments: serde_json::Value,
) -> rmcp::model::CallToolResult {
    let serde_json::Value::Object(arguments) = arguments else {
        panic!("arguments are an object")
    };
    client
        .peer()
        .call_tool(
            rmcp::model::CallToolRequestParams::new("capture_payment").with_arguments(arguments),
        )
        .await
        .unwrap()
}

fn effect_status(result: &rmcp::model::CallToolResult) -> &str {
    result.meta.as_ref().unwrap()[effect_mcp::meta::EFFECT]["status"]
        .as_str()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_stdio_server_serves_a_host_and_replays_after_a_sigkill_restart() {
    use examples::mcp_stdio_server::{INSTRUCTIONS, SERVER_NAME};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("payments.sqlite3");
    let (client, mut child) = start_stdio_server(&db).await;

    let info = client.peer().peer_info().unwrap();
    let server_info = info.server_info.clone().unwrap();
    assert_eq!(server_info.name, SERVER_NAME);
    assert_eq!(server_info.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(info.instructions.as_deref(), Some(INSTRUCTIONS));
    let tools = client.peer().list_all_tools().await.unwrap();
    let names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["capture_payment"]);
    assert_eq!(
        tools[0].annotations.as_ref().unwrap().idempotent_hint,
        Some(true)
    );

    let args = serde_json::json!({"invoice_id": "INV-9", "amount_cents": 700});
    let first = capture(&client, args.clone()).await;
    assert_ne!(first.is_error, Some(true), "{first:?}");
    assert_eq!(effect_status(&first), "confirmed");
    let payment = first.structured_content.clone().unwrap();
    assert_eq!(payment["payment_id"], "pay_000001");
    assert_eq!(payment["invoice_id"], "INV-9");

    let invalid = capture(
        &client,
        serde_json::json!({"invoice_id": "INV-9", "amount_cents": 700, "currency": "EUR"}),
    )
    .await;
    assert_eq!(invalid.is_error, Some(true));
    assert_eq!(effect_status(&invalid), "invalid_arguments");

    // SIGKILL, then a new process on the same ledger: the repeat is replayed.
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    drop(client);
    let (client, _child) = start_stdio_server(&db).await;
    let again = capture(&client, args).await;
    assert_eq!(effect_status(&again), "confirmed");
    assert_eq!(again.structured_content.unwrap(), payment);
    let provider = effect_testkit::provider::FakePaymentProvider::open(
        dir.path().join("payments.sqlite3.provider.jsonl"),
    )
    .unwrap();
    assert_eq!(
        provider.committed_count().unwrap(),
        1,
        "one committed effect"
    );
}

#[test]
fn mcp_stdio_server_without_a_ledger_path_exits_non_zero_with_one_line() {
    let output = std::process::Command::new(example_binary("mcp_stdio_server"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "stdout is the protocol's");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("mcp_stdio_server: --db is required"),
        "{stderr}"
    );
}

/// What the collector stand-in received: (path, body) of each export.
type Exports = std::sync::Arc<std::sync::Mutex<Vec<(String, Vec<u8>)>>>;

/// A collector stand-in on loopback: answers every OTLP/HTTP export with
/// 200 and keeps (path, body) of each.
fn collector() -> (String, Exports) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = std::sync::Arc::clone(&received);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let keep = std::sync::Arc::clone(&keep);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                // Requests on one connection, until the client closes it.
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split(' ').nth(1).unwrap_or_default().to_owned();
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        reader.read_line(&mut header).unwrap();
                        if header.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = header.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse().unwrap();
                        }
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    keep.lock().unwrap().push((path, body));
                    stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
                        .unwrap();
                }
            });
        }
    });
    (endpoint, received)
}

#[test]
fn otel_exports_the_execute_tool_span_and_the_metrics_without_the_card() {
    let (endpoint, received) = collector();
    let exe = std::env::current_exe().unwrap();
    let binary = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(format!("otel{}", std::env::consts::EXE_SUFFIX));
    let output = if binary.exists() {
        std::process::Command::new(&binary)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap()
    } else {
        std::process::Command::new(env!("CARGO"))
            .args(["run", "--quiet", "-p", "examples", "--example", "otel"])
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .output()
            .unwrap()
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("were exported"), "{stdout}");
    let received = received.lock().unwrap();
    let has = |path: &str, needle: &[u8]| {
        received
            .iter()
            .any(|(p, body)| p == path && body.windows(needle.len()).any(|w| w == needle))
    };
    assert!(has("/v1/traces", b"execute_tool capture_payment"));
    assert!(has("/v1/traces", b"invoke_agent billing"));
    assert!(has("/v1/metrics", b"effect.executions"));
    assert!(
        !received
            .iter()
            .any(|(_, body)| body.windows(13).any(|w| w == b"tok_visa_4242")),
        "the card token was exported"
    );
}
