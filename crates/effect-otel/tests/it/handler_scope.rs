//! The handler runs inside its `effect.handler` span: a span the handler
//! starts, and an effect it executes, are children of that span, whether the
//! handler runs on the caller's thread, on its own thread under a deadline,
//! or as an async task polled by a runtime worker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_core::MemoryLedger;
use effect_exec::{CallOptions, EffectExecutor, HandlerContext, HandlerError};
use effect_otel::{OtelObserver, OtelOptions};
use effect_testkit::provider::FakePaymentProvider;
use opentelemetry::Context;
use opentelemetry::trace::{SpanId, TraceContextExt, Tracer, TracerProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::{Value, json};

use crate::{charge, keyed};

/// An executor tracing into memory, and what it exported.
fn traced() -> (EffectExecutor, SdkTracerProvider, InMemorySpanExporter) {
    let spans = InMemorySpanExporter::default();
    let tracing = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let observer = OtelObserver::with_providers(
        &tracing,
        &SdkMeterProvider::default(),
        OtelOptions::default(),
    );
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new())).observer(Arc::new(observer));
    (executor, tracing, spans)
}

/// The span named `name` (exactly one).
fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found: Vec<_> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(
        found.len(),
        1,
        "{name}: {:#?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    found[0]
}

/// A capture whose handler records the current span and starts its own
/// `provider.request` span, as an instrumented HTTP client would.
fn capture_in_span(
    provider: &Arc<FakePaymentProvider>,
    tracing: &SdkTracerProvider,
    seen: &Arc<Mutex<Vec<SpanId>>>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    let tracer = tracing.tracer("provider-client");
    let seen = Arc::clone(seen);
    move |args, ctx| {
        seen.lock()
            .unwrap()
            .push(Context::current().span().span_context().span_id());
        let _request = tracer.start("provider.request");
        let invoice = args["invoice_id"].as_str().unwrap_or_default();
        let capture = provider
            .capture(invoice, 1250, ctx.provider_key())
            .map_err(HandlerError::from_error)?;
        Ok(json!({"payment_id": capture.payment_id}))
    }
}

/// Checks the handler saw the `effect.handler` span as current and its own
/// span is that span's child, for one execution.
fn assert_nested(spans: &[SpanData], seen: &[SpanId]) {
    let handler = one(spans, "effect.handler");
    let request = one(spans, "provider.request");
    assert_eq!(seen, [handler.span_context.span_id()]);
    assert_eq!(request.parent_span_id, handler.span_context.span_id());
    assert_eq!(
        request.span_context.trace_id(),
        handler.span_context.trace_id()
    );
}

#[test]
fn a_sync_handler_runs_inside_its_handler_span() {
    for deadline in [None, Some(Duration::from_secs(60))] {
        let (executor, tracing, spans) = traced();
        let provider = Arc::new(FakePaymentProvider::new());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let contract = keyed("otel_scope_sync").build().unwrap();
        let options = deadline.map(CallOptions::deadline).unwrap_or_default();
        let result = executor
            .execute_with(
                &contract,
                &charge("INV-H1"),
                options,
                capture_in_span(&provider, &tracing, &seen),
            )
            .unwrap();
        assert!(result.is_confirmed(), "{result:?}");
        assert_eq!(provider.committed_count().unwrap(), 1);
        assert_nested(&spans.get_finished_spans().unwrap(), &seen.lock().unwrap());
    }
}

#[test]
fn an_async_handler_is_polled_inside_its_handler_span() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (executor, tracing, spans) = traced();
    let provider = Arc::new(FakePaymentProvider::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let contract = keyed("otel_scope_async").build().unwrap();
    let handler = Arc::new(capture_in_span(&provider, &tracing, &seen));
    let result = runtime
        .block_on(executor.execute_async(
            &contract,
            &charge("INV-H2"),
            CallOptions::default(),
            move |args, ctx| {
                let handler = Arc::clone(&handler);
                async move {
                    // Across an await, possibly resumed on another worker.
                    tokio::task::yield_now().await;
                    handler(args, ctx)
                }
            },
        ))
        .unwrap();
    assert!(result.is_confirmed(), "{result:?}");
    assert_eq!(provider.committed_count().unwrap(), 1);
    assert_nested(&spans.get_finished_spans().unwrap(), &seen.lock().unwrap());
}

#[test]
fn an_effect_a_handler_executes_is_a_child_of_its_handler_span() {
    let (executor, _tracing, spans) = traced();
    let executor = Arc::new(executor);
    let provider = Arc::new(FakePaymentProvider::new());
    let outer = keyed("otel_scope_outer").build().unwrap();
    let inner = keyed("otel_scope_inner").build().unwrap();
    let nested = {
        let executor = Arc::clone(&executor);
        let provider = Arc::clone(&provider);
        move |_args: Value, _ctx: HandlerContext| {
            let provider = Arc::clone(&provider);
            let result = executor
                .execute(&inner, &charge("INV-H3-inner"), move |args, ctx| {
                    let invoice = args["invoice_id"].as_str().unwrap_or_default();
                    let capture = provider
                        .capture(invoice, 1250, ctx.provider_key())
                        .map_err(HandlerError::from_error)?;
                    Ok::<_, HandlerError>(json!({"payment_id": capture.payment_id}))
                })
                .map_err(HandlerError::from_error)?;
            Ok::<_, HandlerError>(json!({"inner": result.status.as_str()}))
        }
    };
    let result = executor.execute(&outer, &charge("INV-H3"), nested).unwrap();
    assert!(result.is_confirmed(), "{result:?}");
    assert_eq!(provider.committed_count().unwrap(), 1);
    let finished = spans.get_finished_spans().unwrap();
    let outer_span = one(&finished, "execute_tool otel_scope_outer");
    let inner_span = one(&finished, "execute_tool otel_scope_inner");
    let handlers: Vec<_> = finished
        .iter()
        .filter(|span| {
            span.name == "effect.handler"
                && span.parent_span_id == outer_span.span_context.span_id()
        })
        .collect();
    assert_eq!(handlers.len(), 1);
    assert_eq!(
        inner_span.parent_span_id,
        handlers[0].span_context.span_id()
    );
    assert_eq!(
        inner_span.span_context.trace_id(),
        outer_span.span_context.trace_id()
    );
}
