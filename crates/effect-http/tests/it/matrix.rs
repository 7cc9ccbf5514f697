//! The fault matrix over real HTTP: every provider fault × every contract
//! shape, sync and async, through EffectExecutor, effect-http and the fake
//! provider. Each cell asserts the effects the provider committed and what
//! the caller was told.

use std::time::Duration;

use effect_core::{EffectContract, EffectStatus};
use effect_http::{HttpEffect, HttpRequest};
use effect_testkit::http_provider::{FakeHttpProvider, HttpFault};

use crate::{MODES, Rig, capture_contract, invoice, posted_keys, with_key};

/// What the contract relies on when an outcome is uncertain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A key is sent, the provider's keys are not declared guaranteed, no probe.
    KeyOnly,
    /// A key the provider guarantees: a retry under it cannot apply twice.
    GuaranteedKey,
    /// A key, not guaranteed, and an authoritative lookup by key.
    ProbeByKey,
    /// No key; an authoritative lookup by the client's reference.
    ProbeByReference,
    /// Neither key nor probe.
    Bare,
}

const SHAPES: [Shape; 5] = [
    Shape::KeyOnly,
    Shape::GuaranteedKey,
    Shape::ProbeByKey,
    Shape::ProbeByReference,
    Shape::Bare,
];

impl Shape {
    fn keyed(self) -> bool {
        matches!(
            self,
            Shape::KeyOnly | Shape::GuaranteedKey | Shape::ProbeByKey
        )
    }

    fn contract(
        self,
        http: &HttpEffect,
        provider: &FakeHttpProvider,
        asynchronous: bool,
    ) -> EffectContract {
        let mut builder = capture_contract();
        if self.keyed() {
            builder = with_key(builder);
        }
        if self == Shape::GuaranteedKey {
            builder = builder.provider_idempotency_guaranteed(true);
        }
        let probe = match self {
            Shape::ProbeByKey => {
                let base = provider.url("/v1/charges/by-key/");
                Some(http.probe(move |_args, key| {
                    Ok(HttpRequest::get(format!(
                        "{base}{}",
                        key.ok_or("no key stored")?
                    )))
                }))
            }
            Shape::ProbeByReference => {
                let base = provider.url("/v1/charges/by-reference/");
                Some(http.probe(move |args, _key| {
                    Ok(HttpRequest::get(format!(
                        "{base}{}",
                        args["reference"].as_str().ok_or("no reference")?
                    )))
                }))
            }
            _ => None,
        };
        if let Some(probe) = probe {
            let probe = probe
                .authoritative(true)
                .provider_id(|body| body["id"].as_str().map(str::to_owned));
            builder = if asynchronous {
                builder.outcome_probe_async(probe.into_async_probe())
            } else {
                builder.outcome_probe(probe.into_probe())
            };
        }
        builder.build().unwrap()
    }
}

/// What one cell must show.
#[derive(Debug, Clone, Copy)]
struct Expect {
    status: EffectStatus,
    /// Effects the provider committed.
    committed: usize,
    /// Dispatches recorded (and POSTs the provider received).
    attempts: u32,
    /// The confirmation carries the provider's `Idempotent-Replayed`.
    replayed: bool,
    /// How long the retry waited for `Retry-After`.
    waited: Duration,
}

const fn expect(status: EffectStatus, committed: usize, attempts: u32) -> Expect {
    Expect {
        status,
        committed,
        attempts,
        replayed: false,
        waited: Duration::ZERO,
    }
}

impl Expect {
    const fn replayed(mut self) -> Self {
        self.replayed = true;
        self
    }

    const fn waited(mut self, waited: Duration) -> Self {
        self.waited = waited;
        self
    }
}

/// Runs `fault` against `shape` in both modes and checks the cell.
fn check(fault: Option<&HttpFault>, shape: Shape, expected: Expect) {
    for mode in MODES {
        let cell = format!("{fault:?} × {shape:?} × {mode:?}");
        let provider = FakeHttpProvider::start().unwrap();
        if let Some(fault) = fault {
            provider.push_fault(fault.clone());
        }
        // A stalled answer is given up on after this timeout; the others
        // answer at once on loopback.
        let timeout = match fault {
            Some(HttpFault::StallAfterCommit) => Duration::from_secs(2),
            _ => Duration::from_secs(30),
        };
        let rig = Rig::new(|http| http.timeout(timeout));
        let contract = shape.contract(&rig.http, &provider, mode == crate::Mode::Async);
        let arguments = invoice("INV-1");
        let result = rig.capture(&contract, &arguments, &provider.url("/v1/charges"), mode);

        assert_eq!(
            result.status, expected.status,
            "{cell}: status ({:?})",
            result.error
        );
        assert_eq!(
            provider.committed_count(),
            expected.committed,
            "{cell}: committed effects"
        );
        assert!(
            provider.committed_count() <= 1,
            "{cell}: never more than one effect"
        );
        assert_eq!(result.attempts, expected.attempts, "{cell}: attempts");
        let keys = posted_keys(&provider);
        assert_eq!(
            keys.len(),
            expected.attempts as usize,
            "{cell}: one POST per attempt"
        );
        let key = shape.keyed().then(|| "capture:INV-1".to_owned());
        assert!(
            keys.iter().all(|sent| *sent == key),
            "{cell}: the same key on every attempt: {keys:?}"
        );
        assert_eq!(
            result.evidence.get("http_idempotent_replayed") == Some(&serde_json::json!(true)),
            expected.replayed,
            "{cell}: replay evidence {:?}",
            result.evidence
        );
        assert_eq!(rig.waited(), expected.waited, "{cell}: Retry-After wait");
        if result.status == EffectStatus::Confirmed {
            let output = result.output.as_ref().unwrap();
            assert_eq!(
                output["id"], "ch_000001",
                "{cell}: the committed charge is the output"
            );
            assert_eq!(output["amount"], 1250, "{cell}");
        }
        // Asking again never adds an effect: a replay, or the same uncertainty.
        let again = rig.capture(&contract, &arguments, &provider.url("/v1/charges"), mode);
        assert_eq!(
            provider.committed_count(),
            expected.committed,
            "{cell}: a second call committed"
        );
        if expected.status == EffectStatus::Confirmed {
            assert!(
                again.duplicate_suppressed,
                "{cell}: the second call replays"
            );
        }
    }
}

use EffectStatus::{Confirmed, Quarantined, Rejected};

#[test]
fn no_fault_commits_once_for_every_shape() {
    for shape in SHAPES {
        check(None, shape, expect(Confirmed, 1, 1));
    }
}

/// The provider committed and the answer was lost (a dropped connection, a
/// stalled answer past the client's timeout, a 5xx after commit): the key
/// makes a retry a replay, a probe finds the commit, and without either the
/// operation is quarantined, never charged twice.
fn lost_answer(fault: &HttpFault) {
    check(Some(fault), Shape::KeyOnly, expect(Quarantined, 1, 1));
    check(
        Some(fault),
        Shape::GuaranteedKey,
        expect(Confirmed, 1, 2).replayed(),
    );
    check(Some(fault), Shape::ProbeByKey, expect(Confirmed, 1, 1));
    check(
        Some(fault),
        Shape::ProbeByReference,
        expect(Confirmed, 1, 1),
    );
    check(Some(fault), Shape::Bare, expect(Quarantined, 1, 1));
}

#[test]
fn commit_then_drop_the_connection() {
    lost_answer(&HttpFault::DropAfterCommit);
}

#[test]
fn commit_then_time_out() {
    lost_answer(&HttpFault::StallAfterCommit);
}

#[test]
fn commit_then_answer_5xx() {
    lost_answer(&HttpFault::ErrorAfterCommit { status: 500 });
    lost_answer(&HttpFault::ErrorAfterCommit { status: 502 });
}

/// A 429 or 503 committed nothing, but says so with a status that does not
/// prove it: a retry happens only on the contract's own basis (a guaranteed
/// key, a probe's `not_committed`), after the `Retry-After` delay.
fn asked_to_wait(fault: &HttpFault) {
    let second = Duration::from_secs(1);
    check(Some(fault), Shape::KeyOnly, expect(Quarantined, 0, 1));
    check(
        Some(fault),
        Shape::GuaranteedKey,
        expect(Confirmed, 1, 2).waited(second),
    );
    check(
        Some(fault),
        Shape::ProbeByKey,
        expect(Confirmed, 1, 2).waited(second),
    );
    check(
        Some(fault),
        Shape::ProbeByReference,
        expect(Confirmed, 1, 2).waited(second),
    );
    check(Some(fault), Shape::Bare, expect(Quarantined, 0, 1));
}

#[test]
fn rate_limited_with_retry_after() {
    asked_to_wait(&HttpFault::RateLimited {
        retry_after: Duration::from_secs(1),
    });
}

#[test]
fn unavailable_with_retry_after() {
    asked_to_wait(&HttpFault::Unavailable {
        retry_after: Duration::from_secs(1),
    });
}

#[test]
fn a_decline_is_rejected_without_a_retry() {
    for shape in SHAPES {
        check(
            Some(&HttpFault::Decline { status: 402 }),
            shape,
            expect(Rejected, 0, 1),
        );
    }
}
