//! OpenTelemetry for effects: one `install` call in `main`, then every
//! execution is an `execute_tool` span under the agent's own span, and the
//! executor's instruments are exported beside it (docs/observability.md).
//!
//! The agent captures a payment whose acknowledgement is lost; the probe
//! finds the capture. The trace shows the agent's run, the tool execution,
//! its handler call, the probe and each ledger write.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use effect_core::secret::Secret;
use effect_core::{EffectContract, EffectLedger, EffectStatus, OutcomeProbeResult};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_otel::{OtelConfig, OtelOptions};
use effect_testkit::provider::FakePaymentProvider;
use opentelemetry::trace::{TraceContextExt, Tracer};
use opentelemetry::{Context, global};
use serde::Serialize;
use serde_json::{Value, json};

/// What one run did.
#[derive(Debug)]
pub struct OtelRun {
    /// The status the capture answered with.
    pub status: EffectStatus,
    /// Captures the provider committed.
    pub committed_payments: usize,
    /// The collector accepted the traces and metrics.
    pub exported: bool,
}

#[derive(Serialize)]
struct Capture {
    invoice_id: String,
    amount_cents: u64,
    /// Never exported: the executor hands observers redacted arguments only.
    card: Secret<String>,
}

/// Installs the telemetry for `endpoint` (an OTLP/HTTP collector), runs
/// the capture under an agent span, and flushes.
///
/// # Errors
///
/// The telemetry could not be installed, or the ledger or the capture failed.
pub fn run(dir: &Path, endpoint: &str) -> anyhow::Result<OtelRun> {
    // The one call in `main`.
    let telemetry = effect_otel::install(
        OtelConfig::default()
            .endpoint(endpoint)
            .service_name("billing-agent")
            .options(OtelOptions::from_env()),
    )?;

    let provider = Arc::new(FakePaymentProvider::new());
    let ledger: Arc<dyn EffectLedger> = Arc::new(
        SqliteLedger::open(dir.join("ledger.db"), SqliteOptions::default())
            .context("opening the ledger")?,
    );
    let lookup = Arc::clone(&provider);
    let contract = EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .outcome_probe(move |_args, key| {
        let key = key.ok_or("missing key")?;
        Ok(
            match lookup.lookup_by_key(key).map_err(|err| err.to_string())? {
                Some(capture) => {
                    OutcomeProbeResult::committed(json!({"payment_id": capture.payment_id}))
                }
                None => OutcomeProbeResult::not_committed(),
            },
        )
    })
    .build()?;
    let executor = EffectExecutor::new(ledger);
    let capturing = Arc::clone(&provider);
    let capture = move |args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        capturing.capture(invoice, 4200, ctx.provider_key())?;
        Err(HandlerError::unknown("timed out waiting for the provider"))
    };

    // The agent framework's span: the tool execution joins its trace.
    let agent = global::tracer("billing-agent").start("invoke_agent billing");
    let context = Context::current_with_span(agent);
    let result = {
        let _attached = context.clone().attach();
        executor.execute(
            &contract,
            &Capture {
                invoice_id: "INV-7".into(),
                amount_cents: 4200,
                card: Secret::new("tok_visa_4242".into()),
            },
            capture,
        )?
    };
    context.span().end();

    let exported = telemetry.flush().is_ok();
    // Shutting down after a failed flush fails the same way; the run's
    // answer does not depend on the collector.
    let _ = telemetry.shutdown();
    Ok(OtelRun {
        status: result.status,
        committed_payments: provider.committed_count()?,
        exported,
    })
}
