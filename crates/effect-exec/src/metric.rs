//! The names of the executor's instruments, defined once for every way they
//! are exported: the `metrics` facade (feature `metrics`) and any
//! [`EffectObserver`](crate::EffectObserver), such as effect-otel's.
//!
//! Each [`Instrument`] carries an OpenTelemetry name (dotted, with a UCUM
//! unit) and the `metrics` facade's name, which is what an OpenTelemetry
//! Prometheus exporter makes of the first (`effect.executions` counted is
//! `effect_executions_total`; `effect.handler.duration` in `s` is
//! `effect_handler_duration_seconds`), so a dashboard reads the same series
//! from either path.
//!
//! ```
//! use effect_exec::metric;
//!
//! assert_eq!(metric::EXECUTIONS.otel, "effect.executions");
//! assert_eq!(metric::EXECUTIONS.facade, "effect_executions_total");
//! assert!(metric::ALL.iter().all(|instrument| !instrument.description.is_empty()));
//! ```
//!
//! Attributes are low-cardinality only: the contract's name and version, a
//! status or an answer; never an operation id, an argument or a key.

/// What an instrument measures and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstrumentKind {
    /// A monotonic count.
    Counter,
    /// A distribution of values (durations, attempts).
    Histogram,
    /// A value set to what was last observed.
    Gauge,
}

/// One instrument: its names, unit and meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Instrument {
    /// The OpenTelemetry instrument name.
    pub otel: &'static str,
    /// The `metrics` facade's name (Prometheus conventions).
    pub facade: &'static str,
    /// The UCUM unit (`s`, or an annotation such as `{execution}`).
    pub unit: &'static str,
    /// Counter, histogram or gauge.
    pub kind: InstrumentKind,
    /// One line on what it counts.
    pub description: &'static str,
    /// The attribute keys it carries (OpenTelemetry names).
    pub attributes: &'static [&'static str],
}

/// Attribute: the contract's name.
pub const CONTRACT: &str = "effect.contract.name";
/// Attribute: the contract's version.
pub const VERSION: &str = "effect.contract.version";
/// Attribute: the status an execution ended with (`confirmed`, …).
pub const STATUS: &str = "effect.status";
/// Attribute: what a reconciliation acted on (see [`RECONCILIATIONS`]).
pub const ANSWER: &str = "effect.reconciliation.answer";
/// Attribute: why an operation was quarantined (see [`QUARANTINES`]).
pub const REASON: &str = "effect.quarantine.reason";
/// Attribute: what a handler call or a recovery dispatch came to.
pub const OUTCOME: &str = "effect.outcome";

/// Calls of `execute` (and its typed, prepared and async forms) by the
/// status they ended with.
pub const EXECUTIONS: Instrument = Instrument {
    otel: "effect.executions",
    facade: "effect_executions_total",
    unit: "{execution}",
    kind: InstrumentKind::Counter,
    description: "Effect executions by the status they ended with",
    attributes: &[CONTRACT, VERSION, STATUS],
};

/// Executions answered with an effect an earlier attempt made.
pub const REPLAYS: Instrument = Instrument {
    otel: "effect.replays",
    facade: "effect_replays_total",
    unit: "{execution}",
    kind: InstrumentKind::Counter,
    description: "Executions answered with an effect an earlier attempt made",
    attributes: &[CONTRACT, VERSION],
};

/// Executions answered `in_progress` (another caller holds the dispatch).
pub const IN_PROGRESS: Instrument = Instrument {
    otel: "effect.in_progress",
    facade: "effect_in_progress_total",
    unit: "{execution}",
    kind: InstrumentKind::Counter,
    description: "Executions answered in progress: another caller holds the dispatch",
    attributes: &[CONTRACT, VERSION],
};

/// Reconciliations by what they acted on: a probe's answer (`committed`,
/// `not_committed`, `pending`, `unknown`, `conflict`), `failed` (the probe failed),
/// `guaranteed_key` (no probe, a guaranteed provider key), `not_sent` (the
/// handler reported that nothing left the process), `postcondition_failed`
/// (an output failed the postcondition: quarantined), `none` (no basis), or
/// `operator` (a manual resolution).
pub const RECONCILIATIONS: Instrument = Instrument {
    otel: "effect.reconciliations",
    facade: "effect_reconciliations_total",
    unit: "{reconciliation}",
    kind: InstrumentKind::Counter,
    description: "Reconciliations of uncertain outcomes by what they acted on",
    attributes: &[CONTRACT, VERSION, ANSWER],
};

/// Operations this process quarantined, by reason: `no_basis` (no probe and
/// no guaranteed key), `key_expired`, `probe_failed`, `probe_unknown`,
/// `handler_may_still_run`, `postcondition_failed`.
pub const QUARANTINES: Instrument = Instrument {
    otel: "effect.quarantined",
    facade: "effect_quarantined_total",
    unit: "{operation}",
    kind: InstrumentKind::Counter,
    description: "Operations quarantined for an operator's decision",
    attributes: &[CONTRACT, VERSION, REASON],
};

/// Dispatch attempts an execution's operation had when it ended.
pub const ATTEMPTS: Instrument = Instrument {
    otel: "effect.attempts",
    facade: "effect_attempts",
    unit: "{attempt}",
    kind: InstrumentKind::Histogram,
    description: "Dispatch attempts of an operation when its execution ended",
    attributes: &[CONTRACT, VERSION, STATUS],
};

/// Time in the handler, per call, by what it came to (`returned`,
/// `rejected`, `failed`, `not_sent`, `timed_out`).
pub const HANDLER_DURATION: Instrument = Instrument {
    otel: "effect.handler.duration",
    facade: "effect_handler_duration_seconds",
    unit: "s",
    kind: InstrumentKind::Histogram,
    description: "Time a handler call took, up to its return or its deadline",
    attributes: &[CONTRACT, VERSION, OUTCOME],
};

/// Time of a whole execution, from the call to its answer.
pub const EXECUTION_DURATION: Instrument = Instrument {
    otel: "effect.execution.duration",
    facade: "effect_execution_duration_seconds",
    unit: "s",
    kind: InstrumentKind::Histogram,
    description: "Time of an execution from the call to its answer, ledger writes included",
    attributes: &[CONTRACT, VERSION, STATUS],
};

/// Operations a recovery worker dispatched, by what the pass counted
/// (`confirmed`, `rejected`, `quarantined`, `unsettled`, `failed`, …).
pub const RECOVERY_DISPATCHES: Instrument = Instrument {
    otel: "effect.recovery.dispatches",
    facade: "effect_recovery_dispatches_total",
    unit: "{operation}",
    kind: InstrumentKind::Counter,
    description: "Operations left behind that a recovery worker dispatched",
    attributes: &[CONTRACT, VERSION, OUTCOME],
};

/// Claims a budget refused.
pub const BUDGET_REFUSALS: Instrument = Instrument {
    otel: "effect.budget.refusals",
    facade: "effect_budget_refusals_total",
    unit: "{claim}",
    kind: InstrumentKind::Counter,
    description: "Dispatch claims a budget refused",
    attributes: &[CONTRACT, VERSION],
};

/// Ledger transitions, from the call to the durable answer (facade only:
/// in a trace each write is a span).
pub const TRANSITION_DURATION: Instrument = Instrument {
    otel: "effect.transition.duration",
    facade: "effect_transition_duration_seconds",
    unit: "s",
    kind: InstrumentKind::Histogram,
    description: "Time of a ledger transition, from the call to the durable answer",
    attributes: &["effect.transition"],
};

/// The stale dispatches the last sweep saw (facade only).
pub const STALE_DISPATCHES: Instrument = Instrument {
    otel: "effect.stale_dispatches",
    facade: "effect_stale_dispatches",
    unit: "{operation}",
    kind: InstrumentKind::Gauge,
    description: "Stale dispatches the last sweep saw",
    attributes: &[],
};

/// Every instrument, in the order of the docs' table.
pub const ALL: [Instrument; 12] = [
    EXECUTIONS,
    REPLAYS,
    IN_PROGRESS,
    RECONCILIATIONS,
    QUARANTINES,
    ATTEMPTS,
    HANDLER_DURATION,
    EXECUTION_DURATION,
    RECOVERY_DISPATCHES,
    BUDGET_REFUSALS,
    TRANSITION_DURATION,
    STALE_DISPATCHES,
];
