//! Reading the ledger's ISO-8601 timestamps back, to compute ages.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// `lease_until` (seconds since the Unix epoch) as an ISO-8601 UTC timestamp,
/// the format of every other time the ledger stores.
pub fn format_unix_seconds(seconds: f64) -> String {
    let since = Duration::try_from_secs_f64(seconds).unwrap_or_default();
    effect_core::clock::format_timestamp(UNIX_EPOCH + since)
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

/// Microseconds since the Unix epoch of `YYYY-MM-DDTHH:MM:SS[.ffffff](Z|±HH:MM)`,
/// the format of SPEC §8 (the Python package also writes it without fraction).
pub fn parse_unix_micros(text: &str) -> Option<i128> {
    let bytes = text.as_bytes();
    if bytes.len() < 20 || bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' {
        return None;
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') || bytes[16] != b':' {
        return None;
    }
    let year = digits(text, 0, 4)?;
    let month = digits(text, 5, 7)?;
    let day = digits(text, 8, 10)?;
    let hour = digits(text, 11, 13)?;
    let minute = digits(text, 14, 16)?;
    let second = digits(text, 17, 19)?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 60 {
        return None;
    }
    let mut rest = &text[19..];
    let mut micros = 0_i128;
    if let Some(fraction) = rest.strip_prefix('.') {
        let len = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if len == 0 {
            return None;
        }
        // Keep microsecond precision: pad or cut the fraction to six digits.
        let fraction_digits = &fraction.as_bytes()[..len];
        let mut scaled = 0_i128;
        for i in 0..6 {
            let digit = fraction_digits.get(i).map_or(0, |b| i128::from(b - b'0'));
            scaled = scaled * 10 + digit;
        }
        micros = scaled;
        rest = &fraction[len..];
    }
    let offset_seconds = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let hours = digits(rest, 1, 3)?;
            let minutes = digits(rest, 4, 6)?;
            sign * (hours * 3600 + minutes * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_seconds;
    Some(seconds * 1_000_000 + micros)
}

fn digits(text: &str, from: usize, to: usize) -> Option<i128> {
    let part = text.get(from..to)?;
    if !part.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    part.parse().ok()
}

/// Howard Hinnant's days-from-civil: days since 1970-01-01.
fn days_from_civil(year: i128, month: i128, day: i128) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests;
