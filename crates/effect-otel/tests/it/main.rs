//! effect-otel exporting over OTLP/HTTP (protobuf) to a receiver on
//! loopback, as an application would after `install`: the spans' names,
//! parents, links and attributes, the metric points, and no argument, key
//! or planted card token anywhere in what was sent.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod handler_scope;
mod receiver;
mod recovery;
mod scenarios;
mod shape;

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use effect_core::secret::Secret;
use effect_core::{EffectContract, EffectContractBuilder, OutcomeProbeResult};
use effect_exec::{HandlerContext, HandlerError};
use effect_otel::{OtelConfig, OtelGuard, OtelOptions, Semconv};
use effect_testkit::provider::FakePaymentProvider;
use opentelemetry::trace::{Span as _, TraceContextExt, Tracer};
use opentelemetry::{Context, global};
use serde::Serialize;
use serde_json::{Value, json};

use crate::receiver::{Point, Receiver, Span};

/// A card token planted in every call's arguments as a secret: it must
/// appear in no byte the receiver gets.
pub const CARD: &str = "tok_card_4242_PLANTED_7f3a";

/// The process's telemetry: one receiver, one `install`.
#[derive(Debug)]
pub struct Telemetry {
    pub receiver: Receiver,
    guard: OtelGuard,
}

static TELEMETRY: LazyLock<Telemetry> = LazyLock::new(|| {
    let receiver = Receiver::start();
    let guard = effect_otel::install(
        OtelConfig::default()
            .endpoint(receiver.endpoint.clone())
            .service_name("effect-otel-tests")
            // Exported when a test flushes, not on a timer.
            .metric_interval(Duration::from_secs(3600))
            .options(
                OtelOptions::default()
                    .semconv(Semconv::V1_36)
                    .record_redacted_arguments(true),
            ),
    )
    .unwrap();
    Telemetry { receiver, guard }
});

pub fn telemetry() -> &'static Telemetry {
    &TELEMETRY
}

impl Telemetry {
    /// Exports everything finished so far and returns what the receiver has.
    pub fn flushed(&self) -> (Vec<Span>, Vec<Point>) {
        self.guard.flush().unwrap();
        (self.receiver.spans(), self.receiver.points())
    }
}

/// A capture's arguments, the card a secret.
#[derive(Debug, Serialize)]
pub struct Charge {
    pub invoice_id: String,
    pub amount_cents: u64,
    pub card: Secret<String>,
}

pub fn charge(invoice: &str) -> Charge {
    Charge {
        invoice_id: invoice.to_owned(),
        amount_cents: 1250,
        card: Secret::new(CARD.to_owned()),
    }
}

/// A capture contract named `name` (each test its own, so the shared
/// metrics are told apart): operation id `{name}:{invoice}`.
pub fn contract(name: &'static str) -> EffectContractBuilder {
    EffectContract::builder(name, move |args| {
        Ok(format!(
            "{name}:{}",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
}

/// With the provider key `{name}-key:{invoice}`.
pub fn keyed(name: &'static str) -> EffectContractBuilder {
    contract(name).provider_idempotency_key(move |args| {
        Ok(args["invoice_id"]
            .as_str()
            .map(|invoice| format!("{name}-key:{invoice}")))
    })
}

/// The provider's lookup by key, as an outcome probe.
pub fn probe(
    provider: &Arc<FakePaymentProvider>,
) -> impl Fn(&Value, Option<&str>) -> Result<OutcomeProbeResult, effect_core::CallbackError>
+ Send
+ Sync
+ 'static {
    let provider = Arc::clone(provider);
    move |_args, key| {
        let key = key.ok_or("missing key")?;
        Ok(
            match provider.lookup_by_key(key).map_err(|err| err.to_string())? {
                Some(capture) => {
                    OutcomeProbeResult::committed(json!({"payment_id": capture.payment_id}))
                }
                None => OutcomeProbeResult::not_committed(),
            },
        )
    }
}

/// What becomes of a handler call.
#[derive(Debug, Clone, Copy)]
pub enum Fate {
    /// The provider commits and answers.
    Answered,
    /// The provider commits; its answer is lost.
    LostAck,
    /// The process dies before sending.
    AbortBeforeSend,
}

/// A capture through the fake provider, meeting `fate`.
pub fn handler(
    provider: &Arc<FakePaymentProvider>,
    fate: Fate,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Clone + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |args, ctx| {
        if let Fate::AbortBeforeSend = fate {
            std::process::abort();
        }
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        let capture = provider
            .capture(invoice, 1250, ctx.provider_key())
            .map_err(HandlerError::from_error)?;
        match fate {
            Fate::LostAck => Err(HandlerError::unknown("timed out waiting for the provider")),
            _ => Ok(json!({"payment_id": capture.payment_id})),
        }
    }
}

/// Runs `work` inside an agent framework's span, as its current context:
/// the answer and the agent span's (trace id, span id).
pub fn in_agent_run<T>(work: impl FnOnce() -> T) -> (T, (Vec<u8>, Vec<u8>)) {
    let tracer = global::tracer("agent-framework");
    let span = tracer.start("agent.run");
    let ids = (
        span.span_context().trace_id().to_bytes().to_vec(),
        span.span_context().span_id().to_bytes().to_vec(),
    );
    let context = Context::current_with_span(span);
    let answer = {
        let _attached = context.clone().attach();
        work()
    };
    context.span().end();
    (answer, ids)
}

/// The one execution span of operation `id`.
pub fn execution<'a>(spans: &'a [Span], id: &str) -> &'a Span {
    let found: Vec<_> = spans
        .iter()
        .filter(|span| {
            span.name.starts_with("execute_tool ") && span.attr("gen_ai.tool.call.id") == Some(id)
        })
        .collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    found[0]
}

/// The children of `parent`, by name (ledger writes by transition).
pub fn children(spans: &[Span], parent: &Span) -> Vec<String> {
    let mut names: Vec<String> = spans
        .iter()
        .filter(|span| span.trace_id == parent.trace_id && span.parent_span_id == parent.span_id)
        .map(|span| match span.attr("effect.transition") {
            Some(transition) => format!("{}:{transition}", span.name),
            None => span.name.clone(),
        })
        .collect();
    names.sort();
    names
}

/// The value of metric `name` at exactly these attributes (0 when absent).
pub fn point(points: &[Point], name: &str, attributes: &[(&str, &str)]) -> f64 {
    points
        .iter()
        .find(|point| {
            point.name == name
                && point.attributes.len() == attributes.len()
                && attributes.iter().all(|(key, value)| {
                    point.attributes.get(*key).map(String::as_str) == Some(value)
                })
        })
        .map_or(0.0, |point| point.value)
}

/// Nothing the receiver got holds the card token (and the check can see:
/// an invoice id sent is found the same way).
pub fn assert_no_card(seen: &str) {
    let receiver = &telemetry().receiver;
    assert!(receiver.requests() > 0);
    assert!(
        receiver.bytes_contain(seen.as_bytes()),
        "the byte check finds {seen}"
    );
    assert!(
        !receiver.bytes_contain(CARD.as_bytes()),
        "the card token was exported"
    );
}
