//! Retry policy and circuit breaker for plain (non-effect) tools.
//!
//! Effect-backed tools bypass both: retrying an uncertain write is decided by
//! its contract in the effect executor, never by a generic retry loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use effect_core::Clock;

use crate::error::ToolErrorKind;

/// How a plain tool is retried: errors of the retryable kinds (default: only
/// [`Timeout`](crate::ToolErrorKind::Timeout)), with bounded exponential backoff.
///
/// ```
/// use agent_runtime::{RetryPolicy, ToolErrorKind};
///
/// let default = RetryPolicy::default();
/// assert!(default.retries(ToolErrorKind::Timeout));
/// assert!(!default.retries(ToolErrorKind::Failed));
/// let broad = RetryPolicy::default().retryable_errors([ToolErrorKind::Timeout, ToolErrorKind::Failed]);
/// assert!(broad.retries(ToolErrorKind::Failed));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// Attempts in total, at least 1. Default 3.
    pub max_attempts: u32,
    /// The delay before the first retry. Default 100 ms.
    pub initial_backoff: Duration,
    /// The largest delay. Default 2 s.
    pub max_backoff: Duration,
    /// The retryable kinds, one bit per kind.
    retryable: u8,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            retryable: kind_bit(ToolErrorKind::Timeout),
        }
    }
}

fn kind_bit(kind: ToolErrorKind) -> u8 {
    match kind {
        ToolErrorKind::Timeout => 1,
        ToolErrorKind::Rejected => 2,
        ToolErrorKind::Failed => 4,
    }
}

impl RetryPolicy {
    /// No retries.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Sets the number of attempts (at least 1).
    #[must_use]
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the error kinds that are retried (default: only `timeout`); an
    /// empty set retries nothing. Only plain tools are retried: an effect's
    /// retry is always its contract's decision.
    #[must_use]
    pub fn retryable_errors(mut self, kinds: impl IntoIterator<Item = ToolErrorKind>) -> Self {
        self.retryable = kinds
            .into_iter()
            .fold(0, |bits, kind| bits | kind_bit(kind));
        self
    }

    /// Whether an error of `kind` is retried (while attempts remain).
    pub fn retries(&self, kind: ToolErrorKind) -> bool {
        self.retryable & kind_bit(kind) != 0
    }

    /// Sets the first delay and the cap.
    #[must_use]
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// The delay after failed attempt `attempt` (1-based): `initial * 2^(attempt-1)`,
    /// capped at `max_backoff`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agent_runtime::RetryPolicy;
    ///
    /// let policy = RetryPolicy::default().backoff(Duration::from_millis(10), Duration::from_millis(25));
    /// assert_eq!(policy.delay_after(1), Duration::from_millis(10));
    /// assert_eq!(policy.delay_after(2), Duration::from_millis(20));
    /// assert_eq!(policy.delay_after(3), Duration::from_millis(25));
    /// ```
    pub fn delay_after(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(31);
        self.initial_backoff
            .checked_mul(1u32 << exponent)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// Waits between retries, injected so tests do not sleep: the executor's
/// `effect_core::Sleeper`, one trait for both layers.
pub use effect_core::{Sleeper, ThreadSleeper};

/// When a dependency's circuit opens, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CircuitBreakerPolicy {
    /// Consecutive failed calls that open the circuit. Default 5.
    pub failure_threshold: u32,
    /// How long an open circuit refuses calls before letting one trial call
    /// through. Default 30 s.
    pub open_for: Duration,
}

impl Default for CircuitBreakerPolicy {
    fn default() -> Self {
        CircuitBreakerPolicy {
            failure_threshold: 5,
            open_for: Duration::from_secs(30),
        }
    }
}

impl CircuitBreakerPolicy {
    /// Opens after `threshold` consecutive failures (at least 1) for `open_for`.
    pub fn new(threshold: u32, open_for: Duration) -> Self {
        CircuitBreakerPolicy {
            failure_threshold: threshold.max(1),
            open_for,
        }
    }
}

/// The state of one dependency's circuit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CircuitState {
    /// Calls go through; this many consecutive failures so far.
    Closed {
        /// Consecutive failed calls.
        consecutive_failures: u32,
    },
    /// Calls are refused until this time; then one trial call goes through.
    Open {
        /// When the trial call is allowed.
        until: SystemTime,
    },
}

/// Per-dependency circuit breakers, shared by every run of a runtime.
#[derive(Debug, Clone)]
pub(crate) struct CircuitBreakers {
    policy: CircuitBreakerPolicy,
    clock: Arc<dyn Clock>,
    states: Arc<Mutex<HashMap<String, CircuitState>>>,
}

impl CircuitBreakers {
    pub(crate) fn new(policy: CircuitBreakerPolicy, clock: Arc<dyn Clock>) -> Self {
        CircuitBreakers {
            policy,
            clock,
            states: Arc::default(),
        }
    }

    /// True when a call to `dependency` may proceed.
    pub(crate) fn allows(&self, dependency: &str) -> bool {
        match self.state(dependency) {
            CircuitState::Closed { .. } => true,
            CircuitState::Open { until } => self.clock.now() >= until,
        }
    }

    pub(crate) fn record_success(&self, dependency: &str) {
        self.with_states(|states| {
            states.insert(
                dependency.to_owned(),
                CircuitState::Closed {
                    consecutive_failures: 0,
                },
            );
        });
    }

    /// Records a failed call; true when the circuit is (now) open.
    pub(crate) fn record_failure(&self, dependency: &str) -> bool {
        let now = self.clock.now();
        let policy = self.policy;
        self.with_states(|states| {
            let failures = match states.get(dependency) {
                Some(CircuitState::Closed {
                    consecutive_failures,
                }) => consecutive_failures.saturating_add(1),
                // A failed trial call re-opens the circuit at once.
                Some(CircuitState::Open { .. }) => policy.failure_threshold,
                None => 1,
            };
            let next = if failures >= policy.failure_threshold {
                CircuitState::Open {
                    until: now + policy.open_for,
                }
            } else {
                CircuitState::Closed {
                    consecutive_failures: failures,
                }
            };
            states.insert(dependency.to_owned(), next);
            matches!(next, CircuitState::Open { .. })
        })
    }

    pub(crate) fn state(&self, dependency: &str) -> CircuitState {
        self.with_states(|states| {
            states
                .get(dependency)
                .copied()
                .unwrap_or(CircuitState::Closed {
                    consecutive_failures: 0,
                })
        })
    }

    fn with_states<T>(&self, f: impl FnOnce(&mut HashMap<String, CircuitState>) -> T) -> T {
        // The map holds plain values; a panic elsewhere cannot leave it half-written.
        let mut states = self
            .states
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut states)
    }
}

#[cfg(test)]
mod tests;
