//! Time, injected: stores and the executor read it only through [`Clock`], so
//! lease and deadline behaviour is testable without sleeping.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
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

    /// Waits for `duration` or until `stop` is raised, whichever comes
    /// first; true when it was raised. The pause of a periodic task (the
    /// sweeper's, the recovery worker's) goes through this, so stopping it
    /// need not wait out the pause. The default waits through
    /// [`sleep`](Self::sleep), then looks at the signal; [`ThreadSleeper`]
    /// wakes as soon as it is raised.
    fn sleep_unless_stopped(&self, duration: Duration, stop: &StopSignal) -> bool {
        if stop.is_stopped() {
            return true;
        }
        self.sleep(duration);
        stop.is_stopped()
    }
}

/// Sleeps the calling thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadSleeper;

impl Sleeper for ThreadSleeper {
    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration);
    }

    fn sleep_unless_stopped(&self, duration: Duration, stop: &StopSignal) -> bool {
        stop.wait(duration)
    }
}

/// A signal that ends a [`Sleeper::sleep_unless_stopped`] early: how a
/// periodic task is told to stop. Clones share one signal; once raised it
/// stays raised.
///
/// ```
/// use std::time::Duration;
/// use effect_core::{Sleeper, StopSignal, ThreadSleeper};
///
/// let stop = StopSignal::new();
/// let raiser = stop.clone();
/// std::thread::spawn(move || raiser.stop());
/// // Wakes when the other thread raises the signal, not after an hour.
/// assert!(ThreadSleeper.sleep_unless_stopped(Duration::from_secs(3600), &stop));
/// ```
#[derive(Debug, Clone, Default)]
pub struct StopSignal {
    raised: Arc<(Mutex<bool>, Condvar)>,
}

impl StopSignal {
    /// A signal not raised yet.
    pub fn new() -> Self {
        StopSignal::default()
    }

    /// Raises the signal and wakes every thread waiting on it.
    pub fn stop(&self) {
        let (raised, woken) = &*self.raised;
        *raised
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = true;
        woken.notify_all();
    }

    /// Whether the signal was raised.
    pub fn is_stopped(&self) -> bool {
        let (raised, _) = &*self.raised;
        *raised
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Blocks the thread until the signal is raised or `timeout` has passed
    /// on the operating system's clock; true when it was raised.
    fn wait(&self, timeout: Duration) -> bool {
        let (raised, woken) = &*self.raised;
        let guard = raised
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (guard, _) = woken
            .wait_timeout_while(guard, timeout, |raised| !*raised)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *guard
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
/// # use effect_core::format_timestamp;
/// let t = UNIX_EPOCH + Duration::from_micros(1_767_225_600_123_456);
/// assert_eq!(format_timestamp(t), "2026-01-01T00:00:00.123456+00:00");
/// ```
pub fn format_timestamp(time: SystemTime) -> String {
    let (secs, micros) = split_micros(time);
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    if year > 9999 {
        // A fifth year digit: not a ledger time, but still written as before.
        return format_timestamp_wide(time);
    }
    // Written into one fixed buffer: this runs for every transition, and
    // `format!` with seven padded fields costs several times as much.
    let mut text = *b"0000-00-00T00:00:00.000000+00:00";
    put_digits(&mut text[0..4], year);
    put_digits(&mut text[5..7], month);
    put_digits(&mut text[8..10], day);
    put_digits(&mut text[11..13], rem / 3600);
    put_digits(&mut text[14..16], (rem % 3600) / 60);
    put_digits(&mut text[17..19], rem % 60);
    put_digits(&mut text[20..26], micros);
    match std::str::from_utf8(&text) {
        Ok(text) => text.to_owned(),
        // Only ASCII digits were written.
        Err(_) => format_timestamp_wide(time),
    }
}

/// Whole seconds and the microseconds past them since the Unix epoch;
/// times before 1970 do not occur in a ledger and are clamped to it rather
/// than failing.
fn split_micros(time: SystemTime) -> (u64, u64) {
    let micros = match time.duration_since(UNIX_EPOCH) {
        Ok(since) => since.as_micros(),
        Err(_) => 0,
    };
    let secs = u64::try_from(micros / 1_000_000).unwrap_or(u64::MAX);
    // Below a million: it fits.
    let micros = u64::try_from(micros % 1_000_000).unwrap_or(0);
    (secs, micros)
}

/// Writes `value` as decimal digits filling `out`, zero-padded on the left
/// (the caller makes `out` wide enough).
fn put_digits(out: &mut [u8], mut value: u64) {
    for digit in out.iter_mut().rev() {
        // A remainder below ten: the cast cannot truncate.
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// [`format_timestamp`] through `format!`, which also writes years past
/// 9999 (with more digits); the fast path's reference in tests.
fn format_timestamp_wide(time: SystemTime) -> String {
    let (secs, micros) = split_micros(time);
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

    proptest::proptest! {
        /// The hand-written formatter writes what `format!` writes, over the
        /// four-digit years and past them.
        #[test]
        fn the_fast_timestamp_is_the_formatted_one(
            micros in 0u64..=253_402_300_799_999_999,
            far in 0u64..=u64::MAX,
        ) {
            for time in [
                UNIX_EPOCH + Duration::from_micros(micros),
                UNIX_EPOCH + Duration::from_micros(far),
            ] {
                proptest::prop_assert_eq!(format_timestamp(time), format_timestamp_wide(time));
            }
        }
    }

    #[test]
    fn the_fast_timestamp_matches_at_every_day_and_edge() {
        // Every day from 1970 to 2300, then every 89th to past 9999, at
        // both ends of the day.
        let days = (0..120_531u64).chain((120_531..2_932_897).step_by(89));
        for day in days {
            for secs in [day * 86_400, day * 86_400 + 86_399] {
                let time = UNIX_EPOCH + Duration::new(secs, 999_999_000);
                assert_eq!(format_timestamp(time), format_timestamp_wide(time));
            }
        }
        let before = UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(format_timestamp(before), "1970-01-01T00:00:00.000000+00:00");
        let last = UNIX_EPOCH + Duration::from_micros(253_402_300_799_999_999);
        assert_eq!(format_timestamp(last), "9999-12-31T23:59:59.999999+00:00");
        let wide = last + Duration::from_micros(1);
        assert_eq!(format_timestamp(wide), "10000-01-01T00:00:00.000000+00:00");
    }

    #[test]
    fn a_raised_signal_ends_every_sleeper_s_wait() {
        let stop = StopSignal::new();
        let manual = ManualClock::new(UNIX_EPOCH);
        assert!(!manual.sleep_unless_stopped(Duration::from_secs(5), &stop));
        assert_eq!(unix_seconds(manual.now()), 5.0, "the manual clock moved");
        stop.clone().stop();
        assert!(stop.is_stopped());
        // Neither waits once the signal is up: an hour would fail the test.
        assert!(ThreadSleeper.sleep_unless_stopped(Duration::from_secs(3600), &stop));
        assert!(manual.sleep_unless_stopped(Duration::from_secs(3600), &stop));
        assert_eq!(unix_seconds(manual.now()), 5.0, "no pause after the stop");
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(UNIX_EPOCH);
        assert_eq!(unix_seconds(clock.now()), 0.0);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(unix_seconds(clock.now()), 1.5);
    }
}
