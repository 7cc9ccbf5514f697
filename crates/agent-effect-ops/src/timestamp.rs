//! Reading the ledger's ISO-8601 timestamps back (to compute ages and filter),
//! and formatting lease times, with `jiff`: real calendars and offsets.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jiff::Timestamp;

/// `lease_until` (seconds since the Unix epoch) as an ISO-8601 UTC timestamp,
/// the format of every other time the ledger stores.
pub fn format_unix_seconds(seconds: f64) -> String {
    let since = Duration::try_from_secs_f64(seconds).unwrap_or_default();
    effect_core::format_timestamp(UNIX_EPOCH + since)
}

/// Seconds from `timestamp` to `now`, rounded down; 0 when `timestamp` lies in
/// the future (clock skew between writers). `None` when it cannot be read.
pub fn age_seconds(timestamp: &str, now: SystemTime) -> Option<u64> {
    let then = parse_unix_micros(timestamp)?;
    let now = match now.duration_since(UNIX_EPOCH) {
        Ok(since) => i128::try_from(since.as_micros()).ok()?,
        Err(_) => 0,
    };
    let age = (now - then).max(0) / 1_000_000;
    u64::try_from(age).ok()
}

/// Microseconds since the Unix epoch of an RFC 3339 timestamp with an offset
/// (`Z`, `+00:00` or `+0000`), the format of docs/spec.md §8 (the Python package also
/// writes it without fraction). `None` for anything else, including dates
/// that do not exist (`2026-02-31`) and impossible offsets (`+99:99`).
pub fn parse_unix_micros(text: &str) -> Option<i128> {
    let timestamp: Timestamp = text.parse().ok()?;
    Some(timestamp.as_microsecond().into())
}

#[cfg(test)]
mod tests;
