//! One output line per workload, in the shape of docs/benchmarks.md, and the
//! medians of several runs.

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use crate::workload::Workload;

/// The result of one workload: the fields of docs/benchmarks.md, then extras.
#[derive(Debug, Clone)]
pub(crate) struct Line {
    pub(crate) workload: Workload,
    pub(crate) n: u64,
    pub(crate) threads: u64,
    pub(crate) seconds: Option<f64>,
    pub(crate) per_second: Option<f64>,
    pub(crate) handler_calls: Option<u64>,
    pub(crate) ok: bool,
    /// Further figures and facts (`store`, `list_ms`, `peak_rss_mb`, `error`, …).
    pub(crate) extra: Vec<(&'static str, Value)>,
}

impl Line {
    /// A measured line: `n` units in `elapsed`.
    pub(crate) fn measured(workload: Workload, n: u64, threads: u64, elapsed: Duration) -> Self {
        let seconds = elapsed.as_secs_f64();
        Line {
            workload,
            n,
            threads,
            seconds: Some(seconds),
            per_second: Some(per_second(n, seconds)),
            handler_calls: None,
            ok: true,
            extra: Vec::new(),
        }
    }

    /// A line whose workload failed: no figure, and why.
    pub(crate) fn failed(
        workload: Workload,
        n: u64,
        threads: u64,
        error: impl Into<String>,
    ) -> Self {
        Line {
            workload,
            n,
            threads,
            seconds: None,
            per_second: None,
            handler_calls: None,
            ok: false,
            extra: vec![("error", Value::String(error.into()))],
        }
    }

    pub(crate) fn handler_calls(mut self, calls: u64) -> Self {
        self.handler_calls = Some(calls);
        self
    }

    pub(crate) fn with(mut self, key: &'static str, value: impl Into<Value>) -> Self {
        self.extra.push((key, value.into()));
        self
    }

    /// Marks the line failed when `condition` does not hold, dropping its figures.
    pub(crate) fn require(mut self, condition: bool, error: impl FnOnce() -> String) -> Self {
        if !condition && self.ok {
            self.ok = false;
            self.seconds = None;
            self.per_second = None;
            self.extra.retain(|(key, _)| !is_figure(key));
            self.extra.push(("error", Value::String(error())));
        }
        self
    }

    pub(crate) fn extra(&self, key: &str) -> Option<&Value> {
        self.extra.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The line as one JSON object, keys in the order of docs/benchmarks.md.
    pub(crate) fn to_json(&self) -> String {
        let mut out = String::from("{");
        let mut field = |key: &str, value: Value| {
            if out.len() > 1 {
                out.push(',');
            }
            // Serializing a `str` or a `Value` cannot fail.
            let _ = write!(out, "{}:{}", Value::from(key), value);
        };
        field("workload", self.workload.id().into());
        field("name", self.workload.name().into());
        field("n", self.n.into());
        field("threads", self.threads.into());
        field("seconds", self.seconds.map(round).into());
        field("per_second", self.per_second.map(round).into());
        field("handler_calls", self.handler_calls.into());
        field("ok", self.ok.into());
        for (key, value) in &self.extra {
            let value = match value.as_f64() {
                Some(number) if value.is_f64() => round(number).into(),
                _ => value.clone(),
            };
            field(key, value);
        }
        out.push('}');
        out
    }
}

/// Extras that are figures, dropped with the main figure when a line fails.
fn is_figure(key: &str) -> bool {
    key.ends_with("_ms") || key.ends_with("_mb") || key.ends_with("_per_second")
}

pub(crate) fn per_second(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        f64::INFINITY
    }
}

/// Four significant decimals are plenty for a benchmark figure.
fn round(x: f64) -> f64 {
    if !x.is_finite() {
        return x;
    }
    let digits = if x.abs() >= 1.0 { 4 } else { 6 };
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// One line per workload: the median of every figure over the runs. A
/// workload that failed in any run fails, with the first error.
pub(crate) fn medians(runs: &[Vec<Line>]) -> Vec<Line> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    if runs.len() == 1 {
        return first.clone();
    }
    first
        .iter()
        .map(|line| {
            let all: Vec<&Line> = runs
                .iter()
                .filter_map(|run| run.iter().find(|l| l.workload == line.workload))
                .collect();
            median_line(&all)
        })
        .collect()
}

fn median_line(lines: &[&Line]) -> Line {
    if let Some(failed) = lines.iter().find(|l| !l.ok) {
        return (*failed).clone().with("runs", lines.len());
    }
    let mut out = lines[0].clone();
    out.seconds = median(lines.iter().filter_map(|l| l.seconds));
    out.per_second = median(lines.iter().filter_map(|l| l.per_second));
    for (key, value) in &mut out.extra {
        if value.is_f64() {
            let values = lines
                .iter()
                .filter_map(|l| l.extra(key).and_then(Value::as_f64));
            // A peak is reported as the worst run, every other figure as the median.
            let combined = if key.starts_with("peak") {
                values.fold(None, |acc: Option<f64>, v| {
                    Some(acc.map_or(v, |a| a.max(v)))
                })
            } else {
                median(values)
            };
            if let Some(number) = combined {
                *value = number.into();
            }
        }
    }
    out.with("runs", lines.len())
}

fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut values: Vec<f64> = values.collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len() % 2 == 1 {
        values[mid]
    } else {
        (values[mid - 1] + values[mid]) / 2.0
    })
}
