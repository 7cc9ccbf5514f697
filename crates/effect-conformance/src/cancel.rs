//! An operator's cancellation of an operation not yet dispatched
//! (docs/spec.md §4, "cancel"): `prepared` or `awaiting_approval` become
//! `rejected`, audited, with their budget charges given back; anything
//! dispatched, uncertain or settled is refused with nothing written; and a
//! cancel racing a claim leaves exactly one of them applied.

use effect_core::EffectLedgerExt as _;
use effect_core::{Claim, EffectStatus as S, LedgerError, LedgerErrorKind, TransitionOutcome};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, LIVE, cancel, cancel_by_operator, except, race};

const NOT_DISPATCHED: [S; 2] = [S::Prepared, S::AwaitingApproval];

fn apply_cancel(c: &Check, id: &str) -> Result<TransitionOutcome, LedgerError> {
    c.ledger.apply(id, &cancel_by_operator())
}

/// From `prepared` and `awaiting_approval`, a cancel makes the operation
/// `rejected` with an audited `cancelled` event (actor, reason, evidence
/// reference, the evidence it replaced kept); no claim dispatches it after,
/// and a second cancel is refused with nothing written.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn cancel_ends_an_operation_not_yet_dispatched(factory: LedgerFactory<'_>) {
    let c = Check::new("cancel_ends_an_operation_not_yet_dispatched", factory);
    for from in NOT_DISPATCHED {
        let id = format!("cancel from {from}");
        c.in_status(&id, from);
        let outcome = c.ok(apply_cancel(&c, &id), format_args!("cancel from {from}"));
        c.ensure(outcome.applied, format_args!("cancel from {from} applied"));
        let record = c.record(&id);
        c.same(&outcome.record, &record, "returned vs stored record");
        c.same(
            (record.status, record.attempts),
            (S::Rejected, 0),
            "after cancel",
        );
        c.same(
            record.error.as_deref(),
            Some("cancelled by operator@example.com: the customer withdrew"),
            "error",
        );
        c.evidence_has(
            &record.evidence,
            &json!({
                "actor": "operator@example.com",
                "reason": "the customer withdrew",
                "evidence_reference": "TICKET-7",
                "resolution": "cancelled",
            }),
            "evidence after cancel",
        );
        if from == S::AwaitingApproval {
            c.evidence_has(
                &record.evidence,
                &json!({"evidence_before_resolution": {"approval_required": true}}),
                "the evidence it replaced",
            );
        }
        let event = c.last_event(&id);
        c.event_is(
            &event,
            "cancelled",
            &json!({"error": "cancelled by operator@example.com: the customer withdrew"}),
        );
        c.same(
            event.data["evidence"]["actor"].as_str(),
            Some("operator@example.com"),
            "the event's actor",
        );
        let before = c.snapshot(&id);
        c.ensure(
            !c.claim(&id, "late worker", LIVE),
            "a claim after the cancel returns false",
        );
        c.err(
            apply_cancel(&c, &id),
            LedgerErrorKind::InvalidTransition,
            "a second cancel",
        );
        c.unchanged(&id, &before, "a claim and a cancel after the cancel");
    }
}

/// A cancel is refused (`InvalidTransition`, nothing written) from every
/// status but `prepared` and `awaiting_approval`, and (`InvalidInput`) with
/// a blank actor, reason or evidence reference.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn cancel_is_refused_once_dispatched(factory: LedgerFactory<'_>) {
    let c = Check::new("cancel_is_refused_once_dispatched", factory);
    for from in except(&NOT_DISPATCHED) {
        let id = format!("cancel from {from}");
        c.in_status(&id, from);
        let before = c.snapshot(&id);
        c.err(
            apply_cancel(&c, &id),
            LedgerErrorKind::InvalidTransition,
            format_args!("cancel from {from}"),
        );
        c.unchanged(&id, &before, format_args!("cancel from {from}"));
    }
    c.prepare("blank");
    let before = c.snapshot("blank");
    for blank in [
        cancel(" ", "r", "e"),
        cancel("a", "", "e"),
        cancel("a", "r", " "),
    ] {
        c.err(
            c.ledger.apply("blank", &blank),
            LedgerErrorKind::InvalidInput,
            "a cancel with a blank field",
        );
    }
    c.unchanged("blank", &before, "cancels with blank fields");
    c.err(
        apply_cancel(&c, "never prepared"),
        LedgerErrorKind::NotFound,
        "cancel of an unknown operation",
    );
}

/// A cancel and a claim racing on one `prepared` operation (24 rounds, so a
/// non-atomic claim is caught even on a loaded machine):
/// exactly one applies each time. When the claim won, the cancel is
/// refused (`InvalidTransition`) and the operation is `dispatched` once;
/// when the cancel won, the claim returns false and it is `rejected`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn cancel_races_a_claim(factory: LedgerFactory<'_>) {
    let c = Check::new("cancel_races_a_claim", factory);
    for round in 0..24 {
        let id = format!("raced {round}");
        c.prepare(&id);
        // The racers swap roles every round: a thread released last from
        // the barrier tends to run first, and each side must sometimes lead.
        let claimer = round % 2;
        let results = race(&c, 2, |i| {
            if i == claimer {
                let claim = Claim::new(format!("worker {round}"), LIVE);
                (Some(c.ledger.claim_dispatch(&id, &claim)), None)
            } else {
                (None, Some(apply_cancel(&c, &id)))
            }
        });
        let claimed = match &results[claimer].0 {
            Some(Ok(claimed)) => *claimed,
            other => c.fail(format_args!("round {round}: the claim answered {other:?}")),
        };
        let cancelled = match &results[1 - claimer].1 {
            Some(Ok(outcome)) => outcome.applied,
            Some(Err(err)) if err.kind() == LedgerErrorKind::InvalidTransition => false,
            other => c.fail(format_args!("round {round}: the cancel answered {other:?}")),
        };
        c.ensure(
            claimed != cancelled,
            format_args!(
                "round {round}: exactly one of the claim ({claimed}) and the cancel \
                 ({cancelled}) applies"
            ),
        );
        let record = c.record(&id);
        let (status, attempts, last) = if claimed {
            (S::Dispatched, 1, "dispatched")
        } else {
            (S::Rejected, 0, "cancelled")
        };
        c.same(
            (record.status, record.attempts),
            (status, attempts),
            format_args!("round {round}"),
        );
        c.same(
            c.event_types(&id),
            vec!["prepared".to_owned(), last.to_owned()],
            format_args!("round {round}'s events"),
        );
    }
}
