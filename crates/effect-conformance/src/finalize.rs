//! Outcomes: unknown, confirmed, rejected, quarantine and reset for retry.

use effect_core::EffectLedgerExt as _;
use effect_core::EffectStatus as S;
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, confirmation, evidence, except};

const UNCERTAIN: [S; 2] = [S::OutcomeUnknown, S::Quarantined];

/// The owner marks a `dispatched` operation `outcome_unknown`: error recorded,
/// evidence merged, lease released, `outcome_unknown {error, evidence}` appended.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_unknown_by_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_unknown_by_owner", factory);
    let token = c.in_status("op", S::Dispatched);
    let applied = c.ledger.mark_outcome_unknown(
        "op",
        Some(&token),
        "read timed out",
        &evidence(json!({"dispatch_interruption": "handler_timeout"})),
    );
    c.applied(
        applied,
        "mark_outcome_unknown by the owner of a dispatched operation",
    );
    let record = c.record("op");
    c.same(record.status, S::OutcomeUnknown, "status");
    c.same(record.error.as_deref(), Some("read timed out"), "error");
    c.same(record.owner_token, None, "owner_token");
    c.same(record.lease_until, None, "lease_until");
    c.same(record.attempts, 1, "attempts");
    let expected = json!({"dispatch_interruption": "handler_timeout"});
    c.evidence_has(&record.evidence, &expected, "record");
    c.event_is(
        &c.last_event("op"),
        "outcome_unknown",
        &json!({"error": "read timed out", "evidence": expected}),
    );
}

/// Marking unknown with a wrong token, or by owner outside `dispatched`,
/// returns false and writes nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_unknown_by_owner_guards(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_unknown_by_owner_guards", factory);
    c.refused_from(
        &[S::Dispatched],
        "mark_outcome_unknown with a wrong token",
        |c, id, _| {
            c.ledger
                .mark_outcome_unknown(id, Some("intruder"), "x", &evidence(json!({})))
        },
    );
    c.refused_from(
        &except(&[S::Dispatched]),
        "mark_outcome_unknown by owner",
        |c, id, token| {
            c.ledger
                .mark_outcome_unknown(id, Some(token), "x", &evidence(json!({})))
        },
    );
}

/// Without an owner, mark unknown works from `outcome_unknown` and `quarantined`
/// (appending an event) and nowhere else.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_unknown_without_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_unknown_without_owner", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let events = c.events(&id).len();
        let applied = c.ledger.mark_outcome_unknown(
            &id,
            None,
            "probe pending",
            &evidence(json!({"probe_status": "pending"})),
        );
        c.applied(
            applied,
            format_args!("mark_outcome_unknown without owner from {from}"),
        );
        c.same(c.status(&id), S::OutcomeUnknown, "status");
        c.same(c.events(&id).len(), events + 1, "events appended");
        c.event_is(
            &c.last_event(&id),
            "outcome_unknown",
            &json!({"error": "probe pending", "evidence": {"probe_status": "pending"}}),
        );
    }
    c.refused_from(
        &except(&UNCERTAIN),
        "mark_outcome_unknown without owner",
        |c, id, _| {
            c.ledger
                .mark_outcome_unknown(id, None, "x", &evidence(json!({})))
        },
    );
}

/// The owner confirms a `dispatched` operation: output, provider operation id
/// and evidence stored, lease released, `confirmed` appended.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_confirmed_by_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_confirmed_by_owner", factory);
    let token = c.in_status("op", S::Dispatched);
    let output = json!({"charge_id": "ch_1", "amount": 1200, "captured": true});
    let applied = c
        .ledger
        .mark_confirmed("op", Some(&token), &confirmation(output.clone()));
    c.applied(
        applied,
        "mark_confirmed by the owner of a dispatched operation",
    );
    let record = c.record("op");
    c.same(record.status, S::Confirmed, "status");
    c.same(record.output, Some(output), "output");
    c.same(
        record.provider_operation_id.as_deref(),
        Some("ch_conformance"),
        "provider_operation_id",
    );
    c.same(record.error, None, "error");
    c.same(record.owner_token, None, "owner_token");
    c.same(record.lease_until, None, "lease_until");
    c.evidence_has(
        &record.evidence,
        &json!({"source": "conformance"}),
        "record",
    );
    c.event_is(
        &c.last_event("op"),
        "confirmed",
        &json!({"provider_operation_id": "ch_conformance", "evidence": {"source": "conformance"}}),
    );
}

/// Confirming with a wrong token, or by owner outside `dispatched`, returns
/// false and writes nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_confirmed_by_owner_guards(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_confirmed_by_owner_guards", factory);
    c.refused_from(
        &[S::Dispatched],
        "mark_confirmed with a wrong token",
        |c, id, _| {
            c.ledger
                .mark_confirmed(id, Some("intruder"), &confirmation(json!(1)))
        },
    );
    c.refused_from(
        &except(&[S::Dispatched]),
        "mark_confirmed by owner",
        |c, id, token| {
            c.ledger
                .mark_confirmed(id, Some(token), &confirmation(json!(1)))
        },
    );
}

/// Without an owner, confirm works from `prepared`, `outcome_unknown` and
/// `quarantined`; not from `dispatched` or `rejected`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_confirmed_without_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_confirmed_without_owner", factory);
    for from in [S::Prepared, S::OutcomeUnknown, S::Quarantined] {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let events = c.events(&id).len();
        let applied =
            c.ledger
                .mark_confirmed(&id, None, &confirmation(json!({"probe": from.as_str()})));
        c.applied(
            applied,
            format_args!("mark_confirmed without owner from {from}"),
        );
        let record = c.record(&id);
        c.same(record.status, S::Confirmed, "status");
        c.same(
            record.output,
            Some(json!({"probe": from.as_str()})),
            "output",
        );
        c.same(record.error, None, "error");
        c.same(c.events(&id).len(), events + 1, "events appended");
        c.event_is(
            &c.last_event(&id),
            "confirmed",
            &json!({"provider_operation_id": "ch_conformance"}),
        );
    }
    c.refused_from(
        &[S::Dispatched, S::Rejected],
        "mark_confirmed without owner",
        |c, id, _| c.ledger.mark_confirmed(id, None, &confirmation(json!(1))),
    );
}

/// Confirming an already `confirmed` operation without owner returns true and
/// writes nothing (the first output stays).
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_confirmed_when_confirmed(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_confirmed_when_confirmed", factory);
    c.in_status("done", S::Confirmed);
    let before = c.snapshot("done");
    let again = c
        .ledger
        .mark_confirmed("done", None, &confirmation(json!({"second": true})));
    c.applied(
        again,
        "mark_confirmed without owner of a confirmed operation",
    );
    c.unchanged("done", &before, "mark_confirmed of a confirmed operation");
}

/// The owner rejects a `dispatched` operation: error stored, lease released,
/// `rejected {error}` appended.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_rejected_by_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_rejected_by_owner", factory);
    let token = c.in_status("op", S::Dispatched);
    let applied = c.ledger.mark_rejected("op", &token, "card declined");
    c.applied(
        applied,
        "mark_rejected by the owner of a dispatched operation",
    );
    let record = c.record("op");
    c.same(record.status, S::Rejected, "status");
    c.same(record.error.as_deref(), Some("card declined"), "error");
    c.same(record.owner_token, None, "owner_token");
    c.same(record.lease_until, None, "lease_until");
    c.event_is(
        &c.last_event("op"),
        "rejected",
        &json!({"error": "card declined"}),
    );
}

/// Rejecting with a wrong token, or outside `dispatched`, returns false and
/// writes nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn mark_rejected_guards(factory: LedgerFactory<'_>) {
    let c = Check::new("mark_rejected_guards", factory);
    c.refused_from(
        &[S::Dispatched],
        "mark_rejected with a wrong token",
        |c, id, _| c.ledger.mark_rejected(id, "intruder", "declined"),
    );
    c.refused_from(
        &except(&[S::Dispatched]),
        "mark_rejected by owner",
        |c, id, token| c.ledger.mark_rejected(id, token, "declined"),
    );
}

/// Quarantine works from `outcome_unknown` and `quarantined`, appending
/// `quarantined {error, evidence}`; from anywhere else it returns false.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn quarantine_only_from_uncertain(factory: LedgerFactory<'_>) {
    let c = Check::new("quarantine_only_from_uncertain", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let applied = c.ledger.quarantine(
            &id,
            "needs an operator",
            &evidence(json!({"policy": "quarantine"})),
        );
        c.applied(applied, format_args!("quarantine from {from}"));
        let record = c.record(&id);
        c.same(record.status, S::Quarantined, "status");
        c.same(record.error.as_deref(), Some("needs an operator"), "error");
        c.event_is(
            &c.last_event(&id),
            "quarantined",
            &json!({"error": "needs an operator", "evidence": {"policy": "quarantine"}}),
        );
    }
    c.refused_from(&except(&UNCERTAIN), "quarantine", |c, id, _| {
        c.ledger.quarantine(id, "x", &evidence(json!({})))
    });
}

/// Reset for retry works from `outcome_unknown` and `quarantined`: back to
/// `prepared`, error cleared, attempts kept, `retry_authorized {evidence}`
/// appended; from anywhere else it returns false.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn reset_for_retry_only_from_uncertain(factory: LedgerFactory<'_>) {
    let c = Check::new("reset_for_retry_only_from_uncertain", factory);
    for from in UNCERTAIN {
        let id = format!("from {from}");
        c.in_status(&id, from);
        let applied = c
            .ledger
            .reset_for_retry(&id, &evidence(json!({"retry_basis": "not_committed"})));
        c.applied(applied, format_args!("reset_for_retry from {from}"));
        let record = c.record(&id);
        c.same(record.status, S::Prepared, "status");
        c.same(record.error, None, "error");
        c.same(record.attempts, 1, "attempts (kept)");
        c.same(record.owner_token, None, "owner_token");
        c.event_is(
            &c.last_event(&id),
            "retry_authorized",
            &json!({"evidence": {"retry_basis": "not_committed"}}),
        );
    }
    c.refused_from(&except(&UNCERTAIN), "reset_for_retry", |c, id, _| {
        c.ledger.reset_for_retry(id, &evidence(json!({})))
    });
}

/// Evidence given to unknown, quarantine and retry transitions is merged
/// into the record's evidence (later keys win).
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn evidence_is_merged(factory: LedgerFactory<'_>) {
    let c = Check::new("evidence_is_merged", factory);
    let token = c.in_status("op", S::Dispatched);
    let steps = [
        c.ledger.mark_outcome_unknown(
            "op",
            Some(&token),
            "timeout",
            &evidence(json!({"a": 1, "b": 1})),
        ),
        c.ledger.quarantine(
            "op",
            "parked",
            &evidence(json!({"b": 2, "c": {"nested": [1, 2]}})),
        ),
        c.ledger
            .mark_outcome_unknown("op", None, "pending", &evidence(json!({"d": "x"}))),
        c.ledger
            .reset_for_retry("op", &evidence(json!({"e": null}))),
    ];
    for (i, step) in steps.into_iter().enumerate() {
        c.applied(
            step,
            format_args!("step {i} (unknown, quarantine, unknown, retry)"),
        );
    }
    let record = c.record("op");
    let expected = json!({"a": 1, "b": 2, "c": {"nested": [1, 2]}, "d": "x", "e": null});
    c.same(
        serde_json::Value::Object(record.evidence),
        expected,
        "evidence after unknown, quarantine, unknown, retry",
    );
}
