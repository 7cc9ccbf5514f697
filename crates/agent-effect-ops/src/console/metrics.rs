//! `/metrics`: what `agent-effect-ops stats` computes (the same function),
//! in the Prometheus text exposition format.

use std::fmt::Write as _;

use crate::view::Stats;

/// The exposition of `stats`.
pub(crate) fn render(stats: &Stats) -> String {
    let mut out = String::new();
    let mut family = |name: &str, help: &str, samples: &[(String, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    let plain = |value: u64| vec![(String::new(), value)];
    family(
        "effect_operations",
        "Operations in the ledger, per status.",
        &stats
            .counts
            .entries()
            .iter()
            .map(|(status, count)| (labels(&[("status", status.as_str())]), *count))
            .collect::<Vec<_>>(),
    );
    family(
        "effect_unresolved_operations",
        "Operations in outcome_unknown or quarantined: waiting for reconciliation or an operator.",
        &plain(stats.unresolved),
    );
    family(
        "effect_oldest_unresolved_age_seconds",
        "Age of the least recently updated unresolved operation (0 when none).",
        &plain(stats.oldest_unresolved_age_seconds.unwrap_or(0)),
    );
    family(
        "effect_stale_dispatches",
        "Dispatched operations whose lease has expired: their worker is gone.",
        &plain(stats.stale),
    );
    family(
        "effect_awaiting_approval",
        "Operations awaiting a human approval.",
        &plain(stats.counts.awaiting_approval),
    );
    family(
        "effect_waiting_operations",
        "Prepared operations nobody is dispatching, per who will: their caller, a recovery worker, or either once a budget deferral ends.",
        &[
            (
                labels(&[("waiting_for", "caller")]),
                stats.waiting_for_caller,
            ),
            (
                labels(&[("waiting_for", "recovery_worker")]),
                stats.waiting_for_recovery_worker,
            ),
            (
                labels(&[("waiting_for", "budget")]),
                stats.waiting_for_budget,
            ),
        ],
    );
    family(
        "effect_recovery_blocked_operations",
        "Operations a recovery worker cannot dispatch: no registered version reads their stored intent, or the running contract weakens their stored terms.",
        &plain(stats.recovery_blocked),
    );
    family(
        "effect_oldest_waiting_age_seconds",
        "Age of the longest-waiting operation its caller, a recovery worker or an operator should dispatch, budget deferrals excluded (0 when none).",
        &plain(stats.oldest_waiting_age_seconds.unwrap_or(0)),
    );
    family(
        "effect_oldest_deferred_age_seconds",
        "Age of the longest-waiting operation deferred by a budget (0 when none): dispatched once the budget has room, rejected at its deferral's bound.",
        &plain(stats.oldest_deferred_age_seconds.unwrap_or(0)),
    );
    let budget = |f: &dyn Fn(&effect_core::BudgetUse) -> Option<u64>| {
        stats
            .budgets
            .iter()
            .filter_map(|b| {
                f(b).map(|value| {
                    (
                        labels(&[("budget", &b.budget), ("window", &b.window)]),
                        value,
                    )
                })
            })
            .collect::<Vec<_>>()
    };
    family(
        "effect_budget_used_count",
        "Dispatches charged to each budget in its current window.",
        &budget(&|b| Some(b.count)),
    );
    family(
        "effect_budget_used_amount",
        "Amounts charged to each budget in its current window.",
        &budget(&|b| Some(b.amount)),
    );
    family(
        "effect_budget_limit_count",
        "The count limit of each budget with one.",
        &budget(&|b| b.max_count),
    );
    family(
        "effect_budget_limit_amount",
        "The amount limit of each budget with one.",
        &budget(&|b| b.max_amount),
    );
    out
}

/// `{a="x",b="y"}`, each value escaped as the format requires.
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(name, value)| {
            let escaped = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{name}=\"{escaped}\"")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}
