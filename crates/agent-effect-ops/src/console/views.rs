//! The approvals, budgets and search views.

use effect_core::{EffectLedger, EffectRecord, EffectStatus, ListQuery, MAX_LIST_LIMIT};
use maud::{Markup, html};

use crate::console::operation::Arguments;
use crate::console::pages::{Frame, message, operation_href, page, pretty};

/// One operation awaiting approval, with what is asked.
#[derive(Debug, Clone)]
pub(crate) struct Asked {
    pub(crate) record: EffectRecord,
    pub(crate) arguments: Arguments,
    /// For a compensation: the confirmed output of the operation it undoes.
    pub(crate) compensates_output: Option<serde_json::Value>,
}

/// Every operation awaiting approval (up to one page), oldest first.
pub(crate) fn read_approvals(ledger: &dyn EffectLedger) -> anyhow::Result<Vec<Asked>> {
    let mut asked = Vec::new();
    let records = ledger.list(&ListQuery::with_status(
        EffectStatus::AwaitingApproval,
        MAX_LIST_LIMIT,
    ))?;
    for record in records.into_iter().rev() {
        let events = ledger.events(&record.operation_id)?;
        asked.push(Asked {
            arguments: Arguments::of(&events),
            compensates_output: crate::inspect::compensates_output(ledger, &record)?,
            record,
        });
    }
    Ok(asked)
}

/// The approvals page.
pub(crate) fn approvals(frame: &Frame<'_>, asked: &[Asked]) -> Markup {
    page(
        frame,
        "Approvals",
        html! {
            h1 { "Approvals" }
            p.muted { "Operations whose contract requires a human approval before each dispatch. Open one to approve or deny it; an approval is bound to the request fingerprint shown." }
            div #approvals hx-get="/approvals/fragment" hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
                (approvals_region(asked))
            }
        },
    )
}

/// The refreshing part of the approvals page.
pub(crate) fn approvals_region(asked: &[Asked]) -> Markup {
    html! {
        @if asked.is_empty() {
            p.muted { "Nothing awaits approval." }
        } @else {
            table #approvals-table {
                thead { tr { th { "Operation" } th { "Contract" } th { "Asked since" } th { "What is asked (secrets redacted)" } th { "Approval" } } }
                tbody {
                    @for item in asked {
                        tr data-operation=(item.record.operation_id) {
                            td { a.mono href=(operation_href(&item.record.operation_id)) { (item.record.operation_id) } }
                            td { (item.record.contract_name) " v" (item.record.contract_version) }
                            td.mono { (item.record.updated_at) }
                            td {
                                @match &item.arguments {
                                    Arguments::Redacted(arguments) => pre.json.arguments { (pretty(arguments)) }
                                    Arguments::NotStored => span.muted { "arguments not stored (fingerprint " span.mono { (item.record.request_fingerprint) } ")" }
                                    Arguments::Sealed(info) => span.sealed { "sealed: " (info) }
                                    Arguments::Shown(arguments) => pre.json.arguments { (pretty(arguments)) }
                                }
                                @if let Some(output) = &item.compensates_output {
                                    p.muted { "It compensates " a.mono href=(operation_href(item.record.compensates().unwrap_or_default())) { (item.record.compensates().unwrap_or_default()) } ", whose confirmed output was:" }
                                    pre.json.compensates-output { (pretty(output)) }
                                }
                            }
                            td {
                                @match item.record.approval() {
                                    Some(approval) => { "approved by " (approval.get("actor").and_then(|a| a.as_str()).unwrap_or("?")) ", unused" }
                                    None => "not yet",
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The budgets page: each budget's use in its current window, as bars.
pub(crate) fn budgets(frame: &Frame<'_>, budgets: &[effect_core::BudgetUse]) -> Markup {
    page(
        frame,
        "Budgets",
        html! {
            h1 { "Budgets" }
            p.muted { "Each budget (per scope: tenant, run, account) in its current window, from the ledger's charges." }
            div #budgets hx-get="/budgets/fragment" hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
                (budgets_region(budgets))
            }
        },
    )
}

/// The refreshing part of the budgets page.
pub(crate) fn budgets_region(budgets: &[effect_core::BudgetUse]) -> Markup {
    html! {
        @if budgets.is_empty() {
            p.muted { "No dispatch was ever charged to a budget." }
        } @else {
            table #budgets-table {
                thead { tr { th { "Budget and scope" } th { "Window" } th { "Count" } th { "Amount" } } }
                tbody {
                    @for budget in budgets {
                        tr data-budget=(budget.budget) {
                            td.mono { (budget.budget) }
                            td { (budget.window) }
                            td { (bar(budget.count, budget.max_count)) }
                            td { (bar(budget.amount, budget.max_amount)) }
                        }
                    }
                }
            }
        }
    }
}

fn bar(used: u64, limit: Option<u64>) -> Markup {
    html! {
        @match limit {
            Some(limit) => {
                meter min="0" max=(limit) high=(limit.saturating_mul(9) / 10) value=(used) title=(format!("{used} of {limit}")) {}
                " " (used) " of " (limit)
            }
            None => { (used) span.muted { " (no limit)" } }
        }
    }
}

/// Operations matching a search: by id, provider idempotency key or
/// provider operation id.
pub(crate) fn search_results(
    frame: &Frame<'_>,
    query: &str,
    found: &[EffectRecord],
    scanned_all: bool,
) -> Markup {
    page(
        frame,
        "Search",
        html! {
            h1 { "Search" }
            p { "Results for " code { (query) } }
            @if !scanned_all {
                (message("error", "Matched on the operation id, and on keys among the 10,000 most recently updated operations: an older operation is found by its id."))
            }
            @if found.is_empty() {
                p.muted #no-results { "No operation has that id, provider idempotency key or provider operation id." }
            } @else {
                table #results {
                    thead { tr { th { "Operation" } th { "Status" } th { "Provider operation id" } th { "Provider key" } } }
                    tbody {
                        @for record in found {
                            tr {
                                td { a.mono href=(operation_href(&record.operation_id)) { (record.operation_id) } }
                                td { span class=(format!("status status-{}", record.status)) { (record.status) } }
                                td.mono { (record.provider_operation_id.as_deref().unwrap_or("—")) }
                                td.mono { (record.provider_idempotency_key.as_deref().unwrap_or("—")) }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// How many recent operations a key search reads.
const SEARCH_SCAN: usize = 10_000;

/// Finds `query` as an operation id (exact), then as a provider key or
/// provider operation id among the most recently updated operations.
/// Returns the matches and whether every operation was read.
pub(crate) fn search(
    ledger: &dyn EffectLedger,
    query: &str,
) -> anyhow::Result<(Vec<EffectRecord>, bool)> {
    let query = query.trim();
    let mut found = Vec::new();
    if query.is_empty() {
        return Ok((found, true));
    }
    if let Some(record) = ledger.get(query)? {
        found.push(record);
    }
    let mut page = ListQuery::new(MAX_LIST_LIMIT);
    let mut read = 0;
    loop {
        let records = ledger.list(&page)?;
        read += records.len();
        let full = records.len() == MAX_LIST_LIMIT;
        let last = records.last().map(|r| r.operation_id.clone());
        for record in records {
            if record.operation_id != query
                && (record.provider_idempotency_key.as_deref() == Some(query)
                    || record.provider_operation_id.as_deref() == Some(query))
            {
                found.push(record);
            }
        }
        match last {
            Some(last) if full && read < SEARCH_SCAN => page = page.after(last),
            _ => return Ok((found, !full)),
        }
    }
}
