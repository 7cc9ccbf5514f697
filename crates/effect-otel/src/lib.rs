//! OpenTelemetry traces and metrics for the effects of production-agent-systems.
//!
//! [`OtelObserver`] implements effect-exec's observer seam
//! ([`EffectObserver`](effect_exec::EffectObserver)):
//!
//! - **Traces.** Each execution is a span shaped by OpenTelemetry's GenAI
//!   tool-execution conventions: `execute_tool {contract}`, with
//!   `gen_ai.operation.name = execute_tool`, `gen_ai.tool.name` (the
//!   contract's name), `gen_ai.tool.call.id` (the operation id) and
//!   `error.type` when the effect did not surely happen, plus the effect's
//!   own attributes under `effect.` ([`attributes`]): final status, attempt,
//!   replay, reconciliation answer, quarantine reason, contract version.
//!   Child spans time the handler call, each probe and each ledger write. The
//!   span joins the caller's current trace; a recovery worker's execution
//!   starts a trace of its own, linked to the one stored with the operation
//!   by the run that created it. Arguments, outputs, keys and evidence are
//!   never attributes; [`OtelOptions::record_redacted_arguments`] adds the
//!   arguments with their secrets redacted.
//! - **Metrics.** The instruments of [`effect_exec::metric`] (executions by
//!   status, replays, reconciliations by answer, quarantines by reason,
//!   attempts, handler and execution durations, recovery dispatches, budget
//!   refusals), attributed by contract name and version and a status only.
//!
//! `OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental` selects the
//! conventions' latest version this crate pins ([`Semconv`]).
//!
//! It depends on effect-exec and effect-core, never on a store. With the
//! default feature `otlp`, [`install`] sets it all up in one call: OTLP/HTTP
//! (protobuf) exporters, OpenTelemetry's global providers, and the observer
//! for every executor of the process. An application with its own pipeline
//! gives [`OtelObserver::global`] to
//! [`set_global_observer`](effect_exec::set_global_observer) instead.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, MemoryLedger};
//! use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
//! use effect_otel::{OtelObserver, OtelOptions};
//! use opentelemetry_sdk::metrics::SdkMeterProvider;
//! use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
//! use serde_json::{json, Value};
//!
//! let spans = InMemorySpanExporter::default();
//! let tracing = SdkTracerProvider::builder().with_simple_exporter(spans.clone()).build();
//! let observer = OtelObserver::with_providers(&tracing, &SdkMeterProvider::default(), OtelOptions::default());
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new())).observer(Arc::new(observer));
//! let contract = EffectContract::builder("send_email", |args| {
//!     Ok(format!("email:{}", args["to"].as_str().ok_or("missing to")?))
//! })
//! .build()?;
//! let send = |_: Value, _: HandlerContext| Ok::<_, HandlerError>(json!({"id": "msg-1"}));
//! executor.execute(&contract, &json!({"to": "ada@example.com"}), send)?;
//! let names: Vec<_> = spans.get_finished_spans()?.iter().map(|span| span.name.to_string()).collect();
//! assert!(names.contains(&"execute_tool send_email".to_owned()));
//! assert!(names.contains(&"effect.handler".to_owned()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Feature flags
//!
//! - `otlp` (default): [`install`], [`OtelConfig`] and [`OtelGuard`], on
//!   opentelemetry-otlp's HTTP/protobuf exporters with a blocking client.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod attributes;
mod error;
#[cfg(feature = "otlp")]
mod install;
mod observer;
mod options;

pub use error::OtelError;
#[cfg(feature = "otlp")]
pub use install::{OtelConfig, OtelGuard, install};
pub use observer::{OtelObserver, SCOPE};
pub use options::{GEN_AI_LATEST_EXPERIMENTAL, OtelOptions, SEMCONV_OPT_IN_ENV, Semconv};
