//! A handler that came back after its attempt lost its claim: `show` and the
//! console put what it returned beside the status it bears on, and the
//! queue marks the operation; its output only when asked for.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use agent_effect_ops::view::{EventView, OperationDetail};
use effect_core::{Clock, EffectLedger, EffectStatus};
use effect_exec::{EffectExecutor, ExecutorOptions, HandlerContext, HandlerError};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use production_agent_systems::open::LedgerUrl;
use serde_json::{Value, json};

use crate::console::support::Site;
use crate::support::{clock, ops};

const ID: &str = "invoice:INV-55:capture";

/// A capture whose handler stalled past its lease (as a process stopped by
/// SIGSTOP): a worker quarantined it, then the handler returned a charge.
/// The number of requests the handler sent.
fn stalled_then_returned(db: &std::path::Path) -> usize {
    let clock = clock();
    let ledger_clock: Arc<dyn Clock> = clock.clone();
    let ledger: Arc<dyn EffectLedger> = Arc::new(
        SqliteLedger::open(
            db,
            SqliteOptions::default().clock(Arc::clone(&ledger_clock)),
        )
        .unwrap(),
    );
    let options = ExecutorOptions::default()
        .dispatch_lease(Duration::from_secs(30))
        .lease_heartbeat(Duration::from_secs(3600));
    let executor = || {
        EffectExecutor::with_clock(
            Arc::clone(&ledger),
            options.clone(),
            Arc::clone(&ledger_clock),
        )
    };
    let (stalled, worker) = (executor(), executor());
    let contract = effect_test_support::contracts::capture_payment()
        .redact(["/card"])
        .build()
        .unwrap();
    let args = json!({"invoice_id": "INV-55", "card": "4242424242424242"});
    let sent = Arc::new(AtomicUsize::new(0));
    let (started_tx, started) = mpsc::channel::<()>();
    let (resume, resume_rx) = mpsc::channel::<()>();
    let resume_rx = std::sync::Mutex::new(resume_rx);
    let handler = {
        let sent = Arc::clone(&sent);
        move |args: Value, ctx: HandlerContext| -> Result<Value, HandlerError> {
            sent.fetch_add(1, Ordering::SeqCst);
            started_tx.send(()).ok();
            resume_rx.lock().unwrap().recv().ok();
            ctx.record_evidence("provider_charge", "ch_55");
            Ok(json!({"charge": "ch_55", "card": args["card"]}))
        }
    };
    let call = {
        let (contract, args) = (contract.clone(), args.clone());
        std::thread::spawn(move || stalled.execute(&contract, &args, handler))
    };
    started.recv_timeout(Duration::from_secs(60)).unwrap();
    clock.advance(Duration::from_secs(31));
    assert_eq!(
        worker.reconcile(&contract, &args).unwrap().status,
        EffectStatus::Quarantined
    );
    resume.send(()).unwrap();
    assert_eq!(
        call.join().unwrap().unwrap().status,
        EffectStatus::Quarantined
    );
    sent.load(Ordering::SeqCst)
}

#[test]
fn show_prints_a_late_result_beside_the_status_and_its_output_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    assert_eq!(stalled_then_returned(&db), 1, "one request was sent");

    let detail: OperationDetail = ops(&db, &["show", ID]).json();
    assert_eq!(detail.summary.status, EffectStatus::Quarantined);
    let [late] = detail.late_observations.as_slice() else {
        panic!("one late observation: {:?}", detail.late_observations);
    };
    assert_eq!(
        (
            late.attempt,
            late.outcome.as_str(),
            late.status_when_observed.as_deref()
        ),
        (Some(1), "returned", Some("quarantined"))
    );
    assert_eq!(late.returned["evidence"]["provider_charge"], "ch_55");
    assert_eq!(
        late.returned["output"],
        "not shown (agent-effect-ops show --include-output)"
    );
    // The same event in the history, its output withheld there too.
    let events: Vec<EventView> = ops(&db, &["events", ID]).json();
    let event = events
        .iter()
        .find(|e| e.event_type == "late_observation")
        .unwrap();
    assert_eq!(event.sequence, late.sequence);
    assert_eq!(
        event.data["output"],
        "not shown (agent-effect-ops show --include-output)"
    );

    let with_output: OperationDetail = ops(&db, &["show", ID, "--include-output"]).json();
    let output = &with_output.late_observations[0].returned["output"];
    assert_eq!(output["charge"], "ch_55");
    assert_eq!(
        output["card"], "[redacted]",
        "the card is redacted: {output}"
    );

    let table = ops(&db, &["show", ID, "--format", "table"]).stdout;
    let at = table.find("late observations (").expect(&table);
    assert!(table.find("evidence:").unwrap() < at, "{table}");
    assert!(
        table[at..].contains("attempt 1: returned at ")
            && table[at..].contains(", while quarantined:"),
        "{table}"
    );
    let everything = std::fs::read(&db).unwrap();
    assert!(
        !String::from_utf8_lossy(&everything).contains("4242424242424242"),
        "the card is nowhere in the ledger"
    );
}

#[test]
fn the_console_shows_a_late_result_on_the_operation_and_marks_it_in_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("effects.sqlite3");
    assert_eq!(stalled_then_returned(&db), 1);
    let site = Site::new(dir, LedgerUrl::Sqlite(db), "");

    let page = site.get("/operations/invoice%3AINV-55%3Acapture", &[]);
    assert_eq!(page.status, 200, "{}", page.body);
    let late = page
        .body
        .find("id=\"late-observations\"")
        .expect(&page.body);
    // Under the status, before the arguments and the timeline.
    assert!(page.body.find("id=\"status\"").unwrap() < late);
    assert!(late < page.body.find("id=\"arguments\"").unwrap());
    assert!(
        page.body[late..].contains("attempt 1: returned at "),
        "{}",
        page.body
    );
    assert!(
        page.body[late..].contains("ch_55"),
        "its evidence: {}",
        page.body
    );
    assert!(
        !page.body.contains("&quot;charge&quot;") && !page.body.contains("\"charge\""),
        "never its output: {}",
        page.body
    );
    assert!(
        page.body[late..].contains("not shown (agent-effect-ops show --include-output)"),
        "{}",
        page.body
    );

    let queue = site.get("/", &[]);
    let row = queue
        .body
        .find("data-operation=\"invoice:INV-55:capture\"")
        .expect(&queue.body);
    let row = &queue.body[row..queue.body[row..].find("</tr>").unwrap() + row];
    assert!(row.contains("late result ×1"), "{row}");
}
