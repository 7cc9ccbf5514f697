//! What rows look like, and what happens when they are not what we wrote.

use effect_core::EffectLedgerExt as _;
use std::time::Duration;

use effect_core::{
    Claim, Confirmation, EffectLedger, Evidence, LedgerErrorKind, ListQuery, Transition,
};
use effect_ledger_postgres::PostgresLedger;
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

/// Overwrites one column of `op-1` with raw SQL and checks that every read
/// reports corruption instead of panicking or guessing.
fn check_corrupt(test: &str, column: &str, value: &str) -> TestResult {
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, test)?;
    let ledger = schema.ledger()?;
    ledger.prepare("op-1", &new_operation(1))?;
    schema.admin()?.execute(
        &format!("UPDATE {}.effect_operations SET {column} = $1", schema.q()),
        &[&value],
    )?;
    assert_eq!(kind(ledger.get("op-1")), Some(LedgerErrorKind::Corrupt));
    if column.ends_with("_json") {
        // Unreadable JSON is that row's problem: the listing goes on, with
        // the row flagged instead of its output and evidence.
        let listed = ledger.list(&ListQuery::new(10))?;
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].output, None);
        assert!(
            listed[0]
                .evidence
                .contains_key(effect_core::evidence::LEDGER_READ_ERROR),
            "{:?}",
            listed[0]
        );
    } else {
        assert_eq!(
            kind(ledger.list(&ListQuery::new(10))),
            Some(LedgerErrorKind::Corrupt)
        );
    }
    let reset = ledger.reset_for_retry("op-1", &Evidence::new());
    assert_eq!(kind(reset), Some(LedgerErrorKind::Corrupt));
    Ok(())
}

/// The error kind of a failed call.
fn kind<T>(result: Result<T, effect_core::LedgerError>) -> Option<LedgerErrorKind> {
    result.err().map(|e| e.kind())
}

#[test]
fn unknown_status_is_corrupt() -> TestResult {
    check_corrupt("unknown_status_is_corrupt", "status", "exploded")?;
    // Stats count per status, so they cannot place it either.
    let Some(url) = server_url("unknown_status_is_corrupt (stats)") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "unknown_status_stats")?;
    let ledger = schema.ledger()?;
    ledger.prepare("op-1", &new_operation(1))?;
    schema.admin()?.execute(
        &format!(
            "UPDATE {}.effect_operations SET status = 'Prepared'",
            schema.q()
        ),
        &[],
    )?;
    assert_eq!(kind(ledger.stats()), Some(LedgerErrorKind::Corrupt));
    Ok(())
}

#[test]
fn invalid_evidence_json_is_corrupt() -> TestResult {
    check_corrupt(
        "invalid_evidence_json_is_corrupt",
        "evidence_json",
        "{not json",
    )
}

#[test]
fn non_object_evidence_is_corrupt() -> TestResult {
    check_corrupt("non_object_evidence_is_corrupt", "evidence_json", "[1,2]")
}

#[test]
fn invalid_result_json_is_corrupt() -> TestResult {
    check_corrupt(
        "invalid_result_json_is_corrupt",
        "result_json",
        "{\"unterminated\": ",
    )
}

#[test]
fn values_use_the_sqlite_formats() -> TestResult {
    let Some(url) = server_url("values_use_the_sqlite_formats") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "sqlite_formats")?;
    let ledger = schema.ledger()?;
    let claim = Claim::new("owner-1", Duration::from_secs(30));
    ledger.prepare("op-1", &new_operation(1))?;
    assert!(ledger.claim_dispatch("op-1", &claim)?);
    let mut admin = schema.admin()?;
    let q = schema.q();
    let row = admin.query_one(
        &format!("SELECT status, lease_until, created_at, owner_token FROM {q}.effect_operations"),
        &[],
    )?;
    assert_eq!(row.get::<_, String>(0), "dispatched");
    assert!(row.get::<_, Option<f64>>(1).is_some_and(|l| l > 1.7e9));
    let created_at: String = row.get(2);
    assert_eq!(
        created_at.len(),
        "2026-01-01T00:00:00.123456+00:00".len(),
        "{created_at}"
    );
    assert!(
        created_at.ends_with("+00:00") && created_at.as_bytes()[10] == b'T',
        "{created_at}"
    );
    assert_eq!(row.get::<_, Option<String>>(3).as_deref(), Some("owner-1"));

    let mut evidence = Evidence::new();
    evidence.insert("probe".into(), json!("ü"));
    let confirmation = Confirmation {
        output: json!({"b": 1, "a": [true, null], "text": "café"}),
        provider_operation_id: Some("ch_1".into()),
        evidence,
    };
    assert!(ledger.mark_confirmed("op-1", Some("owner-1"), &confirmation)?);
    let row = admin.query_one(
        &format!(
            "SELECT status, result_json, evidence_json, owner_token, lease_until, attempts \
             FROM {q}.effect_operations"
        ),
        &[],
    )?;
    assert_eq!(row.get::<_, String>(0), "confirmed");
    assert_eq!(
        row.get::<_, Option<String>>(1).as_deref(),
        Some(r#"{"a":[true,null],"b":1,"text":"café"}"#),
        "compact JSON text, UTF-8 kept"
    );
    assert_eq!(row.get::<_, String>(2), r#"{"probe":"ü"}"#);
    assert_eq!(row.get::<_, Option<String>>(3), None);
    assert_eq!(row.get::<_, Option<f64>>(4), None);
    assert_eq!(row.get::<_, i32>(5), 1);
    let events: Vec<(i64, String, String)> = admin
        .query(
            &format!(
                "SELECT sequence, event_type, data_json FROM {q}.effect_events ORDER BY sequence"
            ),
            &[],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let types: Vec<&str> = events.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(types, ["prepared", "dispatched", "confirmed"]);
    assert_eq!(events[1].2, r#"{"attempt":1}"#);
    assert!(events.windows(2).all(|w| w[0].0 < w[1].0));
    Ok(())
}

/// A ledger on a server whose sessions default to SERIALIZABLE, where row
/// locks can fail with serialization errors instead of waiting.
fn serializable(
    schema: &TestSchema,
    retries: u32,
) -> Result<PostgresLedger, effect_core::LedgerError> {
    let separator = if schema.url.contains('?') { '&' } else { '?' };
    let url = format!(
        "{}{separator}options=-c%20default_transaction_isolation%3Dserializable",
        schema.url
    );
    PostgresLedger::connect(
        &url,
        schema.options().pool_size(16).transaction_retries(retries),
    )
}

/// Races `RACERS` threads to create and claim one operation per round.
/// Returns how many claims were applied and the kinds of the errors.
fn race_claims(
    ledger: &PostgresLedger,
    rounds: std::ops::Range<usize>,
) -> (usize, Vec<LedgerErrorKind>) {
    const RACERS: usize = 16;
    let (mut applied, mut errors) = (0, Vec::new());
    for round in rounds {
        let id = format!("op-{round}");
        let barrier = std::sync::Barrier::new(RACERS);
        std::thread::scope(|scope| {
            let racers: Vec<_> = (0..RACERS)
                .map(|r| {
                    let (id, barrier) = (&id, &barrier);
                    scope.spawn(move || {
                        let claim = Claim::new(format!("racer-{r}"), Duration::from_secs(60));
                        barrier.wait();
                        ledger.apply(
                            id,
                            &Transition::PrepareAndClaim(new_operation(round), claim),
                        )
                    })
                })
                .collect();
            for racer in racers {
                match racer.join() {
                    Ok(Ok(outcome)) => applied += usize::from(outcome.applied),
                    Ok(Err(err)) => errors.push(err.kind()),
                    Err(_) => errors.push(LedgerErrorKind::Backend),
                }
            }
        });
    }
    (applied, errors)
}

#[test]
fn serialization_failures_are_retried() -> TestResult {
    let Some(url) = server_url("serialization_failures_are_retried") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "serializable_retry")?;
    let ledger = serializable(&schema, 64)?;
    let (applied, errors) = race_claims(&ledger, 0..5);
    assert_eq!(errors, vec![], "retries absorb serialization failures");
    assert_eq!(applied, 5, "one winner per operation");

    // Without retries the same race surfaces them as `unavailable` (retrying
    // later may succeed), never as a second winner.
    let schema = TestSchema::new(&url, "serializable_no_retry")?;
    let ledger = serializable(&schema, 0)?;
    for round in 0..50 {
        let (applied, errors) = race_claims(&ledger, round..round + 1);
        assert!(applied <= 1, "at most one winner per operation");
        assert!(
            errors.iter().all(|k| *k == LedgerErrorKind::Unavailable),
            "{errors:?}"
        );
        if !errors.is_empty() {
            return Ok(());
        }
    }
    Err("50 races produced no serialization failure to observe".into())
}

#[test]
fn commits_are_synchronous_whatever_the_server_default() -> TestResult {
    let Some(url) = server_url("commits_are_synchronous_whatever_the_server_default") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "synchronous_commit")?;
    // A role whose sessions start with synchronous_commit=off, as a server
    // tuned for throughput might have it.
    let role = format!("{}_async", schema.name);
    let mut admin = schema.admin()?;
    admin.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN SUPERUSER; \
         ALTER ROLE {role} SET synchronous_commit = off"
    ))?;
    let mut config: postgres::Config = url.parse()?;
    config.user(&role);
    let mut plain = config.connect(postgres::NoTls)?;
    let default: String = plain
        .query_one("SELECT current_setting('synchronous_commit')", &[])?
        .get(0);
    assert_eq!(default, "off", "the role's sessions start asynchronous");
    let role_url = format!(
        "host={} port={} user={role} dbname={}",
        match config.get_hosts().first() {
            Some(postgres::config::Host::Tcp(host)) => host.clone(),
            _ => "127.0.0.1".to_owned(),
        },
        config.get_ports().first().copied().unwrap_or(5432),
        config.get_dbname().unwrap_or("postgres"),
    );
    let ledger = PostgresLedger::connect(&role_url, schema.options())?;
    assert_eq!(ledger.synchronous_commit()?, "on");
    ledger.prepare("op-1", &new_operation(1))?;
    drop(ledger);
    drop(plain);
    admin.batch_execute(&format!("DROP OWNED BY {role}; DROP ROLE IF EXISTS {role}"))?;
    Ok(())
}

#[test]
fn a_deferred_commit_leaves_the_session_synchronous() -> TestResult {
    let Some(url) = server_url("a_deferred_commit_leaves_the_session_synchronous") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "deferred_commit")?;
    // One connection: the deferred transaction and the reads below share it.
    let ledger = PostgresLedger::connect(&url, schema.options().pool_size(1))?;
    let prepared = ledger.apply_with(
        "op-1",
        &Transition::Prepare(new_operation(1)),
        effect_core::WriteDurability::Deferrable,
    )?;
    assert!(prepared.applied);
    // `SET LOCAL` ended with its transaction: the next commits are durable.
    assert_eq!(ledger.synchronous_commit()?, "on");
    assert!(
        ledger.get("op-1")?.is_some(),
        "the deferred commit is visible"
    );
    ledger.sync()?;
    ledger.prepare("op-2", &new_operation(2))?;
    assert_eq!(
        ledger.stats()?.counts.iter().map(|(_, n)| n).sum::<u64>(),
        2
    );
    Ok(())
}

/// Reads `events_after(after, 100)` until `done` holds for the page: another
/// writer of the same schema still in flight may hold events back briefly.
fn page_when(
    ledger: &PostgresLedger,
    after: u64,
    done: impl Fn(&[effect_core::LedgerEvent]) -> bool,
) -> Result<Vec<effect_core::LedgerEvent>, Box<dyn std::error::Error>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let page = ledger.events_after(after, 100)?;
        if done(&page) {
            return Ok(page);
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("events_after({after}) stayed at {page:?}").into());
        }
        std::thread::yield_now();
    }
}

/// A slow transaction draws its event's sequence first and commits last: a
/// faster, later transition commits meanwhile without waiting for it (appends
/// commit in parallel), the cursor returns nothing from the slow event on
/// while it is open, and once it commits the cursor reads both, in sequence
/// order, once. `tests/it/cursor.rs` drives the harder interleavings.
#[test]
fn a_late_commit_is_neither_skipped_nor_repeated_by_the_cursor() -> TestResult {
    let Some(url) = server_url("a_late_commit_is_neither_skipped_nor_repeated_by_the_cursor")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "late_commit")?;
    let ledger = schema.ledger()?;
    ledger.prepare("first", &new_operation(1))?;
    let first = page_when(&ledger, 0, |page| page.len() == 1)?;
    let cursor = first[0].sequence;

    // The slow writer: the ledger's own write function, in a transaction
    // held open after its event was appended.
    let mut slow = schema.admin()?;
    let mut tx = slow.transaction()?;
    let q = schema.q();
    let at = "2026-01-01T00:00:00.000000+00:00";
    let written: bool = tx
        .query_one(
            &format!(
                "SELECT {q}.effect_write('insert', NULL, 'slow', 'capture_payment', '1', 'fp', \
                 NULL, 'prepared', NULL, NULL, NULL, 0, '{{}}', NULL, NULL, $1, $1, \
                 ARRAY['prepared'], ARRAY['{{}}'], ARRAY[$1], false)"
            ),
            &[&at],
        )?
        .get(0);
    assert!(written, "the slow transaction wrote its record and event");
    let slow_sequence: i64 = tx
        .query_one(
            &format!("SELECT sequence FROM {q}.effect_events WHERE operation_id = 'slow'"),
            &[],
        )?
        .get(0);

    // A later writer does not wait for the open transaction: it commits
    // while the slow one is open. Its event is held, as is everything from
    // the open transaction's sequence on.
    let fast = ledger.prepare("fast", &new_operation(2))?;
    assert_eq!(fast.operation_id, "fast");
    let fast_sequence = ledger.events("fast")?[0].sequence;
    assert!(fast_sequence > u64::try_from(slow_sequence)?);
    assert_eq!(
        ledger.events_after(cursor, 100)?,
        vec![],
        "nothing from the open transaction's sequence on is returned"
    );

    tx.commit()?;
    let page = page_when(&ledger, cursor, |page| page.len() == 2)?;
    let seen: Vec<(u64, &str)> = page
        .iter()
        .map(|e| (e.sequence, e.operation_id.as_str()))
        .collect();
    assert_eq!(
        seen,
        [
            (u64::try_from(slow_sequence)?, "slow"),
            (fast_sequence, "fast")
        ],
        "the late commit is read in its place, then the fast one"
    );
    assert_eq!(ledger.events_after(fast_sequence, 100)?, vec![]);
    Ok(())
}
