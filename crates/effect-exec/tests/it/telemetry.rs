//! The metrics a scenario leaves (feature `metrics`), read from a recorder
//! installed for the test's thread.

use std::collections::BTreeMap;

use effect_core::EffectStatus;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

use crate::provider::{FakeProvider, Fault, NEITHER, PROBE_ONLY, contract, handler, invoice};
use crate::{executor, ledger};

/// Counter values by `name{label=value,...}`.
fn counters(recorder: &DebuggingRecorder) -> BTreeMap<String, u64> {
    recorder
        .snapshotter()
        .snapshot()
        .into_vec()
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) => {
                let key = key.key();
                let mut labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                labels.sort();
                Some((format!("{}{{{}}}", key.name(), labels.join(",")), n))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_lost_acknowledgement_and_a_replay_are_counted() {
    let recorder = DebuggingRecorder::new();
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, PROBE_ONLY);
    metrics::with_local_recorder(&recorder, || {
        let first = exec
            .execute(&c, &invoice("INV-M1"), handler(&provider))
            .unwrap();
        assert!(first.is_confirmed());
        let again = exec
            .execute(&c, &invoice("INV-M1"), handler(&provider))
            .unwrap();
        assert!(again.duplicate_suppressed);
    });
    assert_eq!(provider.committed(), 1);
    let counted = counters(&recorder);
    let get = |key: &str| counted.get(key).copied().unwrap_or(0);
    assert_eq!(
        get("effect_executions_total{contract=capture_payment,status=confirmed}"),
        2,
        "{counted:#?}"
    );
    assert_eq!(
        get("effect_replays_total{contract=capture_payment}"),
        2,
        "{counted:#?}"
    );
    assert_eq!(
        get("effect_reconciliations_total{contract=capture_payment,probe_status=committed}"),
        1,
        "{counted:#?}"
    );
    assert!(
        !counted
            .keys()
            .any(|key| key.starts_with("effect_quarantined_total")),
        "{counted:#?}"
    );
}

#[test]
fn a_quarantine_is_counted_once() {
    let recorder = DebuggingRecorder::new();
    let provider = FakeProvider::new(false).script(&[Fault::AfterCommit]);
    let ledger = ledger();
    let exec = executor(&ledger);
    let c = contract(&provider, NEITHER);
    metrics::with_local_recorder(&recorder, || {
        for _ in 0..3 {
            let result = exec
                .execute(&c, &invoice("INV-M2"), handler(&provider))
                .unwrap();
            assert_eq!(result.status, EffectStatus::Quarantined);
        }
    });
    assert_eq!(provider.committed(), 1);
    let counted = counters(&recorder);
    // Calling again on a quarantined operation writes nothing and is not a
    // new quarantine.
    assert_eq!(
        counted.get("effect_quarantined_total{contract=capture_payment,reason=no_basis}"),
        Some(&1),
        "{counted:#?}"
    );
    assert_eq!(
        counted.get("effect_executions_total{contract=capture_payment,status=quarantined}"),
        Some(&3)
    );
}
