//! A payment MCP server over stdio that is *not* an `EffectServer`: it
//! honours the idempotency key a `RemoteTool` sends in `_meta` (at most one
//! capture per key) and keeps its captures in a file, so a new process sees
//! what a killed one committed. The reconnect tests
//! (`tests/it/reconnect.rs`) spawn it as a child process and kill it with
//! SIGKILL in the middle of a call.
//!
//! `stdio_payment_server DIR [--stall-before-commit | --stall-after-commit]`:
//! captures go to `DIR/provider.jsonl`, and every `tools/call` it receives
//! appends its idempotency key to `DIR/requests.log`. With a `--stall-*`
//! flag the first call never gets an answer: the process waits, before or
//! after committing the capture, until it is killed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use effect_mcp::meta;
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    Never,
    BeforeCommit,
    AfterCommit,
}

#[derive(Clone)]
struct PaymentServer {
    provider: Arc<FakePaymentProvider>,
    requests: PathBuf,
    stall: Stall,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaptureArgs {
    invoice_id: String,
    amount_cents: u64,
}

impl ServerHandler for PaymentServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let Value::Object(schema) = json!({
            "type": "object",
            "properties": {
                "invoice_id": {"type": "string"},
                "amount_cents": {"type": "integer", "minimum": 1}
            },
            "required": ["invoice_id", "amount_cents"],
            "additionalProperties": false
        }) else {
            return Err(McpError::internal_error("the schema is an object", None));
        };
        Ok(ListToolsResult::with_all_items(vec![Tool::new(
            "capture_payment",
            "Capture a payment; at most one capture per idempotency key",
            schema,
        )]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let internal =
            |err: &dyn std::fmt::Display| McpError::internal_error(err.to_string(), None);
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.get(meta::IDEMPOTENCY_KEY))
            .or_else(|| context.meta.get(meta::IDEMPOTENCY_KEY))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let first = log_request(&self.requests, key.as_deref()).map_err(|e| internal(&e))?;
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let args: CaptureArgs = serde_json::from_value(arguments)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        if first && self.stall == Stall::BeforeCommit {
            std::future::pending::<()>().await;
        }
        let capture = self
            .provider
            .capture(&args.invoice_id, args.amount_cents, key.as_deref())
            .map_err(|e| internal(&e))?;
        if first && self.stall == Stall::AfterCommit {
            std::future::pending::<()>().await;
        }
        let output = serde_json::to_value(capture).map_err(|e| internal(&e))?;
        Ok(CallToolResult::structured(output).into())
    }
}

/// Appends the request's key to the log, synced; true for the log's first line.
fn log_request(path: &Path, key: Option<&str>) -> std::io::Result<bool> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let first = file.metadata()?.len() == 0;
    writeln!(file, "{}", key.unwrap_or("-"))?;
    file.sync_all()?;
    Ok(first)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!(
            "stdio_payment_server: usage: stdio_payment_server DIR [--stall-before-commit | --stall-after-commit]"
        );
        return ExitCode::from(2);
    };
    let stall = match args.next().as_deref() {
        None => Stall::Never,
        Some("--stall-before-commit") => Stall::BeforeCommit,
        Some("--stall-after-commit") => Stall::AfterCommit,
        Some(other) => {
            eprintln!("stdio_payment_server: unknown flag {other:?}");
            return ExitCode::from(2);
        }
    };
    let provider = match FakePaymentProvider::open(dir.join("provider.jsonl")) {
        Ok(provider) => Arc::new(provider),
        Err(err) => {
            eprintln!("stdio_payment_server: cannot open the provider file: {err}");
            return ExitCode::FAILURE;
        }
    };
    let server = PaymentServer {
        provider,
        requests: dir.join("requests.log"),
        stall,
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
            eprintln!("stdio_payment_server: the MCP session did not start: {err}");
            ExitCode::FAILURE
        }
    }
}
