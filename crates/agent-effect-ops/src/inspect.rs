//! The read commands (`list`, `show`, `events`, `stats`), and what the
//! console reads through them.

use effect_core::{
    Clock, EffectLedger, EffectRecord, EffectStatus, Evidence, LedgerError, ListQuery,
};
use effect_exec::WaitingFor;
use serde_json::Value;

use crate::printer::Printer;
use crate::table;
use crate::timestamp::age_seconds;
use crate::view::{
    CompensationLinks, EventView, LateObservation, OperationDetail, OperationSummary, Stats,
    StatusCounts,
};

/// `list`: a JSON array of summaries. The cursor of the next page is the
/// `operation_id` of the last element (`--after`); a table says it below
/// a full page.
pub(crate) fn list(
    ledger: &dyn EffectLedger,
    query: &ListQuery,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let mut operations = Vec::new();
    for record in ledger.list(query)? {
        let mut summary = OperationSummary::from(&record);
        summary.deferred_by_budget = deferral_of(&record);
        if record.status.is_uncertain() {
            summary.reconciliation_flags =
                Some(safety_evidence(&record.evidence)).filter(|e| !e.is_empty());
            summary.dispatch_error = ledger
                .events(&record.operation_id)?
                .iter()
                .rev()
                .find(|event| {
                    event.event_type == effect_core::event::OUTCOME_UNKNOWN
                        && event.data["evidence"]
                            .get(effect_core::evidence::DISPATCH_INTERRUPTION)
                            .is_some()
                })
                .and_then(|event| event.data["error"].as_str().map(str::to_owned));
        }
        if record.status == EffectStatus::AwaitingApproval {
            let events = ledger.events(&record.operation_id)?;
            for_approver(ledger, &record, &events, &mut summary)?;
        }
        operations.push(summary);
    }
    let limit = query.limit;
    printer.report(&operations, |operations| table::list(operations, limit))
}

/// The budget deferral of a `prepared` or `awaiting_approval` operation
/// (docs/approval.md#budgets): the budget and the bound, for `list`.
fn deferral_of(record: &EffectRecord) -> Option<Value> {
    if !matches!(
        record.status,
        EffectStatus::Prepared | EffectStatus::AwaitingApproval
    ) {
        return None;
    }
    let deferral = record
        .evidence
        .get(effect_core::evidence::BUDGET_DEFERRAL)?;
    let budget = record
        .evidence
        .get(effect_core::evidence::BUDGET_EXCEEDED)
        .and_then(|refusal| refusal.get("budget"))
        .cloned()
        .unwrap_or(Value::Null);
    Some(serde_json::json!({
        "budget": budget,
        "until": deferral.get("deferred_until").cloned().unwrap_or(Value::Null),
    }))
}

pub(crate) fn show(
    ledger: &dyn EffectLedger,
    id: &str,
    include_output: bool,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    let record = ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let stored = ledger.events(id)?;
    let mut summary = OperationSummary::from(&record);
    for_approver(ledger, &record, &stored, &mut summary)?;
    let events: Vec<EventView> = stored.iter().map(EventView::from).collect();
    let detail = OperationDetail {
        late_observations: LateObservation::of(&stored, include_output),
        summary,
        provider_idempotency_key: record.provider_idempotency_key.clone(),
        request_fingerprint: record.request_fingerprint.clone(),
        owner_token: record.owner_token.clone(),
        lease_until: record.lease_until,
        evidence: record.evidence.clone(),
        has_output: record.output.is_some(),
        output: include_output.then(|| record.output.clone()),
        events,
        compensation: CompensationLinks::of(&record),
    };
    printer.report(&detail, table::detail)
}

/// Adds to `summary` what an approver needs to see of `record`: the
/// arguments recorded for them (secrets redacted), and for a compensation
/// the confirmed output of the operation it undoes.
fn for_approver(
    ledger: &dyn EffectLedger,
    record: &EffectRecord,
    events: &[effect_core::LedgerEvent],
    summary: &mut OperationSummary,
) -> anyhow::Result<()> {
    summary.arguments = effect_core::intent::redacted(events).cloned();
    summary.compensates_output = compensates_output(ledger, record)?;
    Ok(())
}

/// For a compensation, the confirmed output of the operation it undoes (what
/// an approver of the compensation is shown); `None` otherwise.
pub(crate) fn compensates_output(
    ledger: &dyn EffectLedger,
    record: &EffectRecord,
) -> anyhow::Result<Option<Value>> {
    Ok(match record.compensates() {
        Some(original) => ledger
            .get(original)?
            .filter(|original| original.status == EffectStatus::Confirmed)
            .and_then(|original| original.output),
        None => None,
    })
}

pub(crate) fn events(
    ledger: &dyn EffectLedger,
    id: &str,
    printer: &mut Printer<'_>,
) -> anyhow::Result<()> {
    // An operation may have no events (ledgers older than the events table),
    // so existence is decided by the record, not by an empty history.
    ledger.get(id)?.ok_or_else(|| not_found(id))?;
    let events: Vec<EventView> = ledger.events(id)?.iter().map(EventView::from).collect();
    printer.report(&events, |events| table::events(events, false))
}

/// `stats`: what `agent-effect-ops stats` prints and the console's `/metrics`
/// exports, computed in one place.
pub(crate) fn stats_of(ledger: &dyn EffectLedger, clock: &dyn Clock) -> anyhow::Result<Stats> {
    // Oldest first: who each prepared operation waits for.
    let waiting = effect_exec::waiting(ledger)?;
    Ok(stats_from(ledger.stats()?, &waiting, clock))
}

/// [`stats_of`] from what it reads: the store's counters and who each
/// prepared operation waits for (oldest first), for a caller that needs the
/// waiting list too (the console's queue) and reads it once.
pub(crate) fn stats_from(
    raw: effect_core::LedgerStats,
    waiting: &[effect_exec::Waiting],
    clock: &dyn Clock,
) -> Stats {
    let counts = StatusCounts::of(&raw);
    // `waiting` is oldest first: the first of each kind is its oldest.
    let oldest = |deferred: bool| {
        waiting
            .iter()
            .find(|w| (w.waiting_for == WaitingFor::Budget) == deferred)
    };
    let (oldest_waiting, oldest_deferred) = (oldest(false), oldest(true));
    let age = raw
        .oldest_unresolved_updated_at
        .as_deref()
        .and_then(|at| age_seconds(at, clock.now()));
    Stats {
        counts,
        total: counts.entries().iter().map(|(_, n)| n).sum(),
        unresolved: counts.outcome_unknown + counts.quarantined,
        oldest_unresolved_updated_at: raw.oldest_unresolved_updated_at,
        oldest_unresolved_age_seconds: age,
        stale: raw.stale_dispatched,
        waiting_for_caller: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::Caller)
            .count() as u64,
        waiting_for_recovery_worker: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::RecoveryWorker)
            .count() as u64,
        waiting_for_budget: waiting
            .iter()
            .filter(|w| w.waiting_for == WaitingFor::Budget)
            .count() as u64,
        recovery_blocked: waiting
            .iter()
            .filter(|w| {
                matches!(
                    w.waiting_for,
                    WaitingFor::UnreadableIntent | WaitingFor::ContractWeakened
                )
            })
            .count() as u64,
        oldest_waiting_age_seconds: oldest_waiting.and_then(|w| age_seconds(&w.since, clock.now())),
        oldest_waiting_since: oldest_waiting.map(|w| w.since.clone()),
        oldest_deferred_age_seconds: oldest_deferred
            .and_then(|w| age_seconds(&w.since, clock.now())),
        oldest_deferred_since: oldest_deferred.map(|w| w.since.clone()),
        budgets: raw.budgets,
    }
}

/// The evidence entries the safety rules read; nothing a probe or a
/// provider returned.
fn safety_evidence(evidence: &Evidence) -> Evidence {
    use effect_core::evidence as key;
    [
        key::DISPATCH_INTERRUPTION,
        key::HANDLER_MAY_STILL_BE_RUNNING,
        key::PROBE_STATUS,
        key::POSTCONDITION,
        key::RETRY_BASIS,
    ]
    .into_iter()
    .filter_map(|name| {
        evidence
            .get(name)
            .filter(|value| value.is_string() || value.is_boolean())
            .map(|value| (name.to_owned(), value.clone()))
    })
    .collect()
}

pub(crate) fn not_found(id: &str) -> LedgerError {
    LedgerError::NotFound {
        operation_id: id.to_owned(),
    }
}
