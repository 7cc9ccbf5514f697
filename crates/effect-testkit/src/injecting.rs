//! [`FaultInjectingProvider`]: a fake payment provider that injects one fault
//! point of the scenario CLI, for the contracts and handlers a user writes.
//!
//! The scenario harness ([`crate::scenario`]) runs its own contract. This is
//! the provider alone: its [`capture`](FaultInjectingProvider::capture) is the
//! body of a handler and its [`probe`](FaultInjectingProvider::probe) the body
//! of an outcome probe, so any [`EffectContract`](effect_core::EffectContract)
//! can be tested against a lost acknowledgement or a failure before commit,
//! counting what the provider really committed.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, MemoryLedger};
//! use effect_exec::EffectExecutor;
//! use effect_testkit::FaultInjectingProvider;
//! use effect_testkit::scenario::FaultPoint;
//! use serde_json::json;
//!
//! let provider = Arc::new(FaultInjectingProvider::new(FaultPoint::AfterCommitBeforeAck)?);
//! let probe = Arc::clone(&provider);
//! let contract = EffectContract::builder("capture_payment", |args| {
//!     Ok(format!("invoice:{}:capture", args["invoice_id"].as_str().ok_or("missing invoice_id")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}"))))
//! .outcome_probe(move |args, key| probe.probe(&args, key))
//! .build()?;
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! let capture = Arc::clone(&provider);
//! let result = executor.execute(&contract, &json!({"invoice_id": "INV-1", "amount_cents": 990}), move |args, ctx: effect_exec::HandlerContext| {
//!     capture.capture(&args, ctx.provider_key())
//! })?;
//! assert!(result.is_confirmed()); // the probe found the capture whose answer was lost
//! assert_eq!(provider.committed_count()?, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::sync::Mutex;

use effect_core::{CallbackError, OutcomeProbeResult};
use effect_exec::HandlerError;
use serde_json::{Value, json};

use crate::provider::{Capture, FakePaymentProvider, ProviderError};
use crate::scenario::{FaultPoint, PROBE_FAILURES};

/// A payment provider that injects one fault point into the first capture
/// (and, for the probe's fault points, into its first lookups).
#[derive(Debug)]
pub struct FaultInjectingProvider {
    inner: FakePaymentProvider,
    fault: FaultPoint,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// The capture fault has been injected.
    injected: bool,
    /// Lookups answered so far.
    lookups: usize,
}

/// The fault point is one the harness injects (process deaths, concurrent
/// callers), not the provider.
#[derive(Debug, thiserror::Error)]
#[error(
    "fault point {fault:?} is injected by the scenario harness, not by a provider; use effect_testkit::scenario"
)]
pub struct UnsupportedFaultPoint {
    /// The fault point asked for.
    pub fault: FaultPoint,
}

impl FaultInjectingProvider {
    /// A provider that injects `fault` and honours idempotency keys (except
    /// for [`FaultPoint::NoProviderIdempotency`]).
    ///
    /// # Errors
    ///
    /// [`UnsupportedFaultPoint`] for [`FaultPoint::ConcurrentCallers`] and
    /// [`FaultPoint::CrashAfterCommit`]: they are about callers and processes,
    /// which only the scenario harness controls.
    pub fn new(fault: FaultPoint) -> Result<Self, UnsupportedFaultPoint> {
        if matches!(
            fault,
            FaultPoint::ConcurrentCallers | FaultPoint::CrashAfterCommit
        ) {
            return Err(UnsupportedFaultPoint { fault });
        }
        let honour = fault != FaultPoint::NoProviderIdempotency;
        Ok(FaultInjectingProvider {
            inner: FakePaymentProvider::new().honour_idempotency_keys(honour),
            fault,
            state: Mutex::new(State::default()),
        })
    }

    /// Whether a repeated idempotency key returns the first capture.
    #[must_use]
    pub fn honour_idempotency_keys(mut self, honour: bool) -> Self {
        self.inner = self.inner.honour_idempotency_keys(honour);
        self
    }

    /// The fault point.
    pub fn fault(&self) -> FaultPoint {
        self.fault
    }

    /// Captures `arguments["amount_cents"]` for `arguments["invoice_id"]`
    /// under `idempotency_key`, injecting the fault point into the first call:
    /// a failure before the commit, a lost acknowledgement after it, or (for
    /// [`FaultPoint::TimeoutLateCommit`]) a commit that arrives after
    /// [`LATE_COMMIT_DEADLINE`](crate::scenario::LATE_COMMIT_DEADLINE).
    ///
    /// # Errors
    ///
    /// A [`HandlerError::unknown`] for the injected fault (an uncertain
    /// outcome, never a rejection), or when `invoice_id` is missing.
    pub fn capture(
        &self,
        arguments: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, HandlerError> {
        let invoice = arguments["invoice_id"]
            .as_str()
            .ok_or_else(|| HandlerError::unknown("the capture needs an invoice_id"))?;
        let amount = arguments["amount_cents"].as_u64().unwrap_or(0);
        let first = {
            let mut state = self.lock();
            !std::mem::replace(&mut state.injected, true)
        };
        if first && self.fault == FaultPoint::BeforeCommit {
            return Err(HandlerError::unknown(
                "injected failure before the provider commits",
            ));
        }
        if first && self.fault == FaultPoint::TimeoutLateCommit {
            std::thread::sleep(crate::scenario::LATE_COMMIT_DEADLINE * 3);
        }
        let capture = self.inner.capture(invoice, amount, idempotency_key)?;
        let loses_ack = matches!(
            self.fault,
            FaultPoint::AfterCommitBeforeAck
                | FaultPoint::ProbeUnavailable
                | FaultPoint::EventuallyConsistent
                | FaultPoint::NoProviderIdempotency
                | FaultPoint::ConflictingProvider
        );
        if first && loses_ack {
            return Err(HandlerError::unknown(
                "injected lost acknowledgement after the provider committed",
            ));
        }
        Ok(payment(&capture))
    }

    /// Looks the capture up by `idempotency_key`, else by
    /// `arguments["invoice_id"]`: `committed` with the capture, or an
    /// authoritative `not_committed` (this provider commits synchronously).
    /// With [`FaultPoint::ProbeUnavailable`] the first
    /// [`PROBE_FAILURES`] lookups fail; with
    /// [`FaultPoint::EventuallyConsistent`] the first answers `pending`, the
    /// second `unknown`.
    ///
    /// # Errors
    ///
    /// The injected lookup failure.
    pub fn probe(
        &self,
        arguments: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<OutcomeProbeResult, CallbackError> {
        let lookup = {
            let mut state = self.lock();
            state.lookups += 1;
            state.lookups
        };
        match self.fault {
            FaultPoint::ProbeUnavailable if lookup <= PROBE_FAILURES => {
                return Err(CallbackError::new(
                    "injected: the provider's lookup API is unavailable",
                ));
            }
            FaultPoint::EventuallyConsistent if lookup == 1 => {
                return Ok(OutcomeProbeResult::pending());
            }
            FaultPoint::EventuallyConsistent if lookup == 2 => {
                return Ok(OutcomeProbeResult::unknown());
            }
            FaultPoint::ConflictingProvider => {
                return Ok(OutcomeProbeResult::conflict()
                    .evidence("source", "provider_lookup")
                    .evidence(
                        "held",
                        serde_json::json!({
                            "invoice_id": arguments["invoice_id"],
                            "amount": "another amount",
                        }),
                    ));
            }
            _ => {}
        }
        let by_key = match idempotency_key {
            Some(key) if self.inner.honours_idempotency_keys() => {
                self.inner.lookup_by_key(key).map_err(lookup_failed)?
            }
            _ => None,
        };
        let found = match by_key {
            Some(capture) => Some(capture),
            None => match arguments["invoice_id"].as_str() {
                Some(invoice) => self
                    .inner
                    .lookup_by_invoice(invoice)
                    .map_err(lookup_failed)?
                    .into_iter()
                    .next(),
                None => None,
            },
        };
        Ok(match found {
            Some(capture) => OutcomeProbeResult::committed(payment(&capture))
                .provider_operation_id(capture.payment_id.clone())
                .evidence("source", "fake_provider_ledger"),
            None => OutcomeProbeResult::not_committed()
                .evidence("source", "fake_provider_ledger")
                .evidence("terminal", true),
        })
    }

    /// Every committed capture, oldest first.
    ///
    /// # Errors
    ///
    /// Never for this in-memory provider; the signature matches
    /// [`FakePaymentProvider::captures`].
    pub fn committed_effects(&self) -> Result<Vec<Capture>, ProviderError> {
        self.inner.captures()
    }

    /// How many captures were committed.
    ///
    /// # Errors
    ///
    /// As [`committed_effects`](Self::committed_effects).
    pub fn committed_count(&self) -> Result<usize, ProviderError> {
        self.inner.committed_count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The provider's answer, as the Python package's fake provider gives it.
fn payment(capture: &Capture) -> Value {
    json!({
        "payment_id": capture.payment_id,
        "invoice_id": capture.invoice_id,
        "status": "captured",
    })
}

fn lookup_failed(error: ProviderError) -> CallbackError {
    CallbackError::new(format!("the provider's lookup failed: {error}"))
}
