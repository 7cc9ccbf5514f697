use std::time::{Duration, UNIX_EPOCH};

use effect_core::format_timestamp;

use super::*;

#[test]
fn reads_what_the_ledger_writes() {
    for micros in [
        0_u64,
        951_782_400_000_001,
        1_767_225_600_123_456,
        1_798_761_599_999_999,
    ] {
        let time = UNIX_EPOCH + Duration::from_micros(micros);
        let text = format_timestamp(time);
        assert_eq!(parse_unix_micros(&text), Some(i128::from(micros)), "{text}");
    }
}

#[test]
fn reads_python_variants_and_offsets() {
    let midnight = 1_767_225_600_000_000_i128; // 2026-01-01T00:00:00Z
    assert_eq!(
        parse_unix_micros("2026-01-01T00:00:00+00:00"),
        Some(midnight)
    );
    assert_eq!(parse_unix_micros("2026-01-01T00:00:00Z"), Some(midnight));
    assert_eq!(
        parse_unix_micros("2026-01-01T01:30:00.5+01:30"),
        Some(midnight + 500_000)
    );
    assert_eq!(
        parse_unix_micros("2025-12-31T23:00:00-01:00"),
        Some(midnight)
    );
    assert_eq!(
        parse_unix_micros("2026-01-01T00:00:00+0000"),
        Some(midnight)
    );
}

#[test]
fn refuses_what_is_not_a_timestamp() {
    for bad in [
        "",
        "yesterday",
        "2026-01-01",
        "2026-01-01T00:00:00",
        "2026-13-01T00:00:00+00:00",
        "2026-01-01T00:00:00.+00:00",
        "2026-01-01T24:00:00+00:00",
        "2026-02-31T00:00:00+00:00",
        "2026-01-01T00:00:00+99:99",
    ] {
        assert_eq!(parse_unix_micros(bad), None, "{bad:?}");
    }
}

#[test]
fn ages_round_down_and_never_go_negative() {
    let now = UNIX_EPOCH + Duration::from_micros(1_767_225_690_900_000);
    assert_eq!(age_seconds("2026-01-01T00:00:00+00:00", now), Some(90));
    assert_eq!(age_seconds("2026-01-01T00:05:00+00:00", now), Some(0));
    assert_eq!(age_seconds("garbage", now), None);
}
