use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use effect_core::ManualClock;

use super::*;

fn breakers(threshold: u32) -> (CircuitBreakers, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(UNIX_EPOCH));
    let policy = CircuitBreakerPolicy::new(threshold, Duration::from_secs(10));
    (CircuitBreakers::new(policy, clock.clone()), clock)
}

#[test]
fn opens_after_consecutive_failures_only() {
    let (b, _) = breakers(3);
    assert!(!b.record_failure("db"));
    assert!(!b.record_failure("db"));
    b.record_success("db");
    assert!(!b.record_failure("db"));
    assert!(!b.record_failure("db"));
    assert!(b.allows("db"));
    assert!(b.record_failure("db"));
    assert!(!b.allows("db"));
    assert!(b.allows("other"));
}

#[test]
fn a_successful_trial_closes_the_circuit() {
    let (b, clock) = breakers(1);
    assert!(b.record_failure("db"));
    clock.advance(Duration::from_secs(9));
    assert!(!b.allows("db"));
    clock.advance(Duration::from_secs(1));
    assert!(b.allows("db"));
    b.record_success("db");
    assert_eq!(
        b.state("db"),
        CircuitState::Closed {
            consecutive_failures: 0
        }
    );
}

#[test]
fn backoff_doubles_and_is_capped() {
    let policy = RetryPolicy::default().backoff(Duration::from_millis(100), Duration::from_secs(1));
    let delays: Vec<u128> = (1..=6).map(|a| policy.delay_after(a).as_millis()).collect();
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    assert_eq!(policy.delay_after(200), Duration::from_secs(1));
    assert_eq!(RetryPolicy::default().max_attempts(0).max_attempts, 1);
}
