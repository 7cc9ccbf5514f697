//! Approval on PostgreSQL: callers on several connections race on approved
//! operations, and each is dispatched once (the claim checks and consumes
//! the approval in the same transaction).

#![allow(clippy::unwrap_used)] // Test helpers unwrap: a panic is a failing test with its message.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use effect_core::{Approval, Clock as _, EffectContract, EffectLedger, EffectStatus, SystemClock};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use serde_json::{Value, json};

use crate::support::{TestResult, TestSchema, server_url};

/// Callers, each with a ledger of its own (its own connection pool).
const CALLERS: usize = 6;

#[test]
fn callers_on_several_connections_dispatch_each_approved_operation_once() -> TestResult {
    let Some(url) =
        server_url("callers_on_several_connections_dispatch_each_approved_operation_once")
    else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "approval_race")?;
    let mut handles: Vec<Arc<dyn EffectLedger>> = Vec::new();
    for _ in 0..CALLERS {
        let ledger = effect_ledger_postgres::PostgresLedger::connect(
            &schema.url,
            schema.options().pool_size(1),
        )?;
        handles.push(Arc::new(ledger));
    }
    callers_dispatch_each_approved_operation_once(handles);
    Ok(())
}

/// Callers racing on approved operations, each on its own ledger handle
/// (its own connections): every approved operation is dispatched exactly
/// once, and an operation nobody approved is never dispatched
/// (docs/approval.md).
///
/// `handles` all open the same, empty ledger.
fn callers_dispatch_each_approved_operation_once(handles: Vec<Arc<dyn EffectLedger>>) {
    const OPERATIONS: usize = 40;
    let contract = EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .requires_approval(true)
    .build()
    .unwrap();
    let args = |n: usize| json!({"order": format!("A-{n}"), "cents": 100 + n});
    let setup = EffectExecutor::new(Arc::clone(&handles[0]));
    let commits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let handler = |commits: &Arc<Mutex<HashMap<String, usize>>>, caller: usize| {
        let commits = Arc::clone(commits);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            *commits.lock().unwrap().entry(order.clone()).or_default() += 1;
            Ok(json!({"refunded": order, "by": caller}))
        }
    };
    // Every operation is recorded waiting; the even ones are approved.
    for n in 0..OPERATIONS {
        let first = setup
            .execute(&contract, &args(n), handler(&commits, usize::MAX))
            .unwrap();
        assert_eq!(first.status, EffectStatus::AwaitingApproval);
    }
    for n in (0..OPERATIONS).step_by(2) {
        let id = format!("order:A-{n}:refund");
        let record = handles[0].get(&id).unwrap().unwrap();
        setup
            .approve(
                &id,
                Approval {
                    request_fingerprint: record.request_fingerprint,
                    actor: "lead@example.com".into(),
                    reason: "checked".into(),
                    expires_at: SystemClock.now() + Duration::from_secs(3600),
                },
            )
            .unwrap();
    }
    let barrier = Barrier::new(handles.len());
    let committers: Mutex<HashSet<usize>> = Mutex::default();
    std::thread::scope(|scope| {
        for (caller, ledger) in handles.iter().enumerate() {
            let (barrier, commits, committers, contract) =
                (&barrier, &commits, &committers, &contract);
            scope.spawn(move || {
                let executor = EffectExecutor::new(Arc::clone(ledger));
                barrier.wait();
                for i in 0..OPERATIONS {
                    // Each caller walks the operations in an order of its own.
                    let n = (i * 7 + caller * 13) % OPERATIONS;
                    let result = executor
                        .execute(contract, &args(n), handler(commits, caller))
                        .unwrap();
                    match result.status {
                        EffectStatus::Confirmed => {
                            if result.output.as_ref().and_then(|o| o["by"].as_u64())
                                == Some(caller as u64)
                                && !result.duplicate_suppressed
                            {
                                committers.lock().unwrap().insert(caller);
                            }
                        }
                        EffectStatus::Dispatched => assert!(result.in_progress, "{result:?}"),
                        EffectStatus::AwaitingApproval => assert!(n % 2 == 1, "{result:?}"),
                        other => panic!("unexpected {other}: {result:?}"),
                    }
                }
            });
        }
    });
    let commits = commits.lock().unwrap();
    for n in 0..OPERATIONS {
        let count = commits.get(&format!("A-{n}")).copied().unwrap_or(0);
        let expected = usize::from(n % 2 == 0);
        assert_eq!(count, expected, "effects committed for order A-{n}");
        let record = handles[0]
            .get(&format!("order:A-{n}:refund"))
            .unwrap()
            .unwrap();
        let status = if n % 2 == 0 {
            EffectStatus::Confirmed
        } else {
            EffectStatus::AwaitingApproval
        };
        assert_eq!(
            (record.status, record.attempts),
            (status, u32::from(n % 2 == 0)),
            "A-{n}"
        );
    }
    assert_eq!(commits.values().sum::<usize>(), OPERATIONS / 2);
    println!("callers that dispatched: {:?}", committers.lock().unwrap());
}
