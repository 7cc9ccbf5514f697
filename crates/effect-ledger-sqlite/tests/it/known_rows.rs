//! An owner's outcome is planned on the claim this ledger wrote, and a
//! prepare on what its replay check read, without a read in the write
//! transaction: the write goes through only if the row is still exactly
//! that. These tests change the row from a second ledger on the same file
//! (another process, as far as the first can tell) in between, and check
//! that the transition is planned again on the row as it is: nothing is
//! lost, and no dispatch is authorized twice (each `dispatched` event is
//! one provider call).

use effect_core::EffectLedgerExt as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use effect_core::{EffectLedger, EffectStatus, ManualClock, Transition};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::{TestResult, claim, confirmation, op};

/// Two ledgers on one file (and the directory that holds it), sharing a
/// manual clock.
struct Pair {
    _dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    first: SqliteLedger,
    second: SqliteLedger,
}

fn two_ledgers() -> Result<Pair, Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("effects.sqlite3");
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let options = SqliteOptions::default().clock(Arc::clone(&clock) as _);
    let first = SqliteLedger::open(&path, options.clone())?;
    let second = SqliteLedger::open(&path, options)?;
    Ok(Pair {
        _dir: dir,
        clock,
        first,
        second,
    })
}

fn event_types(ledger: &SqliteLedger, id: &str) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    Ok(ledger
        .events(id)?
        .into_iter()
        .map(|e| e.event_type)
        .collect())
}

/// Provider calls authorized: one per `dispatched` event.
fn dispatches(ledger: &SqliteLedger, id: &str) -> Result<usize, Box<dyn std::error::Error>> {
    Ok(event_types(ledger, id)?
        .iter()
        .filter(|t| *t == "dispatched")
        .count())
}

#[test]
fn an_owner_outcome_after_a_takeover_elsewhere_is_refused_and_loses_nothing() -> TestResult {
    let Pair {
        _dir,
        clock,
        first,
        second,
    } = two_ledgers()?;
    let id = "known:takeover";
    let claimed = first.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"n": 1})), claim("w1")),
    )?;
    assert!(claimed.applied);
    // The lease runs out; the other process settles the effect from its
    // provider's answer while the first owner still holds its claim.
    clock.advance(Duration::from_secs(61));
    assert!(second.apply(id, &Transition::ExpireLease)?.applied);
    assert!(second.mark_confirmed(id, None, &confirmation(json!({"by": "second"})))?);
    // The first owner's outcome, planned on the claim it wrote, must not
    // overwrite what the other process wrote since.
    let late = first.apply(
        id,
        &Transition::MarkConfirmed {
            owner_token: Some("w1".into()),
            confirmation: confirmation(json!({"by": "first"})),
        },
    )?;
    assert!(!late.applied, "{late:?}");
    let record = first.get(id)?.ok_or("the operation is missing")?;
    assert_eq!(record.status, EffectStatus::Confirmed);
    assert_eq!(record.output, Some(json!({"by": "second"})));
    assert_eq!(
        event_types(&first, id)?,
        ["prepared", "dispatched", "outcome_unknown", "confirmed"]
    );
    assert_eq!(dispatches(&first, id)?, 1);
    Ok(())
}

#[test]
fn an_owner_outcome_after_a_renewal_elsewhere_is_planned_on_the_renewed_row() -> TestResult {
    let Pair {
        _dir,
        clock,
        first,
        second,
    } = two_ledgers()?;
    let id = "known:renewed";
    assert!(
        first
            .apply(
                id,
                &Transition::PrepareAndClaim(op(json!({"n": 2})), claim("w1"))
            )?
            .applied
    );
    clock.advance(Duration::from_secs(1));
    // The owner's heartbeat ran in the other ledger: the row is no longer
    // the claim the first one wrote.
    assert!(second.renew_lease(id, "w1", Duration::from_secs(600))?);
    let renewed = second.get(id)?.ok_or("the operation is missing")?;
    clock.advance(Duration::from_secs(1));
    let outcome = first.apply(
        id,
        &Transition::MarkOutcomeUnknown {
            owner_token: Some("w1".into()),
            error: "the provider timed out".into(),
            evidence: Default::default(),
        },
    )?;
    assert!(outcome.applied, "{outcome:?}");
    let record = first.get(id)?.ok_or("the operation is missing")?;
    assert_eq!(record.status, EffectStatus::OutcomeUnknown);
    assert_eq!(record.attempts, renewed.attempts);
    assert_eq!(record.updated_at, outcome.record.updated_at);
    assert_eq!(
        event_types(&first, id)?,
        ["prepared", "dispatched", "outcome_unknown"]
    );
    assert_eq!(dispatches(&first, id)?, 1);
    Ok(())
}

#[test]
fn a_claim_the_other_ledger_already_finished_is_not_dispatched_again() -> TestResult {
    let Pair {
        _dir,
        first,
        second,
        ..
    } = two_ledgers()?;
    let id = "known:finished";
    let prepare_and_claim = Transition::PrepareAndClaim(op(json!({"n": 3})), claim("w1"));
    assert!(first.apply(id, &prepare_and_claim)?.applied);
    assert!(second.mark_confirmed(id, Some("w1"), &confirmation(json!({"ok": 3})))?);
    // The first ledger's claims remember the dispatch; a second claim of
    // the same operation is planned on the confirmed row instead.
    let again = first.apply(
        id,
        &Transition::PrepareAndClaim(op(json!({"n": 3})), claim("w2")),
    )?;
    assert!(!again.applied);
    assert_eq!(again.record.status, EffectStatus::Confirmed);
    let late = first.apply(
        id,
        &Transition::MarkConfirmed {
            owner_token: Some("w1".into()),
            confirmation: confirmation(json!({"ok": "late"})),
        },
    )?;
    assert!(!late.applied);
    assert_eq!(late.record.output, Some(json!({"ok": 3})));
    assert_eq!(
        event_types(&first, id)?,
        ["prepared", "dispatched", "confirmed"]
    );
    assert_eq!(dispatches(&first, id)?, 1);
    Ok(())
}
