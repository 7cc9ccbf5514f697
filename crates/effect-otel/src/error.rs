//! Errors of the OpenTelemetry layer.

/// Why [`install`](crate::install) could not set up telemetry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// An OTLP exporter could not be built (a malformed endpoint).
    #[cfg(feature = "otlp")]
    #[error("the OTLP {signal} exporter cannot be built")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// The exporter's error.
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    /// The process has a global effect observer already.
    #[error("effect telemetry is installed already in this process")]
    AlreadyInstalled {
        /// The executor's refusal.
        #[source]
        source: effect_exec::GlobalObserverSet,
    },
    /// Flushing or shutting down the exporters failed.
    #[error("the telemetry could not be {action}")]
    Export {
        /// `flushed` or `shut down`.
        action: &'static str,
        /// The SDK's error.
        #[source]
        source: opentelemetry_sdk::error::OTelSdkError,
    },
}
