//! Concurrent callers: exactly one claim wins, and a confirmation beats a claim.

use effect_core::EffectLedgerExt as _;

use effect_core::{Claim, EffectStatus, LedgerError, Transition};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, EXPIRED, LIVE, confirmation, new_operation, race, tick};

/// How many threads race.
pub const RACERS: usize = 16;

fn winners(c: &Check, results: Vec<Result<bool, LedgerError>>, what: &str) -> Vec<usize> {
    results
        .into_iter()
        .enumerate()
        .filter_map(|(i, result)| {
            c.ok(result, format_args!("{what} by racer {i}"))
                .then_some(i)
        })
        .collect()
}

/// 16 threads claim one `prepared` operation at once: exactly one wins, and
/// the record and events show that one claim only.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn concurrent_claims_have_one_winner(factory: LedgerFactory<'_>) {
    let c = Check::new("concurrent_claims_have_one_winner", factory);
    c.prepare("contended");
    let results = race(&c, RACERS, |i| {
        let claim = Claim::new(format!("racer {i}"), LIVE);
        c.ledger.claim_dispatch("contended", &claim)
    });
    let won = winners(&c, results, "claim_dispatch");
    c.same(
        won.len(),
        1,
        format_args!("claims that won (racers {won:?})"),
    );
    claimed_once_by(&c, "contended", won[0]);
}

/// 16 threads run `PrepareAndClaim` on one fresh id at once: exactly one
/// claims it, the operation is created once (one `prepared` event), and the
/// losers get the stored record rather than an error.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn concurrent_prepare_and_claim_has_one_winner(factory: LedgerFactory<'_>) {
    let c = Check::new("concurrent_prepare_and_claim_has_one_winner", factory);
    let results = race(&c, RACERS, |i| {
        let transition =
            Transition::PrepareAndClaim(new_operation(), Claim::new(format!("racer {i}"), LIVE));
        c.ledger
            .apply("fresh", &transition)
            .map(|outcome| outcome.applied)
    });
    let won = winners(&c, results, "PrepareAndClaim");
    c.same(
        won.len(),
        1,
        format_args!("PrepareAndClaim calls that claimed (racers {won:?})"),
    );
    claimed_once_by(&c, "fresh", won[0]);
}

/// The operation was dispatched exactly once, by racer `winner`.
fn claimed_once_by(c: &Check, id: &str, winner: usize) {
    let record = c.record(id);
    c.same(record.status, EffectStatus::Dispatched, "status");
    c.same(record.attempts, 1, "attempts");
    c.same(
        record.owner_token,
        Some(format!("racer {winner}")),
        "owner_token of the winner",
    );
    c.same(
        c.event_types(id),
        vec!["prepared".to_owned(), "dispatched".to_owned()],
        "event types",
    );
}

/// Once an authoritative confirmation is recorded, a claim returns false; and
/// when a confirmation and a claim race, exactly one of them applies.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn confirmation_beats_claim(factory: LedgerFactory<'_>) {
    let c = Check::new("confirmation_beats_claim", factory);
    c.prepare("confirmed first");
    let confirmed = c.ledger.mark_confirmed(
        "confirmed first",
        None,
        &confirmation(json!({"probe": true})),
    );
    c.applied(confirmed, "mark_confirmed without owner from prepared");
    let before = c.snapshot("confirmed first");
    c.ensure(
        !c.claim("confirmed first", "late worker", LIVE),
        "claim of a confirmed operation must return false",
    );
    c.unchanged("confirmed first", &before, "claim after confirmation");
    for round in 0..8 {
        let id = format!("race {round}");
        c.prepare(&id);
        let results = race(&c, 2, |i| {
            if i == 0 {
                c.ledger
                    .mark_confirmed(&id, None, &confirmation(json!({"round": round})))
            } else {
                let claim = Claim::new("worker", LIVE);
                c.ledger.claim_dispatch(&id, &claim)
            }
        });
        let won = winners(&c, results, "confirm or claim");
        c.same(
            won.len(),
            1,
            format_args!("round {round}: applied transitions among [confirm, claim]"),
        );
        let expected = if won[0] == 0 {
            EffectStatus::Confirmed
        } else {
            EffectStatus::Dispatched
        };
        c.same(
            c.status(&id),
            expected,
            format_args!("round {round}: status"),
        );
    }
}

/// 16 threads expire one expired lease at once: exactly one turns it into
/// `outcome_unknown`, with one `outcome_unknown` event.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn concurrent_expiry_has_one_winner(factory: LedgerFactory<'_>) {
    let c = Check::new("concurrent_expiry_has_one_winner", factory);
    c.prepare("abandoned");
    c.must_claim("abandoned", "crashed worker", EXPIRED);
    tick();
    let results = race(&c, RACERS, |_| {
        c.ledger
            .apply("abandoned", &Transition::ExpireLease)
            .map(|outcome| outcome.applied)
    });
    let won = winners(&c, results, "ExpireLease");
    c.same(
        won.len(),
        1,
        format_args!("ExpireLease calls that applied (racers {won:?})"),
    );
    c.same(
        c.status("abandoned"),
        EffectStatus::OutcomeUnknown,
        "status",
    );
    c.same(
        c.event_types("abandoned"),
        vec![
            "prepared".to_owned(),
            "dispatched".to_owned(),
            "outcome_unknown".to_owned(),
        ],
        "event types",
    );
}

/// The owner of an expired lease confirms while another caller expires it:
/// exactly one of them applies, and the status shows which.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn expiry_races_owner_confirmation(factory: LedgerFactory<'_>) {
    let c = Check::new("expiry_races_owner_confirmation", factory);
    for round in 0..8 {
        let id = format!("race {round}");
        c.prepare(&id);
        c.must_claim(&id, "slow owner", EXPIRED);
        tick();
        let results = race(&c, 2, |i| {
            if i == 0 {
                c.ledger.mark_confirmed(
                    &id,
                    Some("slow owner"),
                    &confirmation(json!({"round": round})),
                )
            } else {
                c.ledger
                    .apply(&id, &Transition::ExpireLease)
                    .map(|outcome| outcome.applied)
            }
        });
        let won = winners(&c, results, "owner confirm or ExpireLease");
        c.same(
            won.len(),
            1,
            format_args!("round {round}: applied transitions among [owner confirm, expire]"),
        );
        let expected = if won[0] == 0 {
            EffectStatus::Confirmed
        } else {
            EffectStatus::OutcomeUnknown
        };
        c.same(
            c.status(&id),
            expected,
            format_args!("round {round}: status"),
        );
        c.same(
            c.events(&id).len(),
            3,
            format_args!("round {round}: events"),
        );
    }
}
