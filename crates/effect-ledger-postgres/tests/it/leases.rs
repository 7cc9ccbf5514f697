//! Leases on the database clock, and a killed process's dispatch.

use effect_core::EffectLedgerExt as _;
use std::time::{Duration, Instant};

use effect_core::{Claim, Confirmation, EffectLedger, EffectStatus, Evidence, Transition};
use effect_ledger_postgres::PostgresLedger;
use serde_json::json;

use crate::support::{
    TestResult, TestSchema, child_env, db_epoch, describe, new_operation, server_url, spawn_child,
    wait_child,
};

/// The leases the killed child takes on `op-a` and `op-b`: the parent waits
/// them out on the database clock (which no test can move).
const CHILD_LEASE: Duration = Duration::from_secs(2);
/// The lease the child takes on `op-live`: live whenever the parent looks,
/// however slow the machine.
const LIVE_LEASE: Duration = Duration::from_secs(3600);

fn claim(token: &str, lease: Duration) -> Claim {
    Claim::new(token.to_owned(), lease)
}

/// Applies `ExpireLease`; true when it took the lease.
fn expire(ledger: &PostgresLedger, id: &str) -> Result<bool, effect_core::LedgerError> {
    Ok(ledger.apply(id, &Transition::ExpireLease)?.applied)
}

/// The child: claims `op-a`, `op-b` and `op-live`, commits `op-a` at the
/// fake provider, then dies without recording anything, as a crashed host
/// would.
#[test]
fn child_claims_then_aborts() -> TestResult {
    let Some((url, schema, _)) = child_env("abort") else {
        // Not started as a child: this entry point only runs inside
        // `killed_process_dispatch_is_reconciled_after_its_lease_expires`.
        return Ok(());
    };
    let options = effect_ledger_postgres::PostgresOptions::default().schema(schema.clone());
    let ledger = PostgresLedger::connect(&url, options)?;
    for (id, n, lease) in [
        ("op-a", 1, CHILD_LEASE),
        ("op-b", 2, CHILD_LEASE),
        ("op-live", 3, LIVE_LEASE),
    ] {
        let outcome = ledger.apply(
            id,
            &Transition::PrepareAndClaim(new_operation(n), claim(&format!("dead-{id}"), lease)),
        )?;
        assert!(outcome.applied, "the child claims {id}");
    }
    let mut provider = postgres::Client::connect(&url, postgres::NoTls)?;
    provider.execute(
        &format!("INSERT INTO \"{schema}\".provider_commits (key) VALUES ('op-a')"),
        &[],
    )?;
    std::process::abort();
}

#[test]
fn killed_process_dispatch_is_reconciled_after_its_lease_expires() -> TestResult {
    let test = "killed_process_dispatch_is_reconciled_after_its_lease_expires";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "killed_process")?;
    let ledger = schema.ledger()?;
    let mut admin = schema.admin()?;
    let q = schema.q();
    admin.batch_execute(&format!(
        "CREATE TABLE {q}.provider_commits (seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL)"
    ))?;
    let child = spawn_child("leases::child_claims_then_aborts", "abort", &schema, 0)?;
    let output = wait_child(child, Duration::from_secs(60))?;
    assert!(
        !output.status.success(),
        "the child must die: {}",
        describe(&output)
    );
    let dead = ledger
        .get("op-a")?
        .ok_or_else(|| format!("child never claimed: {}", describe(&output)))?;
    assert_eq!(
        dead.status,
        EffectStatus::Dispatched,
        "{}",
        describe(&output)
    );

    // A live lease on the database clock: nobody may take it, though its
    // owner is dead.
    let live = ledger
        .get("op-live")?
        .ok_or("the child never claimed op-live")?;
    let live_until = live.lease_until.ok_or("a dispatched record has a lease")?;
    assert!(
        db_epoch(&mut admin)? < live_until,
        "an hour-long lease is live"
    );
    assert!(!expire(&ledger, "op-live")?, "a live lease is not expired");
    assert!(!ledger.claim_dispatch("op-live", &claim("other", Duration::from_secs(30)))?);
    assert_eq!(
        ledger.get("op-live")?.map(|r| (r.status, r.owner_token)),
        Some((EffectStatus::Dispatched, Some("dead-op-live".to_owned())))
    );

    // Once the database clock passes a lease, another process turns the
    // dispatch into an uncertain outcome. The child claimed the two at
    // different moments, so each lease is waited out on its own.
    for id in ["op-a", "op-b"] {
        let lease_until = ledger
            .get(id)?
            .and_then(|r| r.lease_until)
            .ok_or("a dispatched record has a lease")?;
        let start = Instant::now();
        while !expire(&ledger, id)? {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the lease of {id} never expired"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(
            db_epoch(&mut admin)? >= lease_until,
            "{id}'s lease was taken before it ended"
        );
    }
    for id in ["op-a", "op-b"] {
        let record = ledger.get(id)?.ok_or("record missing")?;
        assert_eq!(record.status, EffectStatus::OutcomeUnknown);
        assert_eq!(record.evidence["handler_may_still_be_running"], json!(true));
        assert_eq!(
            record.evidence["dispatch_interruption"],
            json!("lease_expired")
        );
        assert_eq!(record.owner_token, None);
        let last = ledger.events(id)?.pop().ok_or("no events")?;
        assert_eq!(last.event_type, "outcome_unknown");
        // The dead owner can never finalize.
        let stale = Confirmation {
            output: json!({}),
            provider_operation_id: None,
            evidence: Evidence::new(),
        };
        assert!(!ledger.mark_confirmed(id, Some(&format!("dead-{id}")), &stale)?);
    }

    // Reconcile through the provider's record, as a probe would.
    let committed = |admin: &mut postgres::Client, id: &str| -> Result<i64, postgres::Error> {
        admin
            .query_one(
                &format!("SELECT count(*) FROM {q}.provider_commits WHERE key = $1"),
                &[&id],
            )?
            .try_get(0)
    };
    assert_eq!(committed(&mut admin, "op-a")?, 1);
    let mut evidence = Evidence::new();
    evidence.insert("probe".into(), json!("provider_commits row found"));
    let found = Confirmation {
        output: json!({"key": "op-a"}),
        provider_operation_id: Some("op-a".into()),
        evidence,
    };
    assert!(ledger.mark_confirmed("op-a", None, &found)?);

    // op-b never reached the provider: reset it and complete it here.
    assert_eq!(committed(&mut admin, "op-b")?, 0);
    let mut evidence = Evidence::new();
    evidence.insert("probe".into(), json!("not_committed"));
    assert!(ledger.reset_for_retry("op-b", &evidence)?);
    let retry = claim("survivor-op-b", Duration::from_secs(30));
    assert!(
        ledger
            .apply(
                "op-b",
                &Transition::PrepareAndClaim(new_operation(2), retry)
            )?
            .applied
    );
    admin.execute(
        &format!("INSERT INTO {q}.provider_commits (key) VALUES ('op-b')"),
        &[],
    )?;
    let done = Confirmation {
        output: json!({"key": "op-b"}),
        provider_operation_id: Some("op-b".into()),
        evidence: Evidence::new(),
    };
    assert!(ledger.mark_confirmed("op-b", Some("survivor-op-b"), &done)?);

    let a = ledger.get("op-a")?.ok_or("op-a missing")?;
    let b = ledger.get("op-b")?.ok_or("op-b missing")?;
    assert_eq!((a.status, a.attempts), (EffectStatus::Confirmed, 1));
    assert_eq!((b.status, b.attempts), (EffectStatus::Confirmed, 2));
    assert_eq!(
        committed(&mut admin, "op-a")?,
        1,
        "exactly one provider commit"
    );
    assert_eq!(
        committed(&mut admin, "op-b")?,
        1,
        "exactly one provider commit"
    );
    Ok(())
}

#[test]
fn leases_are_measured_on_the_database_clock() -> TestResult {
    let Some(url) = server_url("leases_are_measured_on_the_database_clock") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "db_clock")?;
    // A caller whose session runs 14 hours ahead of UTC: if the ledger read a
    // local or session-zoned time, its lease arithmetic would be off by hours.
    let separator = if url.contains('?') { '&' } else { '?' };
    let skewed_url = format!("{url}{separator}options=-c%20TimeZone%3DPacific%2FKiritimati");
    let skewed = PostgresLedger::connect(&skewed_url, schema.options())?;
    let utc = schema.ledger()?;
    let mut admin = schema.admin()?;
    let lease = Duration::from_secs(30);

    skewed.prepare("op-1", &new_operation(1))?;
    let before = db_epoch(&mut admin)?;
    assert!(skewed.claim_dispatch("op-1", &claim("owner-1", lease))?);
    let after = db_epoch(&mut admin)?;
    let lease_until = skewed
        .get("op-1")?
        .and_then(|r| r.lease_until)
        .ok_or("a claimed record has a lease")?;
    assert!(
        lease_until >= before + 30.0 && lease_until <= after + 30.0,
        "lease_until {lease_until} is 30 s after the database clock ({before}..{after})"
    );
    // Neither caller can end the live lease, whatever its session's clock says.
    assert!(!expire(&utc, "op-1")?);
    assert!(!expire(&skewed, "op-1")?);
    assert_eq!(
        utc.get("op-1")?.map(|r| r.status),
        Some(EffectStatus::Dispatched)
    );

    // A lease that has run out on the database clock is expired at once.
    utc.prepare("op-2", &new_operation(2))?;
    assert!(utc.claim_dispatch("op-2", &claim("owner-2", Duration::from_millis(1)))?);
    let lease_until = utc
        .get("op-2")?
        .and_then(|r| r.lease_until)
        .ok_or("a claimed record has a lease")?;
    let start = Instant::now();
    while db_epoch(&mut admin)? < lease_until {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the database clock stands still"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(expire(&skewed, "op-2")?);
    Ok(())
}

/// A transition that waits for another transaction's row lock reads the
/// database clock once it holds the lock: its `updated_at` is after the
/// other transaction committed, so it never stamps the past.
#[test]
fn a_transition_that_waited_for_the_row_lock_is_stamped_after_it() -> TestResult {
    let test = "a_transition_that_waited_for_the_row_lock_is_stamped_after_it";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "lock_clock")?;
    let ledger = schema.ledger()?;
    ledger.prepare("op-1", &new_operation(1))?;
    let mut holder = schema.admin()?;
    let q = schema.q();
    let mut tx = holder.transaction()?;
    tx.execute(
        &format!("SELECT 1 FROM {q}.effect_operations WHERE operation_id = 'op-1' FOR UPDATE"),
        &[],
    )?;
    let waiter = std::thread::spawn(move || {
        ledger
            .claim_dispatch("op-1", &claim("waiter", Duration::from_secs(30)))
            .map(|claimed| (claimed, ledger))
    });
    // Wait until the waiter is blocked on this transaction's row lock.
    let start = Instant::now();
    loop {
        let blocked: i64 = tx
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE pg_backend_pid() = ANY(pg_blocking_pids(pid))",
                &[],
            )?
            .get(0);
        if blocked > 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the waiter never blocked"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let released: String = tx
        .query_one(
            r#"SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')"#,
            &[],
        )?
        .get(0);
    tx.commit()?;
    let (claimed, ledger) = waiter.join().map_err(|_| "the waiter panicked")??;
    assert!(claimed);
    let record = ledger.get("op-1")?.ok_or("record missing")?;
    assert!(
        record.updated_at > released,
        "stamped {} before the lock was released at {released}",
        record.updated_at
    );
    Ok(())
}
