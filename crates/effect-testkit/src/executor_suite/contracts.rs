//! The executor against the safety terms stored with an operation
//! (docs/spec.md §3.1) and the contract's checks: a running contract that
//! weakens the stored terms is refused, a failed postcondition and a probe
//! conflict are quarantined, a precondition rejects before the first
//! dispatch; each counting what the provider received.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::EffectLedgerExt as _;
use effect_core::{EffectStatus as S, NewOperation, RequestFingerprint};
use effect_exec::{EffectExecutor, ExecError, HandlerContext, HandlerError};
use serde_json::{Value, json};

use effect_conformance::LedgerFactory;
use effect_conformance::harness::{Check, capture_builder, capture_contract};

/// The stored contract (docs/spec.md §3.1) made a check: an operation claimed under a key
/// that is not guaranteed, quarantined after an uncertain dispatch, is
/// neither retried nor replayed by the same name and version claiming the
/// guarantee: the call is refused naming both terms, the provider receives
/// nothing more, and the record stays quarantined. A contract that only
/// strengthens the terms reconciles it under them; an operation stored
/// without terms (the Python package's) is decided as before.
pub fn stored_terms_refuse_a_weakened_contract(factory: LedgerFactory<'_>) {
    let c = Check::new("stored_terms_refuse_a_weakened_contract", factory);
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let sent = Arc::new(AtomicUsize::new(0));
    let args = json!({"invoice_id": "INV-39", "amount": 3900});
    let id = "invoice:INV-39:capture";
    let first = match executor.execute(&capture_contract(false), &args, failing(&sent)) {
        Ok(result) => result,
        Err(err) => c.fail(format_args!("the first call: {err}")),
    };
    c.same(first.status, S::Quarantined, "the first call's status");
    c.same(
        sent.load(Ordering::SeqCst),
        1,
        "requests after the first call",
    );
    let before = c.snapshot(id);
    let flipped = capture_contract(true);
    match executor.execute(&flipped, &args, committing(&sent)) {
        Err(ExecError::ContractWeakened { weakenings, .. }) => c.same(
            weakenings.iter().map(|w| w.term).collect::<Vec<_>>(),
            vec!["provider_idempotency_guaranteed"],
            "the weakened terms",
        ),
        other => c.fail(format_args!(
            "a call claiming the guarantee must be refused, got {other:?}"
        )),
    }
    match executor.reconcile(&flipped, &args) {
        Err(ExecError::ContractWeakened { .. }) => {}
        other => c.fail(format_args!(
            "a reconciliation claiming the guarantee must be refused, got {other:?}"
        )),
    }
    c.same(
        sent.load(Ordering::SeqCst),
        1,
        "requests after the refusals",
    );
    c.unchanged(id, &before, "a refused call");
    // Only stronger: a settle time the stored terms do not have.
    let stricter = match capture_builder(false)
        .settle(std::time::Duration::from_secs(60))
        .build()
    {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    match executor.execute(&stricter, &args, committing(&sent)) {
        Ok(result) => c.same(result.status, S::Quarantined, "a stricter call's status"),
        Err(err) => c.fail(format_args!("a stricter contract is allowed: {err}")),
    }
    c.same(
        sent.load(Ordering::SeqCst),
        1,
        "requests after a stricter call",
    );
    c.same(
        c.status(id),
        S::Quarantined,
        "the status left for an operator",
    );

    // A confirmed operation is not replayed under weakened terms either.
    let other = json!({"invoice_id": "INV-40", "amount": 4000});
    match executor.execute(&capture_contract(false), &other, committing(&sent)) {
        Ok(result) => c.same(result.status, S::Confirmed, "a confirmed capture"),
        Err(err) => c.fail(format_args!("a confirmed capture: {err}")),
    }
    c.same(sent.load(Ordering::SeqCst), 2, "requests after the capture");
    match executor.execute(&flipped, &other, committing(&sent)) {
        Err(ExecError::ContractWeakened { .. }) => {}
        other => c.fail(format_args!(
            "a replay under weakened terms must be refused, got {other:?}"
        )),
    }

    // Stored without terms, as the Python package writes: the running
    // contract decides, as before the terms were stored.
    let legacy = json!({"invoice_id": "INV-41", "amount": 4100});
    let op = NewOperation::new(
        "capture_payment",
        "1",
        RequestFingerprint::of_value(&legacy),
    )
    .with_provider_idempotency_key(Some("capture:INV-41".into()));
    c.ok(c.ledger.prepare("invoice:INV-41:capture", &op), "prepare");
    match executor.execute(&flipped, &legacy, committing(&sent)) {
        Ok(result) => c.same(result.status, S::Confirmed, "a call on a legacy record"),
        Err(err) => c.fail(format_args!("a record without terms: {err}")),
    }
    c.same(
        sent.load(Ordering::SeqCst),
        3,
        "requests after the legacy call",
    );
}

/// One rule for a failed postcondition (docs/spec.md §6): under a
/// guaranteed key and no probe, three calls of an operation whose output
/// fails it send one request, and each answers `quarantined`; an operator's
/// authorized retry dispatches it again.
pub fn failed_postcondition_is_quarantined_once(factory: LedgerFactory<'_>) {
    let c = Check::new("failed_postcondition_is_quarantined_once", factory);
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let contract = match capture_builder(true)
        .postcondition(|args, output| Ok(output["invoice"] == args["invoice_id"]))
        .unknown_outcome(effect_core::UnknownOutcomePolicy::KeepUnknown)
        .build()
    {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    let sent = Arc::new(AtomicUsize::new(0));
    let wrong = {
        let sent = Arc::clone(&sent);
        move |_: Value, _: HandlerContext| -> Result<Value, HandlerError> {
            sent.fetch_add(1, Ordering::SeqCst);
            Ok(json!({"invoice": "someone else's"}))
        }
    };
    let args = json!({"invoice_id": "INV-7", "amount": 700});
    let id = "invoice:INV-7:capture";
    for call in 1..=3 {
        match executor.execute(&contract, &args, wrong.clone()) {
            Ok(result) => c.same(
                (result.status, result.attempts),
                (S::Quarantined, 1),
                format_args!("call {call}'s status and attempts"),
            ),
            Err(err) => c.fail(format_args!("call {call}: {err}")),
        }
        c.same(
            sent.load(Ordering::SeqCst),
            1,
            format_args!("requests after call {call}"),
        );
    }
    match executor.reconcile(&contract, &args) {
        Ok(result) => c.same(result.status, S::Quarantined, "a reconciliation"),
        Err(err) => c.fail(format_args!("a reconciliation: {err}")),
    }
    c.same(
        c.record(id).evidence.get("postcondition"),
        Some(&json!("failed")),
        "the evidence",
    );
    let audit = effect_exec::Audit {
        actor: "operator@example.com".into(),
        reason: "the provider fixed the record".into(),
        evidence_reference: "TICKET-7".into(),
    };
    if let Err(err) = executor.operator().authorize_retry(id, audit) {
        c.fail(format_args!("an operator's retry: {err}"));
    }
    match executor.execute(&contract, &args, wrong) {
        Ok(result) => c.same(result.status, S::Quarantined, "the retried call"),
        Err(err) => c.fail(format_args!("the retried call: {err}")),
    }
    c.same(sent.load(Ordering::SeqCst), 2, "requests after the retry");
}

/// A probe that finds a conflicting effect (docs/spec.md §6): under a
/// guaranteed key, three calls after a lost acknowledgement and a
/// reconciliation send one request and ask the probe once; each answers
/// `quarantined` with the probe's evidence, never confirmed or retried.
pub fn probe_conflict_is_quarantined(factory: LedgerFactory<'_>) {
    let c = Check::new("probe_conflict_is_quarantined", factory);
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let probes = Arc::new(AtomicUsize::new(0));
    let asked = Arc::clone(&probes);
    let contract = match capture_builder(true)
        .outcome_probe(move |args, _key| {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(effect_core::OutcomeProbeResult::conflict().evidence(
                "held",
                json!({"invoice_id": args["invoice_id"], "amount": 1}),
            ))
        })
        .build()
    {
        Ok(contract) => contract,
        Err(err) => c.fail(format_args!("building the contract: {err}")),
    };
    let sent = Arc::new(AtomicUsize::new(0));
    let args = json!({"invoice_id": "INV-9", "amount": 900});
    for call in 1..=3 {
        match executor.execute(&contract, &args, failing(&sent)) {
            Ok(result) => {
                c.same(
                    (result.status, result.attempts),
                    (S::Quarantined, 1),
                    format_args!("call {call}'s status and attempts"),
                );
                c.same(
                    result.evidence.get("probe_status"),
                    Some(&json!("conflict")),
                    format_args!("call {call}'s evidence"),
                );
            }
            Err(err) => c.fail(format_args!("call {call}: {err}")),
        }
    }
    match executor.reconcile(&contract, &args) {
        Ok(result) => c.same(result.status, S::Quarantined, "a reconciliation"),
        Err(err) => c.fail(format_args!("a reconciliation: {err}")),
    }
    c.same(sent.load(Ordering::SeqCst), 1, "requests after three calls");
    c.same(
        probes.load(Ordering::SeqCst),
        1,
        "probes after three calls and a reconciliation",
    );
}

/// A precondition (docs/spec.md §5) is asked before the first dispatch and
/// again once an approval lets the operation go: refusing, it rejects the
/// operation with its reason and the provider receives nothing.
pub fn precondition_rejects_before_the_first_dispatch(factory: LedgerFactory<'_>) {
    let c = Check::new("precondition_rejects_before_the_first_dispatch", factory);
    let executor = EffectExecutor::new(Arc::clone(&c.ledger));
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let contract = |approval: bool| {
        let open = Arc::clone(&open);
        match capture_builder(false)
            .requires_approval(approval)
            .precondition(move |args| {
                Ok((!open.load(Ordering::SeqCst)).then(|| {
                    format!(
                        "invoice {} is paid already",
                        args["invoice_id"].as_str().unwrap_or("")
                    )
                }))
            })
            .build()
        {
            Ok(contract) => contract,
            Err(err) => c.fail(format_args!("building the contract: {err}")),
        }
    };
    let sent = Arc::new(AtomicUsize::new(0));
    let paid = json!({"invoice_id": "INV-P", "amount": 100});
    match executor.execute(&contract(false), &paid, committing(&sent)) {
        Ok(result) => {
            c.same(result.status, S::Rejected, "a refused call's status");
            c.ensure(
                result
                    .error
                    .as_deref()
                    .is_some_and(|e| e.contains("INV-P is paid already")),
                format_args!("the reason is the error: {:?}", result.error),
            );
        }
        Err(err) => c.fail(format_args!("a refused call: {err}")),
    }
    c.same(
        c.event_types("invoice:INV-P:capture"),
        vec!["prepared".to_owned(), "precondition_failed".to_owned()],
        "a refused call's events",
    );
    c.ensure(
        c.last_event("invoice:INV-P:capture").data["error"]
            .as_str()
            .is_some_and(|e| e.contains("INV-P is paid already")),
        "the precondition_failed event holds the reason",
    );
    open.store(true, Ordering::SeqCst);
    let due = json!({"invoice_id": "INV-Q", "amount": 100});
    match executor.execute(&contract(false), &due, committing(&sent)) {
        Ok(result) => c.same(result.status, S::Confirmed, "a call that passes"),
        Err(err) => c.fail(format_args!("a call that passes: {err}")),
    }
    c.same(sent.load(Ordering::SeqCst), 1, "requests after two calls");

    // Asked again once an approval lets it go: paid meanwhile, rejected.
    let approved = json!({"invoice_id": "INV-R", "amount": 100});
    match executor.execute(&contract(true), &approved, committing(&sent)) {
        Ok(result) => c.same(result.status, S::AwaitingApproval, "a call waiting"),
        Err(err) => c.fail(format_args!("a call waiting: {err}")),
    }
    open.store(false, Ordering::SeqCst);
    let id = "invoice:INV-R:capture";
    let approval = effect_core::Approval {
        request_fingerprint: c.record(id).request_fingerprint,
        actor: "approver@example.com".into(),
        reason: "ok".into(),
        expires_at: effect_core::Clock::now(&effect_core::SystemClock)
            + std::time::Duration::from_secs(3600),
    };
    if let Err(err) = executor.operator().approve(id, approval) {
        c.fail(format_args!("approving: {err}"));
    }
    match executor.execute(&contract(true), &approved, committing(&sent)) {
        Ok(result) => c.same(result.status, S::Rejected, "the approved call"),
        Err(err) => c.fail(format_args!("the approved call: {err}")),
    }
    c.same(
        sent.load(Ordering::SeqCst),
        1,
        "requests after the approved call",
    );
}

/// A handler whose request leaves and whose answer is lost.
fn failing(
    sent: &Arc<AtomicUsize>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let sent = Arc::clone(sent);
    move |_, _| {
        sent.fetch_add(1, Ordering::SeqCst);
        Err(HandlerError::unknown("connection reset after the request"))
    }
}

/// A handler whose request commits.
fn committing(
    sent: &Arc<AtomicUsize>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let sent = Arc::clone(sent);
    move |args, _| {
        let n = sent.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"charge": format!("ch_{n}"), "invoice": args["invoice_id"]}))
    }
}
