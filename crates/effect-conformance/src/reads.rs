//! Reads: get, events, list, events_after and stats.

use effect_core::EffectLedgerExt as _;
use effect_core::{
    Claim, EffectStatus as S, LedgerError, LedgerErrorKind, ListQuery, ManualAction, Transition,
};
use serde_json::json;

use super::LedgerFactory;
use super::harness::{Check, LIVE, confirmation, evidence, manual, tick};

/// `count_events` answers, for each id in the order given (repeats and
/// missing ids included, more ids than one statement takes), how many
/// events of that type it has.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn count_events_counts_per_operation(factory: LedgerFactory<'_>) {
    let c = Check::new("count_events_counts_per_operation", factory);
    c.in_status("late", S::Quarantined);
    for attempt in [1, 2] {
        c.record_late("late", json!({"attempt": attempt, "outcome": "returned"}));
    }
    c.prepare("quiet");
    let ids = ["quiet", "late", "absent", "late"];
    c.same(
        c.ok(
            c.ledger.count_events(&ids, "late_observation"),
            "count_events of late observations",
        ),
        vec![0, 2, 0, 2],
        "late observations of quiet, late, absent, late",
    );
    c.same(
        c.ok(
            c.ledger.count_events(&["late", "quiet"], "prepared"),
            "count_events of prepared",
        ),
        vec![1, 1],
        "prepared events of late and quiet",
    );
    c.same(
        c.ok(
            c.ledger.count_events(&[], "prepared"),
            "count_events of no id",
        ),
        Vec::new(),
        "counts of no operation",
    );
    let page: Vec<&str> = ["late", "quiet", "absent"]
        .into_iter()
        .cycle()
        .take(1_201)
        .collect();
    let counts = c.ok(
        c.ledger.count_events(&page, "late_observation"),
        "count_events of 1,201 ids",
    );
    let expected: Vec<u64> = page
        .iter()
        .map(|id| if *id == "late" { 2 } else { 0 })
        .collect();
    c.same(counts, expected, "late observations of 1,201 ids");
}

/// `get` of a missing id is `None`; `events` of it is empty.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn missing_operation_reads(factory: LedgerFactory<'_>) {
    let c = Check::new("missing_operation_reads", factory);
    c.prepare("present");
    c.same(c.get("absent"), None, "get of a missing id");
    c.same(c.events("absent"), Vec::new(), "events of a missing id");
}

/// Every transition but prepare on a missing id is `NotFound` and creates nothing.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn missing_operation_transitions(factory: LedgerFactory<'_>) {
    let c = Check::new("missing_operation_transitions", factory);
    let id = "absent";
    let e = || evidence(json!({}));
    let attempts: Vec<(&str, Result<(), LedgerError>)> = vec![
        (
            "claim_dispatch",
            c.ledger
                .claim_dispatch(id, &Claim::new("w", LIVE))
                .map(drop),
        ),
        ("renew_lease", c.ledger.renew_lease(id, "w", LIVE).map(drop)),
        (
            "ExpireLease",
            c.ledger.apply(id, &Transition::ExpireLease).map(drop),
        ),
        (
            "mark_outcome_unknown by owner",
            c.ledger
                .mark_outcome_unknown(id, Some("w"), "x", &e())
                .map(drop),
        ),
        (
            "mark_outcome_unknown",
            c.ledger.mark_outcome_unknown(id, None, "x", &e()).map(drop),
        ),
        (
            "mark_confirmed by owner",
            c.ledger
                .mark_confirmed(id, Some("w"), &confirmation(json!(1)))
                .map(drop),
        ),
        (
            "mark_confirmed",
            c.ledger
                .mark_confirmed(id, None, &confirmation(json!(1)))
                .map(drop),
        ),
        (
            "mark_rejected",
            c.ledger.mark_rejected(id, "w", "x").map(drop),
        ),
        ("quarantine", c.ledger.quarantine(id, "x", &e()).map(drop)),
        (
            "reset_for_retry",
            c.ledger.reset_for_retry(id, &e()).map(drop),
        ),
        (
            "manual confirm",
            c.ledger
                .resolve_manually(
                    id,
                    &manual(ManualAction::Confirm {
                        output: json!(1),
                        provider_operation_id: None,
                    }),
                )
                .map(drop),
        ),
        (
            "manual reject",
            c.ledger
                .resolve_manually(id, &manual(ManualAction::Reject))
                .map(drop),
        ),
        (
            "manual retry authorization",
            c.ledger
                .resolve_manually(
                    id,
                    &manual(ManualAction::AuthorizeRetry {
                        handler_stopped: false,
                    }),
                )
                .map(drop),
        ),
    ];
    for (what, result) in attempts {
        c.err(
            result,
            LedgerErrorKind::NotFound,
            format_args!("{what} of a missing id"),
        );
    }
    c.same(c.get(id), None, "get after transitions on a missing id");
    if let Some(all) = c.all_events() {
        c.same(
            all.len(),
            0,
            "events in the ledger after transitions on a missing id",
        );
    }
}

/// A full lifecycle appends its events in order, each with a strictly
/// increasing sequence, the operation id, a timestamp and the docs/spec.md §4 data.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn events_are_ordered(factory: LedgerFactory<'_>) {
    let c = Check::new("events_are_ordered", factory);
    let id = "lifecycle";
    let token = c.in_status(id, S::Quarantined);
    let retried = c
        .ledger
        .reset_for_retry(id, &evidence(json!({"retry_basis": "not_committed"})));
    c.applied(retried, "reset_for_retry from quarantined");
    c.must_claim(id, "second", LIVE);
    let confirmed = c
        .ledger
        .mark_confirmed(id, Some("second"), &confirmation(json!({"ok": 1})));
    c.applied(confirmed, "mark_confirmed by the second owner");
    let events = c.events(id);
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    c.same(
        types,
        vec![
            "prepared",
            "dispatched",
            "outcome_unknown",
            "quarantined",
            "retry_authorized",
            "dispatched",
            "confirmed",
        ],
        "event types of prepare, claim, unknown, quarantine, retry, claim, confirm",
    );
    for pair in events.windows(2) {
        c.ensure(
            pair[0].sequence < pair[1].sequence,
            format_args!(
                "event sequences must strictly increase: {} then {}",
                pair[0].sequence, pair[1].sequence
            ),
        );
        c.ensure(
            pair[0].timestamp <= pair[1].timestamp,
            format_args!(
                "event timestamps must not go back: {} then {}",
                pair[0].timestamp, pair[1].timestamp
            ),
        );
    }
    for event in &events {
        c.same(event.operation_id.as_str(), id, "event operation_id");
    }
    let record = c.record(id);
    c.event_is(
        &events[0],
        "prepared",
        &json!({"request_fingerprint": record.request_fingerprint}),
    );
    c.event_is(&events[1], "dispatched", &json!({"attempt": 1}));
    c.event_is(
        &events[2],
        "outcome_unknown",
        &json!({"error": "timed out", "evidence": {"timeout": true}}),
    );
    c.event_is(
        &events[3],
        "quarantined",
        &json!({"error": "no probe", "evidence": {"quarantined_by": "conformance"}}),
    );
    c.event_is(
        &events[4],
        "retry_authorized",
        &json!({"evidence": {"retry_basis": "not_committed"}}),
    );
    c.event_is(&events[5], "dispatched", &json!({"attempt": 2}));
    c.event_is(
        &events[6],
        "confirmed",
        &json!({"provider_operation_id": "ch_conformance", "evidence": {"source": "conformance"}}),
    );
    c.ensure(token != "second", "owner tokens differ");
}

/// `list` accepts limits 1 and 1000 and refuses 0 and 1001 with `InvalidInput`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn list_limits(factory: LedgerFactory<'_>) {
    let c = Check::new("list_limits", factory);
    for id in ["a", "b", "c"] {
        c.prepare(id);
    }
    for limit in [0, 1001] {
        c.err(
            c.ledger.list(&ListQuery::new(limit)),
            LedgerErrorKind::InvalidInput,
            format_args!("list limit {limit}"),
        );
        c.err(
            c.ledger.list(&ListQuery::with_status(S::Prepared, limit)),
            LedgerErrorKind::InvalidInput,
            format_args!("list limit {limit} with a status filter"),
        );
    }
    let one = c.ok(c.ledger.list(&ListQuery::new(1)), "list limit 1");
    c.same(one.len(), 1, "operations listed with limit 1");
    let all = c.ok(c.ledger.list(&ListQuery::new(1000)), "list limit 1000");
    c.same(all.len(), 3, "operations listed with limit 1000");
}

fn listed(c: &Check, query: ListQuery) -> Vec<String> {
    c.ok(c.ledger.list(&query), format_args!("list({query:?})"))
        .into_iter()
        .map(|r| r.operation_id)
        .collect()
}

/// `list` returns the most recently updated operation first, and full records.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn list_newest_update_first(factory: LedgerFactory<'_>) {
    let c = Check::new("list_newest_update_first", factory);
    for id in ["first", "second", "third"] {
        c.prepare(id);
        tick();
    }
    c.same(
        listed(&c, ListQuery::new(10)),
        vec!["third".into(), "second".into(), "first".into()],
        "list order",
    );
    c.must_claim("first", "w", LIVE);
    tick();
    c.same(
        listed(&c, ListQuery::new(10)),
        vec!["first".into(), "third".into(), "second".into()],
        "list order after updating the oldest",
    );
    c.same(
        listed(&c, ListQuery::new(2)),
        vec!["first".into(), "third".into()],
        "list order with limit 2",
    );
    let records = c.ok(c.ledger.list(&ListQuery::new(1)), "list");
    c.same(records, vec![c.record("first")], "listed record vs get");
}

/// `list` with a status returns only operations in that status.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn list_filters_by_status(factory: LedgerFactory<'_>) {
    let c = Check::new("list_filters_by_status", factory);
    for status in S::ALL {
        c.in_status(&format!("one {status}"), status);
        tick();
    }
    c.in_status("another quarantined", S::Quarantined);
    for status in S::ALL {
        let ids = listed(&c, ListQuery::with_status(status, 1000));
        let mut expected = Vec::new();
        if status == S::Quarantined {
            expected.push("another quarantined".to_owned());
        }
        expected.push(format!("one {status}"));
        c.same(
            ids,
            expected,
            format_args!("operations listed with status {status}"),
        );
    }
    c.same(
        listed(&c, ListQuery::new(1000)).len(),
        S::ALL.len() + 1,
        "operations listed without a filter",
    );
}

/// `events_after` pages through all operations' events in sequence order.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn events_after_pages(factory: LedgerFactory<'_>) {
    let c = Check::new("events_after_pages", factory);
    c.in_status("a", S::Confirmed);
    c.in_status("b", S::Quarantined);
    c.in_status("c", S::Dispatched);
    let unknown = c
        .ledger
        .mark_outcome_unknown("b", None, "still unknown", &evidence(json!({})));
    c.applied(
        unknown,
        "mark_outcome_unknown without owner from quarantined",
    );
    let Some(all) = c.all_events() else {
        // `events_after` is optional: a store without it answers Unsupported.
        return;
    };
    let mut expected: Vec<_> = ["a", "b", "c"].iter().flat_map(|id| c.events(id)).collect();
    expected.sort_by_key(|e| e.sequence);
    c.same(all.len(), 9, "events in the ledger");
    c.same(
        &all,
        &expected,
        "events_after(0) vs the events of each operation",
    );
    for pair in all.windows(2) {
        c.ensure(
            pair[0].sequence < pair[1].sequence,
            format_args!(
                "sequences must strictly increase across the ledger: {} then {}",
                pair[0].sequence, pair[1].sequence
            ),
        );
    }
    let order: Vec<&str> = all.iter().map(|e| e.operation_id.as_str()).collect();
    c.same(
        order,
        vec!["a", "a", "b", "b", "b", "b", "c", "c", "b"],
        "events_after orders the events of all operations by when they were appended",
    );
    let mut paged = Vec::new();
    let mut after = 0;
    loop {
        let page = c.ok(
            c.ledger.events_after(after, 3),
            format_args!("events_after({after}, 3)"),
        );
        c.ensure(
            page.len() <= 3,
            format_args!("events_after(.., 3) returned {} events", page.len()),
        );
        let Some(last) = page.last() else { break };
        after = last.sequence;
        paged.extend(page);
    }
    c.same(&paged, &all, "events paged three at a time vs all events");
    let tail = c.ok(
        c.ledger.events_after(all[2].sequence, 2),
        "events_after the third event",
    );
    c.same(
        &tail[..],
        &all[3..5],
        "events_after the third event, limit 2",
    );
    let last = all[all.len() - 1].sequence;
    let none = c.ok(
        c.ledger.events_after(last, 10),
        "events_after the last event",
    );
    c.same(none.len(), 0, "events after the last event");
}

/// `stats` counts every status (zero included) and reports the least recently
/// updated uncertain operation.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn stats_counts(factory: LedgerFactory<'_>) {
    let c = Check::new("stats_counts", factory);
    // `stats` is optional: a store without it answers Unsupported.
    let Some(empty) = c.optional(c.ledger.stats(), "stats of an empty ledger") else {
        return;
    };
    for status in S::ALL {
        let count = empty
            .counts
            .iter()
            .filter(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>();
        c.same(
            count,
            vec![0],
            format_args!("count of {status} in an empty ledger"),
        );
    }
    c.same(
        empty.oldest_unresolved_updated_at,
        None,
        "oldest unresolved in an empty ledger",
    );
    c.in_status("oldest unknown", S::OutcomeUnknown);
    tick();
    for status in S::ALL {
        c.in_status(&format!("one {status}"), status);
        tick();
    }
    c.in_status("another prepared", S::Prepared);
    let Some(stats) = c.optional(c.ledger.stats(), "stats") else {
        c.fail("stats answered once, then Unsupported");
    };
    for status in S::ALL {
        let expected = match status {
            S::Prepared | S::OutcomeUnknown => 2,
            _ => 1,
        };
        let count = stats
            .counts
            .iter()
            .filter(|(s, _)| *s == status)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>();
        c.same(count, vec![expected], format_args!("count of {status}"));
    }
    c.same(
        stats.oldest_unresolved_updated_at,
        Some(c.record("oldest unknown").updated_at),
        "oldest_unresolved_updated_at",
    );
}
