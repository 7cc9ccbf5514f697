//! Failures before the request was written are not sent: a refused
//! connection, a DNS failure. A retry is then safe whatever the contract.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use effect_core::EffectStatus;
use effect_core::evidence::{DISPATCH_INTERRUPTION, INTERRUPTED_BEFORE_SENDING};
use effect_http::reqwest::dns::{Addrs, Name, Resolve, Resolving};
use effect_testkit::http_provider::FakeHttpProvider;
use serde_json::json;

use crate::{MODES, Rig, capture_contract, invoice};

/// A loopback port nothing listens on.
fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[test]
fn a_refused_connection_is_not_sent_and_is_retried() {
    for mode in MODES {
        let addr = closed_port();
        let rig = Rig::new(|http| http);
        let contract = capture_contract().build().unwrap();
        let result = rig.capture(
            &contract,
            &invoice("INV-1"),
            &format!("http://{addr}/v1/charges"),
            mode,
        );
        // The first refusal authorized a retry; the retry was refused too.
        // Nothing was sent, so nothing is quarantined: the next call sends it.
        assert_eq!(result.status, EffectStatus::OutcomeUnknown, "{mode:?}");
        assert_eq!(
            result.attempts, 2,
            "{mode:?}: the first refusal authorized a retry"
        );
        assert_eq!(
            result.evidence[DISPATCH_INTERRUPTION],
            json!(INTERRUPTED_BEFORE_SENDING)
        );
        assert_eq!(result.evidence["http_class"], json!("not_sent"));
    }
}

/// Fails its first resolution, then resolves every name to the provider.
struct FlakyDns {
    provider: SocketAddr,
    calls: AtomicUsize,
}

impl Resolve for FlakyDns {
    fn resolve(&self, _name: Name) -> Resolving {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        let addr = self.provider;
        Box::pin(async move {
            if first {
                Err("no such host".into())
            } else {
                Ok(Box::new(std::iter::once(addr)) as Addrs)
            }
        })
    }
}

#[test]
fn a_dns_failure_is_not_sent_and_the_retry_commits_once_without_a_key() {
    for mode in MODES {
        let provider = FakeHttpProvider::start().unwrap();
        let dns = Arc::new(FlakyDns {
            provider: provider.addr(),
            calls: AtomicUsize::new(0),
        });
        let rig = Rig::new(|http| http.dns_resolver(dns.clone()));
        // Neither key nor probe: only "not sent" can make the retry safe.
        let contract = capture_contract().build().unwrap();
        let url = format!(
            "http://payments.example:{}/v1/charges",
            provider.addr().port()
        );
        let result = rig.capture(&contract, &invoice("INV-2"), &url, mode);
        assert!(result.is_confirmed(), "{mode:?}: {:?}", result.error);
        assert_eq!(result.attempts, 2, "{mode:?}");
        assert_eq!(provider.committed_count(), 1, "{mode:?}");
        assert_eq!(
            provider.posts().len(),
            1,
            "{mode:?}: the failed attempt never reached the provider"
        );
        assert_eq!(dns.calls.load(Ordering::SeqCst), 2, "{mode:?}");
    }
}
