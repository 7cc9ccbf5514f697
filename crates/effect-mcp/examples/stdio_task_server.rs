//! An `EffectServer` with ledger-backed MCP tasks over stdio, on a SQLite
//! ledger: a client that declares the tasks extension gets a task for each
//! call and polls it with `tasks/get`, also from a new process started on
//! the same ledger after this one was killed. The task tests
//! (`tests/it/tasks.rs`) spawn it as a child process and kill it with
//! SIGKILL in the middle of a call.
//!
//! `stdio_task_server DIR [--stall-after-commit] [--lease-ms N]`: the ledger
//! is `DIR/ledger.sqlite3` and the fake payment provider's captures go to
//! `DIR/provider.jsonl`. Two tools:
//!
//! - `capture_payment`: captures once per invoice, with an outcome probe
//!   that looks the capture up by its key, and an `outputSchema`;
//! - `capture_large_payment`: the same, but each call waits for a human's
//!   approval first (docs/approval.md).
//!
//! With `--stall-after-commit` the first handler call commits its capture
//! and then waits, never answering, until the process is killed.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use effect_exec::{EffectExecutor, ExecutorOptions, HandlerError, TypedContract, TypedProbe};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_mcp::{EffectCall, EffectServer, ServedTool, TaskOptions};
use effect_testkit::provider::FakePaymentProvider;
use rmcp::ServiceExt;
use serde::{Deserialize, Serialize};

/// What the tools take.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct CaptureArgs {
    invoice_id: String,
    amount_cents: u64,
}

/// What the tools return: the tools' `outputSchema`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Captured {
    payment_id: String,
    invoice_id: String,
    amount_cents: u64,
}

struct Args {
    dir: PathBuf,
    stall: bool,
    lease: Duration,
}

fn parse() -> Result<Args, String> {
    let usage = "usage: stdio_task_server DIR [--stall-after-commit] [--lease-ms N]";
    let mut args = std::env::args().skip(1);
    let dir = args.next().map(PathBuf::from).ok_or(usage)?;
    let (mut stall, mut lease) = (false, Duration::from_secs(30));
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stall-after-commit" => stall = true,
            "--lease-ms" => {
                let ms = args.next().ok_or(usage)?;
                let ms: u64 = ms
                    .parse()
                    .map_err(|_| format!("--lease-ms takes milliseconds, not {ms:?}"))?;
                lease = Duration::from_millis(ms);
            }
            other => return Err(format!("unknown argument {other:?}; {usage}")),
        }
    }
    Ok(Args { dir, stall, lease })
}

fn contract(
    name: &str,
    provider: &Arc<FakePaymentProvider>,
    approval: bool,
) -> Result<TypedContract<CaptureArgs, Captured>, String> {
    let prefix = name.to_owned();
    let provider = Arc::clone(provider);
    TypedContract::<CaptureArgs, Captured>::builder(name, move |args| {
        Ok(format!("invoice:{}:{prefix}", args.invoice_id))
    })
    .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
    .requires_approval(approval)
    .outcome_probe(move |_args, key| {
        let key = key.ok_or("no provider key")?;
        Ok(
            match provider.lookup_by_key(key).map_err(|e| e.to_string())? {
                Some(capture) => TypedProbe::committed(Captured {
                    payment_id: capture.payment_id,
                    invoice_id: capture.invoice_id,
                    amount_cents: capture.amount_cents,
                }),
                None => TypedProbe::not_committed(),
            },
        )
    })
    .build()
    .map_err(|err| err.to_string())
}

fn server(args: &Args) -> Result<EffectServer, String> {
    // A renewal may wait the busy timeout: keep the lease at least twice it.
    let busy = (args.lease / 3).min(Duration::from_secs(5));
    let ledger = SqliteLedger::open(
        args.dir.join("ledger.sqlite3"),
        SqliteOptions::default().busy_timeout(busy),
    )
    .map_err(|err| format!("cannot open the ledger: {err}"))?;
    let provider = Arc::new(
        FakePaymentProvider::open(args.dir.join("provider.jsonl"))
            .map_err(|err| format!("cannot open the provider file: {err}"))?,
    );
    let executor = EffectExecutor::with_options(
        Arc::new(ledger),
        ExecutorOptions::default().dispatch_lease(args.lease),
    );
    let stall = Arc::new(AtomicBool::new(args.stall));
    let handler = {
        let provider = Arc::clone(&provider);
        move |args: CaptureArgs, call: EffectCall| {
            let (provider, stall) = (Arc::clone(&provider), Arc::clone(&stall));
            async move {
                let key = call.provider_idempotency_key.as_deref();
                let capture = provider.capture(&args.invoice_id, args.amount_cents, key)?;
                if stall.swap(false, Ordering::SeqCst) {
                    std::future::pending::<()>().await;
                }
                Ok::<_, HandlerError>(Captured {
                    payment_id: capture.payment_id,
                    invoice_id: capture.invoice_id,
                    amount_cents: capture.amount_cents,
                })
            }
        }
    };
    let capture = ServedTool::new(
        "capture_payment",
        "Capture a payment, once per invoice",
        contract("capture_payment", &provider, false)?,
        handler.clone(),
    )
    .output_schema();
    let large = ServedTool::new(
        "capture_large_payment",
        "Capture a large payment, once per invoice, after a human approved it",
        contract("capture_large_payment", &provider, true)?,
        handler,
    )
    .output_schema();
    EffectServer::new(executor)
        .with_tasks(TaskOptions::default().poll_interval(Duration::from_millis(50)))
        .tool(capture)
        .and_then(|server| server.tool(large))
        .map_err(|err| err.to_string())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let server = match parse().and_then(|args| server(&args)) {
        Ok(server) => server,
        Err(err) => {
            eprintln!("stdio_task_server: {err}");
            return ExitCode::from(2);
        }
    };
    match server
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
    {
        Ok(running) => {
            let _ = running.waiting().await;
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("stdio_task_server: the MCP session did not start: {err}");
            ExitCode::FAILURE
        }
    }
}
