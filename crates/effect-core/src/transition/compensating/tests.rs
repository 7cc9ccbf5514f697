//! The compensation steps of docs/spec.md §5e: only on a confirmed original
//! (the link on the compensation in any status), never a status change, a
//! repeat writes nothing, a different compensation is a conflict.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use crate::compensation::CompensationStep;
use crate::error::LedgerError;
use crate::record::EffectRecord;
use crate::status::EffectStatus;
use crate::transition::{Transition, plan};

fn record(status: EffectStatus) -> EffectRecord {
    let mut record = EffectRecord::new(
        "op",
        "capture_payment",
        "1",
        "blake3:00",
        "2026-01-01T00:00:00.000000+00:00",
    );
    record.status = status;
    record
}

fn start(id: &str) -> Transition {
    Transition::Compensation(CompensationStep::Start {
        operation_id: id.into(),
        contract_name: "refund_payment".into(),
        contract_version: "1".into(),
    })
}

fn finish(id: &str, status: EffectStatus) -> Transition {
    Transition::Compensation(CompensationStep::Finish {
        operation_id: id.into(),
        status,
    })
}

/// Applies `transitions` in turn; returns the record and the event types of each.
fn run(
    mut record: EffectRecord,
    transitions: &[Transition],
) -> Result<(EffectRecord, Vec<Vec<&'static str>>), LedgerError> {
    let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let mut events = Vec::new();
    for transition in transitions {
        let planned = plan("op", Some(record), transition, now)?;
        events.push(
            planned
                .write
                .map(|w| w.events.iter().map(|e| e.event_type).collect())
                .unwrap_or_default(),
        );
        record = planned.outcome.record;
    }
    Ok((record, events))
}

#[test]
fn a_confirmed_original_records_start_and_finish_once() -> Result<(), LedgerError> {
    let (record, events) = run(
        record(EffectStatus::Confirmed),
        &[
            start("op:compensation"),
            start("op:compensation"),
            finish("op:compensation", EffectStatus::Confirmed),
            finish("op:compensation", EffectStatus::Confirmed),
        ],
    )?;
    assert_eq!(
        events,
        vec![
            vec!["compensation_started"],
            vec![],
            vec!["compensated"],
            vec![]
        ]
    );
    assert_eq!(record.status, EffectStatus::Confirmed);
    let link = record
        .compensation()
        .ok_or(LedgerError::invalid_input("no link"))?;
    assert_eq!(link.operation_id, "op:compensation");
    assert_eq!(link.state, "confirmed");
    Ok(())
}

#[test]
fn only_a_confirmed_original_is_compensated() {
    for status in [
        EffectStatus::Prepared,
        EffectStatus::AwaitingApproval,
        EffectStatus::Dispatched,
        EffectStatus::OutcomeUnknown,
        EffectStatus::Quarantined,
        EffectStatus::Rejected,
    ] {
        let refused = run(record(status), &[start("op:compensation")]);
        assert!(
            matches!(refused, Err(LedgerError::InvalidTransition { .. })),
            "{status}: {refused:?}"
        );
    }
}

#[test]
fn another_compensation_or_a_settled_one_changing_is_refused() -> Result<(), LedgerError> {
    let (started, _) = run(record(EffectStatus::Confirmed), &[start("op:compensation")])?;
    assert!(matches!(
        run(started.clone(), &[start("op:other")]),
        Err(LedgerError::Conflict { .. })
    ));
    assert!(matches!(
        run(
            started.clone(),
            &[finish("op:other", EffectStatus::Confirmed)]
        ),
        Err(LedgerError::Conflict { .. })
    ));
    assert!(
        run(
            started.clone(),
            &[finish("op:compensation", EffectStatus::OutcomeUnknown)]
        )
        .is_err()
    );
    let (rejected, events) = run(
        started,
        &[finish("op:compensation", EffectStatus::Rejected)],
    )?;
    assert_eq!(events, vec![vec!["compensation_rejected"]]);
    assert!(
        run(
            rejected,
            &[finish("op:compensation", EffectStatus::Confirmed)]
        )
        .is_err()
    );
    assert!(
        run(
            record(EffectStatus::Confirmed),
            &[finish("op:compensation", EffectStatus::Confirmed)]
        )
        .is_err()
    );
    assert!(run(record(EffectStatus::Confirmed), &[start("op")]).is_err());
    Ok(())
}

#[test]
fn a_request_is_audited_once_and_cleared_when_the_compensation_settles() -> Result<(), LedgerError>
{
    let request = Transition::Compensation(CompensationStep::Request {
        actor: "ops@example.com".into(),
        reason: "customer cancelled".into(),
        evidence_reference: "T-1".into(),
    });
    let blank = Transition::Compensation(CompensationStep::Request {
        actor: " ".into(),
        reason: "r".into(),
        evidence_reference: "e".into(),
    });
    assert!(matches!(
        run(record(EffectStatus::Confirmed), &[blank]),
        Err(LedgerError::InvalidInput { .. })
    ));
    assert!(matches!(
        run(
            record(EffectStatus::OutcomeUnknown),
            std::slice::from_ref(&request)
        ),
        Err(LedgerError::InvalidTransition { .. })
    ));
    let (record, events) = run(
        record(EffectStatus::Confirmed),
        &[
            request.clone(),
            request.clone(),
            start("op:compensation"),
            finish("op:compensation", EffectStatus::Confirmed),
            request,
        ],
    )?;
    assert_eq!(
        events,
        vec![
            vec!["compensation_requested"],
            vec![],
            vec!["compensation_started"],
            vec!["compensated"],
            vec![]
        ]
    );
    assert!(record.compensation_request().is_none());
    Ok(())
}

#[test]
fn the_link_back_survives_confirmation_and_resolution() -> Result<(), LedgerError> {
    let of = Transition::Compensation(CompensationStep::Of {
        original: "original".into(),
    });
    let (linked, events) = run(record(EffectStatus::Prepared), &[of.clone(), of])?;
    assert_eq!(events, vec![vec!["compensation_of"], vec![]]);
    assert_eq!(linked.status, EffectStatus::Prepared);
    let confirm = Transition::MarkConfirmed {
        owner_token: None,
        confirmation: crate::transition::Confirmation {
            output: json!({"refund_id": "re-1"}),
            provider_operation_id: None,
            evidence: crate::record::Evidence::new(),
        },
    };
    let (confirmed, _) = run(linked.clone(), &[confirm])?;
    assert_eq!(confirmed.compensates(), Some("original"));
    let mut unknown = linked;
    unknown.status = EffectStatus::OutcomeUnknown;
    let resolve = Transition::Resolve(crate::transition::ManualResolution::new(
        crate::transition::ManualAction::Reject,
        crate::Audit::new("a", "r", "e"),
    ));
    let (resolved, _) = run(unknown.clone(), &[resolve])?;
    assert_eq!(resolved.compensates(), Some("original"));
    assert!(matches!(
        run(
            unknown,
            &[Transition::Compensation(CompensationStep::Of {
                original: "another".into()
            })]
        ),
        Err(LedgerError::Conflict { .. })
    ));
    Ok(())
}
