//! Waiting for another connection's write lock.
//!
//! SQLite's own busy handler (`busy_timeout`) sleeps 1, 2, 5, 10 … ms
//! between looks at a taken lock, so a writer that meets a transaction of
//! a few hundred microseconds (a prune's, another process's agent) waits
//! a whole millisecond or more for it. A write transaction of the ledger
//! looks every [`LOCK_POLL`] instead for its first [`POLL_PHASE`], then
//! leaves the rest of its busy timeout to SQLite's handler
//! ([`begin_immediate`]); the prune looks every [`LOCK_POLL`] throughout
//! ([`poll_for_lock`]).

use std::time::Duration;

use rusqlite::Connection;

/// How often a waiting writer looks at a taken write lock. An agent
/// writing back to back releases the lock between two of its transactions
/// for tens of microseconds only: the prune, looking every millisecond,
/// rarely fell in that gap and waited tens of milliseconds for a batch.
pub(crate) const LOCK_POLL: Duration = Duration::from_micros(100);

/// How long a ledger write looks every [`LOCK_POLL`] before SQLite's busy
/// handler takes over: as long as a prune's write transaction holds the
/// lock (800 µs by default, `PruneLimits::batch_time`). Past it, the lock
/// is held by another agent's commit and its sync, which SQLite's longer
/// sleeps suit: with 10 ms of polling, four processes executing the same
/// operations (W7, docs/benchmarks.md) ran at half their rate.
pub(crate) const POLL_PHASE: Duration = Duration::from_millis(1);

/// [`POLL_PHASE`] in microseconds, as [`poll_for_lock`]'s parameter.
const POLL_PHASE_MICROS: u64 = 1_000;
const _: () = assert!(POLL_PHASE.as_micros() == POLL_PHASE_MICROS as u128);

/// A busy handler: another look at the lock after [`LOCK_POLL`] as long as
/// the looks so far slept less than `WAIT_MICROS` (each sleep lasts at
/// least [`LOCK_POLL`], so the wait is at least that long).
pub(crate) fn poll_for_lock<const WAIT_MICROS: u64>(attempts: i32) -> bool {
    let slept = u64::try_from(attempts).unwrap_or(0) * LOCK_POLL.as_micros() as u64;
    if slept >= WAIT_MICROS {
        #[cfg(test)]
        tests::gave_up();
        return false;
    }
    std::thread::sleep(LOCK_POLL);
    true
}

/// `BEGIN IMMEDIATE` on `conn`, waiting at most `busy_timeout` for another
/// connection's write lock: looking every [`LOCK_POLL`] for the first
/// [`POLL_PHASE`], then in SQLite's busy handler for the rest. The
/// connection's busy timeout is `busy_timeout` again when it returns.
#[allow(clippy::disallowed_methods)] // A real wait for another connection's lock.
pub(crate) fn begin_immediate(conn: &Connection, busy_timeout: Duration) -> rusqlite::Result<()> {
    let begin = || {
        conn.prepare_cached("BEGIN IMMEDIATE")?
            .execute([])
            .map(drop)
    };
    if busy_timeout <= POLL_PHASE {
        return begin();
    }
    conn.busy_handler(Some(poll_for_lock::<POLL_PHASE_MICROS>))?;
    let started = std::time::Instant::now();
    let mut begun = begin();
    if begun
        .as_ref()
        .is_err_and(|error| error.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy))
    {
        let rest = busy_timeout.saturating_sub(started.elapsed());
        begun = conn.busy_timeout(rest).and_then(|()| begin());
    }
    if let Err(error) = conn.busy_timeout(busy_timeout) {
        if begun.is_ok() {
            // No transaction on a connection whose busy handler is unknown.
            let _ = conn.execute_batch("ROLLBACK");
        }
        return Err(error);
    }
    begun
}

#[cfg(test)]
mod tests {
    #![allow(clippy::disallowed_methods)] // A lock held across real time.

    use std::sync::Mutex;
    use std::thread::ThreadId;

    use super::*;

    /// The threads on which [`poll_for_lock`] stopped looking.
    static GAVE_UP: Mutex<Vec<ThreadId>> = Mutex::new(Vec::new());

    pub(super) fn gave_up() {
        GAVE_UP.lock().unwrap().push(std::thread::current().id());
    }

    #[test]
    fn the_handler_looks_until_its_sleeps_reach_the_wait() {
        assert!(poll_for_lock::<1_000>(0));
        assert!(poll_for_lock::<1_000>(9));
        assert!(!poll_for_lock::<1_000>(10), "10 sleeps of 100 µs");
        assert!(!poll_for_lock::<1_000>(i32::MAX));
        assert!(poll_for_lock::<1_000>(-1), "SQLite never passes one");
    }

    /// A WAL file (in its directory) and two connections to it, the
    /// second holding the write lock.
    fn locked_ledger() -> (tempfile::TempDir, Connection, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.sqlite");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        (dir, conn, holder)
    }

    fn busy_timeout_ms(conn: &Connection) -> i64 {
        conn.pragma_query_value(None, "busy_timeout", |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_write_held_past_the_polling_waits_in_sqlite_s_handler_then_begins() {
        let (_dir, conn, holder) = locked_ledger();
        let timeout = Duration::from_secs(60);
        let writer = std::thread::current().id();
        std::thread::scope(|scope| {
            scope.spawn(move || {
                // Held until the writer's polling phase has ended busy,
                // then 20 ms more, so the writer begins only by waiting in
                // SQLite's handler, its busy timeout's rest.
                while !GAVE_UP.lock().unwrap().contains(&writer) {
                    std::thread::yield_now();
                }
                std::thread::sleep(Duration::from_millis(20));
                holder.execute_batch("ROLLBACK").unwrap();
            });
            begin_immediate(&conn, timeout).unwrap();
        });
        assert!(!conn.is_autocommit(), "the transaction began");
        assert_eq!(busy_timeout_ms(&conn), 60_000, "the timeout restored");
        conn.execute_batch("ROLLBACK").unwrap();
    }

    #[test]
    fn a_write_finding_the_lock_free_keeps_the_busy_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("l.sqlite")).unwrap();
        begin_immediate(&conn, Duration::from_secs(7)).unwrap();
        assert!(!conn.is_autocommit());
        assert_eq!(busy_timeout_ms(&conn), 7_000);
        conn.execute_batch("ROLLBACK").unwrap();
    }

    #[test]
    fn a_write_held_past_the_busy_timeout_fails_busy_with_the_timeout_restored() {
        let (_dir, conn, _holder) = locked_ledger();
        let timeout = POLL_PHASE + Duration::from_millis(20);
        let error = begin_immediate(&conn, timeout).unwrap_err();
        assert_eq!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy)
        );
        assert!(conn.is_autocommit());
        assert_eq!(
            u128::try_from(busy_timeout_ms(&conn)).unwrap(),
            timeout.as_millis()
        );
        let error = begin_immediate(&conn, Duration::ZERO).unwrap_err();
        assert_eq!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy),
            "no wait at all"
        );
    }
}
