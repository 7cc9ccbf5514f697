//! Values that stress the storage encoding: large outputs and unusual ids.

use effect_core::EffectLedgerExt as _;
use effect_core::{EffectStatus, ListQuery};
use serde_json::{Value, json};

use super::LedgerFactory;
use super::harness::{Check, LIVE, confirmation};

/// Operation ids a store must keep byte for byte (quotes, SQL and LIKE
/// metacharacters, escapes, non-ASCII, surrounding spaces, case).
pub const UNUSUAL_OPERATION_IDS: &[&str] = &[
    "it's",
    "\"double quoted\"",
    "'; DROP TABLE effect_operations; --",
    "100% _done_ [x]* ?",
    "back\\slash \\n \\'",
    "tab\there\nnewline\r",
    "ünïcödé:日本語:🚀",
    " padded ",
    "padded",
    "Padded",
    "$1 :name ? @p0",
];

/// A confirmed output of more than 10 MB is stored and read back exactly.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn large_output_round_trips(factory: LedgerFactory<'_>) {
    let c = Check::new("large_output_round_trips", factory);
    let chunk = "ab\"c\\ü😀\n".repeat(16);
    let blob = chunk.repeat(10 * 1024 * 1024 / chunk.len() + 1);
    let output = json!({
        "blob": blob,
        "numbers": [0, -1, 1.5, 0.1, 9_007_199_254_740_993_u64, u64::MAX, i64::MIN],
        "nested": {"empty": {}, "list": [], "null": null, "bool": false, "unicode key ✓": "é"},
    });
    c.prepare("big");
    c.must_claim("big", "w", LIVE);
    let confirmed = c
        .ledger
        .mark_confirmed("big", Some("w"), &confirmation(output.clone()));
    c.applied(confirmed, "mark_confirmed of a 10 MB output by the owner");
    let stored = c.record("big").output;
    match &stored {
        Some(value) if *value == output => {}
        Some(Value::Object(map)) => {
            let blob = map.get("blob").and_then(Value::as_str).map_or(0, str::len);
            c.fail(format_args!(
                "the 10 MB output did not round-trip: stored blob has {blob} bytes of {}, \
                 numbers {:?} (expected {}), nested {:?}",
                output["blob"].as_str().map_or(0, str::len),
                map.get("numbers"),
                output["numbers"],
                map.get("nested"),
            ));
        }
        other => c.fail(format_args!(
            "the 10 MB output did not round-trip: stored output is {}",
            other.as_ref().map_or("None".to_owned(), |v| v
                .to_string()
                .chars()
                .take(200)
                .collect())
        )),
    }
    let listed = c.ok(c.ledger.list(&ListQuery::new(1)), "list");
    c.ensure(
        listed
            .first()
            .is_some_and(|r| r.output.as_ref() == Some(&output)),
        "the listed record carries the same 10 MB output",
    );
}

/// Operation ids with quotes, SQL metacharacters and non-ASCII text round-trip
/// exactly through every read, and ids differing only in case or spaces stay
/// distinct.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn unusual_operation_ids_round_trip(factory: LedgerFactory<'_>) {
    let c = Check::new("unusual_operation_ids_round_trip", factory);
    for id in UNUSUAL_OPERATION_IDS {
        c.prepare(id);
        c.must_claim(id, &format!("owner of {id}"), LIVE);
    }
    for id in UNUSUAL_OPERATION_IDS {
        let record = c.record(id);
        c.same(
            record.operation_id.as_str(),
            *id,
            "operation_id read back by get",
        );
        c.same(
            record.owner_token,
            Some(format!("owner of {id}")),
            "owner_token",
        );
        c.same(record.status, EffectStatus::Dispatched, "status");
        let events = c.events(id);
        c.same(events.len(), 2, format_args!("events of {id:?}"));
        for event in events {
            c.same(
                event.operation_id.as_str(),
                *id,
                "operation_id read back by events",
            );
        }
    }
    let mut listed: Vec<String> = c
        .ok(c.ledger.list(&ListQuery::new(1000)), "list")
        .into_iter()
        .map(|r| r.operation_id)
        .collect();
    listed.sort();
    let mut expected: Vec<String> = UNUSUAL_OPERATION_IDS
        .iter()
        .map(|id| (*id).to_owned())
        .collect();
    expected.sort();
    c.same(listed, expected, "operation ids read back by list");
    // `events_after` is optional: a store without it answers Unsupported.
    if let Some(all) = c.all_events() {
        let mut from_events: Vec<String> = all.into_iter().map(|e| e.operation_id).collect();
        from_events.dedup();
        from_events.sort();
        let mut expected: Vec<String> = UNUSUAL_OPERATION_IDS
            .iter()
            .map(|id| (*id).to_owned())
            .collect();
        expected.sort();
        c.same(
            from_events,
            expected,
            "operation ids read back by events_after",
        );
    }
    for id in ["PADDED", "padded  ", "it''s", "it\\'s"] {
        c.same(
            c.get(id),
            None,
            format_args!("get({id:?}) of an id that was never prepared"),
        );
    }
}
