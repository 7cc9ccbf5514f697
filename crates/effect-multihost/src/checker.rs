//! The checker: the history and the provider's deliveries against the
//! ledger once faults stopped and recovery ran.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use effect_core::{EffectLedger, EffectStatus};
use serde::Serialize;
use serde_json::Value;

use crate::history::{Event, Kind};
use crate::provider::{Delivery, Outcome};
use crate::worker::{BUDGET, REGRESSED, customer_of, refused_by_budget};

/// What one phase did and what it broke.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Findings {
    /// Calls invoked, and how each completed.
    pub(crate) calls: u64,
    pub(crate) ok: u64,
    pub(crate) fail: u64,
    pub(crate) info: u64,
    /// Calls whose process was killed before they completed.
    pub(crate) unfinished: u64,
    /// Distinct operations called.
    pub(crate) operations: u64,
    /// Operations the ledger holds at the end, by status.
    pub(crate) ledger: BTreeMap<String, u64>,
    /// Operations rejected by a budget refusal: never sent.
    pub(crate) refused_by_budget: u64,
    /// Provider deliveries by outcome.
    pub(crate) committed: u64,
    pub(crate) refused: u64,
    /// Deliveries of a key that had already committed: the library
    /// dispatched an operation again after its effect happened, and only the
    /// provider's idempotency key kept it from a second charge.
    pub(crate) second_dispatches: u64,
    /// Quarantined operations whose effect the provider holds: an operator
    /// confirms them after looking (not a violation).
    pub(crate) quarantined_with_effect: u64,
    /// Distinct operations with a lost confirmation.
    pub(crate) lost_confirmation_operations: u64,
    /// Calls whose worker process had seen their operation confirmed and
    /// found the ledger answering as if it had not: what a worker can
    /// detect of a ledger that went back in time.
    pub(crate) regressions_seen_by_workers: u64,
    /// Violations (see `Violations`).
    pub(crate) violations: Violations,
    /// Up to ten examples of each violation.
    pub(crate) examples: BTreeMap<String, Vec<String>>,
}

/// Each property the checker asserts, as a count of operations breaking it.
#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct Violations {
    /// More than one committed effect for one operation at the provider.
    pub(crate) double_commits: u64,
    /// A confirmation a caller received that the ledger no longer holds
    /// (not confirmed, or another output).
    pub(crate) lost_confirmations: u64,
    /// A confirmation whose output is not the provider's capture.
    pub(crate) wrong_outputs: u64,
    /// Operations left prepared, dispatched or outcome_unknown.
    pub(crate) unsettled: u64,
    /// Customers charged more captures than their budget allows.
    pub(crate) budgets_exceeded: u64,
    /// Effects at the provider whose operation the ledger holds neither as
    /// confirmed nor as quarantined (lost with a commit, or never recorded).
    pub(crate) effects_not_confirmed: u64,
    /// Operations confirmed in the ledger without an effect at the provider.
    pub(crate) confirmed_without_effect: u64,
    /// Second dispatches (see [`Findings::second_dispatches`]).
    pub(crate) second_dispatches: u64,
}

impl Violations {
    /// Properties that hold whatever the replication: the library's own.
    pub(crate) fn always(&self) -> u64 {
        self.double_commits + self.wrong_outputs + self.unsettled + self.confirmed_without_effect
    }

    /// Every violation.
    pub(crate) fn total(&self) -> u64 {
        self.always()
            + self.lost_confirmations
            + self.budgets_exceeded
            + self.effects_not_confirmed
            + self.second_dispatches
    }
}

/// Checks `events` and `deliveries` against `ledger`.
pub(crate) fn check(
    events: &[Event],
    deliveries: &[Delivery],
    ledger: &dyn EffectLedger,
) -> anyhow::Result<Findings> {
    let mut findings = Findings::default();
    let example = |findings: &mut Findings, what: &str, text: String| {
        let list = findings.examples.entry(what.to_owned()).or_default();
        if list.len() < 10 {
            list.push(text);
        }
    };

    // The history.
    let mut completed = BTreeSet::new();
    let mut ops = BTreeSet::new();
    for event in events {
        ops.insert(event.op.clone());
        match event.kind {
            Kind::Invoke => findings.calls += 1,
            Kind::Ok => findings.ok += 1,
            Kind::Fail => findings.fail += 1,
            Kind::Info => findings.info += 1,
        }
        if event.kind != Kind::Invoke {
            completed.insert(event.call.clone());
        }
        if event.detail.as_deref() == Some(REGRESSED) {
            findings.regressions_seen_by_workers += 1;
        }
    }
    findings.unfinished = findings.calls.saturating_sub(completed.len() as u64);

    // The provider: its first capture per key, and every commit per key.
    let mut commits: HashMap<&str, Vec<&Delivery>> = HashMap::new();
    for delivery in deliveries {
        match delivery.outcome {
            Outcome::Committed => {
                findings.committed += 1;
                commits.entry(&delivery.key).or_default().push(delivery);
            }
            Outcome::Duplicate => findings.second_dispatches += 1,
            Outcome::Refused => findings.refused += 1,
        }
        ops.insert(op_of_key(&delivery.key));
    }
    findings.violations.second_dispatches = findings.second_dispatches;
    for (key, list) in &commits {
        if list.len() > 1 {
            findings.violations.double_commits += 1;
            example(&mut findings, "double_commits", (*key).to_owned());
        }
    }
    let payment_of = |op: &str| -> Option<String> {
        commits
            .get(key_of_op(op).as_str())
            .and_then(|list| list.first())
            .and_then(|d| d.payment_id.clone())
    };

    // The ledger, operation by operation.
    let mut records = HashMap::new();
    for op in &ops {
        let record = ledger.get(op)?;
        let status = record
            .as_ref()
            .map_or("absent".to_owned(), |r| r.status.to_string());
        *findings.ledger.entry(status).or_default() += 1;
        records.insert(op.clone(), record);
    }
    findings.operations = ops.len() as u64;

    let mut lost_ops = BTreeSet::new();
    for event in events.iter().filter(|e| e.kind == Kind::Ok) {
        let given = event.output.as_ref().and_then(payment_id);
        let stored = records.get(&event.op).and_then(|r| r.as_ref());
        let still = stored.is_some_and(|r| {
            r.status == EffectStatus::Confirmed && r.output.as_ref().and_then(payment_id) == given
        });
        if !still {
            findings.violations.lost_confirmations += 1;
            lost_ops.insert(event.op.clone());
            let now = stored.map_or("absent".to_owned(), |r| {
                format!("{} {:?}", r.status, r.output.as_ref().and_then(payment_id))
            });
            example(
                &mut findings,
                "lost_confirmations",
                format!(
                    "{} ({}): confirmed {given:?}, now {now}",
                    event.op, event.call
                ),
            );
        }
        if given.is_none() || given != payment_of(&event.op) {
            findings.violations.wrong_outputs += 1;
            example(
                &mut findings,
                "wrong_outputs",
                format!(
                    "{}: caller got {given:?}, provider has {:?}",
                    event.op,
                    payment_of(&event.op)
                ),
            );
        }
    }

    findings.lost_confirmation_operations = lost_ops.len() as u64;
    let mut charged: BTreeMap<String, u64> = BTreeMap::new();
    for (op, record) in &records {
        let status = record.as_ref().map(|r| r.status);
        if record.as_ref().is_some_and(refused_by_budget) {
            findings.refused_by_budget += 1;
        } else if matches!(
            status,
            Some(EffectStatus::Prepared | EffectStatus::Dispatched | EffectStatus::OutcomeUnknown)
        ) {
            findings.violations.unsettled += 1;
            example(&mut findings, "unsettled", format!("{op}: {status:?}"));
        }
        let committed = payment_of(op).is_some();
        if committed {
            if let Some(number) = invoice_number(op) {
                *charged.entry(customer_of(number)).or_default() += 1;
            }
            if status == Some(EffectStatus::Quarantined) {
                // Settled with a reason: an operator decides, and the
                // provider now shows the effect (a handler that outlived
                // its lease committed after the probe found nothing).
                findings.quarantined_with_effect += 1;
            } else if status != Some(EffectStatus::Confirmed) {
                findings.violations.effects_not_confirmed += 1;
                example(
                    &mut findings,
                    "effects_not_confirmed",
                    format!("{op}: {status:?}"),
                );
            }
        } else if status == Some(EffectStatus::Confirmed) {
            findings.violations.confirmed_without_effect += 1;
            example(&mut findings, "confirmed_without_effect", op.clone());
        }
    }
    for (customer, count) in charged {
        if count > BUDGET {
            findings.violations.budgets_exceeded += 1;
            example(
                &mut findings,
                "budgets_exceeded",
                format!("customer {customer}: {count} captures"),
            );
        }
    }
    Ok(findings)
}

fn payment_id(output: &Value) -> Option<String> {
    output["payment_id"].as_str().map(str::to_owned)
}

/// `capture:INV-1` → `invoice:INV-1:capture`.
fn op_of_key(key: &str) -> String {
    format!(
        "invoice:{}:capture",
        key.strip_prefix("capture:").unwrap_or(key)
    )
}

fn key_of_op(op: &str) -> String {
    let invoice = op
        .strip_prefix("invoice:")
        .and_then(|rest| rest.strip_suffix(":capture"))
        .unwrap_or(op);
    format!("capture:{invoice}")
}

fn invoice_number(op: &str) -> Option<u64> {
    op.strip_prefix("invoice:INV-")?
        .strip_suffix(":capture")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests;
