//! [`OtelObserver`]: effect-exec's observer seam, recorded as OpenTelemetry
//! spans and instruments.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use crate::attributes::{
    self as attr, ERROR_TYPE, GEN_AI_OPERATION_NAME, GEN_AI_TOOL_CALL_ARGUMENTS,
    GEN_AI_TOOL_CALL_ID, GEN_AI_TOOL_NAME, GEN_AI_TOOL_TYPE,
};
use crate::options::{OtelOptions, Semconv};
use effect_core::{EffectResult, EffectStatus};
use effect_exec::{
    EffectEvent, EffectObserver, ExecError, ExecutionStart, ExecutionTrace, ScopeGuard, Step,
    StepScope, metric,
};
use opentelemetry::global::{self, BoxedTracer};
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{Link, SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;

/// The instrumentation scope's name.
pub const SCOPE: &str = "effect-otel";

/// Durations' histogram buckets, in seconds: a ledger commit (milliseconds)
/// up to a slow provider.
const DURATION_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Attempts' histogram buckets.
const ATTEMPT_BUCKETS: [f64; 5] = [1.0, 2.0, 3.0, 5.0, 10.0];

/// Records executions as spans shaped by OpenTelemetry's GenAI
/// tool-execution conventions and counts them on the instruments of
/// [`effect_exec::metric`].
///
/// Give it to an executor ([`EffectExecutor::observer`](effect_exec::EffectExecutor::observer))
/// or to every executor of the process
/// ([`set_global_observer`](effect_exec::set_global_observer));
/// [`install`](crate::install) does the latter, with OTLP exporters.
#[derive(Clone)]
pub struct OtelObserver {
    inner: Arc<Inner>,
}

struct Inner {
    tracer: BoxedTracer,
    instruments: Instruments,
    options: OtelOptions,
    propagator: TraceContextPropagator,
}

impl fmt::Debug for OtelObserver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OtelObserver")
            .field("options", &self.inner.options)
            .finish_non_exhaustive()
    }
}

impl OtelObserver {
    /// An observer on OpenTelemetry's global tracer and meter providers
    /// (whatever pipeline the application installed), with
    /// [`OtelOptions::from_env`].
    pub fn global() -> Self {
        OtelObserver::global_with(OtelOptions::from_env())
    }

    /// An observer on the global providers, with these options.
    pub fn global_with(options: OtelOptions) -> Self {
        let scope = scope(options.semconv);
        let tracer = global::tracer_with_scope(scope.clone());
        let meter = global::meter_with_scope(scope);
        OtelObserver::from_parts(tracer, &meter, options)
    }

    /// An observer on these providers (a test's, or one pipeline of
    /// several), with these options.
    pub fn with_providers<T, M>(
        tracer_provider: &T,
        meter_provider: &M,
        options: OtelOptions,
    ) -> Self
    where
        T: TracerProvider,
        T::Tracer: Tracer + Send + Sync + 'static,
        <T::Tracer as Tracer>::Span: Send + Sync + 'static,
        M: MeterProvider,
    {
        let scope = scope(options.semconv);
        let tracer = BoxedTracer::new(Box::new(tracer_provider.tracer_with_scope(scope.clone())));
        let meter = meter_provider.meter_with_scope(scope);
        OtelObserver::from_parts(tracer, &meter, options)
    }

    fn from_parts(tracer: BoxedTracer, meter: &Meter, options: OtelOptions) -> Self {
        OtelObserver {
            inner: Arc::new(Inner {
                tracer,
                instruments: Instruments::new(meter),
                options,
                propagator: TraceContextPropagator::new(),
            }),
        }
    }

    /// The options it records with.
    pub fn options(&self) -> &OtelOptions {
        &self.inner.options
    }
}

impl EffectObserver for OtelObserver {
    fn record(&self, event: &EffectEvent<'_>) {
        self.inner.instruments.record(event);
    }

    fn execution(&self, start: &ExecutionStart<'_>) -> Option<Box<dyn ExecutionTrace>> {
        let inner = &self.inner;
        let contract = start.contract;
        let mut attributes = vec![
            KeyValue::new(GEN_AI_OPERATION_NAME, "execute_tool"),
            KeyValue::new(GEN_AI_TOOL_NAME, contract.name.to_owned()),
            KeyValue::new(GEN_AI_TOOL_TYPE, "function"),
            KeyValue::new(GEN_AI_TOOL_CALL_ID, start.operation_id.to_owned()),
            KeyValue::new(attr::CONTRACT_VERSION, contract.version.to_owned()),
        ];
        if start.recovery {
            attributes.push(KeyValue::new(attr::RECOVERY, true));
        }
        if inner.options.record_redacted_arguments {
            let key = match inner.options.semconv {
                Semconv::V1_36 => attr::ARGUMENTS,
                Semconv::LatestExperimental => GEN_AI_TOOL_CALL_ARGUMENTS,
            };
            attributes.push(KeyValue::new(key, start.redacted_arguments().to_string()));
        }
        // A recovery starts its own trace, linked to the run that created
        // the operation; a call joins its caller's.
        let (parent, links) = if start.recovery {
            let links = start
                .linked_trace
                .and_then(|context| inner.linked(context))
                .into_iter()
                .collect();
            (Context::new(), links)
        } else {
            (Context::current(), Vec::new())
        };
        let span = inner
            .tracer
            .span_builder(format!("execute_tool {}", contract.name))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .with_links(links)
            .start_with_context(&inner.tracer, &parent);
        Some(Box::new(OtelTrace {
            inner: Arc::clone(inner),
            context: parent.with_span(span),
            steps: Vec::new(),
        }))
    }
}

impl Inner {
    /// The span a stored `traceparent` names, as a link.
    fn linked(&self, traceparent: &str) -> Option<Link> {
        let carrier = HashMap::from([("traceparent".to_owned(), traceparent.to_owned())]);
        let context = self.propagator.extract(&carrier);
        let span_context = context.span().span_context().clone();
        span_context
            .is_valid()
            .then(|| Link::with_context(span_context))
    }
}

/// The instrumentation scope, with the conventions' schema URL.
fn scope(semconv: Semconv) -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .with_schema_url(semconv.schema_url())
        .build()
}

/// One execution's span and its open steps.
struct OtelTrace {
    inner: Arc<Inner>,
    /// The caller's context with the execution span in it.
    context: Context,
    /// The open child spans, innermost last.
    steps: Vec<Context>,
}

impl ExecutionTrace for OtelTrace {
    fn trace_context(&self) -> Option<String> {
        let mut carrier = HashMap::new();
        self.inner
            .propagator
            .inject_context(&self.context, &mut carrier);
        carrier.remove("traceparent")
    }

    fn step_started(&mut self, step: Step<'_>) {
        let (name, attributes) = match step {
            Step::Handler { attempt } => (
                "effect.handler",
                vec![KeyValue::new(attr::ATTEMPT, i64::from(attempt))],
            ),
            Step::Probe => ("effect.probe", Vec::new()),
            Step::LedgerWrite { transition } => (
                "effect.ledger_write",
                vec![KeyValue::new(attr::TRANSITION, transition.to_owned())],
            ),
            _ => ("effect.step", Vec::new()),
        };
        let parent = self.steps.last().unwrap_or(&self.context);
        let span = self
            .inner
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&self.inner.tracer, parent);
        let context = parent.with_span(span);
        self.steps.push(context);
    }

    fn step_finished(&mut self, failure: Option<&'static str>) {
        if let Some(step) = self.steps.pop() {
            let span = step.span();
            if let Some(failure) = failure {
                span.set_attribute(KeyValue::new(attr::OUTCOME, failure));
                span.set_status(Status::error(failure));
            }
            span.end();
        }
    }

    fn step_scope(&self) -> Option<Arc<dyn StepScope>> {
        let context = self.steps.last().unwrap_or(&self.context).clone();
        Some(Arc::new(OtelScope(context)))
    }

    fn record(&mut self, event: &EffectEvent<'_>) {
        let span = self.context.span();
        match *event {
            EffectEvent::Reconciled { answer, .. } => {
                span.set_attribute(KeyValue::new(attr::RECONCILIATION, answer));
            }
            EffectEvent::Quarantined { reason, .. } => {
                span.set_attribute(KeyValue::new(attr::QUARANTINE_REASON, reason));
            }
            EffectEvent::BudgetRefused { .. } => {
                span.set_attribute(KeyValue::new(attr::BUDGET_REFUSED, true));
            }
            _ => {}
        }
    }

    fn finished(mut self: Box<Self>, answer: Result<&EffectResult, &ExecError>) {
        // Steps a panic left open end with the execution.
        while !self.steps.is_empty() {
            self.step_finished(Some("abandoned"));
        }
        let span = self.context.span();
        let error = match answer {
            Ok(result) => {
                span.set_attributes([
                    KeyValue::new(attr::STATUS, result.status.as_str()),
                    KeyValue::new(attr::ATTEMPT, i64::from(result.attempts)),
                    KeyValue::new(attr::REPLAYED, result.duplicate_suppressed),
                    KeyValue::new(attr::IN_PROGRESS, result.in_progress),
                ]);
                error_type(result.status)
            }
            Err(error) => {
                span.set_attribute(KeyValue::new(attr::STATUS, "error"));
                Some(error.kind_name())
            }
        };
        if let Some(error) = error {
            span.set_attribute(KeyValue::new(ERROR_TYPE, error));
            span.set_status(Status::error(error));
        }
        span.end();
    }
}

/// A step's context, attached on the thread that runs the handler: a span
/// the handler starts, a `traceparent` it injects into its request and an
/// effect it executes all join the `effect.handler` span.
struct OtelScope(Context);

impl StepScope for OtelScope {
    fn enter(&self) -> ScopeGuard {
        ScopeGuard::new(self.0.clone().attach())
    }
}

/// The `error.type` of an answer: an effect that did not (or not surely)
/// happen is the tool call's failure; a confirmation, or a wait for an
/// approval or another caller, is not.
fn error_type(status: EffectStatus) -> Option<&'static str> {
    match status {
        EffectStatus::Rejected | EffectStatus::Quarantined | EffectStatus::OutcomeUnknown => {
            Some(status.as_str())
        }
        EffectStatus::Confirmed
        | EffectStatus::AwaitingApproval
        | EffectStatus::Dispatched
        | EffectStatus::Prepared => None,
    }
}

/// The instruments of [`effect_exec::metric`].
struct Instruments {
    executions: Counter<u64>,
    replays: Counter<u64>,
    in_progress: Counter<u64>,
    reconciliations: Counter<u64>,
    quarantines: Counter<u64>,
    attempts: Histogram<u64>,
    handler_duration: Histogram<f64>,
    execution_duration: Histogram<f64>,
    recovery_dispatches: Counter<u64>,
    budget_refusals: Counter<u64>,
}

impl Instruments {
    fn new(meter: &Meter) -> Self {
        let counter = |instrument: metric::Instrument| {
            meter
                .u64_counter(instrument.otel)
                .with_unit(instrument.unit)
                .with_description(instrument.description)
                .build()
        };
        let seconds = |instrument: metric::Instrument| {
            meter
                .f64_histogram(instrument.otel)
                .with_unit(instrument.unit)
                .with_description(instrument.description)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        Instruments {
            executions: counter(metric::EXECUTIONS),
            replays: counter(metric::REPLAYS),
            in_progress: counter(metric::IN_PROGRESS),
            reconciliations: counter(metric::RECONCILIATIONS),
            quarantines: counter(metric::QUARANTINES),
            attempts: meter
                .u64_histogram(metric::ATTEMPTS.otel)
                .with_unit(metric::ATTEMPTS.unit)
                .with_description(metric::ATTEMPTS.description)
                .with_boundaries(ATTEMPT_BUCKETS.to_vec())
                .build(),
            handler_duration: seconds(metric::HANDLER_DURATION),
            execution_duration: seconds(metric::EXECUTION_DURATION),
            recovery_dispatches: counter(metric::RECOVERY_DISPATCHES),
            budget_refusals: counter(metric::BUDGET_REFUSALS),
        }
    }

    fn record(&self, event: &EffectEvent<'_>) {
        let contract = |contract: effect_exec::ContractRef<'_>| {
            vec![
                KeyValue::new(metric::CONTRACT, contract.name.to_owned()),
                KeyValue::new(metric::VERSION, contract.version.to_owned()),
            ]
        };
        let with = |mut attributes: Vec<KeyValue>, key: &'static str, value: &'static str| {
            attributes.push(KeyValue::new(key, value));
            attributes
        };
        match *event {
            EffectEvent::Executed {
                contract: of,
                result,
                duration,
            } => {
                let attributes = with(contract(of), metric::STATUS, result.status.as_str());
                self.executions.add(1, &attributes);
                self.execution_duration
                    .record(duration.as_secs_f64(), &attributes);
                self.attempts
                    .record(u64::from(result.attempts), &attributes);
                if result.duplicate_suppressed {
                    self.replays.add(1, &contract(of));
                }
                if result.in_progress {
                    self.in_progress.add(1, &contract(of));
                }
            }
            EffectEvent::Failed {
                contract: of,
                error,
                duration,
            } => {
                let attributes = with(
                    with(contract(of), metric::STATUS, "error"),
                    ERROR_TYPE,
                    error.kind_name(),
                );
                self.executions.add(1, &attributes);
                self.execution_duration
                    .record(duration.as_secs_f64(), &attributes);
            }
            EffectEvent::HandlerCalled {
                contract: of,
                outcome,
                duration,
            } => self.handler_duration.record(
                duration.as_secs_f64(),
                &with(contract(of), metric::OUTCOME, outcome),
            ),
            EffectEvent::Reconciled {
                contract: of,
                answer,
            } => self
                .reconciliations
                .add(1, &with(contract(of), metric::ANSWER, answer)),
            EffectEvent::Quarantined {
                contract: of,
                reason,
            } => self
                .quarantines
                .add(1, &with(contract(of), metric::REASON, reason)),
            EffectEvent::BudgetRefused { contract: of } => {
                self.budget_refusals.add(1, &contract(of));
            }
            EffectEvent::RecoveryDispatched {
                contract: of,
                outcome,
            } => self
                .recovery_dispatches
                .add(1, &with(contract(of), metric::OUTCOME, outcome)),
            _ => {}
        }
    }
}
