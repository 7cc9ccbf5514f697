//! Stored intent across contract versions (docs/spec.md §5c): a recovery
//! worker with only a later version's handler registered recovers the
//! operations an earlier version claimed, from their stored intent
//! migrated, under the id, fingerprint and key they were claimed with,
//! counting what the provider received.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use effect_core::{EffectContract, EffectContractBuilder, EffectStatus as S, event, intent};
use effect_exec::{
    EffectExecutor, HandlerContext, HandlerError, RecoveryReport, RecoveryWorker, WaitingFor,
    waiting,
};
use serde_json::{Value, json};

use effect_conformance::LedgerFactory;
use effect_conformance::harness::Check;

/// What the fake provider received: the arguments and the provider key of
/// each request.
type Received = Arc<Mutex<Vec<(Value, Option<String>)>>>;

/// An operation claimed by version 1 of a contract (amounts in cents) and
/// left behind is dispatched by a worker that registers only version 2
/// (amounts with their currency), which declares how it reads version 1's
/// intent: the provider receives exactly one request, with the migrated
/// arguments and the key the operation was claimed with; the record keeps
/// its version, fingerprint and stored intent. A migration that refuses
/// the stored arguments, a version 2 that weakens the stored terms, and a
/// version 2 that declares no migration send nothing; each is recorded once
/// as a `recovery_blocked` event, and `waiting` lists it with its reason.
pub fn recovery_reads_an_earlier_versions_intent(factory: LedgerFactory<'_>) {
    let c = Check::new("recovery_reads_an_earlier_versions_intent", factory);
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let v1 = built(&c, capture("1").store_intent(true));
    let left = |c: &Check, invoice: &str, amount: Value| -> String {
        let args = json!({"invoice_id": invoice, "amount": amount});
        match executor.execute(&v1, &args, |_: Value, _: HandlerContext| {
            Err::<Value, _>(HandlerError::not_sent("the agent stopped before sending"))
        }) {
            // Nothing left the process: uncertain for the store, and a
            // retry is safe.
            Ok(result) => c.same(result.status, S::OutcomeUnknown, "version 1's call"),
            Err(err) => c.fail(format_args!("version 1's call: {err}")),
        }
        format!("invoice:{invoice}:capture")
    };
    let received: Received = Arc::new(Mutex::new(Vec::new()));
    let sent = |received: &Received| {
        received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    };
    let pass = |c: &Check, v2: EffectContract| -> RecoveryReport {
        let worker = match RecoveryWorker::new(executor.clone()).register(v2, recording(&received))
        {
            Ok(worker) => worker.min_age(Duration::ZERO),
            Err(err) => c.fail(format_args!("registering version 2: {err}")),
        };
        match worker.run_once() {
            Ok(report) => report,
            Err(err) => c.fail(format_args!("a recovery pass: {err}")),
        }
    };
    let v2 = |guaranteed: bool| {
        built(
            &c,
            capture("2")
                .store_intent(true)
                .provider_idempotency_guaranteed(guaranteed)
                .reads_intent_of(v1.clone(), cents_to_money),
        )
    };

    let id = left(&c, "INV-50", json!(5000));
    let unreadable = left(&c, "INV-51", json!("fifty"));
    let before = c.record(&id);
    let report = pass(&c, v2(false));
    c.same(report.confirmed, 1, "operations the pass confirmed");
    c.same(
        report.unusable_intent,
        1,
        "operations whose intent version 2 cannot read",
    );
    c.same(
        received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone(),
        vec![(
            json!({"invoice_id": "INV-50", "amount": {"minor": 5000, "currency": "EUR"}}),
            Some("capture:INV-50".to_owned()),
        )],
        "the requests the provider received",
    );
    let after = c.record(&id);
    c.same(
        after.status,
        S::Confirmed,
        "the recovered operation's status",
    );
    c.same(
        after.contract_version.as_str(),
        "1",
        "the version it was claimed under",
    );
    c.same(
        &after.request_fingerprint,
        &before.request_fingerprint,
        "the fingerprint it was claimed with",
    );
    c.same(
        intent::stored(&c.events(&id)).cloned(),
        Some(json!({"invoice_id": "INV-50", "amount": 5000})),
        "the stored intent, never rewritten",
    );
    c.same(
        c.status(&unreadable),
        S::OutcomeUnknown,
        "the unreadable operation's status",
    );

    // Why the worker cannot read it is recorded once, not once per pass.
    c.same(
        blocked(&c, &unreadable),
        Some((
            event::BLOCKED_INTENT_UNREADABLE.to_owned(),
            "version \"2\"'s migration refuses the intent of version \"1\"".to_owned(),
        )),
        "why the unreadable operation waits",
    );
    let unreadable_events = c.events(&unreadable).len();

    // Version 2 claiming a guarantee version 1 did not: refused by the
    // stored terms, nothing sent, recorded once.
    let weakened = left(&c, "INV-52", json!(5200));
    for _ in 0..2 {
        let report = pass(&c, v2(true));
        c.same(
            report.confirmed,
            0,
            "operations confirmed under weakened terms",
        );
        c.same(
            report.contract_weakened,
            1,
            "operations refused by their stored terms",
        );
        c.same(
            report.unusable_intent,
            1,
            "operations whose intent version 2 cannot read",
        );
    }
    c.same(
        sent(&received),
        1,
        "requests after the weakened version's passes",
    );
    c.same(
        c.status(&weakened),
        S::OutcomeUnknown,
        "the refused operation's status",
    );
    c.same(
        blocked(&c, &weakened).map(|(reason, _)| reason),
        Some(event::BLOCKED_CONTRACT_WEAKENED.to_owned()),
        "why the refused operation waits",
    );
    c.same(
        c.event_types(&weakened)
            .iter()
            .filter(|kind| *kind == event::RECOVERY_BLOCKED)
            .count(),
        1,
        "recovery_blocked events after two passes",
    );
    c.same(
        c.events(&unreadable).len(),
        unreadable_events,
        "events of the unreadable operation after two more passes",
    );
    match waiting(c.ledger.as_ref()) {
        Ok(listed) => {
            let mut got: Vec<(String, WaitingFor, S, bool)> = listed
                .into_iter()
                .map(|w| (w.operation_id, w.waiting_for, w.status, w.reason.is_some()))
                .collect();
            got.sort_by(|a, b| a.0.cmp(&b.0));
            c.same(
                got,
                vec![
                    (
                        unreadable.clone(),
                        WaitingFor::UnreadableIntent,
                        S::OutcomeUnknown,
                        true,
                    ),
                    (
                        weakened.clone(),
                        WaitingFor::ContractWeakened,
                        S::OutcomeUnknown,
                        true,
                    ),
                ],
                "what waiting lists",
            );
        }
        Err(err) => c.fail(format_args!("waiting: {err}")),
    }

    // A version 2 that does not declare version 1: no registered version
    // reads their intent.
    let report = pass(&c, built(&c, capture("2").store_intent(true)));
    c.same(
        report.unusable_intent,
        2,
        "operations no registered version reads",
    );
    c.same(
        report.unregistered,
        0,
        "operations of an unregistered contract",
    );
    c.same(
        sent(&received),
        1,
        "requests after the undeclared version's pass",
    );
    c.same(
        blocked(&c, &weakened),
        Some((
            event::BLOCKED_INTENT_UNREADABLE.to_owned(),
            "no registered version reads the intent of version \"1\"".to_owned(),
        )),
        "why the operation waits now",
    );
}

/// The reason and error of `id`'s last event when it is `recovery_blocked`.
fn blocked(c: &Check, id: &str) -> Option<(String, String)> {
    let last = c.events(id).pop()?;
    (last.event_type == event::RECOVERY_BLOCKED).then(|| {
        let field = |name: &str| last.data[name].as_str().unwrap_or_default().to_owned();
        (field("reason"), field("error"))
    })
}

/// Version 1's arguments (an amount in cents) as version 2's (an amount with
/// its currency); an amount that is not a number is refused.
fn cents_to_money(stored: &Value) -> Result<Value, effect_core::CallbackError> {
    let cents = stored["amount"]
        .as_i64()
        .ok_or("amount is not a number of cents")?;
    Ok(json!({
        "invoice_id": stored["invoice_id"],
        "amount": {"minor": cents, "currency": "EUR"},
    }))
}

fn capture(version: &str) -> EffectContractBuilder {
    EffectContract::builder("capture_payment", |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .version(version)
    .provider_idempotency_key(|args| {
        Ok(Some(format!(
            "capture:{}",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        )))
    })
}

fn built(c: &Check, builder: EffectContractBuilder) -> EffectContract {
    match builder.build() {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    }
}

/// A handler whose request commits, recording what it sent.
fn recording(
    received: &Received,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let received = Arc::clone(received);
    move |args, ctx| {
        let mut received = received.lock().unwrap_or_else(PoisonError::into_inner);
        received.push((args.clone(), ctx.provider_key().map(str::to_owned)));
        Ok(json!({"charge": format!("ch_{}", received.len()), "invoice": args["invoice_id"]}))
    }
}
