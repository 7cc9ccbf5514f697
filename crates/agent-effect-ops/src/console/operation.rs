//! One operation: state, timeline, evidence, arguments (secrets redacted,
//! sealed fields shown as sealed), compensation links, the provider's
//! dashboard link, and the forms of the actions its status allows.

use std::collections::BTreeMap;

use effect_core::{EffectLedger, EffectRecord, EffectStatus, LedgerEvent};
use maud::{Markup, html};
use serde_json::Value;

use crate::console::auth::Identity;
use crate::console::pages::{
    Frame, encode, message, operation_href, page, pretty, scalar, timeline,
};
use crate::view::{CompensationLinks, EventView, LateObservation, show_sealed};

/// What the ledger holds of an operation's arguments.
#[derive(Debug, Clone)]
pub(crate) enum Arguments {
    /// The copy recorded for an approver when it was created awaiting
    /// approval: secrets and redacted fields replaced by the marker
    /// (`effect_core::intent::redacted`, what `agent-effect-ops show` prints).
    Redacted(Value),
    /// Its contract does not store them (only the fingerprint is kept).
    NotStored,
    /// Stored sealed: `sealed (key k1)`.
    Sealed(String),
    /// Stored in the clear (secrets already redacted by the contract),
    /// sealed fields shown as sealed.
    Shown(Value),
}

impl Arguments {
    /// The arguments of the operation whose events are `events`: the
    /// approver's redacted copy when there is one, else the stored intent.
    pub(crate) fn of(events: &[LedgerEvent]) -> Arguments {
        if let Some(redacted) = effect_core::intent::redacted(events) {
            let mut shown = redacted.clone();
            show_sealed(&mut shown);
            return Arguments::Redacted(shown);
        }
        match effect_core::intent::stored(events) {
            None => Arguments::NotStored,
            Some(stored) => match effect_exec::secrets::sealed_info(stored) {
                Some(sealed) => Arguments::Sealed(sealed.to_string()),
                None => {
                    let mut shown = stored.clone();
                    show_sealed(&mut shown);
                    Arguments::Shown(shown)
                }
            },
        }
    }
}

/// Everything the operation page shows.
#[derive(Debug, Clone)]
pub(crate) struct Detail {
    pub(crate) record: EffectRecord,
    pub(crate) events: Vec<EventView>,
    /// What handlers returned after their attempt lost its claim.
    pub(crate) late: Vec<LateObservation>,
    pub(crate) arguments: Arguments,
    /// For a compensation: the original's stored output (what is undone).
    pub(crate) original_output: Option<Value>,
    pub(crate) compensation: Option<CompensationLinks>,
    pub(crate) dashboard: Option<String>,
    /// Whether the dispatch lease has ended (a stale dispatch).
    pub(crate) stale: bool,
}

/// Reads an operation; `None` when it does not exist.
pub(crate) fn read(
    ledger: &dyn EffectLedger,
    id: &str,
    dashboards: &BTreeMap<String, String>,
    now_unix: f64,
) -> anyhow::Result<Option<Detail>> {
    let Some(record) = ledger.get(id)? else {
        return Ok(None);
    };
    let events = ledger.events(id)?;
    let arguments = Arguments::of(&events);
    let compensation = CompensationLinks::of(&record);
    let original_output = crate::inspect::compensates_output(ledger, &record)?;
    let dashboard = dashboards
        .get(&record.contract_name)
        .and_then(|template| dashboard_link(template, &record));
    let mut record = record;
    show_sealed_map(&mut record.evidence);
    Ok(Some(Detail {
        stale: record.is_stale_at(now_unix),
        late: LateObservation::of(&events, false),
        events: events.iter().map(EventView::from).collect(),
        record,
        arguments,
        original_output,
        compensation,
        dashboard,
    }))
}

fn show_sealed_map(evidence: &mut effect_core::Evidence) {
    evidence.values_mut().for_each(show_sealed);
}

/// The template with its placeholders filled in (percent-encoded); `None`
/// when it names a value the operation does not have.
pub(crate) fn dashboard_link(template: &str, record: &EffectRecord) -> Option<String> {
    let mut link = template.to_owned();
    for (name, value) in [
        ("{operation_id}", Some(&record.operation_id)),
        (
            "{provider_operation_id}",
            record.provider_operation_id.as_ref(),
        ),
        (
            "{provider_idempotency_key}",
            record.provider_idempotency_key.as_ref(),
        ),
    ] {
        if link.contains(name) {
            link = link.replace(name, &encode(value?));
        }
    }
    Some(link)
}

/// The operation page.
pub(crate) fn render(
    frame: &Frame<'_>,
    detail: &Detail,
    actions_enabled: bool,
    notice: Option<Markup>,
) -> Markup {
    let record = &detail.record;
    page(
        frame,
        &record.operation_id,
        html! {
            h1.mono #operation-id { (record.operation_id) }
            @if let Some(notice) = notice { (notice) }
            (state_region(detail))
            @if !detail.late.is_empty() {
                section #late-observations {
                    h2 { "Late observations" }
                    (message("error", "A handler came back after its attempt lost its claim. What it returned is untrusted and changed nothing, but weigh it before you decide: check at the provider."))
                    @for late in &detail.late {
                        h3.mono { (late.headline()) }
                        pre.json { (pretty(&late.returned)) }
                    }
                }
            }
            h2 { "Arguments" }
            @match &detail.arguments {
                Arguments::Redacted(arguments) => pre.json #arguments title="as recorded for approvers, secrets redacted" { (pretty(arguments)) }
                Arguments::NotStored => p.muted #arguments { "Not stored: its contract keeps only the request fingerprint." }
                Arguments::Sealed(info) => p.sealed #arguments { "Sealed at rest: " (info) }
                Arguments::Shown(arguments) => pre.json #arguments { (pretty(arguments)) }
            }
            @if let Some(output) = &detail.original_output {
                h2 { "What it compensates: the original's confirmed output" }
                pre.json #original-output { (pretty(output)) }
            }
            h2 { "Evidence" }
            pre.json #evidence { (pretty(&Value::Object(record.evidence.clone()))) }
            @if let Some(links) = &detail.compensation {
                h2 { "Compensation" }
                dl.fields #compensation {
                    @if let Some(original) = &links.compensates {
                        dt { "compensates" } dd { a.mono href=(operation_href(original)) { (original) } }
                    }
                    @if let Some(by) = &links.compensated_by {
                        dt { "compensated by" }
                        dd {
                            @if let Some(id) = by.get("operation_id").and_then(Value::as_str) {
                                a.mono href=(operation_href(id)) { (id) }
                                " (" (by.get("state").map(scalar).unwrap_or_default()) ")"
                            } @else { (scalar(by)) }
                        }
                    }
                    @if let Some(requested) = &links.requested {
                        dt { "requested" } dd { (scalar(requested)) }
                    }
                }
            }
            h2 { "Timeline" }
            div #timeline-region hx-get=(format!("{}/timeline", operation_href(&record.operation_id))) hx-trigger="ledger-changed from:body" hx-swap="innerHTML" {
                (timeline(&detail.events))
            }
            @if actions_enabled {
                (forms(frame, detail))
            }
        },
    )
}

/// The summary that refreshes live.
pub(crate) fn state_region(detail: &Detail) -> Markup {
    let record = &detail.record;
    html! {
        div #state hx-get=(format!("{}/state", operation_href(&record.operation_id))) hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
            dl.fields {
                dt { "status" } dd { span #status class=(format!("status status-{}", record.status)) { (record.status) } @if detail.stale { " (stale: its lease has ended)" } }
                dt { "contract" } dd { (record.contract_name) " v" (record.contract_version) }
                dt { "attempts" } dd #attempts { (record.attempts) }
                dt { "provider operation id" } dd.mono { (record.provider_operation_id.as_deref().unwrap_or("—")) }
                dt { "provider idempotency key" } dd.mono { (record.provider_idempotency_key.as_deref().unwrap_or("—")) }
                dt { "request fingerprint" } dd.mono #fingerprint { (record.request_fingerprint) }
                dt { "error" } dd #error { (record.error.as_deref().unwrap_or("—")) }
                dt { "output" } dd { @if record.output.is_some() { "stored (not shown; agent-effect-ops show --include-output)" } @else { "none" } }
                dt { "created" } dd.mono { (record.created_at) }
                dt { "updated" } dd.mono { (record.updated_at) }
                @if let Some(until) = record.lease_until {
                    dt { "lease until" } dd.mono { (crate::timestamp::format_unix_seconds(until)) }
                }
                @if let Some(link) = &detail.dashboard {
                    dt { "provider dashboard" } dd { a #dashboard href=(link) rel="noreferrer noopener" target="_blank" { "open in the provider's dashboard" } }
                }
            }
        }
    }
}

/// The forms of the actions the operation's status allows.
fn forms(frame: &Frame<'_>, detail: &Detail) -> Markup {
    let record = &detail.record;
    let Some(identity) = frame.identity else {
        return html! {};
    };
    let base = operation_href(&record.operation_id);
    let hidden = |identity: &Identity| {
        let _ = identity;
        html! {
            input type="hidden" name="csrf" value=(frame.csrf);
            input type="hidden" name="expect_attempts" value=(record.attempts);
        }
    };
    let audit = html! {
        label { "Reason" input type="text" name="reason" required; }
        label { "Evidence reference (ticket, incident, dashboard reference)" input type="text" name="evidence_reference" required; }
    };
    let uncertain = record.status.is_uncertain();
    html! {
        h2 { "Actions" }
        p.muted { "Recorded with you, " (identity.name) ", as the actor. The same rules as agent-effect-ops apply, checked again when the form is sent." }
        div.actions {
            @if uncertain && identity.may("confirm") {
                form #form-confirm method="post" action=(format!("{base}/confirm")) {
                    h3 { "Confirm: the effect happened" }
                    p.rules { "Only from outcome_unknown or quarantined, and only if it was not dispatched again since this page was read. The output is replayed to the agent: give what the provider shows." }
                    (hidden(identity))
                    label { "Output (JSON)" textarea name="output_json" rows="3" required {} }
                    label { "Provider operation id" input type="text" name="provider_operation_id"; }
                    (audit)
                    button type="submit" { "Confirm" }
                }
            }
            @if uncertain && identity.may("reject") {
                form #form-reject method="post" action=(format!("{base}/reject")) {
                    h3 { "Reject: the effect did not happen, never retry" }
                    p.rules { "Only from outcome_unknown or quarantined. Terminal." }
                    (hidden(identity))
                    (audit)
                    button type="submit" { "Reject" }
                }
            }
            @if uncertain && identity.may("authorize-retry") {
                form #form-authorize-retry method="post" action=(format!("{base}/authorize-retry")) {
                    h3 { "Authorize a retry: it did not happen, dispatch again" }
                    p.rules { "Only from outcome_unknown or quarantined. Refused while a previous handler may still run (a missed deadline, an expired or live lease) unless you assert below that it has stopped." }
                    (hidden(identity))
                    label { input type="checkbox" name="handler_stopped" value="on"; " I assert that no previous handler of this operation is still running (its process is gone, or the request was never sent)" }
                    (audit)
                    button type="submit" { "Authorize retry" }
                }
            }
            @if record.status == EffectStatus::AwaitingApproval && identity.may("approve") {
                form #form-approve method="post" action=(format!("{base}/approve")) {
                    h3 { "Approve one dispatch" }
                    p.rules { "Bound to the request fingerprint shown above: refused if the request changed. Used up by the next dispatch; unused after the expiry, it dispatches nothing." }
                    (hidden(identity))
                    input type="hidden" name="fingerprint" value=(record.request_fingerprint);
                    label { "Reason" input type="text" name="reason" required; }
                    label { "Expires after" input type="text" name="expires" value="1h"; }
                    button type="submit" { "Approve" }
                }
            }
            @if record.status == EffectStatus::AwaitingApproval && identity.may("deny") {
                form #form-deny method="post" action=(format!("{base}/deny")) {
                    h3 { "Deny: never dispatch it" }
                    p.rules { "Only while awaiting approval. Terminal: it becomes rejected." }
                    (hidden(identity))
                    label { "Reason" input type="text" name="reason" required; }
                    button type="submit" { "Deny" }
                }
            }
            @if detail.stale && identity.may("expire") {
                form #form-expire method="post" action=(format!("{base}/expire")) {
                    h3 { "Expire the stale dispatch" }
                    p.rules { "Only once its lease has ended by the store's clock: it becomes outcome_unknown, with a previous handler possibly still running." }
                    (hidden(identity))
                    (audit)
                    button type="submit" { "Expire" }
                }
            }
            @if record.status == EffectStatus::Confirmed && identity.may("compensate") {
                form #form-compensate method="post" action=(format!("{base}/compensate")) {
                    h3 { "Request its compensation" }
                    p.rules { "Only for a confirmed operation whose contract has a compensation; a recovery worker with the compensation's handler runs it once. A repeat writes nothing." }
                    (hidden(identity))
                    (audit)
                    button type="submit" { "Request compensation" }
                }
            }
            @if crate::cancel::cancellable(record.status) && identity.may("cancel") {
                form #form-cancel method="post" action=(format!("{base}/cancel")) {
                    h3 { "Cancel: never dispatch it" }
                    p.rules { "Only while prepared (whoever it waits for, deferred by a budget) or awaiting approval, and only if it was not dispatched since this page was read: a worker that claims it first wins, and the cancel is refused naming the command to use instead. Terminal: it becomes rejected; its budget charges, if any, are given back." }
                    (hidden(identity))
                    (audit)
                    button type="submit" { "Cancel the operation" }
                }
            }
        }
    }
}

/// A refusal or success shown above the operation.
pub(crate) fn notice(ok: bool, text: &str) -> Markup {
    message(if ok { "ok" } else { "error" }, text)
}
