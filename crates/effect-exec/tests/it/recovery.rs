//! The recovery worker: operations whose caller is gone are dispatched from
//! their stored intent, once, under the same rules as a live call; the rest
//! are counted and left alone.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, SystemTime};

use effect_core::secret::Secret;
use effect_core::{
    Claim, Clock, EffectContract, EffectLedger, EffectLedgerExt, EffectStatus, MemoryLedger,
    NewOperation, RequestFingerprint,
};
use effect_exec::secrets::{FingerprintKey, Keyring, SealingKey};
use effect_exec::{
    Audit, CallOptions, EffectExecutor, ExecError, HandlerContext, HandlerError, RecoveryReport,
    RecoveryWorker, TypedContract, WaitingFor, waiting,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::provider::{FakeProvider, Fault, ProbeAnswer, handler, invoice};
use crate::world::{World, memory, worlds};

const LEASE: Duration = Duration::from_secs(30);

impl World {
    /// The capture contract of the fake provider, with a probe and a key
    /// that is not guaranteed.
    fn capture(&self, store_intent: bool) -> EffectContract {
        let provider = Arc::clone(&self.provider);
        effect_test_support::contracts::capture_payment()
            .outcome_probe(move |_args, key| provider.probe(key))
            .store_intent(store_intent)
            .build()
            .unwrap()
    }

    /// The caller's dispatch fails before anything is sent, every time it
    /// tries, and the caller goes away: the operation is left uncertain, its
    /// evidence saying nothing was sent. Returns its id and how many times
    /// the caller's handler ran.
    fn left_by_not_sent(&self, contract: &EffectContract, args: &Value) -> (String, usize) {
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let result = self
            .executor()
            .execute(contract, args, move |_args: Value, _ctx| {
                counted.fetch_add(1, Ordering::SeqCst);
                Err::<Value, _>(HandlerError::not_sent("the agent stopped before sending"))
            })
            .unwrap();
        assert_eq!(
            result.status,
            EffectStatus::OutcomeUnknown,
            "{}",
            self.store
        );
        assert_eq!(
            result.evidence["dispatch_interruption"], "not_sent",
            "{}: {result:?}",
            self.store
        );
        (result.operation_id, calls.load(Ordering::SeqCst))
    }

    /// As [`left_by_not_sent`](Self::left_by_not_sent), then an operator
    /// authorizes a retry (`agent-effect-ops authorize-retry`): the operation
    /// is `prepared`, and its caller is gone.
    fn left_prepared(&self, contract: &EffectContract, args: &Value) -> String {
        let (id, _) = self.left_by_not_sent(contract, args);
        let audit = Audit::new("operator", "nothing was sent", "ticket-1");
        let record = self
            .executor()
            .operator()
            .authorize_retry(&id, audit)
            .unwrap();
        assert_eq!(record.status, EffectStatus::Prepared, "{}", self.store);
        id
    }

    /// A caller claims the dispatch of `args` and dies after its request
    /// reached the provider (when `sent`).
    fn abandoned(&self, contract: &EffectContract, args: &Value, sent: bool) -> String {
        let id = contract.operation_id(args).unwrap();
        let key = contract.provider_idempotency_key(args).unwrap();
        let op = NewOperation::new(
            contract.name().to_owned(),
            contract.version().to_owned(),
            RequestFingerprint::of_value(args),
        )
        .with_provider_idempotency_key(key.clone())
        .with_intent(Some(args.clone()));
        self.ledger.prepare(&id, &op).unwrap();
        let claim = Claim::new(format!("dead-caller-{id}"), LEASE);
        assert!(self.ledger.claim_dispatch(&id, &claim).unwrap());
        if sent {
            let context = HandlerContext::new(&id, contract.name(), contract.version(), 1, key);
            handler(&self.provider)(args.clone(), context).unwrap();
        }
        id
    }
}

/// The capture contract's shape under another name (a second contract
/// beside the capture in one ledger).
fn capture_contract(
    provider: &Arc<FakeProvider>,
    name: &str,
    store_intent: bool,
) -> EffectContract {
    let provider = Arc::clone(provider);
    EffectContract::builder(name, |args| {
        Ok(format!(
            "invoice:{}:capture",
            args["invoice_id"].as_str().ok_or("missing invoice_id")?
        ))
    })
    .provider_idempotency_key(|args| {
        Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
    })
    .outcome_probe(move |_args, key| provider.probe(key))
    .store_intent(store_intent)
    .build()
    .unwrap()
}

/// The report's counters, in a fixed order, for one assertion.
fn counts(report: &RecoveryReport) -> [(&'static str, u64); 10] {
    [
        ("examined", report.examined),
        ("confirmed", report.confirmed),
        ("rejected", report.rejected),
        ("quarantined", report.quarantined),
        ("unsettled", report.unsettled),
        ("waiting_for_caller", report.waiting_for_caller),
        ("unregistered", report.unregistered),
        ("too_recent", report.too_recent),
        ("unusable_intent", report.unusable_intent),
        ("failed", report.failed),
    ]
}

/// Asserts the non-zero counters of `report`; every other one is zero.
fn check(store: &str, report: &RecoveryReport, expected: &[(&str, u64)]) {
    let got: Vec<(&str, u64)> = counts(report)
        .into_iter()
        .filter(|(_, n)| *n != 0)
        .collect();
    assert_eq!(got, expected, "{store}: {report:?}");
}

#[test]
fn a_spawned_worker_pauses_through_the_executor_s_sleeper_until_stopped() {
    let w = memory();
    let every = Duration::from_secs(3600);
    let start = w.clock.now();
    // The manual clock is the executor's sleeper: a pause moves it by
    // `every` at once, so two pauses have passed once it stands two on.
    let handle = w.worker(&w.capture(true)).spawn(every);
    while w.clock.now() < start + 2 * every {
        std::thread::yield_now();
    }
    check_paused(&w, start, every, &handle.stop());
}

/// At least two passes over an empty ledger, each but perhaps the last (the
/// stop came first) followed by a pause of `every` on the manual clock.
fn check_paused(w: &World, start: SystemTime, every: Duration, reports: &[RecoveryReport]) {
    let passes = u32::try_from(reports.len()).unwrap();
    let paused = w.clock.now().duration_since(start).unwrap();
    assert!(passes >= 2, "{reports:?}");
    assert!(
        paused == every * passes || paused == every * (passes - 1),
        "{passes} passes, {paused:?} paused"
    );
    assert!(reports.iter().all(|r| r.examined == 0), "{reports:?}");
    assert_eq!(w.provider.handler_calls(), 0);
}

/// Under tokio the worker pauses through the executor's sleeper too (not
/// tokio's timer: an hour would fail the test), and the shutdown ends it.
#[cfg(feature = "tokio")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_worker_pauses_through_the_executor_s_sleeper_until_shut_down() {
    let w = memory();
    let every = Duration::from_secs(3600);
    let start = w.clock.now();
    let clock = Arc::clone(&w.clock);
    let shutdown = async move {
        while clock.now() < start + 2 * every {
            tokio::task::yield_now().await;
        }
    };
    // A bound on a failure only: the pauses are the manual clock's.
    let reports = tokio::time::timeout(
        Duration::from_secs(120),
        w.worker(&w.capture(true)).run_async(every, shutdown),
    )
    .await
    .expect("the worker paused on tokio's timer, not on the executor's sleeper");
    check_paused(&w, start, every, &reports);
}

#[test]
fn a_retry_authorized_after_not_sent_is_dispatched_once_by_the_worker() {
    for w in worlds() {
        let capture = w.capture(true);
        let id = w.left_prepared(&capture, &invoice("INV-1"));
        assert_eq!(w.provider.committed(), 0, "{}", w.store);
        let worker = w.worker(&capture);

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        let record = w.ledger.get(&id).unwrap().unwrap();
        assert_eq!(record.status, EffectStatus::Confirmed, "{}", w.store);
        assert_eq!(
            record.output.unwrap()["invoice_id"],
            "INV-1",
            "{}: the stored intent reached the handler",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}",
            w.store
        );

        // A second pass has nothing left to do.
        check(w.store, &worker.run_once().unwrap(), &[]);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
    }
}

#[test]
fn an_operation_left_uncertain_by_not_sent_is_dispatched_once_by_the_worker() {
    for w in worlds() {
        let capture = w.capture(true);
        let (id, caller_calls) = w.left_by_not_sent(&capture, &invoice("INV-1"));
        assert!(caller_calls >= 1, "{}", w.store);
        let worker = w.worker(&capture);

        // Not sent, and the probe agrees: a retry is safe, dispatched once.
        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        assert_eq!(w.status(&id), EffectStatus::Confirmed, "{}", w.store);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}",
            w.store
        );
        check(w.store, &worker.run_once().unwrap(), &[]);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
    }
}

/// A call whose two dispatches both fail before anything is sent (a
/// contract with neither probe nor key): nothing can have committed, so the
/// operation is not quarantined; it stays `outcome_unknown` with the
/// evidence, and the next call dispatches it, once.
#[test]
fn two_dispatches_not_sent_are_left_to_the_next_call_not_quarantined() {
    for w in worlds() {
        let contract = EffectContract::builder("send_receipt", |args| {
            Ok(format!(
                "receipt:{}",
                args["invoice_id"].as_str().ok_or("missing invoice_id")?
            ))
        })
        .build()
        .unwrap();
        let (id, caller_calls) = w.left_by_not_sent(&contract, &invoice("INV-7"));
        assert_eq!(
            caller_calls, 2,
            "{}: the first not-sent authorized a retry",
            w.store
        );
        let record = w.ledger.get(&id).unwrap().unwrap();
        assert_eq!(
            (record.status, record.attempts),
            (EffectStatus::OutcomeUnknown, 2),
            "{}",
            w.store
        );
        let error = record.error.unwrap_or_default();
        assert!(
            error.contains("a resend is pending"),
            "{}: {error}",
            w.store
        );
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&sent);
        let result = w
            .executor()
            .execute(&contract, &invoice("INV-7"), move |_args: Value, _ctx| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok::<_, HandlerError>(json!({"sent": true}))
            })
            .unwrap();
        assert_eq!(
            result.status,
            EffectStatus::Confirmed,
            "{}: {result:?}",
            w.store
        );
        assert_eq!(sent.load(Ordering::SeqCst), 1, "{}", w.store);
        assert_eq!(
            w.ledger.get(&id).unwrap().unwrap().attempts,
            3,
            "{}",
            w.store
        );
    }
}

#[test]
fn an_operation_without_stored_intent_waits_for_its_caller() {
    for w in worlds() {
        // An earlier deployment of the same contract stored no intent.
        let old = w.capture(false);
        let id = w.left_prepared(&old, &invoice("INV-1"));
        let worker = w.worker(&w.capture(true));

        for _ in 0..2 {
            let report = worker.run_once().unwrap();
            check(
                w.store,
                &report,
                &[("examined", 1), ("waiting_for_caller", 1)],
            );
        }
        assert_eq!(w.status(&id), EffectStatus::Prepared, "{}", w.store);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (0, 0),
            "{}",
            w.store
        );

        // Its caller, coming back, finishes it.
        let result = w
            .executor()
            .execute(&old, &invoice("INV-1"), handler(&w.provider))
            .unwrap();
        assert!(result.is_confirmed(), "{}", w.store);
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
    }
}

#[test]
fn an_operation_of_an_unregistered_contract_is_left_alone() {
    for w in worlds() {
        let capture = w.capture(true);
        let id = w.left_prepared(&capture, &invoice("INV-1"));
        let refunds = capture_contract(&w.provider, "refund_payment", true);
        let worker = w.worker(&refunds);

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("unregistered", 1)]);
        assert_eq!(w.status(&id), EffectStatus::Prepared, "{}", w.store);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (0, 0),
            "{}",
            w.store
        );
    }
}

#[test]
fn min_age_leaves_a_fresh_prepared_operation_to_its_caller() {
    for w in worlds() {
        let capture = w.capture(true);
        let id = w.left_prepared(&capture, &invoice("INV-1"));
        let worker = w.worker(&capture).min_age(Duration::from_secs(60));

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("too_recent", 1)]);
        w.clock.advance(Duration::from_secs(59));
        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("too_recent", 1)]);
        assert_eq!(w.status(&id), EffectStatus::Prepared, "{}", w.store);
        assert_eq!(w.provider.handler_calls(), 0, "{}", w.store);

        w.clock.advance(Duration::from_secs(2));
        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}",
            w.store
        );
    }
}

#[test]
fn stored_intent_deriving_another_operation_is_not_dispatched() {
    for w in worlds() {
        let capture = w.capture(true);
        // The operation of INV-1 holds the arguments of INV-2, as a writer
        // with a bug (or a hand-edited file) might leave it.
        let id = capture.operation_id(&invoice("INV-1")).unwrap();
        let op = NewOperation::new(
            capture.name().to_owned(),
            capture.version().to_owned(),
            RequestFingerprint::of_value(&invoice("INV-1")),
        )
        .with_provider_idempotency_key(Some("capture:INV-1".to_owned()))
        .with_intent(Some(invoice("INV-2")));
        w.ledger.prepare(&id, &op).unwrap();
        let worker = w.worker(&capture);

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("unusable_intent", 1)]);
        assert_eq!(w.status(&id), EffectStatus::Prepared, "{}", w.store);
        let other = capture.operation_id(&invoice("INV-2")).unwrap();
        assert!(w.ledger.get(&other).unwrap().is_none(), "{}", w.store);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (0, 0),
            "{}",
            w.store
        );
    }
}

#[test]
fn stored_intent_with_another_fingerprint_is_not_dispatched() {
    let w = memory();
    let capture = w.capture(true);
    // Same operation id, but the amount differs from what was fingerprinted.
    let id = capture.operation_id(&invoice("INV-1")).unwrap();
    let op = NewOperation::new(
        capture.name().to_owned(),
        capture.version().to_owned(),
        RequestFingerprint::of_value(&invoice("INV-1")),
    )
    .with_provider_idempotency_key(Some("capture:INV-1".to_owned()))
    .with_intent(Some(
        json!({"invoice_id": "INV-1", "amount_cents": 999_999}),
    ));
    w.ledger.prepare(&id, &op).unwrap();

    let report = w.worker(&capture).run_once().unwrap();
    check(w.store, &report, &[("examined", 1), ("unusable_intent", 1)]);
    assert_eq!(w.status(&id), EffectStatus::Prepared);
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (0, 0));
}

/// The worker derives a recovered operation's identity once and executes
/// under it: the contract's operation-id callback runs once per operation
/// the pass dispatches, not once to check the stored intent and again to
/// execute it.
#[test]
fn the_worker_derives_each_recovered_operation_s_identity_once() {
    for w in worlds() {
        let derived = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&derived);
        let provider = Arc::clone(&w.provider);
        // Hand-built: the shared contract's identity function counts nothing.
        let capture = EffectContract::builder("capture_payment", move |args| {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(format!(
                "invoice:{}:capture",
                args["invoice_id"].as_str().ok_or("missing invoice_id")?
            ))
        })
        .provider_idempotency_key(|args| {
            Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
        })
        .outcome_probe(move |_args, key| provider.probe(key))
        .store_intent(true)
        .build()
        .unwrap();
        for invoice_id in ["INV-1", "INV-2", "INV-3"] {
            w.left_prepared(&capture, &invoice(invoice_id));
        }
        let before = derived.load(Ordering::SeqCst);

        let report = w.worker(&capture).run_once().unwrap();
        check(w.store, &report, &[("examined", 3), ("confirmed", 3)]);
        assert_eq!(
            derived.load(Ordering::SeqCst) - before,
            3,
            "{}: operation-id derivations for three recovered operations",
            w.store
        );
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (3, 3),
            "{}",
            w.store
        );
    }
}

/// A typed version 2 declares how it reads version 1's typed intent; with
/// only version 2's handler registered, the worker dispatches version 1's
/// operation once, its handler receiving the migrated arguments, and the
/// record keeps the version and fingerprint it was claimed with.
#[test]
fn a_typed_version_reads_the_intent_an_earlier_version_stored() {
    #[derive(Serialize, Deserialize)]
    struct CaptureV1 {
        invoice_id: String,
        cents: u64,
    }
    #[derive(Serialize, Deserialize)]
    struct CaptureV2 {
        invoice_id: String,
        amount: Money,
    }
    #[derive(Serialize, Deserialize)]
    struct Money {
        minor: u64,
        currency: String,
    }
    for w in worlds() {
        let v1 = TypedContract::<CaptureV1, Value>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .store_intent(true)
        .build()
        .unwrap();
        let v2 = TypedContract::<CaptureV2, Value>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .version("2")
        .store_intent(true)
        .reads_intent_of(&v1, |old: CaptureV1| {
            Ok(CaptureV2 {
                invoice_id: old.invoice_id,
                amount: Money {
                    minor: old.cents,
                    currency: "EUR".into(),
                },
            })
        })
        .build()
        .unwrap();
        let args = CaptureV1 {
            invoice_id: "INV-7".into(),
            cents: 700,
        };
        let left = w
            .executor()
            .execute_typed(&v1, &args, |_: CaptureV1, _| {
                Err::<Value, _>(HandlerError::not_sent("the agent stopped before sending"))
            })
            .unwrap();
        let before = w.ledger.get(&left.operation_id).unwrap().unwrap();
        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&received);
        let worker = RecoveryWorker::new(w.executor())
            .register_typed(&v2, move |args: CaptureV2, _ctx| {
                seen.lock().unwrap().push((
                    args.invoice_id.clone(),
                    args.amount.minor,
                    args.amount.currency,
                ));
                Ok::<_, HandlerError>(json!({"captured": args.invoice_id}))
            })
            .unwrap()
            .min_age(Duration::ZERO);

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        assert_eq!(
            *received.lock().unwrap(),
            [("INV-7".to_owned(), 700, "EUR".to_owned())],
            "{}",
            w.store
        );
        let after = w.ledger.get(&left.operation_id).unwrap().unwrap();
        assert_eq!(
            (after.status, after.contract_version.as_str()),
            (EffectStatus::Confirmed, "1"),
            "{}",
            w.store
        );
        assert_eq!(
            after.request_fingerprint, before.request_fingerprint,
            "{}",
            w.store
        );
        check(w.store, &worker.run_once().unwrap(), &[]);
        assert_eq!(received.lock().unwrap().len(), 1, "{}", w.store);
    }
}

/// Version 1's arguments held a `Secret` card token: its intent is stored
/// sealed, and its request fingerprint holds a keyed digest of the token.
/// A worker with only version 2 registered opens the intent with the
/// executor's keyring, checks it under version 1's derivation with the
/// token marked as a secret, and sends one request with the migrated
/// arguments; the token is nowhere in the ledger in clear.
#[test]
fn a_typed_version_reads_sealed_intent_whose_earlier_arguments_held_secrets() {
    #[derive(Serialize, Deserialize)]
    struct CaptureV1 {
        invoice_id: String,
        cents: u64,
        card_token: Secret<String>,
    }
    #[derive(Serialize, Deserialize)]
    struct CaptureV2 {
        invoice_id: String,
        minor: u64,
        currency: String,
        card_token: Secret<String>,
    }
    const TOKEN: &str = "tok_live_4242424242";
    for w in worlds() {
        let executor = || {
            w.executor()
                .with_keyring(Keyring::new("k1", SealingKey::from_bytes([3; 32])).unwrap())
                .with_fingerprint_key(FingerprintKey::from_bytes([7; 32]))
        };
        let v1 = TypedContract::<CaptureV1, Value>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .store_intent(true)
        .build()
        .unwrap();
        let v2 = TypedContract::<CaptureV2, Value>::builder("capture_payment", |args| {
            Ok(format!("invoice:{}:capture", args.invoice_id))
        })
        .version("2")
        .store_intent(true)
        .reads_intent_of(&v1, |old: CaptureV1| {
            Ok(CaptureV2 {
                invoice_id: old.invoice_id,
                minor: old.cents,
                currency: "EUR".into(),
                card_token: old.card_token,
            })
        })
        .build()
        .unwrap();
        let args = CaptureV1 {
            invoice_id: "INV-8".into(),
            cents: 800,
            card_token: Secret::new(TOKEN.to_owned()),
        };
        let left = executor()
            .execute_typed(&v1, &args, |_: CaptureV1, _| {
                Err::<Value, _>(HandlerError::not_sent("the agent stopped before sending"))
            })
            .unwrap();
        let id = left.operation_id.clone();
        let before = w.ledger.get(&id).unwrap().unwrap();
        let stored = effect_core::intent::stored(&w.ledger.events(&id).unwrap())
            .cloned()
            .unwrap();
        assert!(
            effect_exec::secrets::sealed_info(&stored).is_some(),
            "{}: the intent is sealed",
            w.store
        );

        let received = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&received);
        let worker = RecoveryWorker::new(executor())
            .register_typed(&v2, move |args: CaptureV2, _ctx| {
                seen.lock().unwrap().push((
                    args.invoice_id.clone(),
                    args.minor,
                    args.currency,
                    args.card_token.expose().clone(),
                ));
                Ok::<_, HandlerError>(json!({"captured": args.invoice_id}))
            })
            .unwrap()
            .min_age(Duration::ZERO);
        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        assert_eq!(
            *received.lock().unwrap(),
            [("INV-8".to_owned(), 800, "EUR".to_owned(), TOKEN.to_owned())],
            "{}",
            w.store
        );
        let after = w.ledger.get(&id).unwrap().unwrap();
        assert_eq!(
            (after.status, after.contract_version.as_str()),
            (EffectStatus::Confirmed, "1"),
            "{}",
            w.store
        );
        assert_eq!(
            after.request_fingerprint, before.request_fingerprint,
            "{}",
            w.store
        );
        let events = w.ledger.events(&id).unwrap();
        assert!(
            !events
                .iter()
                .any(|event| event.event_type == effect_core::event::RECOVERY_BLOCKED),
            "{}",
            w.store
        );
        let written = format!("{after:?} {events:?}");
        assert!(!written.contains(TOKEN), "{}: {written}", w.store);
        check(w.store, &worker.run_once().unwrap(), &[]);
        assert_eq!(received.lock().unwrap().len(), 1, "{}", w.store);
    }
}

#[test]
fn registering_a_contract_that_stores_no_intent_is_refused() {
    let w = memory();
    let err = RecoveryWorker::new(w.executor())
        .register(w.capture(false), handler(&w.provider))
        .unwrap_err();
    assert!(
        matches!(&err, ExecError::IntentNotStored { contract } if contract == "capture_payment"),
        "{err:?}"
    );
}

#[test]
fn an_expired_dispatch_found_committed_by_the_probe_is_confirmed_without_the_handler() {
    for w in worlds() {
        let capture = w.capture(true);
        let committed = w.abandoned(&capture, &invoice("INV-1"), true);
        let lost = w.abandoned(&capture, &invoice("INV-2"), false);
        assert_eq!(w.provider.handler_calls(), 1, "{}", w.store);
        let worker = w.worker(&capture);

        // While the leases are live the callers may still be working.
        check(w.store, &worker.run_once().unwrap(), &[]);
        w.clock.advance(LEASE + Duration::from_secs(1));

        let report = worker.run_once().unwrap();
        // INV-1 committed: the probe says so, confirmed. INV-2 did not, but
        // the dead caller's request may still be in flight: quarantined.
        check(
            w.store,
            &report,
            &[("examined", 2), ("confirmed", 1), ("quarantined", 1)],
        );
        assert_eq!(w.status(&committed), EffectStatus::Confirmed, "{}", w.store);
        assert_eq!(w.status(&lost), EffectStatus::Quarantined, "{}", w.store);
        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (1, 1),
            "{}: the worker ran no handler",
            w.store
        );
    }
}

#[test]
fn a_handler_that_may_still_be_running_is_not_retried_by_the_worker() {
    let w = memory();
    w.provider.script(&[Fault::Held]);
    // At the deadline the probe cannot tell yet: the operation stays uncertain.
    w.provider
        .probe_script(&[ProbeAnswer::Pending, ProbeAnswer::Lookup]);
    let capture = w.capture(true);
    let first = EffectExecutor::new(Arc::clone(&w.ledger))
        .execute_with(
            &capture,
            &invoice("INV-1"),
            CallOptions::deadline(Duration::from_millis(20)),
            handler(&w.provider),
        )
        .unwrap();
    assert_eq!(first.status, EffectStatus::OutcomeUnknown, "{first:?}");
    assert_eq!(first.evidence["handler_may_still_be_running"], true);
    w.provider.wait_until_held();

    // The worker's probe now says not committed, but the first handler may
    // still send, and the key is not guaranteed: no retry.
    let report = w.worker(&capture).run_once().unwrap();
    check(w.store, &report, &[("examined", 1), ("quarantined", 1)]);
    assert_eq!(w.status(&first.operation_id), EffectStatus::Quarantined);
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (1, 0));

    // The first handler does send: one effect, never two.
    w.provider.release();
    w.provider.wait_for_commits(1);
    check(w.store, &w.worker(&capture).run_once().unwrap(), &[]);
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (1, 1));
}

#[test]
fn two_workers_racing_over_fifty_operations_dispatch_each_once() {
    for w in worlds() {
        let capture = w.capture(true);
        let ids: Vec<(String, u32)> = (0..50)
            .map(|i| {
                let id = w.left_prepared(&capture, &invoice(&format!("INV-{i:02}")));
                let attempts = w.ledger.get(&id).unwrap().unwrap().attempts;
                (id, attempts)
            })
            .collect();
        let start = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let worker = w.worker(&capture);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    start.wait();
                    worker.run_once().unwrap()
                })
            })
            .collect();
        let reports: Vec<RecoveryReport> = threads.into_iter().map(|t| t.join().unwrap()).collect();

        assert_eq!(
            (w.provider.handler_calls(), w.provider.committed()),
            (50, 50),
            "{}: {reports:?}",
            w.store
        );
        for (id, attempts) in &ids {
            let record = w.ledger.get(id).unwrap().unwrap();
            assert_eq!(record.status, EffectStatus::Confirmed, "{}: {id}", w.store);
            assert_eq!(
                record.attempts,
                attempts + 1,
                "{}: {id} claimed once by the workers",
                w.store
            );
        }
        for report in &reports {
            assert_eq!(report.failed, 0, "{}: {report:?}", w.store);
            assert!(report.examined <= 50, "{}: {report:?}", w.store);
        }
        let confirmed: u64 = reports.iter().map(|r| r.confirmed).sum();
        assert_eq!(
            confirmed, 50,
            "{}: each dispatch counted once: {reports:?}",
            w.store
        );
    }
}

#[test]
fn a_worker_does_not_count_another_workers_dispatch_as_its_own() {
    let w = memory();
    let capture = w.capture(true);
    w.left_prepared(&capture, &invoice("INV-1"));
    w.left_prepared(&capture, &invoice("INV-2"));
    let other = w.worker(&capture);
    let other_report = Arc::new(OnceLock::new());
    let (provider, first) = (Arc::clone(&w.provider), Arc::new(AtomicBool::new(true)));
    let report_slot = Arc::clone(&other_report);
    // While this worker dispatches INV-1, the other worker's pass dispatches INV-2.
    let worker = RecoveryWorker::new(w.executor())
        .register(capture, move |args: Value, ctx: HandlerContext| {
            if first.swap(false, Ordering::SeqCst) {
                report_slot.set(other.run_once().unwrap()).unwrap();
            }
            provider.capture(&args, ctx.provider_key())
        })
        .unwrap()
        .min_age(Duration::ZERO);

    let report = worker.run_once().unwrap();
    let other_report = other_report.get().unwrap();
    check(w.store, other_report, &[("examined", 1), ("confirmed", 1)]);
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (2, 2));
    check(
        w.store,
        &report,
        &[("examined", 2), ("confirmed", 1), ("unsettled", 1)],
    );
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Capture {
    invoice_id: String,
    amount_cents: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct Captured {
    payment_id: String,
    amount_cents: u64,
}

#[test]
fn a_typed_durable_handler_receives_the_stored_arguments_decoded() {
    for w in worlds() {
        let probe = Arc::clone(&w.provider);
        let contract: TypedContract<Capture, Captured> = TypedContract::from_contract(
            // The capture's shape under its own name: a typed contract
            // beside the untyped one.
            EffectContract::builder("capture_typed", |args| {
                Ok(format!(
                    "invoice:{}:capture",
                    args["invoice_id"].as_str().ok_or("missing invoice_id")?
                ))
            })
            .provider_idempotency_key(|args| {
                Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
            })
            .outcome_probe(move |_args, key| probe.probe(key))
            .store_intent(true)
            .build()
            .unwrap(),
        );
        let args = Capture {
            invoice_id: "INV-7".to_owned(),
            amount_cents: 1250,
        };
        let id = w.left_prepared(contract.contract(), &serde_json::to_value(&args).unwrap());
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&calls);
        let worker = RecoveryWorker::new(w.executor())
            .register_typed(&contract, move |args: Capture, ctx: HandlerContext| {
                counted.fetch_add(1, Ordering::SeqCst);
                assert_eq!(ctx.provider_key(), Some("capture:INV-7"));
                Ok(Captured {
                    payment_id: format!("pay-{}", args.invoice_id),
                    amount_cents: args.amount_cents,
                })
            })
            .unwrap()
            .min_age(Duration::ZERO);

        let report = worker.run_once().unwrap();
        check(w.store, &report, &[("examined", 1), ("confirmed", 1)]);
        assert_eq!(calls.load(Ordering::SeqCst), 1, "{}", w.store);
        let record = w.ledger.get(&id).unwrap().unwrap();
        assert_eq!(
            record.output,
            Some(json!({"payment_id": "pay-INV-7", "amount_cents": 1250})),
            "{}",
            w.store
        );
    }
}

#[test]
fn wait_returns_the_other_callers_confirmed_result_without_dispatching() {
    let w = memory();
    w.provider.script(&[Fault::Held]);
    let capture = w.capture(true);
    let caller = {
        let (exec, capture, handler) = (
            EffectExecutor::new(Arc::clone(&w.ledger)),
            capture.clone(),
            handler(&w.provider),
        );
        std::thread::spawn(move || exec.execute(&capture, &invoice("INV-1"), handler).unwrap())
    };
    w.provider.wait_until_held();
    let id = capture.operation_id(&invoice("INV-1")).unwrap();
    let waiter = {
        let (exec, id) = (EffectExecutor::new(Arc::clone(&w.ledger)), id.clone());
        std::thread::spawn(move || exec.wait(&id, Duration::from_secs(120)).unwrap())
    };
    w.provider.release();
    let first = caller.join().unwrap();
    let waited = waiter.join().unwrap();

    assert!(first.is_confirmed(), "{first:?}");
    assert!(waited.is_confirmed(), "{waited:?}");
    assert_eq!(waited.output, first.output);
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (1, 1));
}

#[test]
fn wait_answers_in_progress_when_the_time_is_up() {
    // The ledger and the caller keep real time (the caller's lease stays
    // live); only the waiter's clock is manual.
    let w = World {
        ledger: Arc::new(MemoryLedger::new()),
        ..memory()
    };
    w.provider.script(&[Fault::Held]);
    let capture = w.capture(true);
    let caller = {
        let (exec, capture, handler) = (
            EffectExecutor::new(Arc::clone(&w.ledger)),
            capture.clone(),
            handler(&w.provider),
        );
        std::thread::spawn(move || exec.execute(&capture, &invoice("INV-1"), handler).unwrap())
    };
    w.provider.wait_until_held();
    let id = capture.operation_id(&invoice("INV-1")).unwrap();

    // On the manual clock the wait's polls advance time instead of sleeping.
    let before = w.clock.now();
    let waited = w.executor().wait(&id, Duration::from_secs(10)).unwrap();
    assert_eq!(waited.status, EffectStatus::Dispatched, "{waited:?}");
    assert!(waited.in_progress, "{waited:?}");
    assert!(w.clock.now().duration_since(before).unwrap() >= Duration::from_secs(10));
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (1, 0));

    w.provider.release();
    assert!(caller.join().unwrap().is_confirmed());
    assert_eq!((w.provider.handler_calls(), w.provider.committed()), (1, 1));
}

#[test]
fn wait_on_an_unknown_operation_is_not_found() {
    let w = memory();
    let err = w
        .executor()
        .wait("invoice:nope:capture", Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(
        err.ledger_kind(),
        Some(effect_core::LedgerErrorKind::NotFound),
        "{err:?}"
    );
}

#[test]
fn waiting_tells_the_caller_kind_from_the_worker_kind_oldest_first() {
    for w in worlds() {
        let by_caller = w.left_prepared(&w.capture(false), &invoice("INV-1"));
        let since_caller = w.ledger.get(&by_caller).unwrap().unwrap().updated_at;
        w.clock.advance(Duration::from_secs(5));
        let stored = capture_contract(&w.provider, "capture_stored", true);
        let by_worker = w.left_prepared(&stored, &invoice("INV-2"));
        let since_worker = w.ledger.get(&by_worker).unwrap().unwrap().updated_at;
        // A confirmed operation waits for nobody.
        w.executor()
            .execute(&stored, &invoice("INV-3"), handler(&w.provider))
            .unwrap();

        let listed = waiting(w.ledger.as_ref()).unwrap();
        let got: Vec<(&str, &str, WaitingFor, &str)> = listed
            .iter()
            .map(|item| {
                (
                    item.operation_id.as_str(),
                    item.contract_name.as_str(),
                    item.waiting_for,
                    item.since.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    by_caller.as_str(),
                    "capture_payment",
                    WaitingFor::Caller,
                    since_caller.as_str()
                ),
                (
                    by_worker.as_str(),
                    "capture_stored",
                    WaitingFor::RecoveryWorker,
                    since_worker.as_str()
                ),
            ],
            "{}",
            w.store
        );
        assert_eq!(w.provider.committed(), 1, "{}", w.store);
    }
}

/// A pass reads its listings a page at a time and works on every operation
/// left behind exactly once, on both stores: stale dispatches, uncertain and
/// prepared operations, more of each than a page holds.
#[test]
fn a_pass_over_more_operations_than_a_page_covers_each_once() {
    for w in worlds() {
        let capture = w.capture(true);
        let mut ids = Vec::new();
        for i in 0..11 {
            ids.push(w.abandoned(&capture, &invoice(&format!("STALE-{i}")), false));
        }
        for i in 0..4 {
            ids.push(
                w.left_by_not_sent(&capture, &invoice(&format!("UNKNOWN-{i}")))
                    .0,
            );
        }
        for i in 0..5 {
            ids.push(w.left_prepared(&capture, &invoice(&format!("PREPARED-{i}"))));
        }
        w.clock.advance(LEASE + Duration::from_secs(1));
        let before = w.provider.handler_calls();
        let worker = w.worker(&capture).page_size(3);

        let report = worker.run_once().unwrap();
        assert_eq!(report.examined, 20, "{}: {report:?}", w.store);
        // The stale dispatches' requests may still be in flight: each is
        // quarantined, never resent. The others are dispatched once.
        assert_eq!(
            (report.confirmed, report.quarantined),
            (9, 11),
            "{}: {report:?}",
            w.store
        );
        // Stale 3+3+3+2, outcome_unknown 3+1, prepared 3+2, awaiting none.
        assert_eq!(report.pages, 4 + 2 + 2 + 1, "{}: {report:?}", w.store);
        assert_eq!(
            w.provider.handler_calls() - before,
            9,
            "{}: one dispatch each",
            w.store
        );
        assert_eq!(w.provider.committed(), 9, "{}", w.store);
        for (i, id) in ids.iter().enumerate() {
            let expected = if i < 11 {
                EffectStatus::Quarantined
            } else {
                EffectStatus::Confirmed
            };
            assert_eq!(w.status(id), expected, "{}: {id}", w.store);
        }
        let again = worker.run_once().unwrap();
        assert_eq!((again.examined, again.pages), (0, 4), "{}", w.store);
    }
}
