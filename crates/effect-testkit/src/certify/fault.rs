//! The faults a certification injects, and the wrapper that injects one of
//! them around the user's handler.

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use effect_exec::{HandlerContext, HandlerError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scenario::harness::{COORDINATION_TIMEOUT, Gate, lock};

/// The user's handler: one request to the provider.
pub type CertifyHandler =
    Arc<dyn Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync>;
/// What else dies with the worker ([`Certification::on_crash`](super::Certification::on_crash)).
pub(crate) type CrashHook = Arc<dyn Fn() + Send + Sync>;

/// One fault a certification injects into the first dispatch of an
/// operation. Every later dispatch (a retry, a resume) reaches the user's
/// handler untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum CertifyFault {
    /// Nothing goes wrong: the baseline, one effect.
    None,
    /// The request fails before it is sent; the caller is told the outcome
    /// is unknown (a client cannot always tell "not sent" from "lost"), so
    /// the contract must find out that nothing was committed.
    FailureBeforeSend,
    /// The provider commits; its answer is lost.
    LostAck,
    /// The provider commits; its answer arrives after the caller's
    /// deadline, when the caller has given up.
    TimeoutAfterCommit,
    /// The request is held until the caller's deadline has passed, then
    /// sent: the provider commits after the caller gave up.
    LateCommit,
    /// The provider commits and the worker dies: nothing it does afterwards
    /// reaches the ledger, and a new executor takes over on the same ledger
    /// once the dead worker's lease has run out.
    CrashAfterCommit,
    /// The provider already holds an effect for the operation's business
    /// identity that contradicts the request (the invoice captured with
    /// another amount, planted by [`Certification::conflicting`](super::Certification::conflicting)),
    /// and the first request fails before it is sent: the contract must not
    /// take that effect for its own, nor send the request beside it.
    ConflictingProvider,
}

impl CertifyFault {
    /// Every fault, in the report's order.
    /// [`ConflictingProvider`](CertifyFault::ConflictingProvider) runs only
    /// when the certification has a conflicting effect to plant.
    pub const ALL: [CertifyFault; 7] = [
        CertifyFault::None,
        CertifyFault::FailureBeforeSend,
        CertifyFault::LostAck,
        CertifyFault::TimeoutAfterCommit,
        CertifyFault::LateCommit,
        CertifyFault::CrashAfterCommit,
        CertifyFault::ConflictingProvider,
    ];

    /// The fault's name, as in the report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            CertifyFault::None => "none",
            CertifyFault::FailureBeforeSend => "failure-before-send",
            CertifyFault::LostAck => "lost-ack",
            CertifyFault::TimeoutAfterCommit => "timeout-after-commit",
            CertifyFault::LateCommit => "late-commit",
            CertifyFault::CrashAfterCommit => "crash-after-commit",
            CertifyFault::ConflictingProvider => "conflicting-provider",
        }
    }

    /// What goes wrong, in one line.
    pub fn description(self) -> &'static str {
        match self {
            CertifyFault::None => "nothing: one request, acknowledged",
            CertifyFault::FailureBeforeSend => {
                "the first request fails before it is sent; the caller cannot tell"
            }
            CertifyFault::LostAck => "the provider commits the first request; its answer is lost",
            CertifyFault::TimeoutAfterCommit => {
                "the provider commits; the answer comes after the caller's deadline"
            }
            CertifyFault::LateCommit => {
                "the first request reaches the provider after the caller's deadline"
            }
            CertifyFault::CrashAfterCommit => {
                "the worker dies right after the provider committed; a new one takes over"
            }
            CertifyFault::ConflictingProvider => {
                "the provider holds a conflicting effect; the first request fails before it is sent"
            }
        }
    }

    /// Whether the first dispatch runs under the certification's deadline.
    pub(crate) fn needs_deadline(self) -> bool {
        matches!(
            self,
            CertifyFault::TimeoutAfterCommit | CertifyFault::LateCommit
        )
    }
}

impl fmt::Display for CertifyFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault name that is not one of [`CertifyFault::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault {name:?}")]
pub struct UnknownCertifyFault {
    /// The name given.
    pub name: String,
}

impl FromStr for CertifyFault {
    type Err = UnknownCertifyFault;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        CertifyFault::ALL
            .into_iter()
            .find(|fault| fault.name() == name)
            .ok_or_else(|| UnknownCertifyFault {
                name: name.to_owned(),
            })
    }
}

/// The user's handler behind one fault: counts its calls, injects the fault
/// into the first, and tracks the requests still running.
pub(crate) struct Injector {
    handler: CertifyHandler,
    fault: CertifyFault,
    on_crash: Option<CrashHook>,
    calls: AtomicUsize,
    fired: AtomicBool,
    /// Set when the worker "died" ([`CertifyFault::CrashAfterCommit`]).
    pub(crate) crashed: Arc<AtomicBool>,
    /// Opened once every caller of the first execution has returned.
    pub(crate) late: Gate,
    in_flight: Mutex<usize>,
    idle: Condvar,
}

impl Injector {
    pub(crate) fn new(
        handler: CertifyHandler,
        fault: CertifyFault,
        on_crash: Option<CrashHook>,
    ) -> Self {
        let injector = Injector {
            handler,
            fault,
            on_crash,
            calls: AtomicUsize::new(0),
            fired: AtomicBool::new(false),
            crashed: Arc::new(AtomicBool::new(false)),
            late: Gate::default(),
            in_flight: Mutex::new(0),
            idle: Condvar::new(),
        };
        if !fault.needs_deadline() {
            // Without a deadline the caller waits for its handler: nobody
            // would open the gate.
            injector.late.open();
        }
        injector
    }

    /// Times the executor called the handler.
    pub(crate) fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// Whether the fault was injected (for [`CertifyFault::None`]: whether
    /// the handler ran at all).
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// One dispatch, as the fault says.
    pub(crate) fn call(
        &self,
        arguments: Value,
        context: HandlerContext,
    ) -> Result<Value, HandlerError> {
        let first = self.calls.fetch_add(1, Ordering::SeqCst) == 0;
        *lock(&self.in_flight) += 1;
        let result = self.dispatch(first, arguments, context);
        *lock(&self.in_flight) -= 1;
        self.idle.notify_all();
        result
    }

    fn dispatch(
        &self,
        first: bool,
        arguments: Value,
        context: HandlerContext,
    ) -> Result<Value, HandlerError> {
        let fire = || self.fired.store(true, Ordering::SeqCst);
        if !first {
            return (self.handler)(arguments, context);
        }
        match self.fault {
            CertifyFault::None => {
                fire();
                (self.handler)(arguments, context)
            }
            CertifyFault::FailureBeforeSend => {
                fire();
                Err(HandlerError::unknown(
                    "injected: the request failed before it was sent",
                ))
            }
            CertifyFault::ConflictingProvider => {
                fire();
                Err(HandlerError::unknown(
                    "injected: the request failed before it was sent, beside a conflicting effect",
                ))
            }
            CertifyFault::LostAck => {
                (self.handler)(arguments, context)?;
                fire();
                Err(HandlerError::unknown(
                    "injected: the provider's answer was lost after it committed",
                ))
            }
            CertifyFault::TimeoutAfterCommit => {
                let answer = (self.handler)(arguments, context)?;
                fire();
                // The caller's deadline passes while the answer is held.
                self.late.hold();
                Ok(answer)
            }
            CertifyFault::LateCommit => {
                fire();
                self.late.hold();
                (self.handler)(arguments, context)
            }
            CertifyFault::CrashAfterCommit => {
                (self.handler)(arguments, context)?;
                fire();
                self.crashed.store(true, Ordering::SeqCst);
                if let Some(on_crash) = &self.on_crash {
                    on_crash();
                }
                Err(HandlerError::unknown(
                    "injected: the worker died after the provider committed",
                ))
            }
        }
    }

    /// Waits until no request is running (a late commit has landed); false
    /// when one still runs after the coordination timeout.
    pub(crate) fn wait_idle(&self) -> bool {
        let in_flight = lock(&self.in_flight);
        let (in_flight, _) = self
            .idle
            .wait_timeout_while(in_flight, COORDINATION_TIMEOUT, |n| *n > 0)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *in_flight == 0
    }
}
