//! The ledger through PgBouncer in transaction mode, where each transaction
//! may run on another server connection: nothing the ledger relies on may
//! outlive a transaction (no named prepared statements, no session settings).
//!
//! They need `EFFECT_TEST_PGBOUNCER_URL`, a PgBouncer with `pool_mode =
//! transaction` in front of the server of `EFFECT_TEST_POSTGRES_URL` (`.ci/run`
//! starts one); `EFFECT_REQUIRE_PGBOUNCER=1` makes a missing one a failure.

use std::io::Write as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use effect_core::{Claim, EffectLedger, EffectLedgerExt as _, Transition};
use effect_ledger_postgres::PostgresLedger;

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
    effect_testkit::conformance::run_all(&factory);
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
                        let claim = Claim {
                            owner_token: format!("racer-{r}"),
                            lease: Duration::from_secs(60),
                            budgets: Vec::new(),
                        };
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
