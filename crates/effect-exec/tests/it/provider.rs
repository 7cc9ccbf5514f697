//! A small fake payment provider for the executor's tests: it counts what it
//! commits, dedups by idempotency key when asked to, and follows a fault script.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use effect_core::{CallbackError, EffectContract, OutcomeProbeResult, ProbeStatus};
use effect_exec::HandlerContext;
use effect_exec::HandlerError;
use serde_json::{Value, json};

/// What the next handler call does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Commit and acknowledge.
    None,
    /// Fail without committing.
    BeforeCommit,
    /// Commit, then lose the acknowledgement.
    AfterCommit,
    /// Sleep, then commit and acknowledge (misses a short deadline).
    SlowCommit(Duration),
    /// Reject definitively without committing.
    Reject,
    /// Wait until [`FakeProvider::release`], then commit and acknowledge: a
    /// handler that is surely still running while the test looks
    /// ([`FakeProvider::wait_until_held`]).
    Held,
}

/// How long a test waits for a condition before it fails.
const PATIENCE: Duration = Duration::from_secs(60);

/// Handlers inside a [`Fault::Held`] call, and whether they may go on.
#[derive(Debug, Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

/// What the next probe call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// Look the key up: committed if found, else not committed.
    Lookup,
    Pending,
    Unknown,
    Fail,
}

#[derive(Debug, Default)]
pub struct FakeProvider {
    commits: Mutex<Vec<(String, String)>>,
    faults: Mutex<VecDeque<Fault>>,
    probes: Mutex<VecDeque<ProbeAnswer>>,
    handler_calls: AtomicUsize,
    probe_calls: AtomicUsize,
    gate: Gate,
    /// Whether a repeated key returns the first commit instead of committing again.
    pub dedup_by_key: bool,
}

impl FakeProvider {
    pub fn new(dedup_by_key: bool) -> Arc<Self> {
        Arc::new(FakeProvider {
            dedup_by_key,
            ..FakeProvider::default()
        })
    }

    pub fn script(self: &Arc<Self>, faults: &[Fault]) -> Arc<Self> {
        self.faults.lock().unwrap().extend(faults.iter().copied());
        Arc::clone(self)
    }

    pub fn probe_script(self: &Arc<Self>, answers: &[ProbeAnswer]) -> Arc<Self> {
        self.probes.lock().unwrap().extend(answers.iter().copied());
        Arc::clone(self)
    }

    pub fn committed(&self) -> usize {
        self.commits.lock().unwrap().len()
    }

    /// Blocks until a handler is inside a [`Fault::Held`] call.
    pub fn wait_until_held(&self) {
        let state = self.gate.state.lock().unwrap();
        let (state, _) = self
            .gate
            .changed
            .wait_timeout_while(state, PATIENCE, |(held, _)| *held == 0)
            .unwrap();
        assert!(state.0 > 0, "no handler was held");
    }

    /// Lets every [`Fault::Held`] call, present and future, go on.
    pub fn release(&self) {
        self.gate.state.lock().unwrap().1 = true;
        self.gate.changed.notify_all();
    }

    /// Blocks until the provider has committed `n` effects.
    pub fn wait_for_commits(&self, n: usize) {
        let step = Duration::from_millis(1);
        let mut waited = Duration::ZERO;
        while self.committed() < n {
            assert!(waited < PATIENCE, "{n} commits never happened");
            std::thread::sleep(step);
            waited += step;
        }
    }

    pub fn handler_calls(&self) -> usize {
        self.handler_calls.load(Ordering::SeqCst)
    }

    pub fn probe_calls(&self) -> usize {
        self.probe_calls.load(Ordering::SeqCst)
    }

    fn commit(&self, key: &str, invoice: &str) -> Value {
        let mut commits = self.commits.lock().unwrap();
        if let Some(i) = commits
            .iter()
            .position(|(k, _)| self.dedup_by_key && k == key)
        {
            return payment(i, invoice);
        }
        commits.push((key.to_owned(), invoice.to_owned()));
        payment(commits.len() - 1, invoice)
    }

    fn lookup(&self, key: &str) -> Option<Value> {
        let commits = self.commits.lock().unwrap();
        let i = commits.iter().position(|(k, _)| k == key)?;
        Some(payment(i, &commits[i].1))
    }

    /// The handler: capture the invoice under the provider key.
    pub fn capture(&self, args: &Value, key: Option<&str>) -> Result<Value, HandlerError> {
        self.handler_calls.fetch_add(1, Ordering::SeqCst);
        let invoice = args["invoice_id"].as_str().unwrap_or_default().to_owned();
        let key = key.map_or_else(|| format!("nokey:{invoice}"), str::to_owned);
        let fault = self
            .faults
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Fault::None);
        match fault {
            Fault::None => Ok(self.commit(&key, &invoice)),
            Fault::BeforeCommit => Err(HandlerError::unknown("connection reset before commit")),
            Fault::AfterCommit => {
                self.commit(&key, &invoice);
                Err(HandlerError::unknown(
                    "timed out waiting for the acknowledgement",
                ))
            }
            Fault::SlowCommit(delay) => {
                std::thread::sleep(delay);
                Ok(self.commit(&key, &invoice))
            }
            Fault::Reject => Err(HandlerError::rejected("card declined")),
            Fault::Held => {
                let mut state = self.gate.state.lock().unwrap();
                state.0 += 1;
                self.gate.changed.notify_all();
                let state = self
                    .gate
                    .changed
                    .wait_while(state, |(_, released)| !*released)
                    .unwrap();
                drop(state);
                Ok(self.commit(&key, &invoice))
            }
        }
    }

    /// The outcome probe: lookup by key, following the probe script.
    pub fn probe(&self, key: Option<&str>) -> Result<OutcomeProbeResult, CallbackError> {
        self.probe_calls.fetch_add(1, Ordering::SeqCst);
        let answer = self
            .probes
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(ProbeAnswer::Lookup);
        let key = key.ok_or("the probe needs the provider key")?;
        match answer {
            ProbeAnswer::Lookup => Ok(match self.lookup(key) {
                Some(found) => {
                    let id = found["payment_id"].as_str().unwrap_or_default().to_owned();
                    OutcomeProbeResult::committed(found)
                        .provider_operation_id(id)
                        .evidence("source", "fake_provider_ledger")
                }
                None => {
                    OutcomeProbeResult::not_committed().evidence("source", "fake_provider_ledger")
                }
            }),
            ProbeAnswer::Pending => Ok(OutcomeProbeResult::pending()),
            ProbeAnswer::Unknown => Ok(OutcomeProbeResult {
                status: ProbeStatus::Unknown,
                ..OutcomeProbeResult::unknown()
            }),
            ProbeAnswer::Fail => Err(CallbackError::new("provider lookup API unavailable")),
        }
    }
}

fn payment(i: usize, invoice: &str) -> Value {
    json!({"payment_id": format!("pay-{:06}", i + 1), "invoice_id": invoice, "status": "captured"})
}

/// Contract variants of the fault matrix.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub key: bool,
    pub guaranteed: bool,
    pub probe: bool,
}

pub const PROBE_ONLY: Variant = Variant {
    key: true,
    guaranteed: false,
    probe: true,
};
pub const GUARANTEED_ONLY: Variant = Variant {
    key: true,
    guaranteed: true,
    probe: false,
};
pub const BOTH: Variant = Variant {
    key: true,
    guaranteed: true,
    probe: true,
};
pub const NEITHER: Variant = Variant {
    key: false,
    guaranteed: false,
    probe: false,
};

pub fn contract(provider: &Arc<FakeProvider>, variant: Variant) -> EffectContract {
    let mut builder = effect_test_support::contracts::capture_payment_without_key();
    if variant.key {
        builder = builder
            .provider_idempotency_key(|args| {
                Ok(args["invoice_id"].as_str().map(|i| format!("capture:{i}")))
            })
            .provider_idempotency_guaranteed(variant.guaranteed);
    }
    if variant.probe {
        let provider = Arc::clone(provider);
        builder = builder.outcome_probe(move |_args, key| provider.probe(key));
    }
    builder.build().unwrap()
}

pub fn handler(
    provider: &Arc<FakeProvider>,
) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static {
    let provider = Arc::clone(provider);
    move |args, key| provider.capture(&args, key.provider_key())
}

pub fn invoice(id: &str) -> Value {
    json!({"invoice_id": id, "amount_cents": 1250})
}
