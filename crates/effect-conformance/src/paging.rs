//! Checks of `list` cursors, stale dispatches, and their count in `stats`.

use effect_core::{EffectStatus as S, LedgerErrorKind, ListQuery};

use super::LedgerFactory;
use super::harness::{Check, EXPIRED, LIVE, tick};

fn listed(c: &Check, query: ListQuery) -> Vec<String> {
    c.ok(c.ledger.list(&query), format_args!("list({query:?})"))
        .into_iter()
        .map(|r| r.operation_id)
        .collect()
}

fn ids(names: &[&str]) -> Vec<String> {
    names.iter().map(|&n| n.to_owned()).collect()
}

/// `list` with a cursor (`after`) continues after the operation it names, in
/// the list's order, with or without a status filter, and refuses a cursor
/// that names no operation with `InvalidInput`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn list_pages_after_cursor(factory: LedgerFactory<'_>) {
    let c = Check::new("list_pages_after_cursor", factory);
    for id in ["a", "b", "c", "d", "e"] {
        c.prepare(id);
        tick();
    }
    c.in_status("q", S::Quarantined);
    let page = |after: &str| listed(&c, ListQuery::new(2).after(after));
    c.same(
        listed(&c, ListQuery::new(2)),
        ids(&["q", "e"]),
        "first page",
    );
    c.same(page("e"), ids(&["d", "c"]), "page after e");
    c.same(page("c"), ids(&["b", "a"]), "page after c");
    c.same(page("a"), ids(&[]), "page after the last operation");
    // A cursor in another status places the page by its sort key.
    c.same(
        listed(&c, ListQuery::with_status(S::Prepared, 2).after("q")),
        ids(&["e", "d"]),
        "prepared operations after a quarantined one",
    );
    c.same(
        listed(&c, ListQuery::with_status(S::Prepared, 10).after("d")),
        ids(&["c", "b", "a"]),
        "prepared operations after d",
    );
    c.err(
        c.ledger.list(&ListQuery::new(2).after("no such operation")),
        LedgerErrorKind::InvalidInput,
        "list after an unknown cursor",
    );
}

/// `list` of stale dispatches returns the `dispatched` operations whose lease
/// has expired, and no other; it pages like any list; a stale filter with
/// another status is `InvalidInput`.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn list_stale_dispatches(factory: LedgerFactory<'_>) {
    let c = Check::new("list_stale_dispatches", factory);
    for id in ["stale 1", "stale 2", "stale 3"] {
        c.prepare(id);
        c.must_claim(id, "gone", EXPIRED);
        tick();
    }
    c.prepare("live");
    c.must_claim("live", "w", LIVE);
    c.in_status("unknown", S::OutcomeUnknown);
    c.prepare("prepared");
    c.same(
        listed(&c, ListQuery::stale(10)),
        ids(&["stale 3", "stale 2", "stale 1"]),
        "stale dispatches",
    );
    c.same(
        listed(&c, ListQuery::stale(1).after("stale 3")),
        ids(&["stale 2"]),
        "stale dispatches after stale 3",
    );
    let mut dispatched = ListQuery::stale(10);
    dispatched.status = Some(S::Dispatched);
    c.same(
        listed(&c, dispatched).len(),
        3,
        "stale dispatches with status dispatched",
    );
    let mut quarantined = ListQuery::stale(10);
    quarantined.status = Some(S::Quarantined);
    c.err(
        c.ledger.list(&quarantined),
        LedgerErrorKind::InvalidInput,
        "stale operations in status quarantined",
    );
    c.same(
        listed(&c, ListQuery::with_status(S::Dispatched, 10)).len(),
        4,
        "dispatched operations, stale or not",
    );
}

/// `stats` counts the stale dispatches, not the live ones.
///
/// # Panics
///
/// When the ledger behaves otherwise.
pub fn stats_counts_stale(factory: LedgerFactory<'_>) {
    let c = Check::new("stats_counts_stale", factory);
    let Some(empty) = c.optional(c.ledger.stats(), "stats of an empty ledger") else {
        return;
    };
    c.same(
        empty.stale_dispatched,
        0,
        "stale dispatches in an empty ledger",
    );
    for id in ["stale 1", "stale 2"] {
        c.prepare(id);
        c.must_claim(id, "gone", EXPIRED);
    }
    c.prepare("live");
    c.must_claim("live", "w", LIVE);
    c.in_status("unknown", S::OutcomeUnknown);
    let Some(stats) = c.optional(c.ledger.stats(), "stats") else {
        c.fail("stats answered once, then Unsupported");
    };
    c.same(stats.stale_dispatched, 2, "stale dispatches");
}
