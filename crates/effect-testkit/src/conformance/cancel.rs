//! An operator's cancellation of an operation not yet dispatched
//! (docs/spec.md §4, "cancel"): `prepared` or `awaiting_approval` become
//! `rejected`, audited, with their budget charges given back; anything
//! dispatched, uncertain or settled is refused with nothing written; and a
//! cancel racing a claim leaves exactly one of them applied.

use std::sync::{Arc, Mutex};

use effect_core::EffectLedgerExt as _;
use effect_core::{
    Budget, Claim, EffectContract, EffectStatus as S, LedgerError, LedgerErrorKind,
    OutcomeProbeResult, Transition, TransitionOutcome,
};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use serde_json::{Value, json};

use super::LedgerFactory;
use super::harness::{Check, LIVE, except};
use super::races::race;

const NOT_DISPATCHED: [S; 2] = [S::Prepared, S::AwaitingApproval];

fn cancel(actor: &str, reason: &str, evidence_reference: &str) -> Transition {
    Transition::Cancel {
        actor: actor.to_owned(),
        reason: reason.to_owned(),
        evidence_reference: evidence_reference.to_owned(),
    }
}

fn cancel_by_operator() -> Transition {
    cancel("operator@example.com", "the customer withdrew", "TICKET-7")
}

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

/// A retry-authorized operation (its first dispatch uncertain, the probe
/// authoritative that nothing committed) keeps its budget charge while it
/// waits; cancelling it gives the charge back (`budget_refunded`), so the
/// next refund fits, and the provider received nothing for it.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn cancel_gives_back_budget_charges(factory: LedgerFactory<'_>) {
    let c = Check::new("cancel_gives_back_budget_charges", factory);
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let contract = EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .budget(Budget::total("refunds").max_count(1))
    .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
    .build();
    let contract = match contract {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    // Fails before the provider has it, every time: two rounds, both
    // reconciled to a retry, which is left for a later call.
    let failing = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::unknown("connection refused"))
    };
    match executor.execute(&contract, &json!({"order": "A-1"}), failing) {
        Ok(result) => c.same(
            (result.status, result.attempts),
            (S::OutcomeUnknown, 2),
            "A-1 after two failed rounds",
        ),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    let id = "order:A-1:refund";
    // The probe says the second attempt did not commit either: the retry
    // waits for a later call, or a worker.
    let reset = Transition::ResetForRetry {
        evidence: super::harness::evidence(json!({"retry_basis": "probe_not_committed"})),
    };
    let reset = c.ok(c.ledger.apply(id, &reset), "authorizing A-1's retry");
    c.same(
        reset.record.status,
        S::Prepared,
        "A-1 waiting for its retry",
    );
    let outcome = c.ok(apply_cancel(&c, id), "cancel of A-1");
    c.same(outcome.record.status, S::Rejected, "A-1 after the cancel");
    let types = c.event_types(id);
    c.same(
        types
            .iter()
            .rev()
            .take(2)
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["budget_refunded", "cancelled"],
        "A-1's last events (newest first)",
    );
    let accepting = {
        let received = Arc::clone(&received);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            lock(&received).push(order.clone());
            Ok(json!({"refunded": order}))
        }
    };
    match executor.execute(&contract, &json!({"order": "A-2"}), accepting.clone()) {
        Ok(result) => c.same(
            result.status,
            S::Confirmed,
            "A-2 in the budget A-1 gave back",
        ),
        Err(err) => c.fail(format_args!("A-2: {err}")),
    }
    match executor.execute(&contract, &json!({"order": "A-1"}), accepting) {
        Ok(result) => c.same(
            (result.status, result.attempts),
            (S::Rejected, 2),
            "A-1 called after its cancel",
        ),
        Err(err) => c.fail(format_args!("A-1 after its cancel: {err}")),
    }
    c.same(
        lock(&received).clone(),
        vec!["A-2".to_owned()],
        "requests the provider received",
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

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
