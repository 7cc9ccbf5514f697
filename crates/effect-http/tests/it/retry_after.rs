//! `Retry-After` delays a retry the contract allows, on the injected clock,
//! and never one the contract does not.

use std::time::Duration;

use effect_core::EffectStatus;
use effect_core::evidence::{DISPATCH_INTERRUPTION, INTERRUPTED_BEFORE_SENDING};
use effect_testkit::http_provider::{FakeHttpProvider, HttpFault};
use serde_json::json;

use crate::{MODES, Rig, capture_contract, invoice, with_key};

#[test]
fn the_retry_waits_the_delay_and_records_it() {
    for mode in MODES {
        let provider = FakeHttpProvider::start().unwrap();
        provider.push_fault(HttpFault::RateLimited {
            retry_after: Duration::from_secs(7),
        });
        let rig = Rig::new(|http| http);
        let contract = with_key(capture_contract())
            .provider_idempotency_guaranteed(true)
            .build()
            .unwrap();
        let result = rig.capture(
            &contract,
            &invoice("INV-1"),
            &provider.url("/v1/charges"),
            mode,
        );
        assert!(result.is_confirmed(), "{mode:?}: {:?}", result.error);
        assert_eq!(rig.waited(), Duration::from_secs(7), "{mode:?}");
        assert_eq!(provider.committed_count(), 1);
        let events = rig.ledger.events("capture:INV-1").unwrap();
        let unknown = events
            .iter()
            .find(|e| e.event_type == "outcome_unknown")
            .unwrap();
        assert_eq!(
            unknown.data["evidence"]["http_retry_after_ms"],
            json!(7000),
            "{:?}",
            unknown.data
        );
        assert_eq!(unknown.data["evidence"]["http_status"], json!(429));
    }
}

#[test]
fn a_delay_longer_than_the_client_waits_is_not_sent() {
    for mode in MODES {
        let provider = FakeHttpProvider::start().unwrap();
        provider.push_fault(HttpFault::Unavailable {
            retry_after: Duration::from_secs(3_600),
        });
        let rig = Rig::new(|http| http.max_retry_after(Duration::from_secs(60)));
        let contract = with_key(capture_contract())
            .provider_idempotency_guaranteed(true)
            .build()
            .unwrap();
        let result = rig.capture(
            &contract,
            &invoice("INV-2"),
            &provider.url("/v1/charges"),
            mode,
        );
        // The guaranteed key authorized the retry; the retry was not sent, and
        // the resend is left to the next call (a call dispatches at most twice).
        assert_eq!(result.status, EffectStatus::OutcomeUnknown, "{mode:?}");
        assert_eq!(result.attempts, 2);
        assert_eq!(
            result.evidence[DISPATCH_INTERRUPTION],
            json!(INTERRUPTED_BEFORE_SENDING)
        );
        assert_eq!(
            rig.waited(),
            Duration::ZERO,
            "{mode:?}: nothing waited an hour"
        );
        assert_eq!(
            provider.posts().len(),
            1,
            "{mode:?}: the retry was not sent"
        );
        assert_eq!(provider.committed_count(), 0);
    }
}
