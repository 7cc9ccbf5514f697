//! The `events_after` cursor while appends in one schema commit in parallel:
//! it never skips an event that commits late and never returns one twice.
//!
//! The interleaving tests drive raw connections through the ledger's own
//! write function (`effect_write`) with explicit `BEGIN`, the append and
//! `COMMIT` or `ROLLBACK`, in the orders that break simpler schemes, and
//! follow the cursor between the steps with the ledger's reader and, to show
//! that the test can tell, with the naive readers that skip. A writer that
//! takes the mark and draws without announcing (an older writer, or one
//! caught between the two) is driven by hand. The stress test runs writer
//! threads against cursor readers, round after round.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use effect_core::{Claim, Confirmation, EffectLedger, EffectLedgerExt as _, Evidence, Transition};
use effect_ledger_postgres::PostgresLedger;
use postgres::Client;
use serde_json::json;

use crate::support::{TestResult, TestSchema, new_operation, server_url};

type Error = Box<dyn std::error::Error>;

/// One raw connection writing through the schema's `effect_write`, in an
/// explicit transaction.
struct Writer {
    client: Client,
    q: String,
}

impl Writer {
    /// A connection in an open transaction that already has its id. An
    /// append that had to wait for another writer fails after 20 s instead of
    /// hanging (`lock_timeout`): appends must not wait for each other.
    fn begin(schema: &TestSchema) -> Result<(Writer, i64), Error> {
        let mut client = schema.admin()?;
        client.batch_execute("SET lock_timeout = '20s'")?;
        let mut writer = Writer {
            client,
            q: schema.q(),
        };
        let xid = writer.begin_again()?;
        Ok((writer, xid))
    }

    /// Opens the next transaction on the same connection; returns its id.
    fn begin_again(&mut self) -> Result<i64, Error> {
        self.client.batch_execute("BEGIN")?;
        Ok(self
            .client
            .query_one("SELECT pg_current_xact_id()::text::bigint", &[])?
            .get(0))
    }

    /// Prepares `id` with one `prepared` event; returns the event's sequence.
    fn append(&mut self, id: &str) -> Result<u64, Error> {
        let q = &self.q;
        let at = "2026-01-01T00:00:00.000000+00:00";
        let written: bool = self
            .client
            .query_one(
                &format!(
                    "SELECT {q}.effect_write('insert', NULL, $1, 'capture_payment', '1', 'fp', \
                     NULL, 'prepared', NULL, NULL, NULL, 0, '{{}}', NULL, NULL, $2, $2, \
                     ARRAY['prepared'], ARRAY['{{}}'], ARRAY[$2], false)"
                ),
                &[&id, &at],
            )?
            .get(0);
        assert!(written, "{id} was written");
        let sequence: i64 = self
            .client
            .query_one(
                &format!("SELECT sequence FROM {q}.effect_events WHERE operation_id = $1"),
                &[&id],
            )?
            .get(0);
        Ok(u64::try_from(sequence)?)
    }

    /// The sequences this writer's transaction has announced (the low 32
    /// bits of each, as migrations/effect_write.sql locks them).
    fn announced(&mut self) -> Result<Vec<u64>, Error> {
        let q = &self.q;
        self.client
            .query(
                &format!(
                    "SELECT (objid::bigint + 2147483648) % 4294967296 FROM pg_locks \
                     WHERE locktype = 'advisory' AND objsubid = 2 AND granted \
                     AND classid = hashtext('effect-ledger-postgres pending {q}')::oid \
                     AND pid = pg_backend_pid() ORDER BY 1"
                ),
                &[],
            )?
            .iter()
            .map(|r| Ok(u64::try_from(r.get::<_, i64>(0))?))
            .collect()
    }

    /// Takes the schema's mark and draws a sequence without announcing it,
    /// as an older writer does (or ours, between its draw and its
    /// announcement); returns the sequence. [`Writer::insert_drawn`] then
    /// writes its event.
    fn draw_unannounced(&mut self) -> Result<u64, Error> {
        let q = &self.q;
        let sequence: i64 = self
            .client
            .query_one(
                &format!(
                    "SELECT pg_advisory_xact_lock_shared(1701209697, \
                         hashtext('effect-ledger-postgres events {q}'))::text, \
                     nextval(pg_get_serial_sequence('{q}.effect_events', 'sequence'))"
                ),
                &[],
            )?
            .get(1);
        Ok(u64::try_from(sequence)?)
    }

    /// Writes operation `id` and its event at a sequence drawn by
    /// [`Writer::draw_unannounced`].
    fn insert_drawn(&mut self, id: &str, sequence: u64) -> Result<(), Error> {
        let q = &self.q;
        let at = "2026-01-01T00:00:00.000000+00:00";
        self.client.execute(
            &format!(
                "INSERT INTO {q}.effect_operations (operation_id, contract_name, \
                 request_fingerprint, status, created_at, updated_at) \
                 VALUES ($1, 'capture_payment', 'fp', 'prepared', $2, $2)"
            ),
            &[&id, &at],
        )?;
        self.client.execute(
            &format!(
                "INSERT INTO {q}.effect_events (sequence, operation_id, event_type, \
                 data_json, timestamp) VALUES ($1, $2, 'prepared', '{{}}', $3)"
            ),
            &[&i64::try_from(sequence)?, &id, &at],
        )?;
        Ok(())
    }

    /// How many transactions hold the schema's mark now, this one included.
    fn marked(&mut self) -> Result<i64, Error> {
        let q = &self.q;
        Ok(self
            .client
            .query_one(
                &format!(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                     AND objsubid = 2 AND granted AND classid = 1701209697 \
                     AND objid = hashtext('effect-ledger-postgres events {q}')::oid"
                ),
                &[],
            )?
            .get(0))
    }

    fn commit(&mut self) -> Result<(), Error> {
        Ok(self.client.batch_execute("COMMIT")?)
    }

    fn rollback(&mut self) -> Result<(), Error> {
        Ok(self.client.batch_execute("ROLLBACK")?)
    }
}

/// Reads one page of sequences after a cursor.
trait Reader {
    fn page(&mut self, after: u64) -> Result<Vec<u64>, Error>;
}

/// The ledger's own `events_after`.
struct LedgerReader<'a>(&'a PostgresLedger);

impl Reader for LedgerReader<'_> {
    fn page(&mut self, after: u64) -> Result<Vec<u64>, Error> {
        Ok(self
            .0
            .events_after(after, 100)?
            .iter()
            .map(|e| e.sequence)
            .collect())
    }
}

/// The outbox filter without a composite cursor: events whose writer's id
/// is below the snapshot's `xmin`, after a cursor that is the sequence alone.
/// Also returns the snapshot's `xmin`. (The test server's ids are far below
/// 2^32, so the 32-bit `xmin` of a row compares.)
fn below_xmin_page(client: &mut Client, q: &str, after: u64) -> Result<(Vec<u64>, i64), Error> {
    let row = client.query_one(
        &format!(
            "WITH snap AS MATERIALIZED (SELECT pg_current_snapshot() AS s) \
             SELECT coalesce(array_agg(sequence ORDER BY sequence), '{{}}'), \
                 (SELECT pg_snapshot_xmin(s)::text::bigint FROM snap) \
             FROM {q}.effect_events WHERE sequence > $1 \
             AND xmin::text::bigint < \
                 (SELECT pg_snapshot_xmin(s)::text::bigint % 4294967296 FROM snap)"
        ),
        &[&i64::try_from(after)?],
    )?;
    let sequences: Vec<i64> = row.get(0);
    let sequences = sequences
        .into_iter()
        .map(|s| Ok(u64::try_from(s)?))
        .collect::<Result<_, Error>>()?;
    Ok((sequences, row.get(1)))
}

/// The reader of schema version 6 (migrations/0006_announced_writers.sql) without its care for unannounced writers:
/// the events after the cursor up to the largest visible sequence and below the
/// smallest announced one, whatever the marked writers that announced
/// nothing. Three statements in one READ COMMITTED transaction, as the
/// ledger's.
fn announced_only_page(client: &mut Client, q: &str, after: u64) -> Result<Vec<u64>, Error> {
    let mut tx = client.transaction()?;
    let drawn: i64 = tx
        .query_one(
            &format!("SELECT coalesce(max(sequence), 0) FROM {q}.effect_events"),
            &[],
        )?
        .get(0);
    let first_pending: Option<i64> = tx
        .query_one(
            &format!(
                "SELECT min((objid::bigint + 2147483648) % 4294967296) FROM pg_locks \
                 WHERE locktype = 'advisory' AND objsubid = 2 AND granted \
                 AND classid = hashtext('effect-ledger-postgres pending {q}')::oid"
            ),
            &[],
        )?
        .get(0);
    let bound = first_pending.map_or(drawn, |first| drawn.min(first - 1));
    let rows = tx.query(
        &format!(
            "SELECT sequence FROM {q}.effect_events WHERE sequence > $1 AND sequence <= $2 \
             ORDER BY sequence"
        ),
        &[&i64::try_from(after)?, &bound],
    )?;
    tx.commit()?;
    rows.iter()
        .map(|r| Ok(u64::try_from(r.get::<_, i64>(0))?))
        .collect()
}

/// A cursor and everything it returned; a sequence at or below the cursor
/// is a repeat and fails at once.
#[derive(Debug, Default)]
struct Follower {
    cursor: u64,
    seen: Vec<u64>,
}

impl Follower {
    /// Reads one page and moves the cursor past it.
    fn read(&mut self, reader: &mut dyn Reader) -> Result<Vec<u64>, Error> {
        let page = reader.page(self.cursor)?;
        self.take(&page)?;
        Ok(page)
    }

    fn take(&mut self, page: &[u64]) -> Result<(), Error> {
        for &sequence in page {
            if sequence <= self.cursor {
                return Err(
                    format!("sequence {sequence} returned again after {}", self.cursor).into(),
                );
            }
            self.cursor = sequence;
            self.seen.push(sequence);
        }
        Ok(())
    }
}

/// Every committed event's sequence, in order.
fn committed(schema: &TestSchema) -> Result<Vec<u64>, Error> {
    schema
        .admin()?
        .query(
            &format!(
                "SELECT sequence FROM {}.effect_events ORDER BY sequence",
                schema.q()
            ),
            &[],
        )?
        .iter()
        .map(|r| Ok(u64::try_from(r.get::<_, i64>(0))?))
        .collect()
}

/// The transaction that draws its sequence first got its id last, and
/// commits last. T_F gets the smaller id, T_E the larger; T_E draws, then
/// T_F draws and commits. While T_E is open the ledger's cursor returns
/// nothing (T_F's event may be preceded by T_E's); once T_E commits it
/// returns both, in order, once.
#[test]
fn a_writer_that_draws_first_and_commits_last_is_neither_skipped_nor_repeated() -> TestResult {
    let test = "a_writer_that_draws_first_and_commits_last_is_neither_skipped_nor_repeated";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "draws_first")?;
    let ledger = schema.ledger()?;
    let mut ours = LedgerReader(&ledger);
    let mut follow_ours = Follower::default();

    let (mut f, f_xid) = Writer::begin(&schema)?;
    let (mut e, e_xid) = Writer::begin(&schema)?;
    assert!(f_xid < e_xid, "T_F has the smaller id ({f_xid} < {e_xid})");
    let e_sequence = e.append("e")?;
    // T_F's append does not wait for T_E's open transaction.
    let f_sequence = f.append("f")?;
    assert!(e_sequence < f_sequence, "T_E drew first");
    assert_eq!(e.announced()?, [e_sequence], "T_E announced its sequence");
    assert_eq!(f.announced()?, [f_sequence], "and T_F its own");
    f.commit()?;

    assert_eq!(
        follow_ours.read(&mut ours)?,
        Vec::<u64>::new(),
        "T_F's event is held"
    );
    e.commit()?;
    assert_eq!(follow_ours.read(&mut ours)?, [e_sequence, f_sequence]);
    assert_eq!(follow_ours.read(&mut ours)?, Vec::<u64>::new());

    let all = committed(&schema)?;
    assert_eq!(all, [e_sequence, f_sequence]);
    assert_eq!(follow_ours.seen, all, "every event once, in order");
    Ok(())
}

/// The advisory locks `writer`'s own backend holds on the schema's mark, by mode.
fn mark_modes(writer: &mut Writer) -> Result<Vec<String>, Error> {
    Ok(writer
        .client
        .query(
            "SELECT mode FROM pg_locks WHERE locktype = 'advisory' AND classid = 1701209697 \
             AND pid = pg_backend_pid() AND granted ORDER BY mode",
            &[],
        )?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// An appender holds only its shared mark and the shared announcement of
/// its first sequence (schema version 6): a second writer appends without
/// waiting (an append that waits fails after `lock_timeout`), and neither
/// looks at the other. The cursor holds the second event until the first
/// writer ends, then returns both once.
#[test]
fn an_appender_holds_its_shared_mark_and_announces_its_first_sequence() -> TestResult {
    let test = "an_appender_holds_its_shared_mark_and_announces_its_first_sequence";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "announcing")?;
    let ledger = schema.ledger()?;
    let mut ours = LedgerReader(&ledger);
    let mut follow = Follower::default();

    let (mut first, _) = Writer::begin(&schema)?;
    let first_sequence = first.append("first")?;
    assert_eq!(first.announced()?, [first_sequence]);
    assert_eq!(
        mark_modes(&mut first)?,
        ["ShareLock"],
        "only the shared mark"
    );

    let (mut second, _) = Writer::begin(&schema)?;
    let second_sequence = second.append("second")?;
    assert_eq!(second.announced()?, [second_sequence]);
    assert_eq!(mark_modes(&mut second)?, ["ShareLock"]);
    assert_eq!(second.marked()?, 2, "both hold the mark at once");
    second.commit()?;
    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "held by the first"
    );
    first.commit()?;
    assert_eq!(follow.read(&mut ours)?, [first_sequence, second_sequence]);
    assert_eq!(
        follow.seen,
        committed(&schema)?,
        "every event once, in order"
    );
    Ok(())
}

/// A marked writer that drew without announcing (an older writer, or ours
/// between its draw and its announcement) holds the cursor at the first
/// missing sequence, and a reader that trusts announcements alone skips its
/// event. Then a rolled-back sequence before a committed one: held while an
/// unannounced writer is open, passed once none is.
#[test]
fn an_unannounced_writer_holds_the_cursor_at_the_first_missing_sequence() -> TestResult {
    let test = "an_unannounced_writer_holds_the_cursor_at_the_first_missing_sequence";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "unannounced")?;
    let ledger = schema.ledger()?;
    let mut naive = schema.admin()?;
    let q = schema.q();
    let mut ours = LedgerReader(&ledger);
    let mut follow = Follower::default();
    let mut follow_naive = Follower::default();

    ledger.prepare("before", &new_operation(0))?;
    let before = follow.read(&mut ours)?;
    assert_eq!(before.len(), 1);
    follow_naive.take(&before)?;

    let (mut old, _) = Writer::begin(&schema)?;
    let old_sequence = old.draw_unannounced()?;
    assert_eq!(old.announced()?, Vec::<u64>::new());
    let (mut later, _) = Writer::begin(&schema)?;
    let later_sequence = later.append("later")?;
    later.commit()?;
    assert!(old_sequence < later_sequence);

    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "held at the unannounced writer's sequence"
    );
    let page = announced_only_page(&mut naive, &q, follow_naive.cursor)?;
    assert_eq!(page, [later_sequence], "the naive reader passes it");
    follow_naive.take(&page)?;

    old.insert_drawn("old", old_sequence)?;
    old.commit()?;
    assert_eq!(follow.read(&mut ours)?, [old_sequence, later_sequence]);
    let page = announced_only_page(&mut naive, &q, follow_naive.cursor)?;
    assert!(page.is_empty(), "and never returns the late event");
    assert!(committed(&schema)?.contains(&old_sequence));
    assert!(!follow_naive.seen.contains(&old_sequence), "it skipped it");
    assert_eq!(follow.seen, committed(&schema)?, "ours: every event once");

    // A sequence rolled back before a committed one, while a marked writer
    // that announced nothing is open: the page stops at the gap.
    let (mut gone, _) = Writer::begin(&schema)?;
    let gone_sequence = gone.append("gone")?;
    gone.rollback()?;
    let (mut open, _) = Writer::begin(&schema)?;
    let open_sequence = open.draw_unannounced()?;
    ledger.prepare("after", &new_operation(1))?;
    assert!(gone_sequence < open_sequence);
    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "held at the gap"
    );
    open.rollback()?;
    let page = follow.read(&mut ours)?;
    assert_eq!(page.len(), 1, "passed once no writer is unannounced");
    assert!(page[0] > open_sequence);
    assert_eq!(follow.seen, committed(&schema)?);
    Ok(())
}

/// The same interleaving with T_E rolling back: T_F's event is held while
/// T_E is open, then returned alone; T_E's sequence never appears.
#[test]
fn a_writer_that_rolls_back_holds_the_cursor_only_while_open() -> TestResult {
    let Some(url) = server_url("a_writer_that_rolls_back_holds_the_cursor_only_while_open") else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "rolled_back")?;
    let ledger = schema.ledger()?;
    let mut ours = LedgerReader(&ledger);
    let mut follow = Follower::default();

    let (mut f, _) = Writer::begin(&schema)?;
    let (mut e, _) = Writer::begin(&schema)?;
    let e_sequence = e.append("e")?;
    let f_sequence = f.append("f")?;
    assert_eq!(e.announced()?, [e_sequence]);
    f.commit()?;
    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "held while T_E is open"
    );
    e.rollback()?;
    assert_eq!(follow.read(&mut ours)?, [f_sequence]);
    assert_eq!(follow.read(&mut ours)?, Vec::<u64>::new());
    assert!(e_sequence < f_sequence);
    assert_eq!(
        committed(&schema)?,
        [f_sequence],
        "T_E's event never committed"
    );
    assert_eq!(follow.seen, [f_sequence]);
    // A later writer is not held by the rolled-back one.
    ledger.prepare("after", &new_operation(1))?;
    assert_eq!(follow.read(&mut ours)?.len(), 1);
    assert_eq!(follow.seen, committed(&schema)?);
    Ok(())
}

/// Three writers: ids in the order F, E2, E1, sequences drawn E1, E2, F,
/// commits F, E2, E1. The cursor returns nothing until E1, the first
/// drawer, commits, then all three in sequence order.
#[test]
fn commits_in_the_reverse_of_the_draw_order_are_read_in_draw_order() -> TestResult {
    let test = "commits_in_the_reverse_of_the_draw_order_are_read_in_draw_order";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "reverse_commits")?;
    let ledger = schema.ledger()?;
    let mut ours = LedgerReader(&ledger);
    let mut follow = Follower::default();

    let (mut f, f_xid) = Writer::begin(&schema)?;
    let (mut e2, e2_xid) = Writer::begin(&schema)?;
    let (mut e1, e1_xid) = Writer::begin(&schema)?;
    assert!(f_xid < e2_xid && e2_xid < e1_xid);
    let s1 = e1.append("e1")?;
    let s2 = e2.append("e2")?;
    let s3 = f.append("f")?;
    assert!(s1 < s2 && s2 < s3);
    assert_eq!(e1.announced()?, [s1]);
    assert_eq!(e2.announced()?, [s2]);
    assert_eq!(f.announced()?, [s3]);

    f.commit()?;
    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "F waits for E1 and E2"
    );
    e2.commit()?;
    assert_eq!(
        follow.read(&mut ours)?,
        Vec::<u64>::new(),
        "E2 and F wait for E1"
    );
    e1.commit()?;
    assert_eq!(follow.read(&mut ours)?, [s1, s2, s3]);
    assert_eq!(follow.seen, committed(&schema)?);
    Ok(())
}

/// The same interleaving read by the naive outbox reader: events whose
/// writer's id is below the snapshot's `xmin`, after a sequence cursor. T_F's
/// id is below T_E's, the oldest running one, so T_F's event is returned
/// while T_E is open, the cursor passes T_E's smaller sequence, and T_E's
/// event is never returned. A transaction of another session older than
/// T_F would hold T_F back too: the interleaving is repeated until one
/// attempt ran without one.
#[test]
fn a_below_xmin_reader_with_a_sequence_cursor_skips_a_late_commit() -> TestResult {
    let test = "a_below_xmin_reader_with_a_sequence_cursor_skips_a_late_commit";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "below_xmin")?;
    let ledger = schema.ledger()?;
    let mut reader = schema.admin()?;
    let q = schema.q();
    let mut follow = Follower::default();
    for attempt in 0..50 {
        let (mut f, f_xid) = Writer::begin(&schema)?;
        let (mut e, _) = Writer::begin(&schema)?;
        let e_sequence = e.append(&format!("e{attempt}"))?;
        let f_sequence = f.append(&format!("f{attempt}"))?;
        f.commit()?;
        let (page, xmin) = below_xmin_page(&mut reader, &q, follow.cursor)?;
        e.commit()?;
        if xmin <= f_xid {
            // An older transaction of another session was running.
            follow.take(&LedgerReader(&ledger).page(follow.cursor)?)?;
            continue;
        }
        assert_eq!(
            page,
            [f_sequence],
            "T_F's event is returned while T_E is open"
        );
        follow.take(&page)?;
        let (after, _) = below_xmin_page(&mut reader, &q, follow.cursor)?;
        assert!(
            !after.contains(&e_sequence),
            "T_E's event is behind the cursor"
        );
        assert!(committed(&schema)?.contains(&e_sequence));
        assert!(
            !follow.seen.contains(&e_sequence),
            "the below-xmin reader skipped it"
        );
        return Ok(());
    }
    Err("50 attempts never ran without an older transaction of another session".into())
}

/// Rounds of the stress test: `EFFECT_PG_CURSOR_ROUNDS`, or 10.
fn stress_rounds() -> usize {
    std::env::var("EFFECT_PG_CURSOR_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(10)
}

/// Writer threads prepare, claim and confirm operations through the ledger,
/// and raw writers append in transactions they hold open a little and
/// sometimes roll back, while two readers follow the cursor with small pages; after each round
/// every reader has seen exactly the committed events, in order, once. One
/// raw writer appends every other event as an older writer would (marked,
/// never announced). Set `EFFECT_PG_CURSOR_ROUNDS=200` for a long run.
/// Appends overlapped (a raw writer saw another writer's mark beside its
/// own), or the test exercised nothing.
#[test]
fn cursor_readers_see_every_event_once_under_concurrent_writers() -> TestResult {
    let test = "cursor_readers_see_every_event_once_under_concurrent_writers";
    let Some(url) = server_url(test) else {
        return Ok(());
    };
    let schema = TestSchema::new(&url, "cursor_stress")?;
    let ledger = PostgresLedger::connect(&url, schema.options().pool_size(8))?;
    const WRITERS: usize = 3;
    const RAW_WRITERS: usize = 2;
    const PER_WRITER: usize = 12;
    let mut readers = [Follower::default(), Follower::default()];
    let rounds = stress_rounds();
    let overlapped = AtomicUsize::new(0);
    for round in 0..rounds {
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| -> Result<(), String> {
            let followers: Vec<_> = readers
                .iter_mut()
                .enumerate()
                .map(|(r, follower)| {
                    let (ledger, done) = (&ledger, &done);
                    scope.spawn(move || -> Result<(), String> {
                        loop {
                            let finished = done.load(Ordering::SeqCst);
                            let page: Vec<u64> = ledger
                                .events_after(follower.cursor, 3 + r * 4)
                                .map_err(|e| e.to_string())?
                                .iter()
                                .map(|e| e.sequence)
                                .collect();
                            follower.take(&page).map_err(|e| e.to_string())?;
                            if page.is_empty() && finished {
                                return Ok(());
                            }
                        }
                    })
                })
                .collect();
            let writers: Vec<_> = (0..WRITERS)
                .map(|w| {
                    let ledger = &ledger;
                    scope.spawn(move || -> Result<(), effect_core::LedgerError> {
                        for i in 0..PER_WRITER {
                            let n = (round * WRITERS + w) * PER_WRITER + i;
                            let id = format!("op-{n}");
                            let owner = format!("owner-{n}");
                            let claim = Claim::new(owner.clone(), Duration::from_secs(60));
                            ledger.apply(
                                &id,
                                &Transition::PrepareAndClaim(new_operation(n), claim),
                            )?;
                            let confirmation = Confirmation {
                                output: json!(n),
                                provider_operation_id: None,
                                evidence: Evidence::new(),
                            };
                            ledger.mark_confirmed(&id, Some(&owner), &confirmation)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            // Raw writers hold each transaction open past its append, for
            // a while, and roll every fourth one back.
            let raw_writers: Vec<_> = (0..RAW_WRITERS)
                .map(|w| {
                    let (schema, overlapped) = (&schema, &overlapped);
                    scope.spawn(move || -> Result<(), String> {
                        let run = || -> Result<(), Error> {
                            let (mut writer, _) = Writer::begin(schema)?;
                            for i in 0..PER_WRITER {
                                if i > 0 {
                                    writer.begin_again()?;
                                }
                                let id = format!("raw-{round}-{w}-{i}");
                                if w == 1 && i % 2 == 1 {
                                    // As an older writer: marked, never announced.
                                    let sequence = writer.draw_unannounced()?;
                                    writer.insert_drawn(&id, sequence)?;
                                } else {
                                    writer.append(&id)?;
                                }
                                if writer.marked()? > 1 {
                                    overlapped.fetch_add(1, Ordering::SeqCst);
                                }
                                for _ in 0..(i % 3) {
                                    writer.client.batch_execute("SELECT 1")?;
                                }
                                if i % 4 == 3 {
                                    writer.rollback()?;
                                } else {
                                    writer.commit()?;
                                }
                            }
                            Ok(())
                        };
                        run().map_err(|err| err.to_string())
                    })
                })
                .collect();
            let mut failure = None;
            for writer in raw_writers {
                match writer.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => failure = Some(err),
                    Err(_) => failure = Some("a raw writer panicked".to_owned()),
                }
            }
            for writer in writers {
                match writer.join() {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => failure = Some(err.to_string()),
                    Err(_) => failure = Some("a writer panicked".to_owned()),
                }
            }
            done.store(true, Ordering::SeqCst);
            for follower in followers {
                follower
                    .join()
                    .map_err(|_| "a reader panicked".to_owned())??;
            }
            failure.map_or(Ok(()), Err)
        })?;
        let all = committed(&schema)?;
        // Three events per ledger operation, one per raw commit (three in four).
        let per_round = WRITERS * PER_WRITER * 3 + RAW_WRITERS * PER_WRITER * 3 / 4;
        assert_eq!(all.len(), (round + 1) * per_round);
        for (r, follower) in readers.iter().enumerate() {
            if follower.seen != all {
                let seen: BTreeSet<u64> = follower.seen.iter().copied().collect();
                let missed: Vec<u64> = all.iter().filter(|s| !seen.contains(s)).copied().collect();
                return Err(format!(
                    "round {round}: reader {r} missed {missed:?} of {} committed events \
                     (it returned {}, {} distinct)",
                    all.len(),
                    follower.seen.len(),
                    seen.len()
                )
                .into());
            }
        }
    }
    let unique: BTreeSet<u64> = readers[0].seen.iter().copied().collect();
    assert_eq!(unique.len(), readers[0].seen.len(), "no duplicates");
    let overlapped = overlapped.load(Ordering::SeqCst);
    assert!(
        overlapped > 0,
        "no two appends overlapped in {rounds} rounds"
    );
    eprintln!(
        "{test}: {rounds} rounds, {} events, {overlapped} raw appends beside another writer",
        unique.len()
    );
    Ok(())
}
