//! Ledger-backed MCP tasks over stdio to a real child process
//! (`examples/stdio_task_server.rs`, an `EffectServer` on a SQLite ledger)
//! killed with SIGKILL in the middle of a call: a new process on the same
//! ledger answers `tasks/get` with the operation's real status.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use effect_schema::InputSchema;
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities,
    ClientConfig, CreateTaskResult, GetTaskParams, Implementation, TaskPayload, TaskStatus,
};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

type Client = RunningService<RoleClient, ClientConfig>;

/// The server binary, built by `cargo test` beside the test binaries (or
/// built here when a filtered run did not build examples).
fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary has a path");
        let debug = exe
            .parent()
            .and_then(Path::parent)
            .expect("test binaries live in target/<profile>/deps");
        let binary = debug
            .join("examples")
            .join(format!("stdio_task_server{}", std::env::consts::EXE_SUFFIX));
        if !binary.exists() {
            let status = std::process::Command::new(env!("CARGO"))
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "effect-mcp",
                    "--example",
                    "stdio_task_server",
                ])
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building the example server failed");
        }
        binary
    })
}

/// One server process and a client, declaring the tasks extension, on it.
struct Server {
    child: Child,
    client: Client,
}

impl Server {
    async fn start(dir: &Path, flags: &[&str]) -> Self {
        let mut child = Command::new(server_binary())
            .arg(dir)
            .args(flags)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("the server starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().expect("piped stdin");
        let config = ClientConfig::new(
            ClientCapabilities::builder().enable_tasks().build(),
            Implementation::new("effect-mcp-task-test", "0"),
        );
        let client = config
            .serve((stdout, stdin))
            .await
            .expect("the client connects");
        Server { child, client }
    }

    async fn kill(mut self) {
        self.child.start_kill().expect("SIGKILL is sent");
        let status = self.child.wait().await.expect("the server is reaped");
        assert!(!status.success(), "killed, not exited: {status:?}");
    }

    async fn call(&self, tool: &str, invoice: &str) -> CreateTaskResult {
        let Value::Object(arguments) = json!({"invoice_id": invoice, "amount_cents": 1250}) else {
            unreachable!("an object literal");
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        match self.client.call_tool_once(params).await {
            Ok(CallToolResponse::Task(task)) => task,
            other => panic!("expected a task, got {other:?}"),
        }
    }

    async fn get(&self, task_id: &str) -> rmcp::model::DetailedTask {
        self.client
            .peer()
            .get_task(GetTaskParams::new(task_id))
            .await
            .expect("tasks/get answers")
            .task
    }

    async fn cancel(&self, task_id: &str) -> Result<(), ServiceError> {
        self.client
            .peer()
            .cancel_task(CancelTaskParams::new(task_id))
            .await
    }

    /// The tool's declared `outputSchema`, as a validator.
    async fn output_schema(&self, tool: &str) -> InputSchema {
        let tools = self
            .client
            .peer()
            .list_all_tools()
            .await
            .expect("tools/list answers");
        let tool = tools
            .into_iter()
            .find(|t| t.name == tool)
            .expect("the tool is listed");
        let schema = tool
            .output_schema
            .expect("the tool declares an outputSchema");
        InputSchema::new(Value::Object((*schema).clone())).expect("a usable schema")
    }
}

fn provider(dir: &Path) -> FakePaymentProvider {
    FakePaymentProvider::open(dir.join("provider.jsonl")).expect("the provider file opens")
}

fn committed(dir: &Path) -> usize {
    provider(dir).committed_count().expect("the file reads")
}

/// Waits until `condition` holds (checked every 10 ms, for up to a minute).
async fn until(what: &str, condition: impl Fn() -> bool) {
    for _ in 0..6000 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

fn result_of(task: &rmcp::model::DetailedTask) -> CallToolResult {
    let TaskPayload::Completed { result } = &task.payload else {
        panic!("expected a completed task, got {task:?}");
    };
    serde_json::from_value(Value::Object(result.clone())).expect("a tools/call result")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_polled_across_a_server_killed_mid_call_gets_the_real_status_and_one_effect() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let first = Server::start(dir.path(), &["--stall-after-commit", "--lease-ms", "1500"]).await;

    let created = first.call("capture_payment", "INV-1").await;
    assert_eq!(created.task.task_id, "invoice:INV-1:capture_payment");
    assert_eq!(created.task.status, TaskStatus::Working);
    let id = created.task.task_id.clone();
    until("the provider committed the capture", || {
        committed(dir.path()) == 1
    })
    .await;
    let running = first.get(&id).await;
    assert_eq!(running.status(), TaskStatus::Working, "{running:?}");
    first.kill().await;

    // A new process on the same ledger knows the task: its dispatch is
    // recorded, and nothing proves it did not happen, so it is working.
    let second = Server::start(dir.path(), &["--lease-ms", "1500"]).await;
    let after_restart = second.get(&id).await;
    assert_eq!(
        after_restart.status(),
        TaskStatus::Working,
        "{after_restart:?}"
    );
    assert_eq!(committed(dir.path()), 1);
    // A dispatched effect cannot be recalled.
    let refused = second.cancel(&id).await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(second.get(&id).await.status(), TaskStatus::Working);

    // Calling again is the same operation: while the dead process's lease
    // runs it answers in progress; after it, the probe finds the capture.
    let mut calls = 0;
    let done = loop {
        calls += 1;
        assert!(calls < 600, "the task never completed");
        let again = second.call("capture_payment", "INV-1").await;
        assert_eq!(again.task.task_id, id, "the same task");
        let task = second.get(&id).await;
        if task.status().is_terminal() {
            break task;
        }
        assert_eq!(task.status(), TaskStatus::Working, "{task:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let result = result_of(&done);
    assert_ne!(result.is_error, Some(true), "{result:?}");
    let output = result
        .structured_content
        .clone()
        .expect("structured output");
    assert_eq!(output["payment_id"], "pay_000001", "the first capture");
    assert_eq!(output["invoice_id"], "INV-1");
    let schema = second.output_schema("capture_payment").await;
    assert_eq!(schema.validate(&output), Ok(()), "conforms: {output}");
    assert_eq!(committed(dir.path()), 1, "one committed effect");

    // A completed task stays completed, for any process on the ledger.
    second.kill().await;
    let third = Server::start(dir.path(), &[]).await;
    let later = third.get(&id).await;
    assert_eq!(result_of(&later).structured_content, Some(output));
    let refused = third.cancel(&id).await;
    assert!(
        refused.is_err(),
        "a terminal task is not cancelled: {refused:?}"
    );
    assert_eq!(committed(dir.path()), 1);
    third.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_approval_is_input_required_across_a_restart_and_cancel_cancels_it() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let first = Server::start(dir.path(), &[]).await;
    let created = first.call("capture_large_payment", "INV-9").await;
    let id = created.task.task_id.clone();
    assert_eq!(id, "invoice:INV-9:capture_large_payment");
    assert_eq!(created.task.status, TaskStatus::InputRequired);
    first.kill().await;

    let second = Server::start(dir.path(), &[]).await;
    let waiting = second.get(&id).await;
    assert_eq!(waiting.status(), TaskStatus::InputRequired, "{waiting:?}");
    let message = waiting.task.status_message.clone().unwrap_or_default();
    assert!(message.contains("approval"), "{message}");
    second
        .cancel(&id)
        .await
        .expect("a task that sent nothing cancels");
    let cancelled = second.get(&id).await;
    assert_eq!(cancelled.status(), TaskStatus::Cancelled, "{cancelled:?}");

    // The operation is denied for good: calling again does not run it.
    let again = second.call("capture_large_payment", "INV-9").await;
    assert_eq!(again.task.task_id, id);
    assert_eq!(second.get(&id).await.status(), TaskStatus::Cancelled);
    assert_eq!(committed(dir.path()), 0, "nothing was sent");

    // An unknown task id is invalid params.
    let unknown = second
        .client
        .peer()
        .get_task(GetTaskParams::new("invoice:NOPE:capture_payment"))
        .await;
    assert!(unknown.is_err(), "{unknown:?}");
    second.kill().await;
}
