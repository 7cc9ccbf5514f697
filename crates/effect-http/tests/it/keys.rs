//! The provider key: in the configured header on every attempt, and a key
//! still in progress at the provider (`409`) is an unknown outcome.

use std::sync::Arc;
use std::time::Duration;

use effect_core::EffectStatus;
use effect_exec::HandlerContext;
use effect_http::HttpRequest;
use effect_testkit::http_provider::{FakeHttpOptions, FakeHttpProvider, Gate, HttpFault};
use serde_json::json;

use crate::{MODES, Rig, capture_contract, invoice, posted_keys, with_key};

#[test]
fn a_custom_key_header_carries_the_same_key_on_every_attempt() {
    for mode in MODES {
        let provider =
            FakeHttpProvider::start_with(FakeHttpOptions::default().key_header("X-Request-Key"))
                .unwrap();
        provider.push_fault(HttpFault::ErrorAfterCommit { status: 503 });
        let rig = Rig::new(|http| http.key_header("X-Request-Key"));
        let contract = with_key(capture_contract())
            .provider_idempotency_guaranteed(true)
            .build()
            .unwrap();
        let result = rig.capture(
            &contract,
            &invoice("INV-7"),
            &provider.url("/v1/charges"),
            mode,
        );
        assert!(result.is_confirmed(), "{mode:?}: {:?}", result.error);
        assert_eq!(result.attempts, 2);
        assert_eq!(
            posted_keys(&provider),
            vec![Some("capture:INV-7".to_owned()); 2],
            "{mode:?}"
        );
        assert_eq!(provider.committed_count(), 1, "{mode:?}");
        assert_eq!(provider.replayed_count(), 1, "{mode:?}");
        assert_eq!(result.evidence["http_key_header"], json!("x-request-key"));
        assert_eq!(result.evidence["http_status"], json!(200));
    }
}

#[test]
fn the_contracts_key_replaces_one_the_request_sets() {
    let provider = FakeHttpProvider::start().unwrap();
    let rig = Rig::new(|http| http);
    let contract = with_key(capture_contract()).build().unwrap();
    let url = provider.url("/v1/charges");
    let result = rig
        .executor
        .execute(
            &contract,
            &invoice("INV-8"),
            rig.http.handler(move |args, _ctx: &HandlerContext| {
                Ok(HttpRequest::post(url.clone())
                    .header("Idempotency-Key", "made-up")
                    .json(args))
            }),
        )
        .unwrap();
    assert!(result.is_confirmed());
    assert_eq!(
        posted_keys(&provider),
        vec![Some("capture:INV-8".to_owned())]
    );
    assert_eq!(provider.committed_count(), 1);
}

/// Another process's request with the same key is still running at the
/// provider: `409` is unknown, whatever the contract. With a guaranteed
/// key the call's retry meets the same `409`, and the operation stays
/// `outcome_unknown` with a resend pending (a call makes at most two
/// dispatches); once the other request commits, the next call resends on the
/// guaranteed key and gets the stored answer replayed. Without a retry
/// basis the operation is quarantined. One effect either way.
#[test]
fn a_key_in_progress_elsewhere_is_unknown_and_never_charged_twice() {
    for mode in MODES {
        for guaranteed in [true, false] {
            let cell = format!("{mode:?} guaranteed={guaranteed}");
            let provider = Arc::new(FakeHttpProvider::start().unwrap());
            let gate = Gate::new();
            provider.push_fault(HttpFault::HoldBeforeCommit(gate.clone()));
            let rig = Rig::new(|http| http.timeout(Duration::from_secs(60)));
            let contract = with_key(capture_contract())
                .provider_idempotency_guaranteed(guaranteed)
                .build()
                .unwrap();
            // The other process: the same key, sent straight to the provider.
            let other = {
                let url = provider.url("/v1/charges");
                let http = rig.http.clone();
                std::thread::spawn(move || {
                    let context = HandlerContext::new(
                        "capture:INV-9",
                        "capture",
                        "1",
                        1,
                        Some("capture:INV-9".into()),
                    );
                    http.send(&HttpRequest::post(url).json(&invoice("INV-9")), &context)
                        .map(|response| response.status())
                })
            };
            provider.wait_until_held(1);
            let url = provider.url("/v1/charges");
            let first = rig.capture(&contract, &invoice("INV-9"), &url, mode);
            let expected = if guaranteed {
                EffectStatus::OutcomeUnknown
            } else {
                EffectStatus::Quarantined
            };
            assert_eq!(first.status, expected, "{cell}: {:?}", first.error);
            assert_eq!(first.attempts, if guaranteed { 2 } else { 1 }, "{cell}");
            assert_eq!(first.evidence["http_status"], json!(409), "{cell}");
            assert_eq!(provider.committed_count(), 0, "{cell}");
            gate.open();
            assert_eq!(other.join().unwrap(), Ok(200), "{cell}");
            assert_eq!(provider.committed_count(), 1, "{cell}");
            let then = rig.capture(&contract, &invoice("INV-9"), &url, mode);
            if guaranteed {
                assert!(then.is_confirmed(), "{cell}: {:?}", then.error);
                assert_eq!(then.output.unwrap()["id"], "ch_000001", "{cell}");
                assert_eq!(
                    then.evidence["http_idempotent_replayed"],
                    json!(true),
                    "{cell}"
                );
            } else {
                assert_eq!(then.status, EffectStatus::Quarantined, "{cell}");
            }
            assert_eq!(provider.committed_count(), 1, "{cell}");
            assert!(
                posted_keys(&provider)
                    .iter()
                    .all(|k| k.as_deref() == Some("capture:INV-9")),
                "{cell}"
            );
        }
    }
}

/// docs/http.md §6: a guarantee is a claim about the provider. Against a
/// provider that ignores keys, the retry it authorizes charges again: the
/// count a test shows before production does.
#[test]
fn a_guarantee_against_a_provider_that_ignores_keys_charges_twice() {
    let provider =
        FakeHttpProvider::start_with(FakeHttpOptions::default().honour_keys(false)).unwrap();
    provider.push_fault(HttpFault::ErrorAfterCommit { status: 502 });
    let rig = Rig::new(|http| http);
    let contract = with_key(capture_contract())
        .provider_idempotency_guaranteed(true)
        .build()
        .unwrap();
    let result = rig.capture(
        &contract,
        &invoice("INV-10"),
        &provider.url("/v1/charges"),
        crate::Mode::Sync,
    );
    assert!(result.is_confirmed());
    assert_eq!(result.attempts, 2);
    assert_eq!(
        provider.committed_count(),
        2,
        "the broken promise shows as a second effect"
    );
    assert_eq!(
        posted_keys(&provider),
        vec![Some("capture:INV-10".to_owned()); 2]
    );
}
