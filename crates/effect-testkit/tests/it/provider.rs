//! The fake payment provider: keys, lookups, threads, and a file that
//! outlives the process.

use std::sync::Arc;

use effect_testkit::provider::FakePaymentProvider;
use effect_testkit::scenario::{Lookup, ScenarioProvider};
use serde_json::json;

#[test]
fn honours_keys_unless_told_not_to() {
    let provider = FakePaymentProvider::new();
    let first = provider.capture("INV-1", 1250, Some("k1")).unwrap();
    assert_eq!(provider.capture("INV-1", 1250, Some("k1")).unwrap(), first);
    provider.capture("INV-1", 1250, None).unwrap();
    assert_eq!(provider.committed_count().unwrap(), 2, "no key, no dedup");

    let careless = FakePaymentProvider::new().honour_idempotency_keys(false);
    assert!(!careless.honours_idempotency_keys());
    careless.capture("INV-1", 1250, Some("k1")).unwrap();
    careless.capture("INV-1", 1250, Some("k1")).unwrap();
    let ids: Vec<_> = careless
        .captures()
        .unwrap()
        .into_iter()
        .map(|c| c.payment_id)
        .collect();
    assert_eq!(ids, ["pay_000001", "pay_000002"]);
}

#[test]
fn looks_up_by_key_then_by_invoice() {
    let provider = FakePaymentProvider::new();
    provider.capture("INV-1", 100, Some("k1")).unwrap();
    provider.capture("INV-2", 200, None).unwrap();
    assert_eq!(
        provider.lookup_by_key("k1").unwrap().unwrap().invoice_id,
        "INV-1"
    );
    assert!(provider.lookup_by_key("k2").unwrap().is_none());
    assert_eq!(provider.lookup_by_invoice("INV-2").unwrap().len(), 1);

    let args = json!({"invoice_id": "INV-2", "amount_cents": 200});
    let found = provider.look_up(&args, Some("unknown-key")).unwrap();
    assert!(matches!(
        found,
        Lookup::Committed { provider_operation_id: Some(ref id), .. } if id == "pay_000002"
    ));
    let missing = json!({"invoice_id": "INV-3", "amount_cents": 1});
    assert_eq!(
        provider.look_up(&missing, Some("k3")).unwrap(),
        Lookup::NotCommitted
    );
    assert!(provider.perform(&json!({"invoice_id": 7}), None).is_err());
}

#[test]
fn concurrent_captures_with_one_key_commit_once() {
    let provider = Arc::new(FakePaymentProvider::new());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let provider = Arc::clone(&provider);
            std::thread::spawn(move || provider.capture("INV-1", 1250, Some("k")).unwrap())
        })
        .collect();
    let ids: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().unwrap().payment_id)
        .collect();
    assert!(ids.iter().all(|id| id == "pay_000001"), "{ids:?}");
    assert_eq!(provider.committed_count().unwrap(), 1);
}

#[test]
fn file_backed_commits_survive_reopening_and_are_seen_by_other_instances() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.jsonl");
    let writer = FakePaymentProvider::open(&path).unwrap();
    writer.capture("INV-1", 1250, Some("k1")).unwrap();
    // Another instance (as in another process) sees the commit and dedups on it.
    let other = FakePaymentProvider::open(&path).unwrap();
    assert_eq!(
        other.capture("INV-1", 1250, Some("k1")).unwrap().payment_id,
        "pay_000001"
    );
    other.capture("INV-2", 500, Some("k2")).unwrap();
    drop((writer, other));

    let reopened = FakePaymentProvider::open(&path).unwrap();
    assert_eq!(reopened.path(), Some(path.as_path()));
    let captures = reopened.captures().unwrap();
    assert_eq!(captures.len(), 2);
    assert_eq!(captures[1].payment_id, "pay_000002");
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
}

#[test]
fn a_corrupt_provider_file_is_an_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("provider.jsonl");
    std::fs::write(&path, "{\"not\": \"a capture\"}\n").unwrap();
    let err = FakePaymentProvider::open(&path).unwrap_err();
    assert!(
        err.to_string().starts_with("line 1 of provider file"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
}

mod fault_injecting {
    use std::sync::Arc;

    use effect_core::{EffectContract, EffectStatus, MemoryLedger};
    use effect_exec::EffectExecutor;
    use effect_testkit::FaultInjectingProvider;
    use effect_testkit::scenario::FaultPoint;
    use serde_json::json;

    /// A user's own contract over the provider: a stable key and a probe.
    fn contract(provider: &Arc<FaultInjectingProvider>) -> EffectContract {
        let probe = Arc::clone(provider);
        EffectContract::builder("my_capture", |args| {
            Ok(format!(
                "my:{}",
                args["invoice_id"].as_str().ok_or("missing invoice_id")?
            ))
        })
        .provider_idempotency_key(|args| {
            Ok(args["invoice_id"].as_str().map(|i| format!("key:{i}")))
        })
        .outcome_probe(move |args, key| probe.probe(args, key))
        .build()
        .unwrap()
    }

    #[test]
    fn every_provider_fault_point_ends_with_one_effect_under_a_users_contract() {
        for fault in [
            FaultPoint::None,
            FaultPoint::BeforeCommit,
            FaultPoint::AfterCommitBeforeAck,
            FaultPoint::TimeoutLateCommit,
            FaultPoint::ProbeUnavailable,
            FaultPoint::EventuallyConsistent,
            FaultPoint::NoProviderIdempotency,
        ] {
            let provider = Arc::new(FaultInjectingProvider::new(fault).unwrap());
            let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
            let contract = contract(&provider);
            let args = json!({"invoice_id": "INV-7", "amount_cents": 700});
            // The agent calls again until the outcome settles, as a resume would.
            let mut statuses = Vec::new();
            for _ in 0..4 {
                let capture = Arc::clone(&provider);
                let result = executor
                    .execute(&contract, &args, move |args, key| {
                        capture.capture(&args, key.provider_key())
                    })
                    .unwrap();
                statuses.push(result.status);
                if result.is_confirmed() {
                    break;
                }
            }
            assert_eq!(
                provider.committed_count().unwrap(),
                1,
                "{fault:?}: {statuses:?}"
            );
            assert_eq!(statuses.last(), Some(&EffectStatus::Confirmed), "{fault:?}");
        }
    }

    #[test]
    fn harness_fault_points_are_refused_with_a_reason() {
        for fault in [FaultPoint::ConcurrentCallers, FaultPoint::CrashAfterCommit] {
            let err = FaultInjectingProvider::new(fault).unwrap_err();
            assert!(err.to_string().contains("scenario harness"), "{err}");
        }
    }
}
