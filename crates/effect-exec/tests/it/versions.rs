//! Several versions that each read the intent one earlier version stored:
//! the recovery worker runs the newest in natural order ("10" after "9").

use std::sync::{Arc, Mutex};
use std::time::Duration;

use effect_core::EffectStatus;
use effect_exec::{HandlerError, RecoveryWorker};
use effect_test_support::contracts::capture_payment;
use serde_json::json;

use crate::world::worlds;

#[test]
fn the_newest_version_in_natural_order_reads_an_earlier_version_s_intent() {
    for w in worlds() {
        let v1 = capture_payment().store_intent(true).build().unwrap();
        let version = |version: &str| {
            capture_payment()
                .version(version)
                .store_intent(true)
                .reads_intent_of(v1.clone(), |args| Ok(args.clone()))
                .build()
                .unwrap()
        };
        let left = w
            .executor()
            .execute(&v1, &json!({"invoice_id": "INV-9"}), |_, _| {
                Err::<serde_json::Value, _>(HandlerError::not_sent("the agent stopped"))
            })
            .unwrap();
        let ran = Arc::new(Mutex::new(Vec::new()));
        let runs = |name: &'static str| {
            let ran = Arc::clone(&ran);
            move |_args, _ctx| {
                ran.lock().unwrap().push(name);
                Ok::<_, HandlerError>(json!({"captured_by": name}))
            }
        };
        let worker = RecoveryWorker::new(w.executor())
            .register(version("9"), runs("9"))
            .unwrap()
            .register(version("10"), runs("10"))
            .unwrap()
            .min_age(Duration::ZERO);
        let report = worker.run_once().unwrap();
        assert_eq!(report.confirmed, 1, "{}: {report:?}", w.store);
        // "10" < "9" as text; the worker takes version 10.
        assert_eq!(*ran.lock().unwrap(), ["10"], "{}", w.store);
        let record = w.ledger.get(&left.operation_id).unwrap().unwrap();
        assert_eq!(
            (record.status, record.contract_version.as_str()),
            (EffectStatus::Confirmed, "1"),
            "{}",
            w.store
        );
    }
}
