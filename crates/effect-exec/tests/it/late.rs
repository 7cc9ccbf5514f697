//! Late outcomes are kept (docs/spec.md §4): a handler stalled past its
//! lease (as a process stopped by SIGSTOP, heartbeat included) returns after
//! another caller expired its lease and quarantined the operation; what it
//! returned is appended as a `late_observation` event, redacted like
//! everything else, and the status stays the decision that was made.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use effect_core::{Clock, EffectLedger, EffectStatus, ManualClock, MemoryLedger};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use serde_json::{Value, json};

#[test]
fn a_handler_that_returns_after_losing_its_lease_leaves_a_late_observation() {
    let clock = Arc::new(ManualClock::new(
        std::time::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let ledger_clock: Arc<dyn Clock> = clock.clone();
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(MemoryLedger::with_clock(Arc::clone(&ledger_clock)));
    // The heartbeat never fires during the test: the stalled process renews nothing.
    let options = ExecutorOptions::default()
        .dispatch_lease(Duration::from_secs(30))
        .lease_heartbeat(Duration::from_secs(3600));
    let stalled = EffectExecutor::with_clock(
        Arc::clone(&ledger),
        options.clone(),
        Arc::clone(&ledger_clock),
    );
    let worker =
        EffectExecutor::with_clock(Arc::clone(&ledger), options, Arc::clone(&ledger_clock));
    let contract = effect_test_support::contracts::capture_payment()
        .redact(["/card"])
        .build()
        .unwrap();
    let args = json!({"invoice_id": "INV-55", "amount": 5500, "card": "4242424242424242"});
    let id = "invoice:INV-55:capture";

    let sent = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = mpsc::channel::<()>();
    let (resume, resume_rx) = mpsc::channel::<()>();
    let resume_rx = std::sync::Mutex::new(resume_rx);
    let handler = {
        let sent = Arc::clone(&sent);
        move |args: Value, _ctx: HandlerContext| -> Result<Value, HandlerError> {
            sent.fetch_add(1, Ordering::SeqCst);
            started_tx.send(()).ok();
            // Stopped until the test resumes it.
            resume_rx.lock().unwrap().recv().ok();
            Ok(json!({"charge": "ch_55", "card": args["card"]}))
        }
    };
    let call = {
        let contract = contract.clone();
        let args = args.clone();
        std::thread::spawn(move || stalled.execute(&contract, &args, handler))
    };
    started
        .recv_timeout(Duration::from_secs(30))
        .expect("the handler started");
    // The lease runs out; a worker expires it and decides: no probe and no
    // guarantee, so the operation is quarantined for an operator.
    clock.advance(Duration::from_secs(31));
    let decided = worker.reconcile(&contract, &args).unwrap();
    assert_eq!(decided.status, EffectStatus::Quarantined);
    let before = ledger.get(id).unwrap().unwrap();

    resume.send(()).unwrap();
    let answer = call.join().unwrap().unwrap();
    assert_eq!(
        answer.status,
        EffectStatus::Quarantined,
        "the record's answer"
    );
    assert_eq!(
        sent.load(Ordering::SeqCst),
        1,
        "one request reached the provider"
    );

    let after = ledger.get(id).unwrap().unwrap();
    assert_eq!(
        after, before,
        "the late result changes nothing of the record"
    );
    let events = ledger.events(id).unwrap();
    let late = events.last().unwrap();
    assert_eq!(late.event_type, "late_observation");
    assert_eq!(late.data["outcome"], "returned");
    assert_eq!(late.data["attempt"], 1);
    assert_eq!(late.data["status_when_observed"], "quarantined");
    assert_eq!(late.data["output"]["charge"], "ch_55");
    let stored = serde_json::to_string(&events).unwrap();
    assert!(
        !stored.contains("4242424242424242"),
        "the card is redacted: {stored}"
    );
    // A later call replays the decision and sends nothing.
    let again = worker
        .execute(
            &contract,
            &args,
            |_: Value, _| -> Result<Value, HandlerError> {
                panic!("a quarantined operation is never dispatched again")
            },
        )
        .unwrap();
    assert_eq!(again.status, EffectStatus::Quarantined);
    assert_eq!(sent.load(Ordering::SeqCst), 1);
}
