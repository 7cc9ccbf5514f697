//! Fault points and fault schedules: what goes wrong, scripted by call count.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The named fault points of the fault matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultPoint {
    /// Nothing goes wrong.
    None,
    /// The first request fails before the provider commits.
    BeforeCommit,
    /// The provider commits the first request; its acknowledgement is lost.
    AfterCommitBeforeAck,
    /// The handler misses its deadline; the provider commits afterwards.
    TimeoutLateCommit,
    /// The acknowledgement is lost and the provider's lookup API fails the
    /// first [`PROBE_FAILURES`] times.
    ProbeUnavailable,
    /// The acknowledgement is lost and lookups answer `pending`, then
    /// `unknown`, before the provider's read side catches up.
    EventuallyConsistent,
    /// The provider ignores idempotency keys; the first acknowledgement is lost.
    NoProviderIdempotency,
    /// [`CONCURRENT_CALLERS`] callers run the same operation at once.
    ConcurrentCallers,
    /// The worker process dies right after the provider committed.
    CrashAfterCommit,
    /// The acknowledgement is lost and the lookup finds a capture of the
    /// invoice with another amount: a conflict, which no retry or
    /// confirmation may settle.
    ConflictingProvider,
}

/// How many lookups answer a conflict in [`FaultPoint::ConflictingProvider`]
/// (more than a scenario asks: a conflict is never asked again).
pub const CONFLICTING_LOOKUPS: usize = 3;
/// How many lookups fail in [`FaultPoint::ProbeUnavailable`].
pub const PROBE_FAILURES: usize = 2;
/// How many callers run at once in [`FaultPoint::ConcurrentCallers`].
pub const CONCURRENT_CALLERS: usize = 3;
/// The handler deadline of [`FaultPoint::TimeoutLateCommit`]. The held request
/// always misses it; it is long enough that the retry, which is not held, does
/// not miss it too on a loaded machine.
pub const LATE_COMMIT_DEADLINE: Duration = Duration::from_millis(100);

impl FaultPoint {
    /// Every fault point, in matrix order.
    pub const ALL: [FaultPoint; 10] = [
        FaultPoint::None,
        FaultPoint::BeforeCommit,
        FaultPoint::AfterCommitBeforeAck,
        FaultPoint::TimeoutLateCommit,
        FaultPoint::ProbeUnavailable,
        FaultPoint::EventuallyConsistent,
        FaultPoint::NoProviderIdempotency,
        FaultPoint::ConcurrentCallers,
        FaultPoint::CrashAfterCommit,
        FaultPoint::ConflictingProvider,
    ];

    /// The kebab-case name, as on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultPoint::None => "none",
            FaultPoint::BeforeCommit => "before-commit",
            FaultPoint::AfterCommitBeforeAck => "after-commit-before-ack",
            FaultPoint::TimeoutLateCommit => "timeout-late-commit",
            FaultPoint::ProbeUnavailable => "probe-unavailable",
            FaultPoint::EventuallyConsistent => "eventually-consistent",
            FaultPoint::NoProviderIdempotency => "no-provider-idempotency",
            FaultPoint::ConcurrentCallers => "concurrent-callers",
            FaultPoint::CrashAfterCommit => "crash-after-commit",
            FaultPoint::ConflictingProvider => "conflicting-provider",
        }
    }

    /// One line saying what goes wrong.
    pub fn description(self) -> &'static str {
        match self {
            FaultPoint::None => "nothing goes wrong: one capture, acknowledged",
            FaultPoint::BeforeCommit => "the first request fails before the provider commits",
            FaultPoint::AfterCommitBeforeAck => {
                "the provider commits the first capture and its acknowledgement is lost"
            }
            FaultPoint::TimeoutLateCommit => {
                "the handler misses its 100 ms deadline; the provider commits after the caller gave up"
            }
            FaultPoint::ProbeUnavailable => {
                "the acknowledgement is lost and the lookup API fails the first 2 times"
            }
            FaultPoint::EventuallyConsistent => {
                "the acknowledgement is lost and lookups answer pending, then unknown"
            }
            FaultPoint::NoProviderIdempotency => {
                "the provider ignores idempotency keys and the first acknowledgement is lost"
            }
            FaultPoint::ConcurrentCallers => {
                "3 callers run the same capture while the first dispatch is live"
            }
            FaultPoint::CrashAfterCommit => {
                "the worker process dies right after the provider committed"
            }
            FaultPoint::ConflictingProvider => {
                "the acknowledgement is lost and lookups find a capture of the invoice with another amount"
            }
        }
    }

    /// The fault schedule that produces this fault point.
    pub fn schedule(self) -> FaultSchedule {
        let schedule = FaultSchedule::new();
        match self {
            FaultPoint::None => schedule,
            FaultPoint::BeforeCommit => schedule.on_perform(1, PerformFault::FailBeforeCommit),
            FaultPoint::AfterCommitBeforeAck => schedule.on_perform(1, PerformFault::LoseAck),
            FaultPoint::TimeoutLateCommit => schedule
                .on_perform(1, PerformFault::LateCommit)
                .deadline(LATE_COMMIT_DEADLINE),
            FaultPoint::ProbeUnavailable => (1..=PROBE_FAILURES).fold(
                schedule.on_perform(1, PerformFault::LoseAck),
                |schedule, call| schedule.on_look_up(call, LookupFault::Unavailable),
            ),
            FaultPoint::EventuallyConsistent => schedule
                .on_perform(1, PerformFault::LoseAck)
                .on_look_up(1, LookupFault::Pending)
                .on_look_up(2, LookupFault::Unknown),
            FaultPoint::NoProviderIdempotency => schedule
                .ignore_idempotency_keys()
                .on_perform(1, PerformFault::LoseAck),
            FaultPoint::ConcurrentCallers => schedule
                .concurrent_callers(CONCURRENT_CALLERS)
                .on_perform(1, PerformFault::Hold),
            FaultPoint::CrashAfterCommit => schedule.on_perform(1, PerformFault::Crash),
            FaultPoint::ConflictingProvider => (1..=CONFLICTING_LOOKUPS).fold(
                schedule.on_perform(1, PerformFault::LoseAck),
                |schedule, call| schedule.on_look_up(call, LookupFault::Conflict),
            ),
        }
    }
}

impl fmt::Display for FaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an unknown fault point name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFaultPoint {
    /// The name given.
    pub name: String,
}

impl fmt::Display for UnknownFaultPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = FaultPoint::ALL.iter().map(|p| p.as_str()).collect();
        write!(
            f,
            "unknown scenario {:?}; valid names: {}",
            self.name,
            names.join(", ")
        )
    }
}

impl std::error::Error for UnknownFaultPoint {}

impl FromStr for FaultPoint {
    type Err = UnknownFaultPoint;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FaultPoint::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownFaultPoint { name: s.to_owned() })
    }
}

/// What one call of the provider's `perform` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PerformFault {
    /// Perform and return the output.
    Commit,
    /// Fail without reaching the provider: nothing is committed.
    FailBeforeCommit,
    /// Perform (the provider commits), then fail as if the reply was lost.
    LoseAck,
    /// Hold the request until every caller has returned (with a handler
    /// deadline they gave up waiting), then perform: the commit is late. The
    /// order comes from synchronization, not from a sleep. Without a deadline
    /// in the schedule it behaves as [`Commit`](Self::Commit).
    LateCommit,
    /// Perform, then the worker process dies: from this point on, nothing that
    /// process does reaches the ledger.
    Crash,
    /// Perform only after every other concurrent caller has run.
    Hold,
}

/// What one call of the provider's `look_up` (the outcome probe) answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupFault {
    /// Ask the provider.
    Answer,
    /// Fail: the lookup API is down.
    Unavailable,
    /// Answer `pending` without asking.
    Pending,
    /// Answer `unknown` without asking (an empty eventually-consistent read).
    Unknown,
    /// Answer that the provider holds a capture of the invoice with another
    /// amount ([`Lookup::Conflict`](crate::scenario::Lookup::Conflict)).
    Conflict,
}

/// A script of faults, by call count: "the 1st perform loses its
/// acknowledgement, the 1st and 2nd lookups fail". Calls not scripted behave
/// normally. Nothing depends on wall-clock time except the deadline and the
/// late commit's delay.
///
/// ```
/// use std::time::Duration;
/// use effect_testkit::scenario::{FaultSchedule, LookupFault, PerformFault};
///
/// let schedule = FaultSchedule::new()
///     .on_perform(1, PerformFault::LoseAck)
///     .on_look_up(1, LookupFault::Pending)
///     .deadline(Duration::from_millis(50));
/// assert_eq!(schedule.perform_fault(1), PerformFault::LoseAck);
/// assert_eq!(schedule.perform_fault(2), PerformFault::Commit);
/// assert_eq!(schedule.look_up_fault(2), LookupFault::Answer);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSchedule {
    perform: Vec<(usize, PerformFault)>,
    look_up: Vec<(usize, LookupFault)>,
    ignore_keys: bool,
    callers: usize,
    deadline: Option<Duration>,
}

impl Default for FaultSchedule {
    fn default() -> Self {
        FaultSchedule::new()
    }
}

impl FaultSchedule {
    /// No faults, one caller, no deadline.
    pub fn new() -> Self {
        FaultSchedule {
            perform: Vec::new(),
            look_up: Vec::new(),
            ignore_keys: false,
            callers: 1,
            deadline: None,
        }
    }

    /// The `call`-th perform (1-based, across all callers) does `fault`.
    #[must_use]
    pub fn on_perform(mut self, call: usize, fault: PerformFault) -> Self {
        self.perform.retain(|(c, _)| *c != call);
        self.perform.push((call, fault));
        self
    }

    /// The `call`-th lookup (1-based) answers `fault`.
    #[must_use]
    pub fn on_look_up(mut self, call: usize, fault: LookupFault) -> Self {
        self.look_up.retain(|(c, _)| *c != call);
        self.look_up.push((call, fault));
        self
    }

    /// The provider ignores idempotency keys: `perform` is called without one,
    /// as if the provider never read it. Lookups still get the key.
    #[must_use]
    pub fn ignore_idempotency_keys(mut self) -> Self {
        self.ignore_keys = true;
        self
    }

    /// `callers` callers run the operation at once (at least 1). Combine with
    /// [`PerformFault::Hold`] on the first perform so the others find its
    /// dispatch live.
    #[must_use]
    pub fn concurrent_callers(mut self, callers: usize) -> Self {
        self.callers = callers.max(1);
        self
    }

    /// The handler deadline of every execution.
    #[must_use]
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// What the `call`-th perform does.
    pub fn perform_fault(&self, call: usize) -> PerformFault {
        self.perform
            .iter()
            .find(|(c, _)| *c == call)
            .map_or(PerformFault::Commit, |(_, f)| *f)
    }

    /// What the `call`-th lookup answers.
    pub fn look_up_fault(&self, call: usize) -> LookupFault {
        self.look_up
            .iter()
            .find(|(c, _)| *c == call)
            .map_or(LookupFault::Answer, |(_, f)| *f)
    }

    /// Whether the provider ignores idempotency keys.
    pub fn ignores_idempotency_keys(&self) -> bool {
        self.ignore_keys
    }

    /// How many callers run at once.
    pub fn callers(&self) -> usize {
        self.callers
    }

    /// The handler deadline, if any.
    pub fn handler_deadline(&self) -> Option<Duration> {
        self.deadline
    }
}
