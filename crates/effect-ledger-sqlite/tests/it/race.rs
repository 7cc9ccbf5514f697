//! Two OS processes share one ledger file and race to claim the same prepared
//! operations: each operation has exactly one winner.
//!
//! The test re-executes its own binary, filtered to this one test, with
//! `EFFECT_SQLITE_RACE_ROLE` set: the copies run as children, wait for a start
//! barrier file, claim, and print one `CLAIM <id> <won>` line per operation.

use effect_core::EffectLedgerExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use effect_core::EffectLedger;
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::{TestResult, barrier, claim, op, ready, wait_for};

const TEST_NAME: &str = "race::processes_racing_to_claim_have_one_winner";
const ROLE: &str = "EFFECT_SQLITE_RACE_ROLE";
const DB: &str = "EFFECT_SQLITE_RACE_DB";
const OPERATIONS: usize = 25;
const CHILDREN: usize = 3;

#[test]
fn processes_racing_to_claim_have_one_winner() -> TestResult {
    match std::env::var(ROLE) {
        Ok(role) => child(&role, Path::new(&std::env::var(DB)?)),
        Err(_) => parent(),
    }
}

fn operation_id(i: usize) -> String {
    format!("race:{i}")
}

fn parent() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("race.sqlite3");
    let ledger = SqliteLedger::open(&db, SqliteOptions::default())?;
    for i in 0..OPERATIONS {
        ledger.prepare(&operation_id(i), &op(json!({"i": i})))?;
    }

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

    let mut wins = vec![Vec::new(); OPERATIONS];
    for (c, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child{c} failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        // The harness may print its own text before the first line.
        let lines: Vec<&str> = stdout
            .lines()
            .filter_map(|l| l.find("CLAIM ").map(|at| &l[at..]))
            .collect();
        assert_eq!(
            lines.len(),
            OPERATIONS,
            "child{c} reports every claim:\n{stdout}"
        );
        for line in lines {
            let mut parts = line.split(' ').skip(1);
            let (Some(index), Some(won)) = (parts.next(), parts.next()) else {
                return Err(format!("bad line {line:?}").into());
            };
            if won == "true" {
                wins[index.parse::<usize>()?].push(format!("child{c}"));
            }
        }
    }
    for (i, winners) in wins.iter().enumerate() {
        assert_eq!(winners.len(), 1, "operation {i} was won by {winners:?}");
        let record = ledger.get(&operation_id(i))?.ok_or("missing")?;
        assert_eq!(record.attempts, 1);
        assert_eq!(record.owner_token.as_deref(), Some(winners[0].as_str()));
        let types: Vec<String> = ledger
            .events(&operation_id(i))?
            .into_iter()
            .map(|e| e.event_type)
            .collect();
        assert_eq!(types, ["prepared", "dispatched"]);
    }
    Ok(())
}

fn child(role: &str, db: &Path) -> TestResult {
    let ledger = SqliteLedger::open(
        db,
        SqliteOptions::default().busy_timeout(Duration::from_secs(30)),
    )?;
    std::fs::write(ready(db, role), b"ready")?;
    wait_for(&barrier(db))?;
    // Alternate children walk the operations in opposite directions, so they
    // meet on some operation even if one of them starts late.
    let order: Vec<usize> = if role.ends_with(['1', '3', '5', '7', '9']) {
        (0..OPERATIONS).rev().collect()
    } else {
        (0..OPERATIONS).collect()
    };
    for i in order {
        let won = ledger.claim_dispatch(&operation_id(i), &claim(role))?;
        println!("CLAIM {i} {won}");
    }
    Ok(())
}
