//! The safety terms stored with an operation (docs/spec.md §3.1): the
//! `prepared` event keeps them and a `PrepareAndClaim` with terms leaves an
//! existing operation for its caller to check; and a late observation.

use effect_core::EffectLedgerExt as _;
use effect_core::terms::{self, ContractTerms};
use effect_core::{Claim, EffectStatus as S, Transition};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, LIVE, capture_contract, new_operation};

/// `prepare` records the terms in the `prepared` event; a
/// `PrepareAndClaim` with terms creates and claims a fresh operation but
/// leaves an existing `prepared` one unclaimed, writing nothing.
pub fn prepare_and_claim_with_terms_leaves_existing(factory: LedgerFactory<'_>) {
    let c = Check::new("prepare_and_claim_with_terms_leaves_existing", factory);
    let contract = capture_contract(false);
    let op = new_operation().with_contract_terms(Some(ContractTerms::of(&contract)));
    let claim = |token: &str| Claim::new(token, LIVE);
    let fresh = c.ok(
        c.ledger.apply(
            "fresh",
            &Transition::PrepareAndClaim(op.clone(), claim("a")),
        ),
        "PrepareAndClaim on a fresh id",
    );
    c.ensure(fresh.applied, "a fresh operation is claimed at once");
    c.same(
        terms::stored(&c.events("fresh")).ok().flatten(),
        Some(ContractTerms::of(&contract)),
        "the terms the prepared event holds",
    );
    c.ok(c.ledger.prepare("existing", &op), "prepare");
    let before = c.snapshot("existing");
    let again = c.ok(
        c.ledger
            .apply("existing", &Transition::PrepareAndClaim(op, claim("b"))),
        "PrepareAndClaim on an existing operation",
    );
    c.ensure(
        !again.applied,
        "an existing operation is not claimed by a PrepareAndClaim with terms",
    );
    c.same(again.record.status, S::Prepared, "its status");
    c.unchanged("existing", &before, "a PrepareAndClaim that claims nothing");
}

/// A late observation (docs/spec.md §4): the stale owner of an expired
/// dispatch appends a `late_observation` event with what its handler
/// returned and the status it found, and the record does not change, its
/// `updated_at` included; the live owner of a dispatch is refused, writing
/// nothing.
pub fn late_observation_is_appended_without_a_transition(factory: LedgerFactory<'_>) {
    let c = Check::new("late_observation_is_appended_without_a_transition", factory);
    let claim = |token: &str, lease| Claim::new(token, lease);
    c.ok(c.ledger.prepare("late", &new_operation()), "prepare");
    c.applied(
        c.ledger
            .claim_dispatch("late", &claim("stalled", std::time::Duration::ZERO)),
        "a claim whose lease ends at once",
    );
    c.ok(c.ledger.apply("late", &Transition::ExpireLease), "expire");
    let before = c.record("late");
    c.same(before.status, S::OutcomeUnknown, "the expired dispatch");
    c.record_late(
        "late",
        json!({
            "attempt": 1,
            "outcome": "returned",
            "output": {"charge": "ch_late"},
        }),
    );
    c.same(
        c.record("late"),
        before,
        "the record after a late observation",
    );
    let event = c.last_event("late");
    c.same(
        event.event_type.as_str(),
        "late_observation",
        "the last event",
    );
    c.same(
        (
            event.data.get("output"),
            event.data.get("status_when_observed"),
        ),
        (
            Some(&json!({"charge": "ch_late"})),
            Some(&json!("outcome_unknown")),
        ),
        "the late observation's data",
    );

    c.ok(c.ledger.prepare("live", &new_operation()), "prepare");
    c.applied(
        c.ledger.claim_dispatch("live", &claim("owner", LIVE)),
        "a live claim",
    );
    let live = c.snapshot("live");
    c.err(
        c.ledger.apply(
            "live",
            &Transition::RecordLateObservation {
                owner_token: "owner".into(),
                observation: effect_core::Evidence::new(),
            },
        ),
        effect_core::LedgerErrorKind::InvalidTransition,
        "a late observation by the live owner",
    );
    c.unchanged("live", &live, "a refused late observation");
}
