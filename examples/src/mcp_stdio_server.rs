//! An effect-backed MCP server that a host starts as a command and talks to
//! over stdio: a payment tool whose calls are recorded in a SQLite ledger
//! before they run, a fake payment provider kept in a file, and the
//! `serverInfo` and instructions a host shows.
//!
//! The binary (`mcp_stdio_server.rs` beside `src/`) parses its arguments
//! with [`Args::parse`] and serves [`server`] on stdin and stdout.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use effect_exec::{EffectExecutor, ExecutorOptions, TypedContract, TypedProbe};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_mcp::{EffectCall, EffectServer, ServedTool};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::model::Implementation;
use serde::{Deserialize, Serialize};

/// The name the server gives in `serverInfo`.
pub const SERVER_NAME: &str = "payments-example";

/// What the server tells a host's model, in `instructions`.
pub const INSTRUCTIONS: &str = "`capture_payment` captures an invoice's payment once: calling it \
again with the same invoice returns the same payment. If a result says the outcome is unknown, \
do not call it again; tell the user the payment is awaiting confirmation under the operation id \
it gives.";

/// The usage line.
pub const USAGE: &str =
    "usage: mcp_stdio_server --db LEDGER.sqlite3 [--provider FILE] [--lease-secs N]";

/// The tool's arguments.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    /// The invoice to capture.
    pub invoice_id: String,
    /// The amount, in cents.
    pub amount_cents: u64,
}

/// The command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Args {
    /// The SQLite ledger (created when missing).
    pub db: PathBuf,
    /// The fake provider's file (default: the ledger's path + `.provider.jsonl`).
    pub provider: PathBuf,
    /// The dispatch lease (default 30 s).
    pub lease: Duration,
}

impl Args {
    /// Reads `--db PATH [--provider PATH] [--lease-secs N]`.
    ///
    /// # Errors
    ///
    /// A missing `--db`, an unknown flag or a flag without its value.
    pub fn parse(args: impl IntoIterator<Item = String>) -> anyhow::Result<Args> {
        let (mut db, mut provider, mut lease) = (None, None, Duration::from_secs(30));
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let mut value = || args.next().with_context(|| format!("{flag} needs a value"));
            match flag.as_str() {
                "--db" => db = Some(PathBuf::from(value()?)),
                "--provider" => provider = Some(PathBuf::from(value()?)),
                "--lease-secs" => {
                    let secs: u64 = value()?
                        .parse()
                        .context("--lease-secs takes whole seconds")?;
                    lease = Duration::from_secs(secs);
                }
                other => bail!("unknown argument {other:?}; {USAGE}"),
            }
        }
        let db = db.with_context(|| format!("--db is required; {USAGE}"))?;
        let provider = provider.unwrap_or_else(|| {
            let mut path = db.clone().into_os_string();
            path.push(".provider.jsonl");
            PathBuf::from(path)
        });
        Ok(Args {
            db,
            provider,
            lease,
        })
    }
}

/// The contract: one capture per invoice, keyed for the provider, with an
/// outcome probe that looks the capture up by key.
fn contract(
    provider: &Arc<FakePaymentProvider>,
) -> anyhow::Result<TypedContract<CaptureArgs, Capture>> {
    let provider = Arc::clone(provider);
    Ok(
        TypedContract::<CaptureArgs, Capture>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
        .outcome_probe(move |_args, key| {
            let key = key.ok_or("no provider key")?;
            Ok(
                match provider.lookup_by_key(key).map_err(|e| e.to_string())? {
                    Some(capture) => {
                        let id = capture.payment_id.clone();
                        TypedProbe::committed(capture).provider_operation_id(id)
                    }
                    None => TypedProbe::not_committed(),
                },
            )
        })
        .build()?,
    )
}

/// The server `args` describe: its ledger and provider opened, its tool added.
///
/// # Errors
///
/// The ledger or the provider file cannot be opened.
pub fn server(args: &Args) -> anyhow::Result<EffectServer> {
    // A renewal may wait the busy timeout: keep the lease at least twice it.
    let busy = (args.lease / 3).min(Duration::from_secs(5));
    let ledger = SqliteLedger::open(&args.db, SqliteOptions::default().busy_timeout(busy))
        .with_context(|| format!("opening the ledger {}", args.db.display()))?;
    let provider = Arc::new(
        FakePaymentProvider::open(&args.provider)
            .with_context(|| format!("opening the provider file {}", args.provider.display()))?,
    );
    let options = ExecutorOptions::default().dispatch_lease(args.lease);
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let p = Arc::clone(&provider);
    let capture = move |args: CaptureArgs, call: EffectCall| {
        let provider = Arc::clone(&p);
        async move {
            let key = call.provider_idempotency_key.as_deref();
            Ok(provider.capture(&args.invoice_id, args.amount_cents, key)?)
        }
    };
    let tool = ServedTool::new(
        "capture_payment",
        "Capture the payment of an invoice",
        contract(&provider)?,
        capture,
    )
    .destructive(false);
    Ok(EffectServer::new(executor)
        .with_server_info(
            Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION"))
                .with_title("Payments (production-agent-systems example)"),
        )
        .with_instructions(INSTRUCTIONS)
        .tool(tool)?)
}
