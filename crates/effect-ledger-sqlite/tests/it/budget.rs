//! Budgets on SQLite (docs/approval.md#budgets): callers on several
//! connections and four OS processes on one file never together exceed a
//! budget, the charge commits with the claim (a process killed after its
//! claim leaves the charge), and a window rolls over with the ledger's clock.
//!
//! The process test re-executes its own binary, filtered to itself, with
//! `EFFECT_SQLITE_BUDGET_ROLE` set: each child waits for a start barrier
//! file, refunds every order through an executor, and prints one
//! `COMMIT <order>` line per refund its fake provider committed.

#![allow(clippy::unwrap_used)] // Test helpers unwrap: a panic is a failing test with its message.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use effect_core::{
    Budget, BudgetDeferral, EffectContract, EffectLedger, EffectStatus, ManualClock,
};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use effect_testkit::executor_suite::callers_never_exceed_a_budget;
use serde_json::{Value, json};

use crate::support::{TestResult, barrier, ready, wait_for};

const TEST_NAME: &str = "budget::processes_never_exceed_a_budget";
const ROLE: &str = "EFFECT_SQLITE_BUDGET_ROLE";
const DB: &str = "EFFECT_SQLITE_BUDGET_DB";
const CHILDREN: usize = 4;
const ORDERS: usize = 60;
const CENTS: u64 = 100;
const LIMIT: u64 = 2_550;

/// Callers, each with a ledger of its own (its own connection pool); the
/// conformance suite also races 16 threads on one ledger.
const CALLERS: usize = 6;

#[test]
fn callers_on_several_connections_never_exceed_a_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("budget.sqlite3");
    let handles: Vec<Arc<dyn EffectLedger>> = (0..CALLERS)
        .map(|_| -> Arc<dyn EffectLedger> {
            let options = SqliteOptions::default().busy_timeout(Duration::from_secs(10));
            Arc::new(SqliteLedger::open(&path, options).unwrap())
        })
        .collect();
    callers_never_exceed_a_budget(&handles);
}

fn refunds(limit: u64) -> EffectContract {
    EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .budget(Budget::total("refunds").max_amount(limit, |args| {
        Ok(args["cents"].as_u64().ok_or("missing cents")?)
    }))
    .build()
    .unwrap()
}

fn order(n: usize) -> Value {
    json!({"order": format!("A-{n}"), "cents": CENTS})
}

#[test]
fn processes_never_exceed_a_budget() -> TestResult {
    match std::env::var(ROLE) {
        Ok(role) => child(&role, Path::new(&std::env::var(DB)?)),
        Err(_) => parent(),
    }
}

fn parent() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("budget.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default())?;
    let exe = std::env::current_exe()?;
    let children = (0..CHILDREN)
        .map(|c| {
            Command::new(&exe)
                .args([TEST_NAME, "--exact", "--nocapture", "--test-threads=1"])
                .env(ROLE, format!("child{c}"))
                .env(DB, &db)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    for c in 0..CHILDREN {
        wait_for(&ready(&db, &format!("child{c}")))?;
    }
    std::fs::write(barrier(&db), b"go")?;
    let mut commits: HashMap<String, usize> = HashMap::new();
    let mut refused = 0;
    for (c, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child{c} failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        for line in stdout.lines() {
            if let Some(at) = line.find("COMMIT ") {
                *commits.entry(line[at + 7..].trim().to_owned()).or_default() += 1;
            }
            if line.contains("REFUSED ") {
                refused += 1;
            }
            assert!(!line.contains("UNEXPECTED "), "child{c}: {line}");
        }
    }
    let dispatches = usize::try_from(LIMIT / CENTS)?;
    assert_eq!(
        commits.len(),
        dispatches,
        "orders the provider refunded: {commits:?}"
    );
    assert!(
        commits.values().all(|n| *n == 1),
        "each refunded once: {commits:?}"
    );
    assert!(refused >= ORDERS - dispatches, "refusals: {refused}");
    let stats = ledger.stats()?;
    let budget = stats
        .budgets
        .iter()
        .find(|b| b.budget == "refunds")
        .ok_or("no budget")?;
    assert_eq!((budget.count, budget.amount), (25, 2_500));
    for n in 0..ORDERS {
        let record = ledger
            .get(&format!("order:A-{n}:refund"))?
            .ok_or("missing")?;
        let committed = commits.contains_key(&format!("A-{n}"));
        // A refusal is terminal: the refused orders are rejected.
        let expected = if committed {
            EffectStatus::Confirmed
        } else {
            EffectStatus::Rejected
        };
        assert_eq!(record.status, expected, "A-{n}");
        assert_eq!(record.attempts, u32::from(committed), "A-{n}");
    }
    Ok(())
}

fn child(role: &str, db: &Path) -> TestResult {
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(
        db,
        SqliteOptions::default().busy_timeout(Duration::from_secs(10)),
    )?);
    let executor = EffectExecutor::new(ledger);
    let contract = refunds(LIMIT);
    std::fs::write(ready(db, role), b"ready")?;
    wait_for(&barrier(db))?;
    let offset: usize = role.trim_start_matches("child").parse()?;
    for i in 0..ORDERS {
        let n = (i * 7 + offset * 17) % ORDERS;
        let handler = |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            println!("COMMIT {}", args["order"].as_str().unwrap_or_default());
            Ok(json!({"refunded": args["order"]}))
        };
        match executor.execute(&contract, &order(n), handler) {
            Ok(result)
                if matches!(
                    result.status,
                    EffectStatus::Confirmed | EffectStatus::Dispatched
                ) => {}
            Ok(result) => println!("UNEXPECTED {result:?}"),
            Err(err) if err.is_budget_exceeded() => println!("REFUSED A-{n}"),
            Err(err) => println!("UNEXPECTED {err}"),
        }
    }
    Ok(())
}

const KILL_ROLE: &str = "EFFECT_SQLITE_BUDGET_KILL";

/// A process killed inside its handler, after the claim committed, leaves
/// the charge: the dispatch may have reached the provider, so the budget
/// keeps it, and a later call over what is left is refused.
#[test]
fn a_charge_survives_a_process_killed_after_its_claim() -> TestResult {
    if let Ok(db) = std::env::var(KILL_ROLE) {
        let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(
            Path::new(&db),
            SqliteOptions::default(),
        )?);
        let executor = EffectExecutor::new(ledger);
        let handler = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            std::process::abort();
        };
        executor.execute(
            &refunds(1_000),
            &json!({"order": "A-1", "cents": 700}),
            handler,
        )?;
        return Err("the handler returned".into());
    }
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("killed.sqlite3");
    drop(SqliteLedger::open(&db, SqliteOptions::default())?);
    let status = Command::new(std::env::current_exe()?)
        .args([
            "budget::a_charge_survives_a_process_killed_after_its_claim",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(KILL_ROLE, &db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    assert!(!status.success(), "the child was killed");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default())?);
    let record = ledger.get("order:A-1:refund")?.ok_or("missing")?;
    assert_eq!(
        (record.status, record.attempts),
        (EffectStatus::Dispatched, 1)
    );
    let stats = ledger.stats()?;
    let budget = stats
        .budgets
        .iter()
        .find(|b| b.budget == "refunds")
        .ok_or("no budget")?;
    assert_eq!((budget.count, budget.amount), (1, 700));
    let committed = Arc::new(Mutex::new(0));
    let handler = {
        let committed = Arc::clone(&committed);
        move |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            *committed.lock().unwrap() += 1;
            Ok(json!({}))
        }
    };
    let executor = EffectExecutor::new(ledger);
    let over = executor.execute(
        &refunds(1_000),
        &json!({"order": "A-2", "cents": 400}),
        handler.clone(),
    );
    assert!(over.unwrap_err().is_budget_exceeded());
    let fits = executor.execute(
        &refunds(1_000),
        &json!({"order": "A-3", "cents": 300}),
        handler,
    )?;
    assert_eq!(fits.status, EffectStatus::Confirmed);
    assert_eq!(
        *committed.lock().unwrap(),
        1,
        "refunds the provider committed"
    );
    Ok(())
}

/// A daily budget counts the current UTC day of the ledger's clock, and a
/// sliding one the last ten minutes: once the clock moves on, the next
/// dispatch fits again, and a call both budgets defer goes out then.
#[test]
fn windows_roll_over_with_the_ledger_clock() -> TestResult {
    // 23:55 UTC on some day.
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(20_000 * 86_400 + 23 * 3_600 + 55 * 60),
    ));
    let dir = tempfile::tempdir()?;
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(
        dir.path().join("windows.sqlite3"),
        SqliteOptions::default().clock(clock.clone()),
    )?);
    let executor = EffectExecutor::new(ledger.clone());
    let contract = EffectContract::builder("payout", |args| {
        Ok(format!("payout:{}", args["n"].as_u64().ok_or("missing n")?))
    })
    .budget(Budget::per_day("payouts").max_count(2).defer(two_days()))
    .budget(
        Budget::sliding("payout_rate", Duration::from_secs(600))
            .max_amount(300, |args| {
                Ok(args["cents"].as_u64().ok_or("missing cents")?)
            })
            .defer(two_days()),
    )
    .build()?;
    let committed = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let committed = Arc::clone(&committed);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            committed
                .lock()
                .unwrap()
                .push(args["n"].as_u64().unwrap_or_default());
            Ok(json!({}))
        }
    };
    let pay = |n: u64, cents: u64| {
        executor.execute(&contract, &json!({"n": n, "cents": cents}), handler.clone())
    };
    assert!(pay(1, 100)?.is_confirmed());
    assert!(pay(2, 100)?.is_confirmed());
    // Two today: the day's budget is used up.
    assert!(pay(3, 100).unwrap_err().is_budget_deferred());
    // Past midnight: a new day, but 200 of the last ten minutes' 300 are used.
    clock.advance(Duration::from_secs(6 * 60));
    assert!(pay(4, 200).unwrap_err().is_budget_deferred());
    assert!(pay(3, 100)?.is_confirmed());
    // Ten minutes after the first two, the sliding window has room again.
    clock.advance(Duration::from_secs(5 * 60));
    assert!(pay(4, 200)?.is_confirmed());
    assert_eq!(*committed.lock().unwrap(), vec![1, 2, 3, 4]);
    let stats = ledger.stats()?;
    let by_name: HashMap<&str, (&str, u64, u64)> = stats
        .budgets
        .iter()
        .map(|b| (b.budget.as_str(), (b.window.as_str(), b.count, b.amount)))
        .collect();
    assert_eq!(by_name["payouts"], ("daily", 2, 0));
    assert_eq!(by_name["payout_rate"], ("sliding:600s", 2, 300));
    Ok(())
}

/// The deferral every budget of [`windows_roll_over_with_the_ledger_clock`] declares.
fn two_days() -> BudgetDeferral {
    BudgetDeferral::For(Duration::from_secs(2 * 86_400))
}
