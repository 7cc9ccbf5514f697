//! The owner's outcome of a claim the ledger wrote is planned on the record
//! the claim wrote and written in one statement (schema version 4): it is
//! stamped with the database clock, and a copy made stale by another host
//! never overwrites what that host wrote.

use std::time::Duration;

use effect_core::{
    Claim, Confirmation, EffectLedger, EffectLedgerExt as _, EffectStatus, Evidence, Transition,
    TransitionOutcome,
};
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

const ID: &str = "invoice:INV-1:capture";

fn claim(owner: &str, lease: Duration) -> Claim {
    Claim {
        owner_token: owner.to_owned(),
        lease,
        budgets: Vec::new(),
    }
}

fn confirm(owner: &str, output: serde_json::Value) -> Transition {
    Transition::MarkConfirmed {
        owner_token: Some(owner.to_owned()),
        confirmation: Confirmation {
            output,
            provider_operation_id: Some("ch_1".to_owned()),
            evidence: Evidence::new(),
        },
    }
}

/// The event types stored for `ID`, in order.
fn event_types(ledger: &dyn EffectLedger) -> Result<Vec<String>, effect_core::LedgerError> {
    Ok(ledger
        .events(ID)?
        .into_iter()
        .map(|e| e.event_type)
        .collect())
}

/// The owner's confirmation answers the record as stored, every timestamp
/// the database's clock (never the placeholder it was planned with), later
/// than the claim's.
#[test]
fn an_owner_outcome_is_answered_as_stored_and_stamped_by_the_database() -> TestResult {
    let test = "an_owner_outcome_is_answered_as_stored_and_stamped_by_the_database";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "owner_outcome")?;
    let ledger = schema.ledger()?;
    let claimed = ledger.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-a", Duration::from_secs(60))),
    )?;
    assert!(claimed.applied);
    let confirmed: TransitionOutcome = ledger.apply(ID, &confirm("owner-a", json!({"ok": 1})))?;
    assert!(confirmed.applied, "{confirmed:?}");
    assert_eq!(confirmed.record.status, EffectStatus::Confirmed);

    let stored = ledger.get(ID)?.ok_or("the operation is stored")?;
    assert_eq!(stored, confirmed.record, "the answer is the stored record");
    assert!(
        !stored.updated_at.starts_with("1970"),
        "stamped by the database: {}",
        stored.updated_at
    );
    assert!(stored.updated_at >= claimed.record.updated_at);
    let events = ledger.events(ID)?;
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(types, ["prepared", "dispatched", "confirmed"]);
    assert_eq!(events[2].timestamp, stored.updated_at);
    assert!(events[2].timestamp >= events[1].timestamp);
    Ok(())
}

/// Host A claims with a lease that has already ended; host B expires it,
/// resets the operation for a retry and claims it. A's confirmation,
/// planned on its copy of its own claim, is refused by the row's version
/// and decided again on the fresh row: not applied, and the answer is B's
/// claim. B's own confirmation then applies. Two claims, one confirmation.
#[test]
fn a_stale_owner_outcome_never_overwrites_another_hosts_claim() -> TestResult {
    let test = "a_stale_owner_outcome_never_overwrites_another_hosts_claim";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "stale_owner")?;
    let host_a = schema.ledger()?;
    let host_b = schema.ledger()?;
    let a_claim = host_a.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-a", Duration::ZERO)),
    )?;
    assert!(a_claim.applied);

    let expired = host_b.apply(ID, &Transition::ExpireLease)?;
    assert!(expired.applied, "{expired:?}");
    assert_eq!(expired.record.status, EffectStatus::OutcomeUnknown);
    let mut evidence = Evidence::new();
    evidence.insert("provider_has_no_record".into(), json!(true));
    let reset = host_b.apply(ID, &Transition::ResetForRetry { evidence })?;
    assert_eq!(reset.record.status, EffectStatus::Prepared, "{reset:?}");
    let b_claim = host_b.apply(
        ID,
        &Transition::Claim(claim("owner-b", Duration::from_secs(60))),
    )?;
    assert!(b_claim.applied);

    let stale = host_a.apply(ID, &confirm("owner-a", json!({"ok": "a"})))?;
    assert!(!stale.applied, "A no longer owns the dispatch: {stale:?}");
    assert_eq!(stale.record.status, EffectStatus::Dispatched);
    assert_eq!(stale.record.owner_token.as_deref(), Some("owner-b"));
    assert_eq!(stale.record, b_claim.record, "A is told what B wrote");

    let confirmed = host_b.apply(ID, &confirm("owner-b", json!({"ok": "b"})))?;
    assert!(confirmed.applied);
    let stored = host_a.get(ID)?.ok_or("the operation is stored")?;
    assert_eq!(stored, confirmed.record);
    assert_eq!(stored.output, Some(json!({"ok": "b"})));
    assert_eq!(stored.attempts, 2);
    assert_eq!(
        event_types(&host_a)?,
        [
            "prepared",
            "dispatched",
            "outcome_unknown",
            "retry_authorized",
            "dispatched",
            "confirmed"
        ]
    );
    Ok(())
}

/// A second confirmation by the same owner (its answer was lost, it asks
/// again) is decided on the fresh row: confirmed already, nothing written.
#[test]
fn an_owner_outcome_sent_twice_is_written_once() -> TestResult {
    let test = "an_owner_outcome_sent_twice_is_written_once";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "outcome_twice")?;
    let ledger = schema.ledger()?;
    ledger.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-a", Duration::from_secs(60))),
    )?;
    let first = ledger.apply(ID, &confirm("owner-a", json!({"ok": 1})))?;
    let again = ledger.apply(ID, &confirm("owner-a", json!({"ok": 1})))?;
    assert!(first.applied);
    assert_eq!(again.record, first.record);
    assert_eq!(
        event_types(&ledger)?,
        ["prepared", "dispatched", "confirmed"]
    );
    Ok(())
}
