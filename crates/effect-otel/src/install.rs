//! [`install`]: OTLP/HTTP exporters, OpenTelemetry's global providers and
//! the process's effect observer, in one call from `main`.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::global;
use opentelemetry_otlp::{MetricExporter, Protocol, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::error::OtelError;
use crate::observer::OtelObserver;
use crate::options::OtelOptions;

/// Where and how [`install`] exports.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtelConfig {
    /// The OTLP/HTTP base endpoint (`http://collector:4318`); traces go to
    /// its `/v1/traces`, metrics to `/v1/metrics`. `None` (the default)
    /// leaves it to the exporters: `OTEL_EXPORTER_OTLP_ENDPOINT` and the
    /// per-signal variables, else `http://localhost:4318`.
    pub endpoint: Option<String>,
    /// The `service.name` resource attribute. `None`: the SDK's default
    /// (`OTEL_SERVICE_NAME`, else `unknown_service`).
    pub service_name: Option<String>,
    /// How often metrics are exported. Default 60 s.
    pub metric_interval: Duration,
    /// Also make these OpenTelemetry's global tracer and meter providers and
    /// W3C trace context its propagator (default true), so the
    /// application's own spans, an agent framework's among them, share the
    /// pipeline and parent the effects' spans.
    pub set_global_providers: bool,
    /// What the observer records.
    pub options: OtelOptions,
}

impl Default for OtelConfig {
    fn default() -> Self {
        OtelConfig {
            endpoint: None,
            service_name: None,
            metric_interval: Duration::from_secs(60),
            set_global_providers: true,
            options: OtelOptions::from_env(),
        }
    }
}

impl OtelConfig {
    /// Exports to this OTLP/HTTP base endpoint.
    #[must_use]
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoint = Some(endpoint.into());
        self
    }

    /// Names the service.
    #[must_use]
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = Some(name.into());
        self
    }

    /// Exports metrics this often.
    #[must_use]
    pub fn metric_interval(mut self, interval: Duration) -> Self {
        self.metric_interval = interval;
        self
    }

    /// Sets (or not) OpenTelemetry's global providers.
    #[must_use]
    pub fn set_global_providers(mut self, set: bool) -> Self {
        self.set_global_providers = set;
        self
    }

    /// Records with these options.
    #[must_use]
    pub fn options(mut self, options: OtelOptions) -> Self {
        self.options = options;
        self
    }
}

/// Sets up OpenTelemetry for every executor of the process: OTLP/HTTP
/// (protobuf) exporters of traces (batched) and metrics (periodic), the
/// global providers (unless told not to), and an [`OtelObserver`] as
/// effect-exec's global observer. Keep the guard for the life of `main`:
/// dropping it flushes what is buffered and shuts the exporters down.
///
/// Call it outside an async runtime's worker, or within one: the exporters
/// send from threads of their own.
///
/// ```
/// use std::sync::Arc;
/// use effect_core::{EffectContract, MemoryLedger};
/// use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
/// use effect_otel::OtelConfig;
/// use serde_json::{json, Value};
///
/// // Nothing listens on this port: the exports fail quietly, the effects run.
/// let telemetry = effect_otel::install(
///     OtelConfig::default().endpoint("http://127.0.0.1:9").service_name("billing-agent"),
/// )?;
/// let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
/// let contract = EffectContract::builder("send_email", |args| {
///     Ok(format!("email:{}", args["to"].as_str().ok_or("missing to")?))
/// })
/// .build()?;
/// let send = |_: Value, _: HandlerContext| Ok::<_, HandlerError>(json!({"id": "msg-1"}));
/// assert!(executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?.is_confirmed());
/// drop(telemetry);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`OtelError::Exporter`] for a malformed endpoint;
/// [`OtelError::AlreadyInstalled`] when the process has an effect observer.
pub fn install(config: OtelConfig) -> Result<OtelGuard, OtelError> {
    // Without a process-wide provider, reqwest's client panics when built
    // in a build where another crate selected `rustls-no-provider`. An
    // application's own choice stays: this only fills the gap.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race to another installer leaves that provider: fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    let endpoint = |path: &str| {
        config
            .endpoint
            .as_ref()
            .map(|base| format!("{}/{path}", base.trim_end_matches('/')))
    };
    let mut spans = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(endpoint) = endpoint("v1/traces") {
        spans = spans.with_endpoint(endpoint);
    }
    let spans = spans.build().map_err(|source| OtelError::Exporter {
        signal: "traces",
        source,
    })?;
    let mut metrics = MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary);
    if let Some(endpoint) = endpoint("v1/metrics") {
        metrics = metrics.with_endpoint(endpoint);
    }
    let metrics = metrics.build().map_err(|source| OtelError::Exporter {
        signal: "metrics",
        source,
    })?;
    let mut resource = Resource::builder();
    if let Some(name) = &config.service_name {
        resource = resource.with_service_name(name.clone());
    }
    let resource = resource.build();
    let tracer_provider = SdkTracerProvider::builder()
        .with_batch_exporter(spans)
        .with_resource(resource.clone())
        .build();
    let meter_provider = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(metrics)
                .with_interval(config.metric_interval)
                .build(),
        )
        .with_resource(resource)
        .build();
    let guard = OtelGuard {
        tracer_provider,
        meter_provider,
        shut_down: false,
    };
    let observer = OtelObserver::with_providers(
        &guard.tracer_provider,
        &guard.meter_provider,
        config.options,
    );
    effect_exec::set_global_observer(Arc::new(observer))
        .map_err(|source| OtelError::AlreadyInstalled { source })?;
    if config.set_global_providers {
        global::set_tracer_provider(guard.tracer_provider.clone());
        global::set_meter_provider(guard.meter_provider.clone());
        global::set_text_map_propagator(TraceContextPropagator::new());
    }
    Ok(guard)
}

/// The exporters [`install`] set up; dropping it flushes and shuts them down.
#[derive(Debug)]
pub struct OtelGuard {
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    shut_down: bool,
}

impl OtelGuard {
    /// Exports what is buffered now (finished spans, the metrics' current
    /// values), waiting for the collector's answer.
    ///
    /// # Errors
    ///
    /// [`OtelError::Export`] when an export failed.
    pub fn flush(&self) -> Result<(), OtelError> {
        let failed = |source| OtelError::Export {
            action: "flushed",
            source,
        };
        self.tracer_provider.force_flush().map_err(failed)?;
        self.meter_provider.force_flush().map_err(failed)
    }

    /// Flushes and shuts the exporters down; later spans and metrics are
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`OtelError::Export`] when the last export failed.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shut_down = true;
        let failed = |source| OtelError::Export {
            action: "shut down",
            source,
        };
        let traces = self.tracer_provider.shutdown().map_err(failed);
        let metrics = self.meter_provider.shutdown().map_err(failed);
        traces.and(metrics)
    }

    /// The tracer provider, for the application's own tracers.
    pub fn tracer_provider(&self) -> &SdkTracerProvider {
        &self.tracer_provider
    }

    /// The meter provider, for the application's own meters.
    pub fn meter_provider(&self) -> &SdkMeterProvider {
        &self.meter_provider
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        if !self.shut_down {
            // Best effort: a collector that is gone loses what was buffered.
            let _ = self.tracer_provider.shutdown();
            let _ = self.meter_provider.shutdown();
        }
    }
}
