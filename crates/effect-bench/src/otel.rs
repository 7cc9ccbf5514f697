//! `--otel`: effect-otel's observer on every executor of this process, its
//! spans and metrics going through the OpenTelemetry SDK (batched spans,
//! periodic metrics) to exporters that discard them, so W1 with the flag
//! beside W1 without it is what the integration costs, not a collector.
//! W4 and W7 run in child processes, which install it too (told by
//! [`CHILD_ENV`]).

use std::future::{Future, ready};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context;
use effect_otel::{OtelObserver, OtelOptions};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};

/// An exporter that accepts everything and sends nothing.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    fn export(&self, _batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        ready(Ok(()))
    }
}

impl PushMetricExporter for Discard {
    fn export(&self, _metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        ready(Ok(()))
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

/// The providers behind the observer; dropped at the end of the run.
#[derive(Debug)]
pub(crate) struct Providers {
    _tracing: SdkTracerProvider,
    _metrics: SdkMeterProvider,
}

/// Set in a worker process's environment when the benchmark runs with
/// `--otel`.
pub(crate) const CHILD_ENV: &str = "EFFECT_BENCH_OTEL";

static ENABLED: AtomicBool = AtomicBool::new(false);

/// This process records with the observer (so its workers do too).
pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// A worker process started by a benchmark run with `--otel`.
pub(crate) fn wanted_by_parent() -> bool {
    std::env::var_os(CHILD_ENV).is_some_and(|value| value == "1")
}

/// Sets effect-otel's observer as the process's.
pub(crate) fn install() -> anyhow::Result<Providers> {
    let tracing = SdkTracerProvider::builder()
        .with_batch_exporter(Discard)
        .build();
    let metrics = SdkMeterProvider::builder()
        .with_reader(PeriodicReader::builder(Discard).build())
        .build();
    let observer = OtelObserver::with_providers(&tracing, &metrics, OtelOptions::default());
    effect_exec::set_global_observer(Arc::new(observer))
        .context("installing the OpenTelemetry observer")?;
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Providers {
        _tracing: tracing,
        _metrics: metrics,
    })
}
