//! The one insta settings helper every crate's snapshot tests use.
//!
//! Reports and CLI output contain values that change from run to run:
//! timestamps, lease deadlines, durations, owner tokens (hashes seeded by the
//! clock and the process id) and temporary paths. [`settings`] redacts them in
//! JSON snapshots and filters them out of text snapshots, so a snapshot diff
//! shows a change of *behaviour* and nothing else.
//!
//! Bind them around each assertion, always with a named snapshot:
//! `settings().bind(|| insta::assert_json_snapshot!("matrix_report", report))`,
//! or for a whole test, `let _guard = settings().bind_to_scope();`. The
//! redactions apply to serialized values, the filters to the final text:
//!
//! ```
//! use serde_json::json;
//!
//! let settings = effect_test_support::snapshots::settings();
//! assert!(settings.sort_maps());
//! settings.bind(|| {
//!     // Inside, every insta assertion redacts and filters, e.g.
//!     // `insta::assert_json_snapshot!("report", json!({"created_at": "..."}))`.
//!     let _ = json!({"created_at": "2026-01-01T00:00:00.123456+00:00"});
//! });
//! ```
//!
//! The crate's own tests (`tests/it/snapshot_settings.rs`) pin what each
//! redaction and filter produces.
//!
//! # What is redacted
//!
//! | JSON field (at any depth) | replaced by |
//! | --- | --- |
//! | `timestamp`, `created_at`, `updated_at`, `started_at`, `finished_at` | `[timestamp]` |
//! | `lease_until` | `[lease-until]` |
//! | `owner_token` | `[owner-token]` |
//! | `duration_ms`, `elapsed_ms`, `duration`, `elapsed` | `[duration]` |
//! | `temp_dir`, `ledger_path`, `provider_file`, `path` | `[temp-path]` |
//!
//! Text filters replace ISO-8601 timestamps, owner tokens, temporary paths and
//! durations such as `12ms` or `1.5 s` in any snapshot, JSON included.
//! Request fingerprints are *not* redacted: they are a pure function of the
//! arguments, and a change there is a change of identity worth reviewing.

use std::path::Path;

/// Redactions (JSON fields) and their replacements.
const REDACTIONS: &[(&str, &str)] = &[
    (".**.timestamp", "[timestamp]"),
    (".**.created_at", "[timestamp]"),
    (".**.updated_at", "[timestamp]"),
    (".**.started_at", "[timestamp]"),
    (".**.finished_at", "[timestamp]"),
    (".**.lease_until", "[lease-until]"),
    (".**.owner_token", "[owner-token]"),
    (".**.duration_ms", "[duration]"),
    (".**.elapsed_ms", "[duration]"),
    (".**.duration", "[duration]"),
    (".**.elapsed", "[duration]"),
    (".**.temp_dir", "[temp-path]"),
    (".**.ledger_path", "[temp-path]"),
    (".**.provider_file", "[temp-path]"),
    (".**.path", "[temp-path]"),
];

/// Regex filters for text and their replacements, applied in this order.
const FILTERS: &[(&str, &str)] = &[
    // ISO-8601 timestamps as the ledger writes them (docs/spec.md §8), or with `Z`.
    (
        r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)",
        "[timestamp]",
    ),
    // Owner tokens: 16 hex digits of a clock-seeded hash, a dash, a counter.
    (r"\b[0-9a-f]{16}-\d+\b", "[owner-token]"),
    // Durations: `12ms`, `1.5 s`, `30µs`, `2.000123s`.
    (r"\b\d+(?:\.\d+)?\s?(?:ns|µs|us|ms|s)\b", "[duration]"),
];

/// Insta settings with the workspace's redactions and filters, on top of the
/// current settings (so the snapshot path and other settings still apply).
///
/// Bind them around each assertion: `settings().bind(|| insta::assert_json_snapshot!("name", value))`,
/// or keep them for a whole test with `let _guard = settings().bind_to_scope();`.
pub fn settings() -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.set_sort_maps(true);
    settings.set_omit_expression(true);
    for (selector, replacement) in REDACTIONS {
        settings.add_redaction(selector, *replacement);
    }
    for (pattern, replacement) in temp_path_filters() {
        settings.add_filter(&pattern, replacement);
    }
    for (pattern, replacement) in FILTERS {
        settings.add_filter(pattern, *replacement);
    }
    settings
}

/// Filters for temporary paths: the platform's temporary directory (as given
/// and canonicalized, since macOS links `/var` to `/private/var`) and `/tmp`.
fn temp_path_filters() -> Vec<(String, &'static str)> {
    let temp = std::env::temp_dir();
    let mut roots = vec![temp.clone()];
    if let Ok(canonical) = temp.canonicalize() {
        roots.push(canonical);
    }
    roots.push(Path::new("/tmp").to_path_buf());
    let mut filters: Vec<(String, &'static str)> = Vec::new();
    for root in roots {
        let root = root.to_string_lossy();
        let root = root.trim_end_matches(['/', '\\']);
        if root.is_empty() {
            continue;
        }
        let pattern = format!(r#"{}(?:[/\\][^\s"',:;)\]]*)?"#, escape_regex(root));
        if !filters.iter().any(|(existing, _)| *existing == pattern) {
            filters.push((pattern, "[temp-path]"));
        }
    }
    filters
}

/// Escapes regex metacharacters in a literal.
fn escape_regex(literal: &str) -> String {
    let mut escaped = String::with_capacity(literal.len());
    for c in literal.chars() {
        if r"\.+*?()|[]{}^$#&-~".contains(c) {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}
