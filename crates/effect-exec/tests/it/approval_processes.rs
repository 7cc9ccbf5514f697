//! Several OS processes race to dispatch one approved operation on one
//! SQLite ledger file: the claim transaction checks and consumes the
//! approval, so exactly one effect is committed.
//!
//! The test re-executes its own binary, filtered to this one test, with
//! `EFFECT_APPROVAL_RACE_ROLE` set. Each child waits for a start barrier
//! file, calls the operation once and prints `ANSWER <status> <in_progress>`.
//! The fake provider is a file each committing handler appends a line to;
//! the winner's handler holds until every other child has answered, so the
//! others meet its dispatch in flight.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use effect_core::{Approval, Clock as _, EffectContract, EffectLedger, EffectStatus, SystemClock};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use serde_json::{Value, json};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const TEST_NAME: &str =
    "approval_processes::processes_racing_on_one_approved_operation_commit_one_effect";
const ROLE: &str = "EFFECT_APPROVAL_RACE_ROLE";
const DB: &str = "EFFECT_APPROVAL_RACE_DB";
const CHILDREN: usize = 4;
const ID: &str = "order:A-1:refund";

fn contract() -> EffectContract {
    EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order_id"].as_str().ok_or("missing order_id")?
        ))
    })
    .provider_idempotency_key(|args| Ok(args["order_id"].as_str().map(|id| format!("re-{id}"))))
    .requires_approval(true)
    .build()
    .unwrap()
}

fn args() -> Value {
    json!({"order_id": "A-1", "cents": 4200})
}

fn provider_file(db: &Path) -> PathBuf {
    db.with_extension("provider")
}

fn barrier(db: &Path) -> PathBuf {
    db.with_extension("start")
}

fn marker(db: &Path, what: &str, role: &str) -> PathBuf {
    db.with_extension(format!("{what}-{role}"))
}

/// The effects the file provider committed.
fn committed(db: &Path) -> usize {
    std::fs::read_to_string(provider_file(db)).map_or(0, |text| text.lines().count())
}

/// Polls until `done` holds, without sleeping, for at most a minute.
#[allow(clippy::disallowed_methods)] // Other processes: only real time bounds the wait.
fn wait_until(what: &str, done: impl Fn() -> bool) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {what}").into());
        }
        std::thread::yield_now();
    }
    Ok(())
}

fn answered(db: &Path) -> usize {
    (0..CHILDREN)
        .filter(|c| marker(db, "answered", &format!("child{c}")).exists())
        .count()
}

#[test]
fn processes_racing_on_one_approved_operation_commit_one_effect() -> TestResult {
    match std::env::var(ROLE) {
        Ok(role) => child(&role, Path::new(&std::env::var(DB)?)),
        Err(_) => parent(),
    }
}

fn parent() -> TestResult {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("approval.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&db, SqliteOptions::default())?);
    let executor = EffectExecutor::new(Arc::clone(&ledger));
    let never = |_: Value, _: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::rejected("the parent never dispatches"))
    };
    let first = executor.execute(&contract(), &args(), never)?;
    assert_eq!(first.status, EffectStatus::AwaitingApproval);
    let fingerprint = ledger.get(ID)?.ok_or("not recorded")?.request_fingerprint;
    let approval = || Approval {
        request_fingerprint: fingerprint.clone(),
        actor: "lead@example.com".into(),
        reason: "refund matches ticket T-9".into(),
        expires_at: SystemClock.now() + Duration::from_secs(3600),
    };
    executor.operator().approve(ID, approval())?;

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
        let ready = marker(&db, "ready", &format!("child{c}"));
        wait_until("a child to be ready", || ready.exists())?;
    }
    std::fs::write(barrier(&db), b"go")?;

    let mut answers = Vec::new();
    for (c, child) in children.into_iter().enumerate() {
        let output = child.wait_with_output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "child{c} failed: {}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        let line = stdout
            .lines()
            .find_map(|l| l.find("ANSWER ").map(|at| l[at..].to_owned()))
            .ok_or_else(|| format!("child{c} gave no answer:\n{stdout}"))?;
        answers.push(line);
    }
    answers.sort();
    // One child dispatched and saw it confirmed; the others met the dispatch
    // in flight (none dispatched again, none waited for another approval).
    let mut expected = vec!["ANSWER confirmed false".to_owned()];
    expected.extend((1..CHILDREN).map(|_| "ANSWER dispatched true".to_owned()));
    expected.sort();
    assert_eq!(answers, expected);
    assert_eq!(committed(&db), 1);
    let record = ledger.get(ID)?.ok_or("missing")?;
    assert_eq!(
        (record.status, record.attempts),
        (EffectStatus::Confirmed, 1)
    );
    let events: Vec<String> = ledger
        .events(ID)?
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(events, ["prepared", "approved", "dispatched", "confirmed"]);

    // The approval is used up: the next call replays, another is refused.
    let again = executor.execute(&contract(), &args(), never)?;
    assert_eq!(again.status, EffectStatus::Confirmed);
    assert!(executor.operator().approve(ID, approval()).is_err());
    assert_eq!(committed(&db), 1);
    Ok(())
}

fn child(role: &str, db: &Path) -> TestResult {
    let ledger: Arc<dyn EffectLedger> = Arc::new(SqliteLedger::open(
        db,
        SqliteOptions::default().busy_timeout(Duration::from_secs(10)),
    )?);
    let executor = EffectExecutor::new(ledger);
    std::fs::write(marker(db, "ready", role), b"ready")?;
    let start = barrier(db);
    wait_until("the start barrier", || start.exists())?;
    let provider = provider_file(db);
    let me = role.to_owned();
    let db_path = db.to_owned();
    let handler = move |_: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
        // Hold until every other child has answered, then commit.
        wait_until("the other children's answers", || {
            answered(&db_path) >= CHILDREN - 1
        })
        .map_err(|err| HandlerError::unknown(err.to_string()))?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&provider)
            .map_err(|err| HandlerError::unknown(err.to_string()))?;
        writeln!(file, "{me} {}", ctx.provider_key().unwrap_or_default())
            .map_err(|err| HandlerError::unknown(err.to_string()))?;
        Ok(json!({"refund_id": format!("re-{me}")}))
    };
    let result = executor.execute(&contract(), &args(), handler)?;
    std::fs::write(marker(db, "answered", role), b"answered")?;
    println!("ANSWER {} {}", result.status, result.in_progress);
    Ok(())
}
