//! Time, injected: stores and the executor read it only through [`Clock`], so
//! lease and deadline behaviour is testable without sleeping.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // The one place that reads the real clock.
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Waiting, injected like the clock: the executor's bounded wait for a live
/// owner sleeps through this, so a test can make the wait pass without
/// sleeping (a [`ManualClock`] advances itself instead).
pub trait Sleeper: Send + Sync + fmt::Debug {
    /// Waits for `duration`.
    fn sleep(&self, duration: Duration);
}

/// Sleeps the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }
}

/// A clock that only moves when told to; for tests.
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<SystemTime>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self
            .now
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Sleeping on a manual clock moves it forward at once.
impl Sleeper for ManualClock {
    fn sleep(&self, duration: Duration) {
        self.advance(duration);
    }
}

/// Seconds since the Unix epoch as a float, the format of `lease_until` (docs/spec.md §8).
pub fn unix_seconds(time: SystemTime) -> f64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_secs_f64(),
        Err(before) => -before.duration().as_secs_f64(),
    }
}

/// ISO-8601 UTC text with microseconds and offset, the timestamp format of
/// docs/spec.md §8: `2026-01-01T00:00:00.123456+00:00`.
///
/// ```
/// # use std::time::{Duration, UNIX_EPOCH};
/// # use effect_core::clock::format_timestamp;
/// let t = UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
/// assert_eq!(format_timestamp(t), "2026-01-01T00:00:00.123456+00:00");
/// ```
pub fn format_timestamp(time: SystemTime) -> String {
    let micros = match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_micros(),
        // Times before 1970 do not occur in a ledger; clamp rather than fail.
        Err(_) => 0,
    };
    let secs = u64::try_from(micros / 1_000_000).unwrap_or(u64::MAX);
    let micros = micros % 1_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}+00:00",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm, for days since 1970-01-01.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_leap_days_and_epoch() {
        assert_eq!(
            format_timestamp(UNIX_EPOCH),
            "1970-01-01T00:00:00.000000+00:00"
        );
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(format_timestamp(leap), "2000-02-29T00:00:00.000000+00:00");
        let late = UNIX_EPOCH + Duration::from_secs(1_798_761_599); // 2026-12-31T23:59:59
        assert_eq!(format_timestamp(late), "2026-12-31T23:59:59.000000+00:00");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(UNIX_EPOCH);
        assert_eq!(unix_seconds(clock.now()), 0.0);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(unix_seconds(clock.now()), 1.5);
    }
}
