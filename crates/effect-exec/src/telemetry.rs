//! Counters and timings through the `metrics` facade (feature `metrics`).
//!
//! Names follow Prometheus' conventions (`_total` counters, `_seconds`
//! histograms), with the contract's name as a label; an application installs
//! any `metrics` recorder (Prometheus, StatsD, OpenTelemetry) to collect them.
//! Without the feature every function here is empty and costs nothing.
//!
//! - `effect_executions_total{contract, status}`: calls of `execute` (and its
//!   typed and async forms) by the status they ended with.
//! - `effect_replays_total{contract}`: calls answered with an effect an
//!   earlier attempt made (a stored result, or one the probe found).
//! - `effect_in_progress_total{contract}`: calls answered `in_progress`.
//! - `effect_reconciliations_total{contract, probe_status}`: probe answers
//!   reconciliations acted on (`none` without a probe, `failed` for an error).
//! - `effect_quarantined_total{contract}`: operations this process quarantined.
//! - `effect_transition_duration_seconds{transition}`: ledger transitions,
//!   from the call to the durable answer.
//! - `effect_stale_dispatches`: gauge, the stale dispatches the last sweep saw.

use effect_core::EffectResult;

/// A finished call of `execute`.
pub(crate) fn executed(contract: &str, result: &EffectResult) {
    #[cfg(feature = "metrics")]
    {
        let labels = [
            ("contract", contract.to_owned()),
            ("status", result.status.as_str().to_owned()),
        ];
        metrics::counter!("effect_executions_total", &labels).increment(1);
        let contract = [("contract", contract.to_owned())];
        if result.duplicate_suppressed {
            metrics::counter!("effect_replays_total", &contract).increment(1);
        }
        if result.in_progress {
            metrics::counter!("effect_in_progress_total", &contract).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (contract, result);
}

/// A reconciliation acted on this probe answer.
pub(crate) fn reconciled(contract: &str, probe_status: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "effect_reconciliations_total",
        "contract" => contract.to_owned(),
        "probe_status" => probe_status,
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (contract, probe_status);
}

/// This process quarantined an operation of `contract`.
pub(crate) fn quarantined(contract: &str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("effect_quarantined_total", "contract" => contract.to_owned()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = contract;
}

/// One ledger transition took `elapsed` (only with the feature: timing it
/// reads the clock twice).
#[cfg(feature = "metrics")]
pub(crate) fn transition(name: &'static str, elapsed: std::time::Duration) {
    metrics::histogram!("effect_transition_duration_seconds", "transition" => name)
        .record(elapsed.as_secs_f64());
}

/// The last sweep saw this many stale dispatches.
pub(crate) fn stale_dispatches(count: u64) {
    #[cfg(feature = "metrics")]
    #[allow(clippy::cast_precision_loss)] // A gauge of operations, far below 2^52.
    metrics::gauge!("effect_stale_dispatches").set(count as f64);
    #[cfg(not(feature = "metrics"))]
    let _ = count;
}
