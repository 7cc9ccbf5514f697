//! The dispatch lease: claim, renew, expire, and stale owners.

use effect_core::EffectLedgerExt as _;
use effect_core::{Confirmation, EffectStatus, Transition};
use serde_json::{Value, json};

use super::LedgerFactory;
use super::harness::{Check, EXPIRED, LIVE, confirmation, evidence, except, tick};

/// A transition attempted with a stale owner token.
type StaleAttempt<'a> = Box<dyn Fn() -> Result<bool, effect_core::LedgerError> + 'a>;

/// Seconds between two `lease_until` values granted a moment apart.
fn lease_gap(c: &Check, earlier: &str, later: &str) -> f64 {
    let until = |id: &str| match c.record(id).lease_until {
        Some(until) => until,
        None => c.fail(format_args!("{id:?} holds a lease but lease_until is None")),
    };
    until(later) - until(earlier)
}

fn expire(c: &Check, id: &str) -> bool {
    c.ok(
        c.ledger.apply(id, &Transition::ExpireLease),
        format_args!("ExpireLease({id:?})"),
    )
    .applied
}

/// Claiming a `prepared` operation sets status `dispatched`, attempts + 1, the
/// owner token and a lease of the requested length, and appends
/// `dispatched {attempt}`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn claim_from_prepared(factory: LedgerFactory<'_>) {
    let c = Check::new("claim_from_prepared", factory);
    c.prepare("short");
    c.prepare("long");
    c.must_claim("short", "worker-0", EXPIRED);
    c.must_claim("long", "worker-1", LIVE);
    let record = c.record("long");
    c.same(
        record.status,
        EffectStatus::Dispatched,
        "status after claim",
    );
    c.same(record.attempts, 1, "attempts after the first claim");
    c.same(
        record.owner_token.as_deref(),
        Some("worker-1"),
        "owner_token",
    );
    let gap = lease_gap(&c, "short", "long");
    c.ensure(
        (59.0..=90.0).contains(&gap),
        format_args!(
            "a 60 s lease granted just after a 0 s one must end about 60 s later \
             (lease_until is seconds since the epoch), the gap is {gap} s"
        ),
    );
    c.same(
        c.event_types("long"),
        vec!["prepared".to_owned(), "dispatched".to_owned()],
        "event types after claim",
    );
    c.event_is(&c.last_event("long"), "dispatched", &json!({"attempt": 1}));
}

/// Claiming from any status but `prepared` returns false and writes nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn claim_only_from_prepared(factory: LedgerFactory<'_>) {
    let c = Check::new("claim_only_from_prepared", factory);
    c.refused_from(&except(&[EffectStatus::Prepared]), "claim", |c, id, _| {
        Ok(c.claim(id, "second worker", LIVE))
    });
}

/// A retry authorized after an uncertain attempt is claimed as attempt 2.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn claim_counts_attempts(factory: LedgerFactory<'_>) {
    let c = Check::new("claim_counts_attempts", factory);
    c.in_status("retried", EffectStatus::OutcomeUnknown);
    let reset = c
        .ledger
        .reset_for_retry("retried", &evidence(json!({"probe": "not_committed"})));
    c.applied(reset, "reset_for_retry from outcome_unknown");
    c.must_claim("retried", "worker-2", LIVE);
    let record = c.record("retried");
    c.same(record.attempts, 2, "attempts after the second claim");
    c.same(
        record.owner_token.as_deref(),
        Some("worker-2"),
        "owner_token",
    );
    c.event_is(
        &c.last_event("retried"),
        "dispatched",
        &json!({"attempt": 2}),
    );
}

/// Only the owner renews; renewal extends the lease and appends no event.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn renew_lease_only_for_owner(factory: LedgerFactory<'_>) {
    let c = Check::new("renew_lease_only_for_owner", factory);
    c.prepare("reference");
    c.must_claim("reference", "other", EXPIRED);
    c.prepare("renewed");
    c.must_claim("renewed", "owner", EXPIRED);
    let before = c.snapshot("renewed");
    let renewed = c.ledger.renew_lease("renewed", "not the owner", LIVE);
    c.ensure(
        !c.ok(renewed, "renew_lease with a wrong token"),
        "renew_lease with a wrong token must return false",
    );
    c.unchanged("renewed", &before, "renew_lease with a wrong token");
    let renewed = c.ledger.renew_lease("renewed", "owner", LIVE);
    c.applied(renewed, "renew_lease by the owner");
    let gap = lease_gap(&c, "reference", "renewed");
    c.ensure(
        (59.0..=90.0).contains(&gap),
        format_args!("a lease renewed for 60 s must end about 60 s from now, the gap is {gap} s"),
    );
    c.same(
        c.events("renewed").len(),
        2,
        "events after renew_lease (it appends none)",
    );
    c.ensure(
        !expire(&c, "renewed"),
        "ExpireLease on a renewed (live) lease must return false",
    );
    c.refused_from(
        &except(&[EffectStatus::Dispatched]),
        "renew_lease",
        |c, id, token| c.ledger.renew_lease(id, token, LIVE),
    );
}

/// `ExpireLease` leaves a live lease alone.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn expire_lease_ignores_live_lease(factory: LedgerFactory<'_>) {
    let c = Check::new("expire_lease_ignores_live_lease", factory);
    c.in_status("live", EffectStatus::Dispatched);
    let before = c.snapshot("live");
    c.ensure(
        !expire(&c, "live"),
        "ExpireLease on a live lease must return false",
    );
    c.unchanged("live", &before, "ExpireLease on a live lease");
}

/// `ExpireLease` on an expired lease makes the operation `outcome_unknown` with
/// `handler_may_still_be_running=true` and `dispatch_interruption=lease_expired`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn expire_lease_marks_outcome_unknown(factory: LedgerFactory<'_>) {
    let c = Check::new("expire_lease_marks_outcome_unknown", factory);
    c.prepare("expired");
    c.must_claim("expired", "crashed worker", EXPIRED);
    tick();
    c.ensure(
        expire(&c, "expired"),
        "ExpireLease on an expired lease must return true",
    );
    let record = c.record("expired");
    let expected =
        json!({"handler_may_still_be_running": true, "dispatch_interruption": "lease_expired"});
    c.same(
        record.status,
        EffectStatus::OutcomeUnknown,
        "status after ExpireLease",
    );
    c.evidence_has(&record.evidence, &expected, "record after ExpireLease");
    c.same(record.owner_token, None, "owner_token after ExpireLease");
    c.same(record.lease_until, None, "lease_until after ExpireLease");
    c.ensure(
        record.error.is_some_and(|e| !e.is_empty()),
        "an expired lease records an error",
    );
    let event = c.last_event("expired");
    c.event_is(&event, "outcome_unknown", &json!({}));
    let data = event.data.get("evidence").cloned().unwrap_or(Value::Null);
    c.evidence_has(
        &evidence(data),
        &expected,
        "outcome_unknown event after ExpireLease",
    );
    c.ensure(
        event.data.get("error").is_some_and(Value::is_string),
        "outcome_unknown event carries the error",
    );
}

/// `ExpireLease` does nothing outside `dispatched`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn expire_lease_only_from_dispatched(factory: LedgerFactory<'_>) {
    let c = Check::new("expire_lease_only_from_dispatched", factory);
    c.refused_from(
        &except(&[EffectStatus::Dispatched]),
        "ExpireLease",
        |c, id, _| {
            tick();
            Ok(expire(c, id))
        },
    );
}

/// After an expired lease is taken over (expire, reset, claim by a new owner),
/// the old owner can neither confirm, reject, mark unknown nor renew.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn stale_owner_cannot_finalize(factory: LedgerFactory<'_>) {
    let c = Check::new("stale_owner_cannot_finalize", factory);
    let id = "taken over";
    c.prepare(id);
    c.must_claim(id, "old", EXPIRED);
    tick();
    c.ensure(expire(&c, id), "ExpireLease on an expired lease");
    let reset = c
        .ledger
        .reset_for_retry(id, &evidence(json!({"probe": "not_committed"})));
    c.applied(reset, "reset_for_retry after expiry");
    c.must_claim(id, "new", LIVE);
    let before = c.snapshot(id);
    let stale: [(&str, StaleAttempt<'_>); 4] = [
        (
            "mark_confirmed",
            Box::new(|| {
                c.ledger
                    .mark_confirmed(id, Some("old"), &confirmation(json!(1)))
            }),
        ),
        (
            "mark_rejected",
            Box::new(|| c.ledger.mark_rejected(id, "old", "declined")),
        ),
        (
            "mark_outcome_unknown",
            Box::new(|| {
                c.ledger
                    .mark_outcome_unknown(id, Some("old"), "late", &evidence(json!({})))
            }),
        ),
        (
            "renew_lease",
            Box::new(|| c.ledger.renew_lease(id, "old", LIVE)),
        ),
    ];
    for (what, act) in &stale {
        let applied = c.ok(act(), format_args!("{what} by the stale owner"));
        c.ensure(
            !applied,
            format_args!("{what} by the stale owner must return false"),
        );
        c.unchanged(id, &before, format_args!("{what} by the stale owner"));
    }
    let confirmed = c.ledger.mark_confirmed(
        id,
        Some("new"),
        &Confirmation {
            output: json!({"ok": true}),
            provider_operation_id: None,
            evidence: evidence(json!({"source": "handler_return"})),
        },
    );
    c.applied(confirmed, "mark_confirmed by the new owner");
}
