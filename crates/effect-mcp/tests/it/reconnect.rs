//! `RemoteTool` over a real child process (`examples/stdio_payment_server.rs`)
//! spawned with stdio and killed with SIGKILL in the middle of a call: the
//! resend the contract allows goes over a new connection to a new process.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use effect_core::{EffectStatus, MemoryLedger};
use effect_exec::{EffectExecutor, UncertainOutcome};
use effect_mcp::{ConnectError, Connection, RemoteTool};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::ServiceExt;
use tokio::process::{Child, Command};

use crate::fixture::{CaptureArgs, Reconcile, args, contract};

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
        let binary = debug.join("examples").join(format!(
            "stdio_payment_server{}",
            std::env::consts::EXE_SUFFIX
        ));
        if !binary.exists() {
            let status = std::process::Command::new(env!("CARGO"))
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "effect-mcp",
                    "--example",
                    "stdio_payment_server",
                ])
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building the example server failed");
        }
        binary
    })
}

/// The server processes a connector spawned, oldest first.
type Children = Arc<Mutex<Vec<Arc<Mutex<Child>>>>>;

/// Spawns a server over stdio in `dir`; the first one with `first_flag`.
async fn spawn(
    dir: &Path,
    first_flag: Option<&str>,
    children: &Children,
) -> Result<Connection, ConnectError> {
    let first = children.lock().expect("not poisoned").is_empty();
    let mut command = Command::new(server_binary());
    command.arg(dir);
    if let (true, Some(flag)) = (first, first_flag) {
        command.arg(flag);
    }
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    let mut child = command.spawn()?;
    let stdout = child.stdout.take().ok_or("the child has no stdout")?;
    let stdin = child.stdin.take().ok_or("the child has no stdin")?;
    let service = ().serve((stdout, stdin)).await?;
    let child = Arc::new(Mutex::new(child));
    children
        .lock()
        .expect("not poisoned")
        .push(Arc::clone(&child));
    Ok(Connection::new(service).holding(child))
}

struct Setup {
    dir: tempfile::TempDir,
    provider: Arc<FakePaymentProvider>,
    children: Children,
    executor: EffectExecutor,
}

impl Setup {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let provider = Arc::new(
            FakePaymentProvider::open(dir.path().join("provider.jsonl"))
                .expect("the provider file opens"),
        );
        Setup {
            dir,
            provider,
            children: Arc::default(),
            executor: EffectExecutor::new(Arc::new(MemoryLedger::new())),
        }
    }

    /// A tool whose connector respawns the server; the first process stalls.
    async fn reconnecting(
        &self,
        reconcile: Reconcile,
        stall: &'static str,
    ) -> RemoteTool<CaptureArgs, Capture> {
        let (dir, children) = (self.dir.path().to_owned(), Arc::clone(&self.children));
        let connector = move || {
            let (dir, children) = (dir.clone(), Arc::clone(&children));
            async move { spawn(&dir, Some(stall), &children).await }
        };
        RemoteTool::connect(
            connector,
            "capture_payment",
            contract(&self.provider, reconcile),
            self.executor.clone(),
        )
        .await
        .expect("the first server starts and lists the tool")
    }

    fn committed(&self) -> usize {
        self.provider.committed_count().expect("the file reads")
    }

    /// The idempotency key of every `tools/call` the servers received.
    fn requests(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("requests.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    fn spawned(&self) -> usize {
        self.children.lock().expect("not poisoned").len()
    }

    /// Waits until `condition` holds, then kills the first server with SIGKILL.
    async fn kill_first_when(&self, condition: impl Fn(&Self) -> bool) {
        for _ in 0..6000 {
            if condition(self) {
                let first = Arc::clone(&self.children.lock().expect("not poisoned")[0]);
                first
                    .lock()
                    .expect("not poisoned")
                    .start_kill()
                    .expect("SIGKILL is sent");
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the server never reached the point to kill it at");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_after_committing_is_respawned_and_the_keyed_resend_confirms_once() {
    let setup = Setup::new();
    let tool = Arc::new(
        setup
            .reconnecting(Reconcile::GuaranteedKey, "--stall-after-commit")
            .await,
    );
    let call = tokio::spawn({
        let tool = Arc::clone(&tool);
        async move { tool.call(&args("INV-1")).await }
    });
    setup.kill_first_when(|s| s.committed() == 1).await;
    let result = call
        .await
        .expect("the call task ends")
        .expect("the call runs");

    assert!(result.is_confirmed(), "{:?}", result.result);
    assert_eq!(
        result.output.as_ref().map(|c| c.payment_id.as_str()),
        Some("pay_000001"),
        "the resend got the first capture back"
    );
    assert_eq!(result.attempts, 2, "sent twice");
    assert_eq!(setup.spawned(), 2, "one new connection, to a new process");
    assert_eq!(setup.requests(), vec!["capture:INV-1".to_owned(); 2]);
    assert_eq!(setup.committed(), 1, "one committed effect");

    // A repeat is replayed from the client's ledger: nothing is sent.
    let again = tool.call(&args("INV-1")).await.expect("the call runs");
    assert!(again.duplicate_suppressed);
    assert_eq!(setup.requests().len(), 2);
    assert_eq!(setup.committed(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_killed_before_committing_is_probed_then_resent_over_a_new_connection() {
    let setup = Setup::new();
    let tool = Arc::new(
        setup
            .reconnecting(Reconcile::Probe, "--stall-before-commit")
            .await,
    );
    let call = tokio::spawn({
        let tool = Arc::clone(&tool);
        async move { tool.call(&args("INV-2")).await }
    });
    setup.kill_first_when(|s| s.requests().len() == 1).await;
    let result = call
        .await
        .expect("the call task ends")
        .expect("the call runs");

    assert!(result.is_confirmed(), "{:?}", result.result);
    let events = setup
        .executor
        .ledger()
        .events("invoice:INV-2:capture")
        .expect("the ledger reads");
    let retry = events
        .iter()
        .find(|e| e.event_type == "retry_authorized")
        .expect("a resend was authorized");
    assert_eq!(
        retry.data["evidence"]["retry_basis"], "probe_not_committed",
        "the resend rests on the probe's answer"
    );
    assert_eq!(setup.spawned(), 2);
    assert_eq!(setup.requests().len(), 2);
    assert_eq!(setup.committed(), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_finds_the_effect_confirms_it_without_reconnecting() {
    let setup = Setup::new();
    let tool = Arc::new(
        setup
            .reconnecting(Reconcile::Probe, "--stall-after-commit")
            .await,
    );
    let call = tokio::spawn({
        let tool = Arc::clone(&tool);
        async move { tool.call(&args("INV-3")).await }
    });
    setup.kill_first_when(|s| s.committed() == 1).await;
    let result = call
        .await
        .expect("the call task ends")
        .expect("the call runs");

    assert!(result.is_confirmed(), "{:?}", result.result);
    assert!(
        result.duplicate_suppressed,
        "found by the probe, not resent"
    );
    assert_eq!(setup.spawned(), 1, "no new connection was needed");
    assert_eq!(setup.requests().len(), 1);
    assert_eq!(setup.committed(), 1, "one committed effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_connector_the_lost_connection_is_recorded_and_the_resend_left_pending() {
    let setup = Setup::new();
    let connection = spawn(
        setup.dir.path(),
        Some("--stall-after-commit"),
        &setup.children,
    )
    .await
    .expect("the server starts");
    let tool = Arc::new(
        RemoteTool::discover(
            connection.peer().clone(),
            "capture_payment",
            contract(&setup.provider, Reconcile::GuaranteedKey),
            setup.executor.clone(),
        )
        .await
        .expect("the tool is listed"),
    );
    let call = tokio::spawn({
        let tool = Arc::clone(&tool);
        async move { tool.call(&args("INV-4")).await }
    });
    setup.kill_first_when(|s| s.committed() == 1).await;
    let result = call
        .await
        .expect("the call task ends")
        .expect("the call runs");

    // What happened: the first send's answer was lost with the connection,
    // and the resend could not be sent. What happens next: the next call
    // resends under the same key; no operator is involved.
    assert_eq!(
        result.status,
        EffectStatus::OutcomeUnknown,
        "{:?}",
        result.result
    );
    let error = result.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("no connector") && error.contains("resend") && error.contains("pending"),
        "{error}"
    );
    let notice = UncertainOutcome::from_result("capture_payment", &result.result)
        .expect("an uncertain outcome has a notice");
    assert!(!notice.message.contains("operator"), "{}", notice.message);
    assert_eq!(
        setup.requests().len(),
        1,
        "nothing was sent on the dead connection"
    );
    assert_eq!(setup.committed(), 1);

    // The next call, on a tool with a working connection, resends and confirms.
    let children = Arc::clone(&setup.children);
    let dir = setup.dir.path().to_owned();
    let retry = RemoteTool::connect(
        move || {
            let (dir, children) = (dir.clone(), Arc::clone(&children));
            async move { spawn(&dir, None, &children).await }
        },
        "capture_payment",
        contract(&setup.provider, Reconcile::GuaranteedKey),
        setup.executor.clone(),
    )
    .await
    .expect("a new server starts");
    let settled = retry.call(&args("INV-4")).await.expect("the call runs");
    assert!(settled.is_confirmed(), "{:?}", settled.result);
    assert_eq!(
        settled.output.as_ref().map(|c| c.payment_id.as_str()),
        Some("pay_000001")
    );
    assert_eq!(setup.requests().len(), 2);
    assert_eq!(setup.committed(), 1, "one committed effect");
    drop(connection);
}
