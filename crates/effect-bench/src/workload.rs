//! The workloads of docs/benchmarks.md, by id and name.

use std::str::FromStr;

/// A workload of docs/benchmarks.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Workload {
    W0,
    W0n,
    W0r,
    W1,
    W1d,
    W1i,
    W2,
    W3,
    W4,
    W4d,
    W5,
    W6,
    W7,
    W8,
    W9,
}

impl Workload {
    pub(crate) const ALL: [Workload; 15] = [
        Workload::W0,
        Workload::W0n,
        Workload::W0r,
        Workload::W1,
        Workload::W1d,
        Workload::W1i,
        Workload::W2,
        Workload::W3,
        Workload::W4,
        Workload::W4d,
        Workload::W5,
        Workload::W6,
        Workload::W7,
        Workload::W8,
        Workload::W9,
    ];

    pub(crate) fn id(self) -> &'static str {
        match self {
            Workload::W0 => "W0",
            Workload::W0n => "W0n",
            Workload::W0r => "W0r",
            Workload::W1 => "W1",
            Workload::W1d => "W1d",
            Workload::W1i => "W1i",
            Workload::W2 => "W2",
            Workload::W3 => "W3",
            Workload::W4 => "W4",
            Workload::W4d => "W4d",
            Workload::W5 => "W5",
            Workload::W6 => "W6",
            Workload::W7 => "W7",
            Workload::W8 => "W8",
            Workload::W9 => "W9",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::W0 => "fsync-limit",
            Workload::W0n => "commit-limit-normal",
            Workload::W0r => "read-limit",
            Workload::W1 => "fresh-full",
            Workload::W1d => "fresh-deferred",
            Workload::W1i => "fresh-intent",
            Workload::W2 => "fresh-normal",
            Workload::W3 => "replay",
            Workload::W4 => "concurrent-full",
            Workload::W4d => "concurrent-deferred",
            Workload::W5 => "contention",
            Workload::W6 => "scan",
            Workload::W7 => "multi-process",
            Workload::W8 => "maintenance",
            Workload::W9 => "console",
        }
    }

    /// Whether the workload runs against a PostgreSQL store. W6 fills the
    /// SQLite file directly; W2 runs with every commit asynchronous (see
    /// `Store::fresh`); the bare limits always run, as the reference of the
    /// ratios (W0 on the PostgreSQL server itself).
    pub(crate) fn runs_on_postgres(self) -> bool {
        !matches!(self, Workload::W6 | Workload::W9)
    }
}

impl FromStr for Workload {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL
            .into_iter()
            .find(|w| w.id().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| {
                format!(
                    "unknown workload {s:?}; expected one of W0, W0n, W0r, W1 … W9, W1d, W1i, W4d"
                )
            })
    }
}
