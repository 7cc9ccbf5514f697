//! JSON the ledger could not read back: refused before it is written.

use std::sync::Arc;

use effect_core::canonical::{MAX_DEPTH, python_json};
use effect_core::{
    CanonicalError, EffectContract, EffectStatus, FingerprintForm, ListQuery, OutcomeProbeResult,
};
use effect_exec::{ExecError, ExecutorOptions};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Value, json};

use crate::provider::{FakeProvider, NEITHER, contract, invoice};
use crate::{executor, executor_with, ledger};

/// `{"invoice_id": "INV-D", "nested": [[[...]]]}` with `depth` levels in all,
/// serialized recursively as a caller's own type would be.
struct DeepArguments(usize);

struct Nested(usize);

impl Serialize for DeepArguments {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("invoice_id", "INV-D")?;
        map.serialize_entry("nested", &Nested(self.0 - 1))?;
        map.end()
    }
}

impl Serialize for Nested {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(None)?;
        if self.0 > 1 {
            seq.serialize_element(&Nested(self.0 - 1))?;
        }
        seq.end()
    }
}

/// Runs `f` on a thread with the default stack, as a caller's worker would.
fn on_default_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

#[test]
fn deep_arguments_are_a_typed_error_and_nothing_is_written() {
    on_default_stack(|| {
        let provider = FakeProvider::new(false);
        let ledger = ledger();
        let exec = executor(&ledger);
        let c = contract(&provider, NEITHER);
        for depth in [MAX_DEPTH + 1, 100_000] {
            let err = exec
                .execute(
                    &c,
                    &DeepArguments(depth),
                    crate::provider::handler(&provider),
                )
                .unwrap_err();
            assert!(
                matches!(
                    &err,
                    ExecError::InvalidArguments {
                        source: CanonicalError::TooDeep { .. }
                    }
                ),
                "{err}"
            );
        }
        assert!(ledger.list(&ListQuery::new(10)).unwrap().is_empty());
        // At the limit the arguments are recorded and the effect runs.
        let result = exec
            .execute(
                &c,
                &DeepArguments(MAX_DEPTH),
                crate::provider::handler(&provider),
            )
            .unwrap();
        assert!(result.is_confirmed());
        assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
    });
}

#[test]
fn a_deep_handler_output_is_unstorable_and_keeps_the_outcome_uncertain() {
    on_default_stack(|| {
        for depth in [MAX_DEPTH + 1, 100_000] {
            let provider = FakeProvider::new(false);
            let p = Arc::clone(&provider);
            let ledger = ledger();
            let result = executor(&ledger)
                .execute(
                    &contract(&provider, NEITHER),
                    &invoice("INV-D1"),
                    move |args: Value, key| {
                        p.capture(&args, key.provider_key())?;
                        Ok(Nested(depth))
                    },
                )
                .unwrap();
            assert_eq!(result.status, EffectStatus::Quarantined);
            assert!(result.output.is_none());
            assert_eq!(
                result.evidence["dispatch_interruption"],
                "unstorable_output"
            );
            let events = ledger.events("invoice:INV-D1:capture").unwrap();
            let unknown = events
                .iter()
                .find(|e| e.event_type == "outcome_unknown")
                .unwrap();
            let error = unknown.data["error"].as_str().unwrap();
            assert!(error.contains("deeper than 64"), "{error}");
            assert_eq!((provider.handler_calls(), provider.committed()), (1, 1));
        }
    });
}

fn deep_json(depth: usize) -> Value {
    let mut value = json!([]);
    for _ in 1..depth {
        value = json!([value]);
    }
    value
}

#[test]
fn a_deep_probe_output_or_evidence_is_not_stored() {
    let cases: [(&str, OutcomeProbeResult); 2] = [
        (
            "output",
            OutcomeProbeResult::committed(deep_json(MAX_DEPTH + 1)),
        ),
        (
            "evidence",
            OutcomeProbeResult::committed(json!("ok")).evidence("trace", deep_json(MAX_DEPTH + 1)),
        ),
    ];
    for (what, answer) in cases {
        let c = EffectContract::builder("c", |args| Ok(format!("op:{}", args["id"])))
            .outcome_probe(move |_, _| Ok(answer.clone()))
            .build()
            .unwrap();
        let ledger = ledger();
        let result = executor(&ledger)
            .execute(&c, &json!({"id": 1}), |_, _| {
                Err::<Value, _>(effect_exec::HandlerError::unknown("ack lost"))
            })
            .unwrap();
        assert!(result.status.is_uncertain(), "{what}: {:?}", result.status);
        assert!(result.output.is_none(), "{what}");
        // Everything stored reads back.
        for event in ledger.events("op:1").unwrap() {
            effect_core::canonical::check_depth(&event.data).unwrap();
        }
    }
}

#[test]
fn the_sha256_form_stores_what_python_writes_and_both_forms_replay() {
    let provider = FakeProvider::new(false);
    let ledger = ledger();
    let python_form = executor_with(
        &ledger,
        ExecutorOptions::default().fingerprint_form(FingerprintForm::Sha256),
    );
    let c = contract(&provider, NEITHER);
    let args = json!({"invoice_id": "INV-S", "rate": 1e-5, "fee": 0.1});
    let first = python_form
        .execute(&c, &args, crate::provider::handler(&provider))
        .unwrap();
    assert!(first.is_confirmed());
    let record = ledger.get("invoice:INV-S:capture").unwrap().unwrap();
    assert_eq!(
        python_json(&args),
        r#"{"fee":0.1,"invoice_id":"INV-S","rate":1e-05}"#
    );
    // What Python 1.0.1 stores for these arguments (hashlib.sha256 of _json_dumps).
    assert_eq!(
        record.request_fingerprint,
        "a4f1ada619d431d9ee16c163708364027e120d6b14b0cad18792e61f84dd2cca"
    );
    // A default (blake3) executor accepts the Python form, and the reverse.
    let again = executor(&ledger)
        .execute(&c, &args, crate::provider::handler(&provider))
        .unwrap();
    assert!(again.duplicate_suppressed);
    assert_eq!(provider.committed(), 1);
}
