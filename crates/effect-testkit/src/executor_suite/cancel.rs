//! An operator's cancellation (docs/spec.md §4, "cancel") gives back the
//! budget charges of the operation it ends, so the executor dispatches
//! another within the limit.

use std::sync::{Arc, Mutex};

use effect_core::EffectLedgerExt as _;
use effect_core::{Budget, EffectContract, EffectStatus as S, OutcomeProbeResult, Transition};
use effect_exec::{EffectExecutor, HandlerContext, HandlerError};
use serde_json::{Value, json};

use effect_conformance::LedgerFactory;
use effect_conformance::harness::{Check, cancel_by_operator};

/// A retry-authorized operation (its first dispatch uncertain, the probe
/// authoritative that nothing committed) keeps its budget charge while it
/// waits; cancelling it gives the charge back (`budget_refunded`), so the
/// next refund fits, and the provider received nothing for it.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn cancel_gives_back_budget_charges(factory: LedgerFactory<'_>) {
    let c = Check::new("cancel_gives_back_budget_charges", factory);
    let received = Arc::new(Mutex::new(Vec::<String>::new()));
    let contract = EffectContract::builder("refund", |args| {
        Ok(format!(
            "order:{}:refund",
            args["order"].as_str().ok_or("missing order")?
        ))
    })
    .budget(Budget::total("refunds").max_count(1))
    .outcome_probe(|_args, _key| Ok(OutcomeProbeResult::not_committed()))
    .build();
    let contract = match contract {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    // Fails before the provider has it, every time: two rounds, both
    // reconciled to a retry, which is left for a later call.
    let failing = |_args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
        Err(HandlerError::unknown("connection refused"))
    };
    match executor.execute(&contract, &json!({"order": "A-1"}), failing) {
        Ok(result) => c.same(
            (result.status, result.attempts),
            (S::OutcomeUnknown, 2),
            "A-1 after two failed rounds",
        ),
        Err(err) => c.fail(format_args!("A-1: {err}")),
    }
    let id = "order:A-1:refund";
    // The probe says the second attempt did not commit either: the retry
    // waits for a later call, or a worker.
    let reset = Transition::ResetForRetry {
        evidence: effect_conformance::harness::evidence(
            json!({"retry_basis": "probe_not_committed"}),
        ),
    };
    let reset = c.ok(c.ledger.apply(id, &reset), "authorizing A-1's retry");
    c.same(
        reset.record.status,
        S::Prepared,
        "A-1 waiting for its retry",
    );
    let outcome = c.ok(c.ledger.apply(id, &cancel_by_operator()), "cancel of A-1");
    c.same(outcome.record.status, S::Rejected, "A-1 after the cancel");
    let types = c.event_types(id);
    c.same(
        types
            .iter()
            .rev()
            .take(2)
            .map(String::as_str)
            .collect::<Vec<_>>(),
        vec!["budget_refunded", "cancelled"],
        "A-1's last events (newest first)",
    );
    let accepting = {
        let received = Arc::clone(&received);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            let order = args["order"].as_str().unwrap_or_default().to_owned();
            lock(&received).push(order.clone());
            Ok(json!({"refunded": order}))
        }
    };
    match executor.execute(&contract, &json!({"order": "A-2"}), accepting.clone()) {
        Ok(result) => c.same(
            result.status,
            S::Confirmed,
            "A-2 in the budget A-1 gave back",
        ),
        Err(err) => c.fail(format_args!("A-2: {err}")),
    }
    match executor.execute(&contract, &json!({"order": "A-1"}), accepting) {
        Ok(result) => c.same(
            (result.status, result.attempts),
            (S::Rejected, 2),
            "A-1 called after its cancel",
        ),
        Err(err) => c.fail(format_args!("A-1 after its cancel: {err}")),
    }
    c.same(
        lock(&received).clone(),
        vec!["A-2".to_owned()],
        "requests the provider received",
    );
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
