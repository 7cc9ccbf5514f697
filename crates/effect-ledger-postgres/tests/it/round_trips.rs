//! The owner's outcome of a claim the ledger wrote is planned on the record
//! the claim wrote and written in one statement (schema version 4): it is
//! stamped with the database clock, and a copy made stale by another host
//! never overwrites what that host wrote. A new operation the ledger has
//! just read as absent is inserted in one statement (schema version 6), its
//! lease measured on the database clock; when the row exists after all,
//! nothing is overwritten.

use std::time::Duration;

use effect_core::{
    Claim, Confirmation, EffectLedger, EffectLedgerExt as _, EffectStatus, Evidence, Transition,
    TransitionOutcome,
};
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

const ID: &str = "invoice:INV-1:capture";

fn claim(owner: &str, lease: Duration) -> Claim {
    Claim::new(owner.to_owned(), lease)
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

/// The database clock, in seconds since the epoch.
fn database_now(client: &mut postgres::Client) -> Result<f64, postgres::Error> {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .map(|row| row.get(0))
}

/// After a read that found nothing, a prepare-and-claim is one statement
/// and the owner's confirmation another: a fresh effect costs three. The
/// claim is answered as stored, its timestamps and lease from the database
/// clock at the write (never the placeholder it was planned with).
#[test]
fn a_fresh_operation_read_as_absent_is_claimed_in_one_statement() -> TestResult {
    let test = "a_fresh_operation_read_as_absent_is_claimed_in_one_statement";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "fresh_insert")?;
    let (proxy, proxied) = effect_test_support::pg_proxy::CommitCutProxy::for_url(&url)?;
    let ledger = effect_ledger_postgres::PostgresLedger::connect(&proxied, schema.options())?;
    let mut admin = schema.admin()?;

    let before = proxy.executions();
    assert_eq!(ledger.get(ID)?, None);
    assert_eq!(proxy.executions() - before, 1, "the read");
    let clock_before = database_now(&mut admin)?;
    let before = proxy.executions();
    let lease = Duration::from_secs(60);
    let claimed = ledger.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-a", lease)),
    )?;
    assert_eq!(proxy.executions() - before, 1, "the insert, without a read");
    let clock_after = database_now(&mut admin)?;
    assert!(claimed.applied, "{claimed:?}");
    assert_eq!(claimed.record.status, EffectStatus::Dispatched);
    let stored = ledger.get(ID)?.ok_or("the operation is stored")?;
    assert_eq!(stored, claimed.record, "the answer is the stored record");
    assert!(
        !stored.created_at.starts_with("1970"),
        "{}",
        stored.created_at
    );
    assert_eq!(stored.created_at, stored.updated_at);
    let lease_until = stored.lease_until.ok_or("the claim has a lease")?;
    assert!(
        lease_until >= clock_before + 60.0 && lease_until <= clock_after + 60.0,
        "lease {lease_until} not 60 s after the database clock at the write \
         ({clock_before} to {clock_after})"
    );
    let events = ledger.events(ID)?;
    assert!(events.iter().all(|e| e.timestamp == stored.created_at));

    let before = proxy.executions();
    let confirmed = ledger.apply(ID, &confirm("owner-a", json!({"ok": 1})))?;
    assert!(confirmed.applied);
    assert_eq!(proxy.executions() - before, 1, "the confirmation");
    assert_eq!(
        event_types(&ledger)?,
        ["prepared", "dispatched", "confirmed"]
    );
    Ok(())
}

/// Host A reads the operation as absent; host B creates and claims it; A's
/// prepare-and-claim, tried as an insert, finds the row, writes nothing and
/// is decided on a fresh read: not applied, and the answer is B's claim.
#[test]
fn a_fresh_insert_that_finds_the_row_is_decided_on_it() -> TestResult {
    let test = "a_fresh_insert_that_finds_the_row_is_decided_on_it";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "fresh_conflict")?;
    let host_a = schema.ledger()?;
    let host_b = schema.ledger()?;
    assert_eq!(host_a.get(ID)?, None);
    let b_claim = host_b.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-b", Duration::from_secs(60))),
    )?;
    assert!(b_claim.applied);
    let a_claim = host_a.apply(
        ID,
        &Transition::PrepareAndClaim(new_operation(1), claim("owner-a", Duration::from_secs(60))),
    )?;
    assert!(!a_claim.applied, "B owns it: {a_claim:?}");
    assert_eq!(a_claim.record, b_claim.record, "A is told what B wrote");
    assert_eq!(event_types(&host_a)?, ["prepared", "dispatched"]);
    Ok(())
}
