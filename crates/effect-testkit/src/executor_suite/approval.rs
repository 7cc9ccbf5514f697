//! Human approval through the executor (docs/approval.md): callers racing
//! on approved operations, each on its own handle of one ledger, dispatch
//! every approved operation exactly once and none that nobody approved.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_core::{Approval, Clock as _, EffectStatus as S, SystemClock};
use effect_core::{EffectContract, EffectLedger};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use serde_json::{Value, json};

use effect_conformance::harness::Check;
use effect_conformance::harness::race;

const ACTOR: &str = "approver@example.com";
const REASON: &str = "refund matches the ticket";

/// Callers racing through the executor on approved operations, each on its
/// own handle of one ledger (its own connections, or its own process's
/// pool): every approved operation is dispatched exactly once, and an
/// operation nobody approved is never dispatched (docs/approval.md). Each
/// store runs it with handles it opens on one empty ledger.
///
/// # Panics
///
/// When a property does not hold, with the check's name and what differed
/// (it is a test), or when `handles` is empty.
pub fn callers_dispatch_each_approved_operation_once(handles: &[Arc<dyn EffectLedger>]) {
    const OPERATIONS: usize = 40;
    let Some(first) = handles.first() else {
        panic!("callers_dispatch_each_approved_operation_once needs ledger handles");
    };
    let factory = || Arc::clone(first);
    let c = Check::new("callers_dispatch_each_approved_operation_once", &factory);
    let contract = match EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .requires_approval(true)
    .build()
    {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    let args = |n: usize| json!({"order": format!("A-{n}"), "cents": 100 + n});
    let setup = EffectExecutor::new(Arc::clone(first));
    let commits: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
    let handler = |commits: &Arc<Mutex<HashMap<String, usize>>>, caller: usize| {
        let commits = Arc::clone(commits);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            *lock(&commits).entry(order.clone()).or_default() += 1;
            Ok(json!({"refunded": order, "by": caller}))
        }
    };
    // Every operation is recorded waiting; the even ones are approved.
    for n in 0..OPERATIONS {
        match setup.execute(&contract, &args(n), handler(&commits, usize::MAX)) {
            Ok(result) => c.same(result.status, S::AwaitingApproval, "a first call"),
            Err(err) => c.fail(format_args!("a first call: {err}")),
        }
    }
    for n in (0..OPERATIONS).step_by(2) {
        let id = format!("order:A-{n}:refund");
        let Some(record) = c.ok(first.get(&id), "get") else {
            c.fail(format_args!("{id} was not recorded"));
        };
        let approval = Approval {
            request_fingerprint: record.request_fingerprint,
            actor: ACTOR.into(),
            reason: REASON.into(),
            expires_at: SystemClock.now() + Duration::from_secs(3600),
        };
        if let Err(err) = setup.operator().approve(&id, approval) {
            c.fail(format_args!("approving {id}: {err}"));
        }
    }
    let committers: Mutex<HashSet<usize>> = Mutex::default();
    race(&c, handles.len(), |caller| {
        let executor = EffectExecutor::new(Arc::clone(&handles[caller]));
        for i in 0..OPERATIONS {
            // Each caller walks the operations in an order of its own.
            let n = (i * 7 + caller * 13) % OPERATIONS;
            let result = match executor.execute(&contract, &args(n), handler(&commits, caller)) {
                Ok(result) => result,
                Err(err) => c.fail(format_args!("caller {caller}, A-{n}: {err}")),
            };
            match result.status {
                S::Confirmed => {
                    if result.output.as_ref().and_then(|o| o["by"].as_u64()) == Some(caller as u64)
                        && !result.duplicate_suppressed
                    {
                        lock(&committers).insert(caller);
                    }
                }
                S::Dispatched => c.ensure(result.in_progress, format_args!("{result:?}")),
                S::AwaitingApproval => c.ensure(n % 2 == 1, format_args!("{result:?}")),
                other => c.fail(format_args!("unexpected {other}: {result:?}")),
            }
        }
    });
    let commits = lock(&commits);
    for n in 0..OPERATIONS {
        let count = commits.get(&format!("A-{n}")).copied().unwrap_or(0);
        let approved = n % 2 == 0;
        c.same(
            count,
            usize::from(approved),
            format_args!("effects committed for order A-{n}"),
        );
        let Some(record) = c.ok(first.get(&format!("order:A-{n}:refund")), "get") else {
            c.fail(format_args!("order A-{n} was not recorded"));
        };
        let status = if approved {
            S::Confirmed
        } else {
            S::AwaitingApproval
        };
        c.same(
            (record.status, record.attempts),
            (status, u32::from(approved)),
            format_args!("A-{n}"),
        );
    }
    c.same(
        commits.values().sum::<usize>(),
        OPERATIONS / 2,
        "effects committed",
    );
    println!("callers that dispatched: {:?}", lock(&committers));
}

/// A mutex's value, also after a panicking holder (the panic fails the check).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
