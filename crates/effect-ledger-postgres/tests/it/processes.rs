//! Four OS processes executing the same 500 operations against one database.
//!
//! Each child runs effect-exec's `EffectExecutor` over its own
//! `PostgresLedger`; the handler is a fake provider whose record is a row in
//! `provider_commits`. That table has no unique key, so a double dispatch
//! would show up as a second row rather than be hidden. A child that finds an
//! operation in progress elsewhere or already confirmed moves on.
//!
//! The parent prepares the even operations beforehand (as a crashed earlier run
//! would have left them), so the children race both to create records and to
//! claim existing `prepared` ones.

use effect_core::EffectLedgerExt as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use effect_core::{EffectLedger, EffectStatus};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use effect_ledger_postgres::{PostgresLedger, PostgresOptions};
use serde_json::{Value, json};

use crate::support::{
    TestResult, TestSchema, child_env, describe, new_operation, server_url, spawn_child, wait_child,
};

const PROCESSES: usize = 4;
const OPERATIONS: usize = 500;

/// The order in which child `index` walks the operations: each its own.
fn order(index: usize) -> Vec<usize> {
    (0..OPERATIONS)
        .map(|i| match index % 4 {
            0 => i,
            1 => OPERATIONS - 1 - i,
            // 7 and 500 are coprime, so this visits every operation once.
            2 => (i * 7) % OPERATIONS,
            _ => (i + OPERATIONS / 2) % OPERATIONS,
        })
        .collect()
}

/// One executor process (see the module docs).
#[test]
fn child_executes_operations() -> TestResult {
    let Some((url, schema, index)) = child_env("executor") else {
        // Not started as a child: this entry point only runs inside
        // `four_processes_commit_each_effect_exactly_once`.
        return Ok(());
    };
    let options = PostgresOptions::default()
        .schema(schema.clone())
        .pool_size(2);
    let ledger = PostgresLedger::connect(&url, options)?;
    let mut provider = postgres::Client::connect(&url, postgres::NoTls)?;
    let q = format!("\"{schema}\"");

    // Start together, so the processes really race for the same operations.
    provider.execute(
        &format!("INSERT INTO {q}.ready (child) VALUES ($1)"),
        &[&(index as i32)],
    )?;
    let start = Instant::now();
    loop {
        let ready: i64 = provider
            .query_one(&format!("SELECT count(*) FROM {q}.ready"), &[])?
            .get(0);
        if ready == PROCESSES as i64 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the other children never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // The contract of `new_operation`: the same identity the parent prepared.
    let contract = effect_test_support::contracts::capture_payment().build()?;
    let provider = Arc::new(Mutex::new(provider));
    let dispatched = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (provider, dispatched, q) = (Arc::clone(&provider), Arc::clone(&dispatched), q.clone());
        move |args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
            let key = ctx
                .into_provider_key()
                .ok_or_else(|| HandlerError::unknown("no provider key"))?;
            let mut provider = provider.lock().unwrap_or_else(PoisonError::into_inner);
            provider
                .execute(
                    &format!(
                        "INSERT INTO {q}.provider_commits (key, committed_by) VALUES ($1, $2)"
                    ),
                    &[&key, &(index as i32)],
                )
                .map_err(|err| HandlerError::unknown(err.to_string()))?;
            dispatched.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"captured": key, "invoice": args["invoice_id"]}))
        }
    };
    let options = ExecutorOptions::default().dispatch_lease(Duration::from_secs(120));
    let executor = EffectExecutor::with_options(Arc::new(ledger), options);
    let (mut in_progress, mut replayed) = (0, 0);
    for n in order(index) {
        let result = executor.execute(
            &contract,
            &json!({"invoice_id": format!("INV-{n}")}),
            handler.clone(),
        )?;
        if result.in_progress {
            in_progress += 1;
        } else {
            assert_eq!(result.status, EffectStatus::Confirmed, "{result:?}");
            replayed += usize::from(result.duplicate_suppressed);
        }
    }
    let committed = dispatched.load(Ordering::SeqCst);
    println!(
        "child {index}: committed {committed}, replayed {replayed}, in progress elsewhere {in_progress}"
    );
    Ok(())
}

#[test]
fn four_processes_commit_each_effect_exactly_once() -> TestResult {
    let Some(url) = server_url("four_processes_commit_each_effect_exactly_once") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "four_processes")?;
    let ledger = schema.ledger()?;
    let mut admin = schema.admin()?;
    let q = schema.q();
    admin.batch_execute(&format!(
        "CREATE TABLE {q}.provider_commits (
             seq BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, committed_by INTEGER NOT NULL);
         CREATE TABLE {q}.ready (child INTEGER PRIMARY KEY);"
    ))?;
    for n in (0..OPERATIONS).step_by(2) {
        ledger.prepare(&format!("invoice:INV-{n}:capture"), &new_operation(n))?;
    }
    let children = (0..PROCESSES)
        .map(|i| {
            spawn_child(
                "processes::child_executes_operations",
                "executor",
                &schema,
                i,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let outputs = children
        .into_iter()
        .map(|c| wait_child(c, Duration::from_secs(300)))
        .collect::<Result<Vec<_>, _>>()?;
    for output in &outputs {
        assert!(
            output.status.success(),
            "a child failed: {}",
            describe(output)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        let summary = stdout
            .lines()
            .find_map(|l| l.find("child ").map(|at| &l[at..]))
            .filter(|l| l.contains("committed"));
        let Some(summary) = summary else {
            panic!("a child did not run its operations: {}", describe(output));
        };
        println!("{summary}");
    }

    let row = admin.query_one(
        &format!("SELECT count(*), count(DISTINCT key), count(DISTINCT committed_by) FROM {q}.provider_commits"),
        &[],
    )?;
    let (commits, distinct, committers): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!(distinct, OPERATIONS as i64, "every effect committed");
    assert_eq!(commits, OPERATIONS as i64, "no effect committed twice");
    assert!(
        committers > 1,
        "the processes raced (only {committers} committed anything)"
    );

    let stats = ledger.stats()?;
    for (status, count) in stats.counts {
        let expected = if status == EffectStatus::Confirmed {
            OPERATIONS as u64
        } else {
            0
        };
        assert_eq!(count, expected, "{status}");
    }
    let row = admin.query_one(
        &format!(
            "SELECT count(*) FILTER (WHERE attempts <> 1), \
             (SELECT count(*) FROM {q}.effect_events) FROM {q}.effect_operations"
        ),
        &[],
    )?;
    assert_eq!(row.get::<_, i64>(0), 0, "each operation was claimed once");
    assert_eq!(
        row.get::<_, i64>(1),
        3 * OPERATIONS as i64,
        "prepared, dispatched, confirmed"
    );
    Ok(())
}
