//! The queue: every operation that needs a person or is waiting, with why.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use effect_core::{Clock, EffectLedger, EffectRecord, EffectStatus, ListQuery, MAX_LIST_LIMIT};
use effect_exec::WaitingFor;
use serde::Deserialize;

use crate::timestamp::{age_seconds, format_unix_seconds, parse_unix_micros};
use crate::view::Stats;

/// Why an operation is in the queue, in the order the counts are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    Quarantined,
    OutcomeUnknown,
    StaleDispatch,
    AwaitingApproval,
    DeferredByBudget,
    WaitingForCaller,
    WaitingForRecoveryWorker,
    RecoveryBlocked,
}

impl Kind {
    pub(crate) const ALL: [Kind; 8] = [
        Kind::Quarantined,
        Kind::OutcomeUnknown,
        Kind::StaleDispatch,
        Kind::AwaitingApproval,
        Kind::DeferredByBudget,
        Kind::WaitingForCaller,
        Kind::WaitingForRecoveryWorker,
        Kind::RecoveryBlocked,
    ];

    /// The name in URLs and metrics.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Quarantined => "quarantined",
            Kind::OutcomeUnknown => "outcome_unknown",
            Kind::StaleDispatch => "stale_dispatch",
            Kind::AwaitingApproval => "awaiting_approval",
            Kind::DeferredByBudget => "deferred_by_budget",
            Kind::WaitingForCaller => "waiting_for_caller",
            Kind::WaitingForRecoveryWorker => "waiting_for_recovery_worker",
            Kind::RecoveryBlocked => "recovery_blocked",
        }
    }

    /// What it means for the operator.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Kind::Quarantined => "quarantined: an operator decides",
            Kind::OutcomeUnknown => "outcome unknown: reconciliation pending",
            Kind::StaleDispatch => "stale dispatch: lease expired, worker gone",
            Kind::AwaitingApproval => "awaiting approval",
            Kind::DeferredByBudget => "deferred by a budget",
            Kind::WaitingForCaller => "prepared: waiting for its caller",
            Kind::WaitingForRecoveryWorker => "prepared: waiting for a recovery worker",
            Kind::RecoveryBlocked => {
                "recovery blocked: no registered version reads its intent, or weakened terms"
            }
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|kind| kind.name() == text)
    }
}

/// One queued operation: a summary only (no output, arguments or evidence).
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) kind: Kind,
    pub(crate) operation_id: String,
    pub(crate) contract: String,
    pub(crate) status: EffectStatus,
    pub(crate) attempts: u32,
    pub(crate) updated_at: String,
    /// Seconds since its last transition.
    pub(crate) age_seconds: Option<u64>,
    /// By when someone must act: an approval's expiry, a stale lease's end.
    pub(crate) decide_by: Option<String>,
    /// The error the ledger holds, for uncertain operations.
    pub(crate) error: Option<String>,
    /// Late observations on record (a handler came back after its attempt
    /// lost its claim), for the kinds an operator decides
    /// ([`EffectLedger::count_events`], one read for the queue).
    pub(crate) late: usize,
}

/// The queue's filters, from the query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Filter {
    /// A contract name.
    #[serde(default)]
    pub(crate) contract: Option<String>,
    /// A [`Kind`] name.
    #[serde(default)]
    pub(crate) kind: Option<String>,
    /// Only operations older than this (`30m`, `2h`, `1d`).
    #[serde(default)]
    pub(crate) older_than: Option<String>,
}

/// The queue as shown: the items the filters keep, counts over all of them.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    pub(crate) items: Vec<Item>,
    /// Exact, from the numbers of `stats` (the store's counters), whatever
    /// the listing holds.
    pub(crate) counts: BTreeMap<Kind, u64>,
    pub(crate) contracts: BTreeSet<String>,
    /// A kind had more operations than one page ([`MAX_LIST_LIMIT`]).
    pub(crate) truncated: bool,
}

/// The number of operations of each kind, from `stats` (what
/// `agent-effect-ops stats` and `/metrics` report).
pub(crate) fn counts(stats: &Stats) -> BTreeMap<Kind, u64> {
    Kind::ALL
        .into_iter()
        .map(|kind| {
            let count = match kind {
                Kind::Quarantined => stats.counts.quarantined,
                Kind::OutcomeUnknown => stats.counts.outcome_unknown,
                Kind::StaleDispatch => stats.stale,
                Kind::AwaitingApproval => stats.counts.awaiting_approval,
                Kind::DeferredByBudget => stats.waiting_for_budget,
                Kind::WaitingForCaller => stats.waiting_for_caller,
                Kind::WaitingForRecoveryWorker => stats.waiting_for_recovery_worker,
                Kind::RecoveryBlocked => stats.recovery_blocked,
            };
            (kind, count)
        })
        .collect()
}

/// Reads the queue from the ledger and applies `filter`.
pub(crate) fn read(
    ledger: &dyn EffectLedger,
    filter: &Filter,
    clock: &dyn Clock,
) -> anyhow::Result<Queue> {
    let now = clock.now();
    let now_unix = effect_core::unix_seconds(now);
    let mut items = Vec::new();
    let mut truncated = false;
    // Who will dispatch each prepared operation (a budget deferred them, a
    // recovery worker or their caller), and which ones a recovery worker
    // found blocked, with why; read once for the counts too.
    let waiting_list = effect_exec::waiting(ledger)?;
    let stats = crate::inspect::stats_from(ledger.stats()?, &waiting_list, clock);
    let blocked: BTreeMap<String, String> = waiting_list
        .iter()
        .filter_map(|w| Some((w.operation_id.clone(), w.reason.clone()?)))
        .collect();
    let mut push = |kind: Kind, record: &EffectRecord, decide_by: Option<String>| {
        // A worker cannot dispatch it: that is why it is in the queue.
        let (kind, error) = match blocked.get(&record.operation_id) {
            Some(reason) => (Kind::RecoveryBlocked, Some(reason.clone())),
            None => (kind, record.error.clone()),
        };
        items.push(Item {
            kind,
            operation_id: record.operation_id.clone(),
            contract: record.contract_name.clone(),
            status: record.status,
            attempts: record.attempts,
            updated_at: record.updated_at.clone(),
            age_seconds: age_seconds(&record.updated_at, now),
            decide_by,
            error,
            late: 0,
        });
    };
    for (kind, query) in [
        (
            Kind::Quarantined,
            ListQuery::with_status(EffectStatus::Quarantined, MAX_LIST_LIMIT),
        ),
        (
            Kind::OutcomeUnknown,
            ListQuery::with_status(EffectStatus::OutcomeUnknown, MAX_LIST_LIMIT),
        ),
        (Kind::StaleDispatch, ListQuery::stale(MAX_LIST_LIMIT)),
        (
            Kind::AwaitingApproval,
            ListQuery::with_status(EffectStatus::AwaitingApproval, MAX_LIST_LIMIT),
        ),
    ] {
        let records = ledger.list(&query)?;
        truncated |= records.len() == MAX_LIST_LIMIT;
        for record in &records {
            let decide_by = match kind {
                Kind::AwaitingApproval => record
                    .approval()
                    .and_then(|approval| approval.get("expires_at"))
                    .and_then(|at| at.as_str())
                    .map(str::to_owned),
                Kind::StaleDispatch => record.lease_until.map(format_unix_seconds),
                _ => None,
            };
            if kind == Kind::StaleDispatch && !record.is_stale_at(now_unix) {
                continue;
            }
            push(kind, record, decide_by);
        }
    }
    let waiting: BTreeMap<String, WaitingFor> = waiting_list
        .into_iter()
        .map(|w| (w.operation_id, w.waiting_for))
        .collect();
    let prepared = ledger.list(&ListQuery::with_status(
        EffectStatus::Prepared,
        MAX_LIST_LIMIT,
    ))?;
    truncated |= prepared.len() == MAX_LIST_LIMIT;
    for record in &prepared {
        let kind = match waiting.get(&record.operation_id) {
            Some(WaitingFor::Budget) => Kind::DeferredByBudget,
            Some(WaitingFor::RecoveryWorker) => Kind::WaitingForRecoveryWorker,
            _ => Kind::WaitingForCaller,
        };
        push(kind, record, None);
    }
    // Where an operator decides, what a stalled handler came back with
    // bears on the decision: late observations, counted in one read.
    let deciding: Vec<usize> = (0..items.len())
        .filter(|&i| {
            matches!(
                items[i].kind,
                Kind::Quarantined | Kind::OutcomeUnknown | Kind::StaleDispatch
            )
        })
        .collect();
    let ids: Vec<&str> = deciding
        .iter()
        .map(|&i| items[i].operation_id.as_str())
        .collect();
    let late = ledger.count_events(&ids, effect_core::event::LATE_OBSERVATION)?;
    for (&i, late) in deciding.iter().zip(late) {
        items[i].late = usize::try_from(late).unwrap_or(usize::MAX);
    }
    let contracts = items.iter().map(|item| item.contract.clone()).collect();
    let counts = counts(&stats);
    let kind = filter.kind.as_deref().and_then(Kind::parse);
    let older_than = filter
        .older_than
        .as_deref()
        .filter(|text| !text.trim().is_empty())
        .and_then(|text| crate::cli::parse_duration(text).ok())
        .map(|d: Duration| d.as_secs());
    items.retain(|item| {
        filter
            .contract
            .as_deref()
            .is_none_or(|c| c.is_empty() || c == item.contract)
            && kind.is_none_or(|k| k == item.kind)
            && older_than.is_none_or(|min| item.age_seconds.is_some_and(|age| age >= min))
    });
    // The earliest decide-by time first, then the oldest.
    items.sort_by_key(|item| {
        (
            item.decide_by
                .as_deref()
                .and_then(parse_unix_micros)
                .map_or((1, 0), |at| (0, at)),
            item.updated_at
                .as_str()
                .parse::<jiff::Timestamp>()
                .map(|t| t.as_microsecond())
                .unwrap_or(i64::MAX),
            item.operation_id.clone(),
        )
    });
    Ok(Queue {
        items,
        counts,
        contracts,
        truncated,
    })
}
