//! The console's HTML: maud templates. maud escapes every interpolated value
//! (`(value)`), and nothing here uses `PreEscaped` on ledger data: ids,
//! errors, reasons and evidence from the ledger always render as text.

use maud::{DOCTYPE, Markup, html};
use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::Value;

use crate::console::auth::Identity;
use crate::console::queue::{Filter, Kind, Queue};
use crate::view::EventView;

/// What every page's frame needs to know.
pub(crate) struct Frame<'a> {
    /// The signed-in identity, when authentication is configured.
    pub(crate) identity: Option<&'a Identity>,
    /// The CSRF token of its forms.
    pub(crate) csrf: String,
}

/// The path of an operation's page.
pub(crate) fn operation_href(id: &str) -> String {
    format!("/operations/{}", encode(id))
}

/// `text` percent-encoded for a path segment or a query value.
pub(crate) fn encode(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

/// A full page.
pub(crate) fn page(frame: &Frame<'_>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // htmx may not inject styles or evaluate code: the CSP forbids both.
                meta name="htmx-config" content=r#"{"includeIndicatorStyles":false,"allowEval":false,"allowScriptTags":false}"#;
                title { (title) " · effect console" }
                link rel="stylesheet" href="/static/console.css";
                script src="/static/htmx.min.js" defer {}
                script src="/static/console.js" defer {}
            }
            body {
                header {
                    a.brand href="/" { "effect console" }
                    a href="/" { "Queue" }
                    a href="/approvals" { "Approvals" }
                    a href="/budgets" { "Budgets" }
                    a href="/charts" { "Charts" }
                    a href="/metrics" { "Metrics" }
                    form method="get" action="/search" {
                        input type="search" name="q" placeholder="operation id, provider key or provider operation id" aria-label="Search";
                    }
                    @if let Some(identity) = frame.identity {
                        span.who { (identity.name) " (" (identity.role.name()) ")" }
                        @if matches!(identity.via, crate::console::auth::Via::Session(_)) {
                            form method="post" action="/logout" {
                                input type="hidden" name="csrf" value=(frame.csrf);
                                button type="submit" { "Sign out" }
                            }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A message in place of a view.
pub(crate) fn message(kind: &str, text: &str) -> Markup {
    html! { div class=(format!("banner {kind}")) role="status" { (text) } }
}

/// The login page (token mode).
pub(crate) fn login(error: Option<&str>) -> Markup {
    let frame = Frame {
        identity: None,
        csrf: String::new(),
    };
    page(
        &frame,
        "Sign in",
        html! {
            h1 { "Sign in" }
            @if let Some(error) = error { (message("error", error)) }
            form method="post" action="/login" {
                label { "Operator token " input type="password" name="token" autocomplete="off"; }
                " "
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// The queue page: filters, counts, and the region that refreshes live.
pub(crate) fn queue_page(frame: &Frame<'_>, queue: &Queue, filter: &Filter) -> Markup {
    page(
        frame,
        "Queue",
        html! {
            h1 { "Queue" }
            p.muted { "Every operation that needs a person or is waiting: the earliest decide-by time first, then the oldest." }
            form.filters method="get" action="/" {
                label { "Contract"
                    select name="contract" {
                        option value="" { "any" }
                        @for contract in &queue.contracts {
                            option value=(contract) selected[filter.contract.as_deref() == Some(contract.as_str())] { (contract) }
                        }
                    }
                }
                label { "Kind"
                    select name="kind" {
                        option value="" { "any" }
                        @for kind in Kind::ALL {
                            option value=(kind.name()) selected[filter.kind.as_deref() == Some(kind.name())] { (kind.label()) }
                        }
                    }
                }
                label { "Older than"
                    input type="text" name="older_than" size="6" placeholder="30m" value=(filter.older_than.as_deref().unwrap_or(""));
                }
                button type="submit" { "Filter" }
            }
            (queue_region(queue, filter))
        },
    )
}

/// The part of the queue page that `/queue/fragment` refreshes.
pub(crate) fn queue_region(queue: &Queue, filter: &Filter) -> Markup {
    let query = serde_urlencoded_filter(filter);
    html! {
        div #queue hx-get=(format!("/queue/fragment?{query}")) hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
            div.counts {
                @for (kind, count) in &queue.counts {
                    a.count href=(format!("/?kind={}", kind.name())) data-kind=(kind.name()) {
                        b { (count) } (kind.label())
                    }
                }
            }
            @if queue.truncated {
                (message("error", "A kind holds more than 1000 operations: the counts above are exact (the numbers of stats), the list shows the first 1000 of each; use the filters or the CLI's list paging."))
            }
            @if queue.items.is_empty() {
                p.muted #queue-empty { "Nothing needs attention." }
            } @else {
                table #queue-table {
                    thead { tr { th { "Operation" } th { "Contract" } th { "Why" } th { "Decide by" } th { "Age" } th { "Attempts" } th { "Error" } } }
                    tbody {
                        @for item in &queue.items {
                            tr data-operation=(item.operation_id) data-kind=(item.kind.name()) {
                                td { a.mono href=(operation_href(&item.operation_id)) { (item.operation_id) } }
                                td { (item.contract) }
                                td {
                                    span class=(format!("status status-{}", item.status)) { (item.kind.label()) }
                                    @if item.late > 0 {
                                        " " span.late title="a handler came back after its attempt lost its claim: see the operation" { "late result ×" (item.late) }
                                    }
                                }
                                td.mono { (item.decide_by.as_deref().unwrap_or("—")) }
                                td { (item.age_seconds.map(age).unwrap_or_else(|| "—".to_owned())) }
                                td { (item.attempts) }
                                td { (item.error.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// An age in words: `42s`, `5m`, `3h 12m`, `2d 4h`.
pub(crate) fn age(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        s => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn serde_urlencoded_filter(filter: &Filter) -> String {
    let mut parts = Vec::new();
    for (key, value) in [
        ("contract", &filter.contract),
        ("kind", &filter.kind),
        ("older_than", &filter.older_than),
    ] {
        if let Some(value) = value.as_deref().filter(|v| !v.is_empty()) {
            parts.push(format!("{key}={}", encode(value)));
        }
    }
    parts.join("&")
}

/// How a timeline entry is drawn.
fn event_class(event_type: &str) -> &'static str {
    use effect_core::event as e;
    match event_type {
        e::OUTCOME_UNKNOWN
        | e::QUARANTINED
        | e::REJECTED
        | e::APPROVAL_DENIED
        | e::APPROVAL_EXPIRED
        | e::BUDGET_EXCEEDED
        | e::COMPENSATION_REJECTED => "kind-bad",
        e::CONFIRMED | e::COMPENSATED => "kind-ok",
        e::MANUALLY_CONFIRMED
        | e::MANUALLY_REJECTED
        | e::MANUAL_RETRY_AUTHORIZED
        | e::APPROVED
        | e::COMPENSATION_REQUESTED => "kind-manual",
        _ => "kind-wait",
    }
}

/// The fields of an event's data worth a line of their own.
const EVENT_FACTS: [&str; 9] = [
    "actor",
    "reason",
    "evidence_reference",
    "error",
    "owner_token",
    "probe_status",
    "provider_operation_id",
    "expires_at",
    "lease_until",
];

/// An operation's history as a vertical timeline.
pub(crate) fn timeline(events: &[EventView]) -> Markup {
    html! {
        ol.timeline #timeline {
            @for event in events {
                li class=(event_class(&event.event_type)) data-event=(event.event_type) {
                    strong { (event.event_type.replace('_', " ")) }
                    " "
                    span.when.mono { (event.timestamp) " · #" (event.sequence) }
                    @for fact in EVENT_FACTS {
                        // A manual step keeps its audit fields in its evidence.
                        @if let Some(value) = event.data.get(fact).or_else(|| event.data.get("evidence").and_then(|e| e.get(fact))).filter(|v| !v.is_null()) {
                            div { span.muted { (fact.replace('_', " ")) ": " } span.fact data-fact=(fact) { (scalar(value)) } }
                        }
                    }
                    @if event.data.as_object().is_some_and(|m| !m.is_empty()) {
                        details {
                            summary.muted { "data" }
                            pre.json { (pretty(&event.data)) }
                        }
                    }
                }
            }
        }
    }
}

/// A JSON value as one line of text (strings without quotes).
pub(crate) fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Pretty JSON, as text (maud escapes it).
pub(crate) fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
}
