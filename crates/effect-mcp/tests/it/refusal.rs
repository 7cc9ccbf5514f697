//! Error results that mean the tool never ran, as the official Python SDK
//! sends them (`mcp` 2.3, `MCPServer`): uncertain by default, rejections
//! when the RemoteTool is told how to recognize them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::{EffectStatus, MemoryLedger};
use effect_exec::EffectExecutor;
use effect_mcp::{RemoteTool, refusal};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::Value;

use crate::fixture::{CaptureArgs, Reconcile, args, committed, connect, contract};

/// Answers as the Python SDK does: an unknown tool and arguments that fail
/// validation are `isError` results; a tool that raises after it captured
/// is one too.
#[derive(Clone)]
struct PythonLikeServer {
    provider: Arc<FakePaymentProvider>,
    calls: Arc<AtomicUsize>,
}

impl ServerHandler for PythonLikeServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let error = |text: String| Ok(CallToolResult::error(vec![ContentBlock::text(text)]).into());
        let name = request.name.to_string();
        if name != "capture_payment" {
            return error(format!("Unknown tool: {name}"));
        }
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let args: CaptureArgs = match serde_json::from_value::<CaptureArgs>(arguments) {
            Ok(args) if args.amount_cents > 0 => args,
            _ => {
                return error(
                    "Error executing tool capture_payment: 1 validation error for \
                     capture_paymentArguments\namount_cents\n  Input should be greater than 0 \
                     [type=greater_than, input_value=0, input_type=int]"
                        .to_owned(),
                );
            }
        };
        self.provider
            .capture(&args.invoice_id, args.amount_cents, None)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        // The tool acted, then raised a ToolError of its own.
        error("Error executing tool capture_payment: receipt printer offline".to_owned())
    }
}

struct Case {
    name: &'static str,
    arguments: CaptureArgs,
}

fn cases() -> [Case; 2] {
    let mut zero = args("INV-Z");
    zero.amount_cents = 0;
    [
        Case {
            name: "capture_payment_v2",
            arguments: args("INV-U"),
        },
        Case {
            name: "capture_payment",
            arguments: zero,
        },
    ]
}

async fn call(
    server: &PythonLikeServer,
    case: &Case,
    classify: bool,
) -> effect_exec::TypedResult<Capture> {
    let client = connect(server.clone()).await;
    // Built without discovery: the client's own schema check would refuse
    // the bad arguments before the server saw them.
    let mut tool = RemoteTool::new(
        client.peer().clone(),
        case.name,
        contract(&server.provider, Reconcile::Nothing),
        EffectExecutor::new(Arc::new(MemoryLedger::new())),
    );
    if classify {
        tool = tool.refusal_when(refusal::python_sdk);
    }
    tool.call(&case.arguments).await.expect("the call runs")
}

fn server() -> PythonLikeServer {
    PythonLikeServer {
        provider: Arc::new(FakePaymentProvider::new()),
        calls: Arc::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_an_unknown_tool_or_invalid_arguments_result_is_uncertain() {
    let server = server();
    for case in cases() {
        let result = call(&server, &case, false).await;
        assert_eq!(result.status, EffectStatus::Quarantined, "{}", case.name);
        assert_eq!(result.output, None);
    }
    assert_eq!(server.calls.load(Ordering::SeqCst), 2);
    assert_eq!(committed(&server.provider), 0, "no provider effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recognized_refusals_are_rejections_and_never_resent() {
    let server = server();
    for case in cases() {
        for _ in 0..2 {
            let result = call(&server, &case, true).await;
            assert_eq!(result.status, EffectStatus::Rejected, "{}", case.name);
            let error = result.error.as_deref().unwrap_or_default();
            assert!(error.contains("the server refused the call"), "{error}");
        }
    }
    // Each client has its own ledger, so each call reached the server once.
    assert_eq!(server.calls.load(Ordering::SeqCst), 4);
    assert_eq!(committed(&server.provider), 0, "no provider effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_the_tool_raised_after_acting_stays_uncertain_with_the_predicate() {
    let server = server();
    let case = Case {
        name: "capture_payment",
        arguments: args("INV-R"),
    };
    let result = call(&server, &case, true).await;
    assert!(result.is_uncertain(), "{:?}", result.status);
    assert_eq!(committed(&server.provider), 1, "the tool acted once");
}
