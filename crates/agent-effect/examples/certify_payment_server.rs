//! A payment MCP server over stdio for `agent-effect certify --mcp-command`:
//! a tool that captures, a probe tool and a count tool, its captures kept in
//! a file so that a server spawned after a kill sees what the killed one
//! committed.
//!
//! `certify_payment_server DIR [--ignore-keys]` (DIR is created when
//! missing): captures go to
//! `DIR/provider.jsonl`, and each process appends a line to `DIR/starts.log`
//! when it starts. The tools take `{"invoice_id", "amount_cents"}`:
//!
//! - `capture_payment` captures, at most once per idempotency key in
//!   `_meta` (with `--ignore-keys`, every call captures: the planted bug a
//!   contract claiming a guaranteed key must be caught on);
//! - `get_capture` answers the capture made under the key in `_meta`, or
//!   an error result when there is none;
//! - `count_captures` answers `{"count": n}`, the captures of the invoice.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use effect_mcp::meta;
use effect_testkit::provider::FakePaymentProvider;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Clone)]
struct PaymentServer {
    provider: Arc<FakePaymentProvider>,
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
        let schema = Arc::new(schema);
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new(
                "capture_payment",
                "Capture a payment; at most one capture per idempotency key",
                Arc::clone(&schema),
            ),
            Tool::new(
                "get_capture",
                "The capture made under the idempotency key in _meta",
                Arc::clone(&schema),
            ),
            Tool::new(
                "count_captures",
                "How many captures the invoice has",
                schema,
            ),
        ]))
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
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let args: CaptureArgs = serde_json::from_value(arguments)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let result = match request.name.as_ref() {
            "capture_payment" => {
                let capture = self
                    .provider
                    .capture(&args.invoice_id, args.amount_cents, key.as_deref())
                    .map_err(|e| internal(&e))?;
                CallToolResult::structured(serde_json::to_value(capture).map_err(|e| internal(&e))?)
            }
            "get_capture" => {
                let found = match key.as_deref() {
                    Some(key) => self.provider.lookup_by_key(key).map_err(|e| internal(&e))?,
                    None => None,
                };
                match found {
                    Some(capture) => CallToolResult::structured(
                        serde_json::to_value(capture).map_err(|e| internal(&e))?,
                    ),
                    None => {
                        CallToolResult::error(vec![ContentBlock::text("no capture under this key")])
                    }
                }
            }
            "count_captures" => {
                let count = self
                    .provider
                    .lookup_by_invoice(&args.invoice_id)
                    .map_err(|e| internal(&e))?
                    .len();
                CallToolResult::structured(json!({"count": count}))
            }
            other => {
                return Err(McpError::invalid_params(format!("no tool {other:?}"), None));
            }
        };
        Ok(result.into())
    }
}

/// Appends this process's start to `DIR/starts.log`, synced.
fn log_start(dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("starts.log"))?;
    writeln!(file, "{}", std::process::id())?;
    file.sync_all()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("certify_payment_server: usage: certify_payment_server DIR [--ignore-keys]");
        return ExitCode::from(2);
    };
    let honour_keys = match args.next().as_deref() {
        None => true,
        Some("--ignore-keys") => false,
        Some(other) => {
            eprintln!("certify_payment_server: unknown flag {other:?}");
            return ExitCode::from(2);
        }
    };
    // A fresh machine has no DIR yet: make it, as the docs' commands expect.
    if let Err(err) = std::fs::create_dir_all(&dir) {
        eprintln!(
            "certify_payment_server: cannot create {}: {err}",
            dir.display()
        );
        return ExitCode::FAILURE;
    }
    if let Err(err) = log_start(&dir) {
        eprintln!("certify_payment_server: cannot write starts.log: {err}");
        return ExitCode::FAILURE;
    }
    let provider = match FakePaymentProvider::open(dir.join("provider.jsonl")) {
        Ok(provider) => Arc::new(provider.honour_idempotency_keys(honour_keys)),
        Err(err) => {
            eprintln!("certify_payment_server: cannot open the provider file: {err}");
            return ExitCode::FAILURE;
        }
    };
    match (PaymentServer { provider })
        .serve((tokio::io::stdin(), tokio::io::stdout()))
        .await
    {
        Ok(running) => {
            let _ = running.waiting().await;
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("certify_payment_server: the MCP session did not start: {err}");
            ExitCode::FAILURE
        }
    }
}
