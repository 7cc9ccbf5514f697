//! The span's shape under each version of the GenAI conventions, on an
//! in-memory exporter (no receiver needed).

use std::sync::Arc;

use effect_core::MemoryLedger;
use effect_exec::EffectExecutor;
use effect_otel::{OtelObserver, OtelOptions, Semconv};
use effect_testkit::provider::FakePaymentProvider;
use opentelemetry::Value as OtelValue;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

use crate::{CARD, Fate, charge, handler, keyed};

fn arguments_attribute(semconv: Semconv) -> (Vec<(String, String)>, String) {
    let spans = InMemorySpanExporter::default();
    let tracing = SdkTracerProvider::builder()
        .with_simple_exporter(spans.clone())
        .build();
    let options = OtelOptions::default()
        .semconv(semconv)
        .record_redacted_arguments(true);
    let observer = OtelObserver::with_providers(&tracing, &SdkMeterProvider::default(), options);
    let executor = EffectExecutor::new(Arc::new(MemoryLedger::new())).observer(Arc::new(observer));
    let provider = Arc::new(FakePaymentProvider::new());
    let contract = keyed("otel_shape").build().unwrap();
    let result = executor
        .execute(
            &contract,
            &charge("INV-S"),
            handler(&provider, Fate::Answered),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(provider.committed_count().unwrap(), 1);
    let finished = spans.get_finished_spans().unwrap();
    let span = finished
        .iter()
        .find(|span| span.name == "execute_tool otel_shape")
        .unwrap();
    let attributes = span
        .attributes
        .iter()
        .filter(|kv| kv.key.as_str().contains("arguments"))
        .map(|kv| {
            let OtelValue::String(text) = &kv.value else {
                panic!("arguments as a string");
            };
            (kv.key.to_string(), text.to_string())
        })
        .collect();
    let schema = span
        .instrumentation_scope
        .schema_url()
        .unwrap_or_default()
        .to_owned();
    (attributes, schema)
}

#[test]
fn the_latest_conventions_put_the_redacted_arguments_under_gen_ai() {
    let (attributes, schema) = arguments_attribute(Semconv::LatestExperimental);
    assert_eq!(schema, opentelemetry_semantic_conventions::SCHEMA_URL);
    assert_eq!(attributes.len(), 1, "{attributes:?}");
    assert_eq!(attributes[0].0, "gen_ai.tool.call.arguments");
    assert!(attributes[0].1.contains("INV-S") && !attributes[0].1.contains(CARD));

    let (attributes, schema) = arguments_attribute(Semconv::V1_36);
    assert_eq!(schema, "https://opentelemetry.io/schemas/1.36.0");
    assert_eq!(attributes.len(), 1, "{attributes:?}");
    assert_eq!(attributes[0].0, "effect.arguments");
}
