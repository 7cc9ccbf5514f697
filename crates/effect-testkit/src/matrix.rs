//! The fault matrix: every [`FaultPoint`] against every [`ContractVariant`],
//! with the naive baseline of each fault point beside it.
//!
//! ```
//! use effect_testkit::matrix::Matrix;
//! use effect_testkit::scenario::FaultPoint;
//!
//! let report = Matrix::new()
//!     .faults(&[FaultPoint::None, FaultPoint::AfterCommitBeforeAck])
//!     .run()?;
//! assert_eq!(report.cells.len(), 2 * 4);
//! assert!(report.guarantee_kept);
//! let baseline = report.baseline(FaultPoint::AfterCommitBeforeAck).expect("ran");
//! assert_eq!((baseline.ledger_max_committed, baseline.naive.committed_effect_count), (1, 2));
//! println!("{}", report.to_table());
//! # Ok::<(), effect_testkit::scenario::ScenarioError>(())
//! ```

use std::fmt::Write as _;
use std::sync::Arc;

use effect_core::{Clock, EffectLedger, LedgerError};
use effect_exec::ExecutorOptions;
use serde::{Deserialize, Serialize};

use crate::scenario::{
    ContractVariant, FaultPoint, LedgerFactory, NaiveReport, Scenario, ScenarioError,
    ScenarioReport,
};

/// Runs the fault matrix over the built-in payment scenarios.
#[derive(Clone)]
pub struct Matrix {
    faults: Vec<FaultPoint>,
    variants: Vec<ContractVariant>,
    ledger: Option<LedgerFactory>,
    options: Option<ExecutorOptions>,
}

impl std::fmt::Debug for Matrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matrix")
            .field("faults", &self.faults)
            .field("variants", &self.variants)
            .field("custom_ledger", &self.ledger.is_some())
            .field("options", &self.options)
            .finish()
    }
}

impl Default for Matrix {
    fn default() -> Self {
        Matrix::new()
    }
}

impl Matrix {
    /// Every fault point against every contract variant, on a [`MemoryLedger`](effect_core::MemoryLedger) per cell.
    pub fn new() -> Self {
        Matrix {
            faults: FaultPoint::ALL.to_vec(),
            variants: ContractVariant::ALL.to_vec(),
            ledger: None,
            options: None,
        }
    }

    /// Only these fault points.
    #[must_use]
    pub fn faults(mut self, faults: &[FaultPoint]) -> Self {
        self.faults = faults.to_vec();
        self
    }

    /// Only these contract variants.
    #[must_use]
    pub fn variants(mut self, variants: &[ContractVariant]) -> Self {
        self.variants = variants.to_vec();
        self
    }

    /// A fresh ledger per cell from `ledger` (it must honour the given clock).
    #[must_use]
    pub fn ledger<F>(mut self, ledger: F) -> Self
    where
        F: Fn(Arc<dyn Clock>) -> Result<Arc<dyn EffectLedger>, LedgerError> + Send + Sync + 'static,
    {
        self.ledger = Some(Arc::new(ledger));
        self
    }

    /// The executor options of every cell (default: each scenario's own),
    /// e.g. `ExecutorOptions::default().deferred_outcomes(true)` to run the
    /// matrix in the deferred-outcomes mode.
    #[must_use]
    pub fn executor_options(mut self, options: ExecutorOptions) -> Self {
        self.options = Some(options);
        self
    }

    /// Runs every cell, then the naive baseline of every fault point.
    ///
    /// # Errors
    ///
    /// The first cell that could not run.
    pub fn run(&self) -> Result<MatrixReport, ScenarioError> {
        let mut cells = Vec::with_capacity(self.faults.len() * self.variants.len());
        let mut baselines = Vec::with_capacity(self.faults.len());
        for &fault in &self.faults {
            let mut ledger_max_committed = 0;
            for &variant in &self.variants {
                let mut scenario = Scenario::payment(fault, variant)
                    .expect_only_the_guarantee()
                    .naive_baseline(None);
                if let Some(ledger) = &self.ledger {
                    let ledger = Arc::clone(ledger);
                    scenario = scenario.ledger(move |clock| ledger(clock));
                }
                if let Some(options) = &self.options {
                    scenario = scenario.executor_options(options.clone());
                }
                let cell = scenario.run()?;
                if cell.guarantee.claimed {
                    ledger_max_committed = ledger_max_committed.max(cell.committed_effect_count);
                }
                cells.push(cell);
            }
            let naive = Scenario::payment(fault, ContractVariant::Neither).run_naive()?;
            baselines.push(Baseline {
                fault,
                ledger_max_committed,
                naive,
            });
        }
        let guarantee_kept = cells.iter().all(|c| c.guarantee.kept());
        Ok(MatrixReport {
            cells,
            baselines,
            guarantee_kept,
        })
    }
}

/// The matrix's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct MatrixReport {
    /// One report per (fault point, contract variant), fault-major order.
    pub cells: Vec<ScenarioReport>,
    /// One naive baseline per fault point.
    pub baselines: Vec<Baseline>,
    /// Every cell where the library claims its guarantee kept it.
    pub guarantee_kept: bool,
}

/// A fault point's naive baseline beside the ledger's worst case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Baseline {
    /// The fault point.
    pub fault: FaultPoint,
    /// The most effects any cell of this fault point committed, over cells
    /// where the library claims its guarantee.
    pub ledger_max_committed: usize,
    /// Plain retry-on-error without the ledger.
    pub naive: NaiveReport,
}

impl MatrixReport {
    /// The cell of `fault` under `variant`, if it ran.
    pub fn cell(&self, fault: FaultPoint, variant: ContractVariant) -> Option<&ScenarioReport> {
        self.cells
            .iter()
            .find(|c| c.scenario == fault.as_str() && c.contract == variant)
    }

    /// The baseline of `fault`, if it ran.
    pub fn baseline(&self, fault: FaultPoint) -> Option<&Baseline> {
        self.baselines.iter().find(|b| b.fault == fault)
    }

    /// A plain-text table for a terminal: the cells, then the naive baseline.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<24} {:<15} {:<16} {:>8} {:>8} {:>7} {:>8}  guarantee",
            "fault point", "contract", "status", "attempts", "handler", "probes", "effects"
        );
        for cell in &self.cells {
            let guarantee = match (cell.guarantee.claimed, cell.guarantee.held) {
                (false, _) => "not claimed (false key guarantee)",
                (true, true) => "held",
                (true, false) => "BROKEN",
            };
            let _ = writeln!(
                out,
                "{:<24} {:<15} {:<16} {:>8} {:>8} {:>7} {:>8}  {}",
                cell.scenario,
                cell.contract.as_str(),
                cell.status.as_str(),
                cell.attempts,
                cell.handler_calls,
                cell.probe_calls,
                cell.committed_effect_count,
                guarantee
            );
        }
        let _ = writeln!(out);
        let strategy = self
            .baselines
            .first()
            .map_or("", |b| b.naive.strategy.as_str());
        let _ = writeln!(out, "naive baseline: {strategy}");
        let _ = writeln!(
            out,
            "{:<24} {:>8} {:>8} {:>9}  side by side",
            "fault point", "attempts", "effects", "duplicate"
        );
        for baseline in &self.baselines {
            let _ = writeln!(
                out,
                "{:<24} {:>8} {:>8} {:>9}  with the ledger: {}; naive retry: {}",
                baseline.fault.as_str(),
                baseline.naive.attempts,
                baseline.naive.committed_effect_count,
                if baseline.naive.duplicate_effect_detected {
                    "yes"
                } else {
                    "no"
                },
                captures(baseline.ledger_max_committed),
                captures(baseline.naive.committed_effect_count)
            );
        }
        let _ = writeln!(
            out,
            "\nguarantee {} in every cell where the library claims it",
            if self.guarantee_kept {
                "held"
            } else {
                "BROKEN"
            }
        );
        out
    }
}

fn captures(n: usize) -> String {
    format!("{n} capture{}", if n == 1 { "" } else { "s" })
}
