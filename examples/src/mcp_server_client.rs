//! An MCP client calls an effect-backed MCP server's payment tool over an
//! in-process transport. Both sides run their calls through an executor, each
//! with its own SQLite ledger. The server's provider commits the first capture
//! but its acknowledgement is lost; the provider's key is documented to be
//! idempotent, so the server's executor resends with the same key and gets
//! the same payment. The client then repeats its call: its ledger replays the
//! stored result. One payment.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, ensure};
use effect_core::EffectStatus;
use effect_exec::{EffectExecutor, HandlerError, TypedContract};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_mcp::{EffectCall, EffectServer, RemoteTool, ServedTool};
use effect_testkit::provider::{Capture, FakePaymentProvider};
use rmcp::ServiceExt;
use serde::{Deserialize, Serialize};

/// The tool's arguments.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureArgs {
    /// The invoice to capture.
    pub invoice_id: String,
    /// The amount, in cents.
    pub amount_cents: u64,
}

/// What the run showed.
#[derive(Debug)]
pub struct Run {
    /// The annotations the server advertised: (idempotent, destructive, read-only).
    pub annotations: (Option<bool>, Option<bool>, Option<bool>),
    /// The client's first result.
    pub first: EffectStatus,
    /// The client's repeat: status and whether it was replayed.
    pub repeat: (EffectStatus, bool),
    /// The payment the client got.
    pub payment_id: Option<String>,
    /// Capture requests the provider received.
    pub capture_requests: usize,
    /// Payments the provider committed.
    pub committed_payments: usize,
}

impl Run {
    /// Exactly one payment, confirmed on both sides.
    ///
    /// # Errors
    ///
    /// What went wrong, in words.
    pub fn verdict(&self) -> anyhow::Result<()> {
        ensure!(
            self.committed_payments == 1,
            "{} payments committed, expected exactly one",
            self.committed_payments
        );
        ensure!(
            self.first == EffectStatus::Confirmed,
            "first call: {}",
            self.first
        );
        ensure!(
            self.repeat == (EffectStatus::Confirmed, true),
            "repeat: {:?}",
            self.repeat
        );
        ensure!(
            self.payment_id.as_deref() == Some("pay_000001"),
            "payment {:?}",
            self.payment_id
        );
        Ok(())
    }
}

fn contract() -> anyhow::Result<TypedContract<CaptureArgs, Capture>> {
    Ok(
        TypedContract::<CaptureArgs, Capture>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .provider_idempotency_key(|args| Ok(Some(format!("capture:{}", args.invoice_id))))
        // The fake provider, like a payment API's Idempotency-Key header, applies
        // at most one capture per key: a resend with the same key is safe.
        .provider_idempotency_guaranteed(true)
        .build()?,
    )
}

fn executor(path: &Path) -> anyhow::Result<EffectExecutor> {
    let ledger = SqliteLedger::open(path, SqliteOptions::default())
        .with_context(|| format!("opening {}", path.display()))?;
    Ok(EffectExecutor::new(Arc::new(ledger)))
}

/// Runs the server and the client, with their ledgers in `dir`.
///
/// # Errors
///
/// Opening a ledger, connecting, or a call that could not run.
pub async fn run(dir: &Path) -> anyhow::Result<Run> {
    let provider = Arc::new(FakePaymentProvider::new());
    let requests = Arc::new(AtomicUsize::new(0));
    let lose_next = Arc::new(AtomicUsize::new(1));
    let (p, r) = (Arc::clone(&provider), Arc::clone(&requests));
    let capture = move |args: CaptureArgs, call: EffectCall| {
        let (provider, requests, lose_next) =
            (Arc::clone(&p), Arc::clone(&r), Arc::clone(&lose_next));
        async move {
            requests.fetch_add(1, Ordering::SeqCst);
            let key = call.provider_idempotency_key.as_deref();
            let capture = provider.capture(&args.invoice_id, args.amount_cents, key)?;
            if lose_next.swap(0, Ordering::SeqCst) > 0 {
                return Err(HandlerError::unknown("timed out waiting for the provider"));
            }
            Ok(capture)
        }
    };
    let server = EffectServer::new(executor(&dir.join("server.sqlite3"))?).tool(
        ServedTool::new(
            "capture_payment",
            "Capture the payment of an invoice",
            contract()?,
            capture,
        )
        // A capture adds a payment; it does not overwrite anything.
        .destructive(false),
    )?;

    // An in-process transport: the two ends of a duplex pipe.
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await.context("connecting the client")?;
    let tools = client
        .peer()
        .list_all_tools()
        .await
        .context("listing tools")?;
    let annotations = tools
        .first()
        .and_then(|tool| tool.annotations.clone())
        .map(|a| (a.idempotent_hint, a.destructive_hint, a.read_only_hint))
        .unwrap_or_default();

    let remote = RemoteTool::discover(
        client.peer().clone(),
        "capture_payment",
        contract()?,
        executor(&dir.join("client.sqlite3"))?,
    )
    .await?;
    let args = CaptureArgs {
        invoice_id: "INV-1042".into(),
        amount_cents: 1250,
    };
    let first = remote.call(&args).await?;
    let repeat = remote.call(&args).await?;
    Ok(Run {
        annotations,
        first: first.status,
        repeat: (repeat.status, repeat.duplicate_suppressed),
        payment_id: first.output.map(|capture| capture.payment_id),
        capture_requests: requests.load(Ordering::SeqCst),
        committed_payments: provider.committed_count()?,
    })
}
