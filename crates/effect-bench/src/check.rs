//! `--check`: one JSON line comparing the figures of a run with the targets
//! of docs/benchmarks.md#targets. A target whose workloads did not run (or
//! failed) is not met.
//!
//! A ratio is taken within each run (a workload and its limit measured minutes
//! apart on a shared disk can see very different fsync times), and the median
//! of those per-run ratios is reported.

use serde_json::{Value, json};

use crate::report::Line;
use crate::store::Store;
use crate::workload::Workload;

/// The summary line: `lines` are the medians of `runs`.
pub(crate) fn summary(lines: &[Line], runs: &[Vec<Line>], store: &Store) -> Value {
    let find = |w: Workload| lines.iter().find(|l| l.workload == w && l.ok);
    let rate_in = |run: &[Line], w: Workload| {
        run.iter()
            .find(|l| l.workload == w && l.ok)
            .and_then(|l| l.per_second)
    };
    let extra = |w: Workload, key: &str| find(w).and_then(|l| l.extra(key)).and_then(Value::as_f64);

    let mut targets = Vec::new();
    let mut ratio = |target: &str, numerator: Workload, denominator: Workload, at_least: f64| {
        let per_run: Vec<f64> = runs
            .iter()
            .filter_map(|run| {
                rate_in(run, numerator)
                    .zip(rate_in(run, denominator))
                    .map(|(a, b)| a / b)
            })
            .collect();
        // A failed run of either workload fails the target.
        let complete = per_run.len() == runs.len();
        let value = complete.then(|| median(per_run)).flatten();
        targets.push(entry(target, value, |r| r >= at_least));
    };
    if store.is_postgres() {
        // The server's own limit: a PostgreSQL commit costs a round trip
        // and a WAL flush, so a transition's extra statements weigh more.
        ratio("W1 >= 0.4 x W0", Workload::W1, Workload::W0, 0.4);
    } else {
        ratio("W1 >= 0.45 x W0", Workload::W1, Workload::W0, 0.45);
        ratio("W2 >= 0.4 x W0n", Workload::W2, Workload::W0n, 0.4);
        ratio("W3 >= 0.5 x W0r", Workload::W3, Workload::W0r, 0.5);
    }
    ratio("W1d >= 0.8 x W0", Workload::W1d, Workload::W0, 0.8);
    // Stored intent adds a field to the `prepared` event, not a commit.
    ratio("W1i >= 0.85 x W1", Workload::W1i, Workload::W1, 0.85);
    ratio("W4 >= 2 x W0", Workload::W4, Workload::W0, 2.0);
    ratio("W7 >= 0.3 x W0", Workload::W7, Workload::W0, 0.3);
    let calls = |w: Workload| find(w).and_then(|l| l.handler_calls.map(|c| (c, l.n)));
    for (target, w) in [
        ("W5 handler calls == n", Workload::W5),
        ("W7 handler calls == n", Workload::W7),
    ] {
        let value = calls(w).map(|(c, n)| c as f64 / n as f64);
        targets.push(entry(target, value, |r| r == 1.0));
    }
    for (target, key, bound) in [
        ("W6 list < 2 ms", "list_ms", 2.0),
        ("W6 events < 2 ms", "events_ms", 2.0),
        ("W6 list <= 2 x small ledger", "list_ratio", 2.0),
        ("W6 events <= 2 x small ledger", "events_ratio", 2.0),
    ] {
        let value = extra(Workload::W6, key);
        targets.push(entry(target, value, |v| {
            v < bound || (key.ends_with("ratio") && v <= bound)
        }));
    }
    for (target, w) in [
        ("W4 peak RSS < 64 MB", Workload::W4),
        ("W4d peak RSS < 64 MB", Workload::W4d),
    ] {
        let rss = extra(w, "peak_rss_mb");
        targets.push(entry(target, rss, |mb| mb < 64.0));
    }

    let all_met = targets.iter().all(|t| t["met"] == json!(true));
    json!({
        "workload": "check",
        "store": store.name(),
        "runs": runs.len(),
        "ok": lines.iter().all(|l| l.ok),
        "all_met": all_met,
        "machine": machine(),
        "targets": targets,
    })
}

fn entry(target: &str, value: Option<f64>, met: impl Fn(f64) -> bool) -> Value {
    match value {
        Some(value) => json!({
            "target": target,
            "value": (value * 1000.0).round() / 1000.0,
            "met": met(value),
        }),
        None => json!({"target": target, "value": null, "met": false, "note": "not measured"}),
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    match values.len() {
        0 => None,
        n if n % 2 == 1 => Some(values[mid]),
        _ => Some((values[mid - 1] + values[mid]) / 2.0),
    }
}

fn machine() -> Value {
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_owned())
        .ok();
    json!({"cpus": cpus, "kernel": kernel})
}
