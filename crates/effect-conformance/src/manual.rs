//! Audited manual resolutions by an operator.

use effect_core::EffectLedgerExt as _;
use effect_core::{EffectStatus as S, LedgerErrorKind, ManualAction, ManualResolution};
use serde_json::{Value, json};

use super::LedgerFactory;
use super::harness::{Check, evidence, except, manual};

const UNCERTAIN: [S; 2] = [S::OutcomeUnknown, S::Quarantined];

fn audit() -> Value {
    json!({
        "actor": "operator@example.com",
        "reason": "checked the provider dashboard",
        "evidence_reference": "TICKET-42",
    })
}

fn resolve(c: &Check, id: &str, action: ManualAction) -> effect_core::EffectRecord {
    let returned = c.ok(
        c.ledger.resolve_manually(id, &manual(action)),
        format_args!("resolve_manually({id:?})"),
    );
    let stored = c.record(id);
    c.same(
        &returned,
        &stored,
        "record returned by resolve_manually vs stored record",
    );
    stored
}

fn event_evidence(c: &Check, id: &str, event_type: &str) -> effect_core::Evidence {
    let event = c.last_event(id);
    c.event_is(&event, event_type, &json!({}));
    evidence(event.data.get("evidence").cloned().unwrap_or(Value::Null))
}

/// Manual confirm from `outcome_unknown` / `quarantined` stores the output and
/// appends an audited `manually_confirmed` event.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_confirm(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_confirm", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let output = json!({"charge_id": "ch_manual"});
        let action = ManualAction::Confirm {
            output: output.clone(),
            provider_operation_id: Some("ch_manual".into()),
        };
        let record = resolve(&c, &id, action);
        c.same(record.status, S::Confirmed, "status");
        c.same(record.output, Some(output), "output");
        c.same(
            record.provider_operation_id.as_deref(),
            Some("ch_manual"),
            "provider_operation_id",
        );
        c.same(record.owner_token, None, "owner_token");
        c.evidence_has(&record.evidence, &audit(), "record after manual confirm");
        let data = event_evidence(&c, &id, "manually_confirmed");
        c.evidence_has(&data, &audit(), "manually_confirmed event");
    }
}

/// Manual reject from `outcome_unknown` / `quarantined` records an error and
/// appends an audited `manually_rejected` event.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_reject(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_reject", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let record = resolve(&c, &id, ManualAction::Reject);
        c.same(record.status, S::Rejected, "status");
        c.ensure(
            record.error.as_deref().is_some_and(|e| !e.is_empty()),
            "a manual rejection records an error",
        );
        c.evidence_has(&record.evidence, &audit(), "record after manual reject");
        let data = event_evidence(&c, &id, "manually_rejected");
        c.evidence_has(&data, &audit(), "manually_rejected event");
    }
}

/// Manual retry authorization from `outcome_unknown` / `quarantined` returns
/// the operation to `prepared`, records `handler_may_still_be_running=false`
/// and appends `manual_retry_authorized`; the next claim is attempt 2.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_authorize_retry(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_authorize_retry", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let record = resolve(
            &c,
            &id,
            ManualAction::AuthorizeRetry {
                handler_stopped: false,
            },
        );
        let mut expected = audit();
        expected["handler_may_still_be_running"] = Value::Bool(false);
        c.same(record.status, S::Prepared, "status");
        c.same(record.error, None, "error");
        c.evidence_has(
            &record.evidence,
            &expected,
            "record after manual retry authorization",
        );
        let data = event_evidence(&c, &id, "manual_retry_authorized");
        c.evidence_has(&data, &expected, "manual_retry_authorized event");
        c.must_claim(&id, "retry worker", super::harness::LIVE);
        c.same(
            c.record(&id).attempts,
            2,
            "attempts after the authorized retry is claimed",
        );
    }
}

/// Sets one audit field of a resolution to a blank value.
type Blank = fn(&mut ManualResolution, &str);

fn actions() -> [(&'static str, ManualAction); 3] {
    [
        (
            "manual confirm",
            ManualAction::Confirm {
                output: json!(1),
                provider_operation_id: None,
            },
        ),
        ("manual reject", ManualAction::Reject),
        (
            "manual retry authorization",
            ManualAction::AuthorizeRetry {
                handler_stopped: false,
            },
        ),
    ]
}

/// Manual resolutions outside `outcome_unknown` / `quarantined` fail with
/// `InvalidTransition` and write nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_only_from_uncertain(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_only_from_uncertain", factory);
    for (i, (what, action)) in actions().into_iter().enumerate() {
        for from in except(&UNCERTAIN) {
            let id = format!("{i} from {from}");
            c.in_status(&id, from);
            let before = c.snapshot(&id);
            c.err(
                c.ledger.resolve_manually(&id, &manual(action.clone())),
                LedgerErrorKind::InvalidTransition,
                format_args!("{what} from {from}"),
            );
            c.unchanged(&id, &before, format_args!("{what} from {from}"));
        }
    }
}

/// A blank actor, reason or evidence reference is `InvalidInput`; nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn manual_requires_audit_fields(factory: LedgerFactory<'_>) {
    let c = Check::new("manual_requires_audit_fields", factory);
    c.in_status("op", S::Quarantined);
    let before = c.snapshot("op");
    let blanked: [(&str, Blank); 3] = [
        ("actor", |r, v| r.audit.actor = v.to_owned()),
        ("reason", |r, v| r.audit.reason = v.to_owned()),
        ("evidence reference", |r, v| {
            r.audit.evidence_reference = v.to_owned()
        }),
    ];
    for (what, action) in actions() {
        for (field, blank) in &blanked {
            for value in ["", "  "] {
                let mut resolution = manual(action.clone());
                blank(&mut resolution, value);
                c.err(
                    c.ledger.resolve_manually("op", &resolution),
                    LedgerErrorKind::InvalidInput,
                    format_args!("{what} with {field} {value:?}"),
                );
                c.unchanged("op", &before, format_args!("{what} with {field} {value:?}"));
            }
        }
    }
}
