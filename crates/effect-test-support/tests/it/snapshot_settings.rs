//! The shared insta settings redact and filter exactly the unstable values.

use effect_test_support::snapshots;
use serde_json::json;

#[test]
fn json_redactions_hide_unstable_fields_at_any_depth() {
    let report = json!({
        "status": "confirmed",
        "request_fingerprint": "blake3:0b5c",
        "record": {
            "created_at": "2026-01-01T00:00:00.123456+00:00",
            "updated_at": "2026-01-01T00:00:01.000000+00:00",
            "owner_token": "3f2a9c0d11b2e4f5-1",
            "lease_until": 1_767_225_630.5,
        },
        "events": [{"event_type": "prepared", "timestamp": "2026-01-01T00:00:00.123456+00:00"}],
        "elapsed_ms": 12,
        "ledger_path": "/somewhere/ledger.sqlite3",
    });
    snapshots::settings().bind(|| {
        insta::assert_json_snapshot!("settings_redact_json", report);
    });
}

#[test]
fn text_filters_hide_timestamps_tokens_temp_paths_and_durations() {
    let temp = std::env::temp_dir()
        .join(".tmpAbC123")
        .join("ledger.sqlite3");
    let text = format!(
        "ledger {}\nclaimed by 3f2a9c0d11b2e4f5-12 at 2026-01-01T00:00:00.123456+00:00\ntook 12ms, lease 1.5 s\nattempts 2, effects 1\n",
        temp.display()
    );
    snapshots::settings().bind(|| {
        insta::assert_snapshot!("settings_filter_text", text);
    });
}
