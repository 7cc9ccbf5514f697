//! [`CertificationReport`]: what each fault did to the user's provider, and
//! whether the contract's declared guarantees held.

use effect_core::{EffectStatus, ProbeStatus};
use serde::{Deserialize, Serialize};

use super::CertifyFault;

/// What a certification found. Serializes to stable JSON: no timestamps, no
/// durations, no generated ids (operation ids come from the user's
/// arguments), so it can be snapshot-tested as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CertificationReport {
    /// The contract's name.
    pub contract: String,
    /// What the contract declares.
    pub declared: Declared,
    /// Whether effects were counted at the provider (a counter was given).
    /// Without one, "at most one effect" and a guaranteed key are unverified.
    pub effects_counted: bool,
    /// One cell per fault, in the order they ran.
    pub cells: Vec<CertifyCell>,
    /// Faults asked for and not run: [`CertifyFault::ConflictingProvider`]
    /// without a conflicting effect to plant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_run: Vec<CertifyFault>,
    /// Every cell passed: the contract is certified against these faults.
    pub certified: bool,
    /// Some cell failed: a guarantee was broken (the CLI exits non-zero).
    pub failed: bool,
}

/// What the contract declares about its provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Declared {
    /// It derives a provider idempotency key.
    pub provider_key: bool,
    /// It claims the provider applies at most one effect per key
    /// (`provider_idempotency_guaranteed`).
    pub key_guaranteed: bool,
    /// It has an outcome probe.
    pub probe: bool,
}

/// One fault against the user's provider.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CertifyCell {
    /// The fault.
    pub fault: CertifyFault,
    /// The operation id the contract derived for this cell's arguments.
    pub operation_id: String,
    /// Whether the fault was injected (it is not when the first request
    /// failed on its own before the provider committed).
    pub fault_fired: bool,
    /// Where the operation ended in the ledger, after the resumes.
    pub status: EffectStatus,
    /// Dispatches the ledger claimed.
    pub attempts: u32,
    /// Times the executor called the user's handler.
    pub handler_calls: usize,
    /// Effects the provider holds for this cell's arguments, as the user's
    /// counter reports them (less the conflicting effect the cell planted);
    /// `None` without a counter.
    pub committed_effects: Option<usize>,
    /// [`CertifyFault::ConflictingProvider`]: the conflicting effects the
    /// cell planted, as counted; `None` for other faults or without a counter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conflicting_effects: Option<usize>,
    /// Whether the provider ended with at most one effect; `None` without a
    /// counter.
    pub at_most_one_effect: Option<bool>,
    /// Whether an uncertain dispatch was sent again without a basis (a
    /// probe's `not_committed`, a guaranteed key, an operator's decision).
    pub blind_retry: bool,
    /// The contract's probe, asked once more after the run; `None` without a
    /// probe (or with an async-only one).
    pub probe_after: Option<ProbeAnswer>,
    /// Whether that answer matches the counted effects; `None` when either
    /// is missing or the probe answered `pending`/`unknown`. Beside a
    /// conflicting effect, whether it answered `conflict`.
    pub probe_agrees: Option<bool>,
    /// The declared key guarantee, checked against the counted effects.
    pub key_guarantee: KeyGuarantee,
    /// The cell's verdict.
    pub verdict: Verdict,
    /// Why the verdict is not `pass`, one sentence each.
    pub findings: Vec<String>,
}

/// The probe's answer after the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeAnswer {
    /// `committed`.
    Committed,
    /// `not_committed`.
    NotCommitted,
    /// `pending`.
    Pending,
    /// `unknown`.
    Unknown,
    /// `conflict`.
    Conflict,
    /// The probe returned an error.
    Error,
}

impl ProbeAnswer {
    pub(crate) fn of(status: ProbeStatus) -> Self {
        match status {
            ProbeStatus::Committed => ProbeAnswer::Committed,
            ProbeStatus::NotCommitted => ProbeAnswer::NotCommitted,
            ProbeStatus::Pending => ProbeAnswer::Pending,
            ProbeStatus::Unknown => ProbeAnswer::Unknown,
            ProbeStatus::Conflict => ProbeAnswer::Conflict,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ProbeAnswer::Committed => "committed",
            ProbeAnswer::NotCommitted => "not_committed",
            ProbeAnswer::Pending => "pending",
            ProbeAnswer::Unknown => "unknown",
            ProbeAnswer::Conflict => "conflict",
            ProbeAnswer::Error => "error",
        }
    }
}

/// A declared `provider_idempotency_guaranteed`, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum KeyGuarantee {
    /// The contract does not claim it.
    NotDeclared,
    /// Claimed, and the provider held at most one effect.
    Held,
    /// Claimed, and the provider holds more than one effect: the claim is
    /// false, and every retry the library made on its word duplicated.
    Broken,
    /// Claimed, but effects were not counted.
    Unverified,
}

impl KeyGuarantee {
    fn name(self) -> &'static str {
        match self {
            KeyGuarantee::NotDeclared => "not declared",
            KeyGuarantee::Held => "held",
            KeyGuarantee::Broken => "BROKEN",
            KeyGuarantee::Unverified => "unverified",
        }
    }
}

/// A cell's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// At most one effect, no blind retry, the probe agrees, nothing left
    /// in progress.
    Pass,
    /// A guarantee failed; see the findings.
    Fail,
    /// Nothing failed that certify could see, but effects were not counted.
    Unverified,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "FAIL",
            Verdict::Unverified => "unverified",
        }
    }
}

/// What one cell observed, before it is judged.
pub(crate) struct Observed {
    pub(crate) fault: CertifyFault,
    pub(crate) operation_id: String,
    pub(crate) fault_fired: bool,
    pub(crate) status: EffectStatus,
    pub(crate) attempts: u32,
    pub(crate) handler_calls: usize,
    pub(crate) committed: Option<usize>,
    /// The conflicting effects planted before the cell ran.
    pub(crate) conflicting: Option<usize>,
    /// Effects the provider held for the cell's arguments before it ran.
    pub(crate) before: usize,
    pub(crate) blind_retry: bool,
    pub(crate) probe_after: Option<ProbeAnswer>,
}

impl CertifyCell {
    /// Judges what a cell observed against what the contract declares.
    pub(crate) fn judge(observed: Observed, declared: Declared) -> Self {
        let Observed {
            fault,
            operation_id,
            fault_fired,
            status,
            attempts,
            handler_calls,
            committed,
            conflicting,
            before,
            blind_retry,
            probe_after,
        } = observed;
        let beside_conflict = fault == CertifyFault::ConflictingProvider;
        let mut findings = Vec::new();
        let at_most_one = committed.map(|n| n <= 1);
        if beside_conflict {
            if let Some(n) = committed.filter(|n| *n > 0) {
                findings.push(format!(
                    "the request was sent beside an effect that contradicts it: the provider holds {n} new effect(s) besides the conflicting one"
                ));
            }
            if status == EffectStatus::Confirmed {
                findings.push(
                    "the operation was confirmed by an effect that contradicts the request: a probe that finds one must answer conflict"
                        .to_owned(),
                );
            }
        } else if let Some(n) = committed.filter(|n| *n > 1) {
            findings.push(format!("the provider holds {n} effects for one operation"));
        }
        let key_guarantee = match (declared.key_guaranteed, committed) {
            (false, _) => KeyGuarantee::NotDeclared,
            (true, None) => KeyGuarantee::Unverified,
            (true, Some(n)) if n > 1 => {
                findings.push(
                    "the contract declares a guaranteed idempotency key, but the provider did not honour it"
                        .to_owned(),
                );
                KeyGuarantee::Broken
            }
            (true, Some(_)) => KeyGuarantee::Held,
        };
        if blind_retry {
            findings.push("an uncertain dispatch was sent again without a basis".to_owned());
        }
        let probe_agrees = match (probe_after, committed) {
            (Some(answer), _) if beside_conflict => Some(answer == ProbeAnswer::Conflict),
            (Some(ProbeAnswer::Committed), Some(n)) => Some(n >= 1),
            (Some(ProbeAnswer::NotCommitted), Some(n)) => Some(n == 0),
            _ => None,
        };
        if beside_conflict && probe_agrees == Some(false) {
            let answer = probe_after.map_or("nothing", ProbeAnswer::name);
            findings.push(format!(
                "the probe answers {answer} where the provider holds an effect that contradicts the request (expected conflict)"
            ));
        } else if probe_agrees == Some(false) {
            let answer = probe_after.map_or("nothing", ProbeAnswer::name);
            let count = committed.unwrap_or(0);
            findings.push(format!(
                "the probe answers {answer} where the provider holds {count} effects"
            ));
        }
        if status == EffectStatus::Dispatched {
            findings
                .push("the operation is still dispatched after every caller returned".to_owned());
        }
        if before > 0 {
            findings.push(format!(
                "the provider already held {before} effect(s) for these arguments before the cell ran (an earlier run?), so nothing new was dispatched and {fault} was not tested; give every run fresh arguments (agent-effect certify puts a run id in them)"
            ));
        } else if handler_calls == 0 {
            findings.push(format!(
                "nothing was dispatched (the operation ended {status} without a request), so {fault} was not tested"
            ));
        } else if !fault_fired {
            findings.push(format!(
                "the fault never fired: the first request failed on its own, so {fault} was not tested"
            ));
        }
        let verdict = if !findings.is_empty() {
            Verdict::Fail
        } else if committed.is_none() {
            Verdict::Unverified
        } else {
            Verdict::Pass
        };
        CertifyCell {
            fault,
            operation_id,
            fault_fired,
            status,
            attempts,
            handler_calls,
            committed_effects: committed,
            conflicting_effects: conflicting,
            at_most_one_effect: at_most_one,
            blind_retry,
            probe_after,
            probe_agrees,
            key_guarantee,
            verdict,
            findings,
        }
    }
}

impl CertificationReport {
    pub(crate) fn new(
        contract: String,
        declared: Declared,
        effects_counted: bool,
        cells: Vec<CertifyCell>,
        not_run: Vec<CertifyFault>,
    ) -> Self {
        let certified = !cells.is_empty() && cells.iter().all(|c| c.verdict == Verdict::Pass);
        let failed = cells.iter().any(|c| c.verdict == Verdict::Fail);
        CertificationReport {
            contract,
            declared,
            effects_counted,
            cells,
            not_run,
            certified,
            failed,
        }
    }

    /// The report as aligned columns, one row per fault, then the findings
    /// and a one-line summary. A broken guarantee reads `BROKEN`, a failed
    /// cell `FAIL`.
    pub fn to_table(&self) -> String {
        let mut table = comfy_table::Table::new();
        table
            .load_preset(comfy_table::presets::NOTHING)
            .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
            .set_header([
                "fault",
                "status",
                "attempts",
                "handler",
                "effects",
                "key guarantee",
                "probe after",
                "verdict",
            ]);
        for cell in &self.cells {
            table.add_row([
                cell.fault.name().to_owned(),
                cell.status.as_str().to_owned(),
                cell.attempts.to_string(),
                cell.handler_calls.to_string(),
                cell.committed_effects
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
                cell.key_guarantee.name().to_owned(),
                cell.probe_after.map_or("-", ProbeAnswer::name).to_owned(),
                cell.verdict.name().to_owned(),
            ]);
        }
        for (i, column) in table.column_iter_mut().enumerate() {
            column.set_padding((0, if i == 7 { 0 } else { 2 }));
            if (2..=4).contains(&i) {
                column.set_cell_alignment(comfy_table::CellAlignment::Right);
            }
        }
        let mut out = format!("certify {}\n", self.contract);
        for line in table.lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        for cell in &self.cells {
            for finding in &cell.findings {
                out.push_str(&format!("{}: {finding}\n", cell.fault));
            }
        }
        for fault in &self.not_run {
            out.push_str(&format!(
                "{fault}: not run: no conflicting effect to plant (Certification::conflicting; agent-effect certify --conflicting-arguments)\n"
            ));
        }
        if !self.effects_counted {
            out.push_str(
                "effects were not counted (no counter): at most one effect is unverified\n",
            );
        }
        let passed = self
            .cells
            .iter()
            .filter(|c| c.verdict == Verdict::Pass)
            .count();
        let failed = self
            .cells
            .iter()
            .filter(|c| c.verdict == Verdict::Fail)
            .count();
        out.push_str(&format!(
            "{}: {passed} of {} faults passed, {failed} failed\n",
            if self.certified {
                "certified"
            } else if self.failed {
                "NOT certified"
            } else {
                "unverified"
            },
            self.cells.len()
        ));
        out
    }
}
