//! The ledger through PgBouncer in transaction mode, where each transaction
//! may run on another server connection: nothing the ledger relies on may
//! outlive a transaction (no session settings), and a statement it prepared
//! on one server session may be missing on the next, which makes the ledger
//! switch to unnamed statements.
//!
//! They need `EFFECT_TEST_PGBOUNCER_URL`, a PgBouncer with `pool_mode =
//! transaction` in front of the server of `EFFECT_TEST_POSTGRES_URL` (`cargo xtask ci`
//! starts one); `EFFECT_REQUIRE_PGBOUNCER=1` makes a missing one a failure.

use std::io::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use effect_core::{
    Budget, Claim, Confirmation, EffectContract, EffectLedger, EffectLedgerExt as _, Evidence,
    Transition,
};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_postgres::PostgresLedger;
use postgres::{Client, NoTls};
use serde_json::{Value, json};

use crate::support::{TestResult, TestSchema, new_operation, server_url};

const PGBOUNCER_URL_VAR: &str = "EFFECT_TEST_PGBOUNCER_URL";
const REQUIRE_PGBOUNCER_VAR: &str = "EFFECT_REQUIRE_PGBOUNCER";

/// The server's URL (for the schema's setup and removal) and PgBouncer's, or
/// `None` after saying that `test` was skipped.
fn urls(test: &str) -> Option<(String, String)> {
    let server = server_url(test)?;
    if let Ok(url) = std::env::var(PGBOUNCER_URL_VAR)
        && !url.trim().is_empty()
    {
        return Some((server, url));
    }
    assert!(
        std::env::var(REQUIRE_PGBOUNCER_VAR).as_deref() != Ok("1"),
        "{test}: {PGBOUNCER_URL_VAR} is not set, but {REQUIRE_PGBOUNCER_VAR}=1 requires the PgBouncer tests to run"
    );
    let message = format!("\nskipped: {test}: {PGBOUNCER_URL_VAR} is not set\n");
    let _ = std::io::stderr().write_all(message.as_bytes());
    None
}

fn through_pgbouncer(
    schema: &TestSchema,
    bouncer: &str,
) -> Result<PostgresLedger, effect_core::LedgerError> {
    // More client connections than PgBouncer has server connections, so
    // transactions of one client connection move between server sessions.
    PostgresLedger::connect(bouncer, schema.options().pool_size(8))
}

#[test]
fn passes_the_conformance_suite_through_pgbouncer() -> TestResult {
    let Some((server, bouncer)) = urls("passes_the_conformance_suite_through_pgbouncer") else {
        return Ok(());
    };
    let schemas: Mutex<Vec<TestSchema>> = Mutex::new(Vec::new());
    let factory = || -> Arc<dyn EffectLedger> {
        let schema = TestSchema::new(&server, "bouncer_conformance").expect("a fresh schema name");
        let ledger = through_pgbouncer(&schema, &bouncer).expect("a ledger through PgBouncer");
        schemas
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(schema);
        Arc::new(ledger)
    };
    effect_conformance::run_all(&factory);
    effect_testkit::executor_suite::run_all(&factory);
    Ok(())
}

/// Sixteen threads race to claim each operation through PgBouncer: exactly
/// one claim per operation applies, and the cursor reads every event once.
#[test]
fn racing_claims_through_pgbouncer_have_one_winner_each() -> TestResult {
    let Some((server, bouncer)) = urls("racing_claims_through_pgbouncer_have_one_winner_each")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&server, "bouncer_race")?;
    let ledger = through_pgbouncer(&schema, &bouncer)?;
    const OPERATIONS: usize = 20;
    const RACERS: usize = 16;
    let mut winners = Vec::new();
    for n in 0..OPERATIONS {
        let id = format!("op-{n}");
        let barrier = std::sync::Barrier::new(RACERS);
        let applied: Vec<bool> = std::thread::scope(|scope| {
            let racers: Vec<_> = (0..RACERS)
                .map(|r| {
                    let (id, barrier, ledger) = (&id, &barrier, &ledger);
                    scope.spawn(move || {
                        let claim = Claim::new(format!("racer-{r}"), Duration::from_secs(60));
                        barrier.wait();
                        ledger
                            .apply(id, &Transition::PrepareAndClaim(new_operation(n), claim))
                            .map(|outcome| outcome.applied)
                    })
                })
                .collect();
            racers
                .into_iter()
                .map(|r| {
                    r.join()
                        .map_err(|_| "a racer panicked")?
                        .map_err(|e| e.to_string())
                })
                .collect::<Result<_, String>>()
        })?;
        winners.push(applied.iter().filter(|a| **a).count());
        let record = ledger.get(&id)?.ok_or("record missing")?;
        assert_eq!(record.attempts, 1, "{id} was dispatched once");
    }
    assert_eq!(
        winners,
        vec![1; OPERATIONS],
        "one claim applied per operation"
    );
    let events = ledger.events_after(0, 1000)?;
    assert_eq!(
        events.len(),
        OPERATIONS * 2,
        "prepared and dispatched, each once"
    );
    assert!(events.windows(2).all(|w| w[0].sequence < w[1].sequence));
    Ok(())
}

/// Effects through PgBouncer by one client connection, each while another
/// client holds the server session PgBouncer used last (it hands out the
/// most recently used one first; it has two), so the ledger's transaction
/// runs on a session where what it prepared is missing. The ledger runs
/// that call again with unnamed statements and keeps to them, without
/// failing a call, and every effect is dispatched exactly once: first on
/// the plain path (a claim read and written on its own, its outcome written
/// at once), then on the locked path (a budget-charged claim in one
/// transaction under the row lock, which the error aborts and rolls back).
/// One test, so that no two tests hold PgBouncer's two sessions at once.
#[test]
fn a_session_without_a_prepared_statement_falls_back_to_unnamed_ones() -> TestResult {
    let Some((server, bouncer)) =
        urls("a_session_without_a_prepared_statement_falls_back_to_unnamed_ones")
    else {
        return Ok(());
    };
    falls_back_on_the_plain_path(&server, &bouncer)?;
    falls_back_in_a_transaction(&server, &bouncer)
}

const EFFECTS: usize = 12;

fn falls_back_on_the_plain_path(server: &str, bouncer: &str) -> TestResult {
    let schema = TestSchema::new(server, "bouncer_fallback")?;
    let ledger = PostgresLedger::connect(bouncer, schema.options().pool_size(1))?;
    assert!(ledger.prepares_statements(), "prepared by default");
    let executor = EffectExecutor::new(Arc::new(ledger.clone()));
    let contract = EffectContract::builder("capture_payment", |args| {
        Ok(format!("invoice:{}:capture", args["invoice_id"]))
    })
    .build()?;
    let calls = Arc::new(AtomicUsize::new(0));
    let capture = {
        let calls = Arc::clone(&calls);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            calls.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"charge": args["invoice_id"]}))
        }
    };
    let mut pin = Client::connect(bouncer, NoTls)?;
    // The first effect prepares its statements on one session, unpinned.
    let first = executor.execute(&contract, &json!({"invoice_id": 0}), capture.clone())?;
    assert!(first.is_confirmed());
    assert!(ledger.statements_prepared() > 0);
    for n in 1..EFFECTS {
        let held = pin.transaction()?;
        let done = executor.execute(&contract, &json!({"invoice_id": n}), capture.clone())?;
        held.commit()?;
        assert!(done.is_confirmed(), "effect {n}: {done:?}");
    }
    assert!(
        !ledger.prepares_statements(),
        "a session without the ledger's statements made it fall back"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        EFFECTS,
        "each dispatched once"
    );
    for n in 0..EFFECTS {
        let again = executor.execute(&contract, &json!({"invoice_id": n}), capture.clone())?;
        assert!(again.duplicate_suppressed, "effect {n} replayed");
        let record = ledger
            .get(&format!("invoice:{n}:capture"))?
            .ok_or("record missing")?;
        assert_eq!(record.attempts, 1, "effect {n} dispatched once");
    }
    assert_eq!(
        calls.load(Ordering::SeqCst),
        EFFECTS,
        "replays dispatch nothing"
    );
    Ok(())
}

fn falls_back_in_a_transaction(server: &str, bouncer: &str) -> TestResult {
    let schema = TestSchema::new(server, "bouncer_fallback_locked")?;
    let ledger = PostgresLedger::connect(bouncer, schema.options().pool_size(1))?;
    let claim = |n: usize| -> Result<Transition, Box<dyn std::error::Error>> {
        let budget = Budget::total("captures").max_count(1000);
        let claim = Claim::new(format!("owner-{n}"), Duration::from_secs(60))
            .with_budgets(vec![budget.charge(&json!({}))?]);
        Ok(Transition::PrepareAndClaim(new_operation(n), claim))
    };
    let confirm = |n: usize| Transition::MarkConfirmed {
        owner_token: Some(format!("owner-{n}")),
        confirmation: Confirmation {
            output: json!({"charge": n}),
            provider_operation_id: None,
            evidence: Evidence::new(),
        },
    };
    let mut pin = Client::connect(bouncer, NoTls)?;
    for n in 0..EFFECTS {
        let id = format!("op-{n}");
        // Pinned from the second claim on, whose first statement (the row
        // lock) is inside its transaction.
        let held = if n > 0 {
            Some(pin.transaction()?)
        } else {
            None
        };
        let claimed = ledger.apply(&id, &claim(n)?)?;
        if let Some(held) = held {
            held.commit()?;
        }
        assert!(claimed.applied, "claim {n}: {claimed:?}");
        assert!(ledger.apply(&id, &confirm(n))?.applied, "confirm {n}");
    }
    assert!(
        !ledger.prepares_statements(),
        "a session without the ledger's statements made it fall back"
    );
    for n in 0..EFFECTS {
        let id = format!("op-{n}");
        let record = ledger.get(&id)?.ok_or("record missing")?;
        assert_eq!(record.attempts, 1, "{id} dispatched once");
        assert!(!ledger.apply(&id, &claim(n)?)?.applied, "{id} replayed");
        assert_eq!(
            ledger.events(&id)?.len(),
            3,
            "{id}: prepared, dispatched, confirmed"
        );
    }
    let stats = ledger.stats()?;
    let captures = stats
        .budgets
        .iter()
        .find(|b| b.budget == "captures")
        .ok_or("budget missing")?;
    assert_eq!(captures.count, EFFECTS as u64, "each claim charged once");
    Ok(())
}
