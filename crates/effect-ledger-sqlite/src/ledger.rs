//! [`SqliteLedger`]: opening a ledger file and the [`EffectLedger`] methods.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use effect_core::transition;
use effect_core::{
    Clock, EffectLedger, EffectRecord, LedgerError, LedgerEvent, LedgerStats, ListQuery,
    Transition, TransitionOutcome, WriteDurability,
};
use r2d2::{Pool, PooledConnection};
use r2d2_sqlite::SqliteConnectionManager;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};

use crate::batch::{Answer, replicate, write_batch};
use crate::confirmed::ConfirmedCache;
use crate::deferred::Syncer;
use crate::error::{SqliteError, is_read_only_handle, is_sync_failure, ledger_error, pool_error};
use crate::file::LedgerFile;
use crate::group::{GroupCommit, MAX_BATCH};
use crate::known::{Claims, Known};
use crate::options::{SqliteOptions, Synchronous};
use crate::row::{
    ListSql, SELECT_EVENTS, SELECT_EVENTS_AFTER, collect, decode_event, decode_listed, list_sql,
    load,
};
use crate::schema::{self, Layout};

/// How long opening waits for the pool's connections to open, at least.
const POOL_FILL_WAIT: Duration = Duration::from_secs(5);

/// An [`EffectLedger`] in a SQLite file, in the table layout of the Python
/// package (docs/spec.md §8).
///
/// Every transition runs inside one SQLite transaction that loads the record,
/// evaluates [`transition::plan`] and writes the record and its events before
/// `COMMIT` (the write lock is taken before the first write, and the plan made
/// again should another writer have committed since the read). A prepare
/// whose replay check found no row and an owner's outcome of a claim this
/// ledger wrote skip the load: they are planned on what is known and
/// written only if the row is still exactly that, else planned again on a
/// fresh read. With
/// [`crate::Synchronous::Full`] the commit is on stable
/// storage before [`apply_with`](EffectLedger::apply_with) returns. Several processes
/// may share one file: SQLite's lock serializes their transitions.
///
/// Within a process, concurrent transitions share that transaction (group
/// commit, see [`SqliteOptions::group_commit`]): each is still planned on the
/// record as the transitions before it left it, in a savepoint of its own, so
/// a refused or failed one affects only its caller.
///
/// Cloning is cheap and shares the connection pool.
#[derive(Clone)]
pub struct SqliteLedger {
    pub(crate) pool: Pool<Manager>,
    clock: Arc<dyn Clock>,
    path: PathBuf,
    /// Writers of this process queue here rather than in SQLite's busy
    /// handler, which polls with sleeps of up to 100 ms, and share commits
    /// (a batch of one without group commit); other processes still meet the
    /// file lock and the busy timeout.
    group: Arc<GroupCommit>,
    /// How long a transition waits for another process's lock.
    pub(crate) busy_timeout: Duration,
    /// The file opened, checked before every commit.
    pub(crate) file: Arc<LedgerFile>,
    pub(crate) confirmed: Arc<ConfirmedCache>,
    /// The claims this ledger committed, so an owner's outcome is planned
    /// without a read first (see `known`).
    claims: Arc<Claims>,
    /// How `list` reads this file (a file opened read-only keeps its layout).
    list_sql: &'static ListSql,
    /// Opened read-only as an immutable snapshot (see `is_immutable_snapshot`).
    immutable: bool,
    /// Whether a deferrable batch commits at `synchronous = NORMAL`: only a
    /// ledger whose commits are otherwise `FULL`.
    pub(crate) defers: bool,
    /// Makes those commits durable (see `deferred`).
    syncer: Arc<Syncer>,
    /// Set should a connection fail to return to `FULL` after a deferred
    /// batch: from then on every batch sets its connection's level first,
    /// since a pooled connection may have been left at `NORMAL`.
    pub(crate) levels_unknown: Arc<AtomicBool>,
    /// Set once a commit of this ledger failed to sync (see `is_poisoned`).
    poisoned: Arc<AtomicBool>,
    /// Opened with [`SqliteOptions::read_only`].
    read_only: bool,
}

/// The pool's connection manager: r2d2-sqlite's, except that a connection
/// returned inside a transaction is broken and dropped, never handed out
/// again (every ledger method ends its transactions).
#[derive(Debug)]
pub(crate) struct Manager(SqliteConnectionManager);

impl r2d2::ManageConnection for Manager {
    type Connection = Connection;
    type Error = rusqlite::Error;

    fn connect(&self) -> Result<Connection, rusqlite::Error> {
        self.0.connect()
    }

    fn is_valid(&self, conn: &mut Connection) -> Result<(), rusqlite::Error> {
        self.0.is_valid(conn)
    }

    fn has_broken(&self, conn: &mut Connection) -> bool {
        !conn.is_autocommit()
    }
}

impl fmt::Debug for SqliteLedger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLedger")
            .field("path", &self.path)
            .field("pool_size", &self.pool.max_size())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl SqliteLedger {
    /// Opens the ledger file at `path`, creating it (and its parent directories)
    /// when missing, switching it to WAL mode and migrating it to the current
    /// schema ([`SCHEMA_VERSION`](crate::SCHEMA_VERSION)). Files written by the
    /// Python package open as they are.
    ///
    /// # Errors
    ///
    /// [`SqliteError::InvalidPath`] for an empty path, `:memory:`, a `file:` URI
    /// or a directory (the ledger must outlive the process);
    /// [`SqliteError::InvalidOption`] for a pool size of 0;
    /// [`SqliteError::NotADatabase`] for a file that is not SQLite;
    /// [`SqliteError::ReadOnly`] for a file this process can only read (a
    /// read-only file or mount: open it with [`SqliteOptions::read_only`]
    /// instead), [`SqliteError::Io`] for an I/O error or a full disk (worth
    /// another attempt), [`SqliteError::CannotOpen`], [`SqliteError::Busy`],
    /// [`SqliteError::NewerSchema`], [`SqliteError::IncompatibleSchema`], and
    /// [`SqliteError::CreateDirectory`] / [`SqliteError::Open`] /
    /// [`SqliteError::Pool`] for other failures.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self, SqliteError> {
        check_path(path.as_ref())?;
        // Pooled connections may be (re)opened later: pin the file the caller
        // meant now, whatever the working directory becomes.
        let path = &std::path::absolute(path.as_ref()).unwrap_or_else(|_| path.as_ref().to_owned());
        if options.pool_size == 0 {
            return Err(SqliteError::InvalidOption {
                option: "pool_size",
                reason: "the pool needs at least one connection",
            });
        }
        // Without SQLITE_OPEN_URI a path is always a file name, never a URI.
        let flags = if options.read_only {
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
        } else {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|source| SqliteError::CreateDirectory {
                    path: parent.to_owned(),
                    source,
                })?;
            }
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX
        };
        let settings = Settings::from(&options);
        let (layout, target, flags, immutable) = if options.read_only {
            match open_readable(path, path, flags, settings) {
                Ok(layout) => (layout, path.to_owned(), flags, false),
                // A directory this user cannot write, and no -wal/-shm files
                // to share: SQLite cannot set up WAL reading, so read the
                // file as an immutable snapshot (no writer can be active
                // without those files).
                Err(err) if err.is_permission() => {
                    let uri = immutable_uri(path);
                    let flags = flags | OpenFlags::SQLITE_OPEN_URI;
                    (
                        open_readable(&uri, path, flags, settings)?,
                        uri,
                        flags,
                        true,
                    )
                }
                Err(err) => return Err(err),
            }
        } else {
            let fail = |step: &'static str| move |e| SqliteError::open(path.to_owned(), step, e);
            let mut conn =
                Connection::open_with_flags(path, flags).map_err(fail("opening the file"))?;
            refuse_read_only(&conn, path)?;
            settings
                .apply(&conn)
                .map_err(fail("configuring the connection"))?;
            if !options.migrate {
                schema::check_current(&conn, path)?;
            }
            prepare_file(&mut conn, path, options.busy_timeout)?;
            (Layout::Current, path.to_owned(), flags, false)
        };

        let writable = !options.read_only;
        let manager = Manager(
            SqliteConnectionManager::file(&target)
                .with_flags(flags)
                .with_init(move |conn| {
                    // A pooled connection opens the file again, later: should
                    // SQLite fall back to reading only (the file became
                    // read-only, or opening it for writing failed), the pool
                    // drops it and opens another rather than keep one that
                    // fails every write.
                    if writable && conn.is_readonly(rusqlite::MAIN_DB)? {
                        return Err(read_only_handle());
                    }
                    settings.apply(conn)
                }),
        );
        let pool = Pool::builder()
            .max_size(options.pool_size)
            // Opening fills the pool before it returns, which a loaded machine
            // can take longer than a short busy timeout; later waits for a
            // free connection are bounded by the busy timeout (`connection`).
            .connection_timeout(options.busy_timeout.max(POOL_FILL_WAIT))
            // Connections to a local file do not go stale: no reaping, no
            // reconnects, and no test query on every checkout (r2d2-sqlite's
            // `SELECT 1`, parsed anew each time: about a tenth of a
            // transition's instructions). A connection left in a
            // transaction is still dropped (`Manager::has_broken`).
            .max_lifetime(None)
            .idle_timeout(None)
            .test_on_check_out(false)
            .build(manager)
            .map_err(|source| SqliteError::Pool {
                path: path.to_owned(),
                source,
            })?;
        let poisoned = Arc::new(AtomicBool::new(false));
        Ok(SqliteLedger {
            pool,
            clock: options.clock,
            path: path.to_owned(),
            group: Arc::new(GroupCommit::new(if options.group_commit {
                MAX_BATCH
            } else {
                1
            })),
            file: Arc::new(LedgerFile::at(path)),
            busy_timeout: options.busy_timeout,
            confirmed: Arc::new(ConfirmedCache::new(options.confirmed_cache)),
            claims: Arc::new(Claims::default()),
            list_sql: list_sql(layout),
            immutable,
            defers: options.synchronous == Synchronous::Full && !options.read_only,
            // A failed sync of deferred commits poisons the ledger too.
            syncer: Arc::new(Syncer::new(
                path,
                options.deferred_sync_delay,
                Arc::clone(&poisoned),
            )),
            levels_unknown: Arc::new(AtomicBool::new(false)),
            poisoned,
            read_only: options.read_only,
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a [`read_only`](SqliteOptions::read_only) open fell back to
    /// reading the file as an immutable snapshot. That happens when this user
    /// cannot write the file's directory and no `-wal` and `-shm` files are
    /// there to share: SQLite then cannot set up WAL reading. Without those
    /// files no writer is active, so the snapshot is complete when opened;
    /// but a writer that starts afterwards is not seen, and reads racing its
    /// first checkpoint may fail or see a torn file. Reopen to see new work.
    pub fn is_immutable_snapshot(&self) -> bool {
        self.immutable
    }

    /// Whether a commit of this ledger (or a clone) failed to sync to the
    /// disk (`fsync` or `fdatasync` reported an error). Its callers were told
    /// that the write's outcome is unknown, and from then on every transition
    /// is refused with [`LedgerError::Unavailable`] while reads still work;
    /// open the file again (a new [`SqliteLedger`], or a new process) to
    /// write. See "After a failed sync" in the crate docs.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    fn connection(
        &self,
        doing: impl Fn() -> String,
    ) -> Result<PooledConnection<Manager>, LedgerError> {
        // r2d2 panics on a zero timeout; a zero busy timeout means "do not wait".
        self.pool
            .get_timeout(self.busy_timeout.max(Duration::from_millis(1)))
            .map_err(|e| pool_error(doing(), e))
    }

    /// Writes one batch of the group commit (see [`write_on`](Self::write_on)),
    /// on another connection should SQLite refuse this one every write.
    fn write(&self, conn: &Connection, batch: &[crate::group::Request]) -> Vec<Answer> {
        let mut answers = self.write_on(conn, batch);
        if self.read_only || !answers.iter().any(read_only_handle_answer) {
            return answers;
        }
        // SQLite opened this connection's write-ahead log read-only (opening
        // it for writing failed, as a transient I/O error can make it): the
        // connection refuses every write, and nothing of the batch was
        // written, since that refusal comes before the first write. Leave
        // the connection inside a transaction, which the pool takes as
        // broken (`Manager::has_broken`) and replaces, and write the batch
        // on another one.
        let _ = conn.execute_batch("BEGIN");
        for _ in 1..self.pool.max_size() {
            let Ok(other) = self.connection(String::new) else {
                break;
            };
            answers = self.write_on(&other, batch);
            if !answers.iter().any(read_only_handle_answer) {
                break;
            }
            let _ = other.execute_batch("BEGIN");
        }
        answers
    }

    /// Writes one batch on `conn`, at `synchronous = NORMAL` when every
    /// transition of it is deferrable, else at the ledger's level. The
    /// connection goes back to the pool at `FULL`, so nothing else written on
    /// it (a prune, the next batch) is deferred by accident.
    fn write_on(&self, conn: &Connection, batch: &[crate::group::Request]) -> Vec<Answer> {
        let deferred = self.defers
            && batch
                .iter()
                .all(|r| r.durability == WriteDurability::Deferrable);
        if deferred || self.levels_unknown.load(Ordering::Acquire) {
            let level = if deferred { "NORMAL" } else { "FULL" };
            if let Err(err) = conn.pragma_update(None, "synchronous", level) {
                // The connection's level is unknown: write nothing on it.
                let doing = format!("setting synchronous = {level} for a batch");
                return batch
                    .iter()
                    .map(|_| Err(ledger_error(doing.clone(), replicate(&err))))
                    .collect();
            }
        }
        let pairs: Vec<crate::batch::Item<'_>> = batch
            .iter()
            .map(|r| (r.operation_id.as_str(), &r.transition, &r.known))
            .collect();
        let answers = write_batch(
            conn,
            self.clock.as_ref(),
            &self.file,
            self.busy_timeout,
            &pairs,
        );
        if answers
            .iter()
            .any(|answer| answer.as_ref().is_err_and(is_sync_failure))
        {
            self.poisoned.store(true, Ordering::Release);
        }
        if deferred {
            self.syncer.deferred_committed();
            if conn.pragma_update(None, "synchronous", "FULL").is_err() {
                self.levels_unknown.store(true, Ordering::Release);
            }
        }
        answers
    }

    fn submit(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        if self.is_poisoned() {
            return Err(LedgerError::unavailable(
                format!(
                    "the sqlite ledger {} refuses {} to operation {operation_id:?}: an earlier \
                     commit failed to sync to the disk, so what this ledger holds in memory \
                     may differ from the file; open the ledger again (or restart the process)",
                    self.path.display(),
                    transition.name()
                ),
                None,
            ));
        }
        // A compensation step adds to a confirmed record's evidence (the one
        // change a confirmed record sees): it is decided on the stored record.
        if !matches!(transition, Transition::Compensation(_))
            && let Some(record) = self.confirmed.get(operation_id)
        {
            // Confirmed is terminal: the plan on the cached record is the plan
            // on the stored one. Only a plan that writes nothing is answered here.
            let plan = transition::plan(operation_id, Some(record), transition, self.clock.now())?;
            if plan.write.is_none() {
                return Ok(plan.outcome);
            }
        }
        let known = if matches!(
            transition,
            Transition::Prepare(_) | Transition::PrepareAndClaim(..)
        ) {
            match self.replay(operation_id, transition)? {
                Replay::Answered(outcome) => return Ok(outcome),
                Replay::Read(known) => known,
            }
        } else {
            self.claims.take(operation_id, transition)
        };
        let doing = || {
            format!(
                "applying {} to operation {operation_id:?}",
                transition.name()
            )
        };
        // Only a ledger whose commits are FULL has anything to defer: on
        // the others a deferrable write is an ordinary one, and the group
        // commit need not keep it in a batch of its own.
        let durability = if self.defers {
            durability
        } else {
            WriteDurability::Durable
        };
        let answer = self.group.submit(
            operation_id,
            transition,
            known,
            durability,
            || self.connection(doing),
            |conn, batch| self.write(conn, batch),
        );
        if let Ok(outcome) = &answer {
            self.confirmed.remember(&outcome.record);
            self.claims.remember(&outcome.record);
        }
        answer
    }
}

/// What the replay check of a prepare found.
enum Replay {
    /// The stored record answers the prepare: nothing to write.
    Answered(TransitionOutcome),
    /// The prepare goes to the write path, with what the read found.
    Read(Known),
}

impl SqliteLedger {
    /// A prepare of an operation already `confirmed` or `rejected`, answered
    /// from one read outside any transaction, with no write and no lock: a
    /// terminal record never changes (only a prune deletes it), so the plan
    /// on it is the plan the write transaction would make. Only a plan that
    /// writes nothing is answered here; anything else, a conflict included,
    /// goes to the write path, which decides it as before; when the read
    /// found no row, on that (see `known`).
    fn replay(&self, operation_id: &str, transition: &Transition) -> Result<Replay, LedgerError> {
        let conn = self.connection(|| format!("reading operation {operation_id:?}"))?;
        let Some(record) = load(&conn, operation_id)? else {
            return Ok(Replay::Read(Known::Absent));
        };
        drop(conn);
        // A prepare of an existing operation that this read cannot answer
        // (one in progress, a retry, a conflict) may well write nothing:
        // the write transaction reads it again, starting as a read.
        if !record.status.is_terminal() {
            return Ok(Replay::Read(Known::Nothing));
        }
        match transition::plan(operation_id, Some(record), transition, self.clock.now()) {
            Ok(plan) if plan.write.is_none() => {
                self.confirmed.remember(&plan.outcome.record);
                Ok(Replay::Answered(plan.outcome))
            }
            _ => Ok(Replay::Read(Known::Nothing)),
        }
    }
}

/// Operations per statement of [`EffectLedger::count_events`]: well under
/// SQLite's limit on bound parameters.
const COUNT_CHUNK: usize = 500;

impl EffectLedger for SqliteLedger {
    /// A deferrable transition commits, in a batch of deferrable transitions
    /// only, at `synchronous = NORMAL` and is answered before the log is
    /// synced (see [`SqliteOptions::deferred_sync_delay`]).
    fn apply_with(
        &self,
        operation_id: &str,
        transition: &Transition,
        durability: WriteDurability,
    ) -> Result<TransitionOutcome, LedgerError> {
        self.submit(operation_id, transition, durability)
    }

    fn sync(&self) -> Result<(), LedgerError> {
        self.syncer.sync()
    }

    fn get(&self, operation_id: &str) -> Result<Option<EffectRecord>, LedgerError> {
        let doing = || format!("reading operation {operation_id:?}");
        let conn = self.connection(doing)?;
        load(&conn, operation_id)
    }

    fn list(&self, query: &ListQuery) -> Result<Vec<EffectRecord>, LedgerError> {
        query.validate()?;
        let doing = || "listing operations".to_owned();
        let conn = self.connection(doing)?;
        let limit = i64::try_from(query.limit).unwrap_or(i64::MAX);
        let sql = self.list_sql;
        if query.after.is_none() && !query.stale {
            return match query.status {
                Some(status) => collect(
                    &conn,
                    &sql.by_status,
                    params![status.as_str(), limit],
                    decode_listed,
                    &doing,
                ),
                None => collect(&conn, &sql.all, params![limit], decode_listed, &doing),
            };
        }
        let cursor: Option<(String, i64, i64)> = match &query.after {
            Some(id) => Some(
                conn.prepare_cached(&sql.cursor)
                    .and_then(|mut stmt| {
                        stmt.query_row(params![id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                            .optional()
                    })
                    .map_err(|e| ledger_error(doing(), e))?
                    .ok_or_else(|| ListQuery::unknown_cursor(id))?,
            ),
            None => None,
        };
        let now = query
            .stale
            .then(|| effect_core::unix_seconds(self.clock.now()));
        match (query.status_filter(), cursor) {
            (None, Some((updated_at, sequence, rowid))) => collect(
                &conn,
                &sql.all_after,
                params![limit, updated_at, sequence, rowid],
                decode_listed,
                &doing,
            ),
            (Some(status), cursor) => {
                let (updated_at, sequence, rowid) = match cursor {
                    Some((u, s, r)) => (Some(u), Some(s), Some(r)),
                    None => (None, None, None),
                };
                collect(
                    &conn,
                    &sql.by_status_after,
                    params![status.as_str(), limit, updated_at, sequence, rowid, now],
                    decode_listed,
                    &doing,
                )
            }
            // Neither a cursor nor a status: handled above.
            (None, None) => collect(&conn, &sql.all, params![limit], decode_listed, &doing),
        }
    }

    fn events(&self, operation_id: &str) -> Result<Vec<LedgerEvent>, LedgerError> {
        let doing = || format!("reading the events of operation {operation_id:?}");
        let conn = self.connection(doing)?;
        collect(
            &conn,
            SELECT_EVENTS,
            params![operation_id],
            decode_event,
            &doing,
        )
    }

    fn events_after(&self, after: u64, limit: usize) -> Result<Vec<LedgerEvent>, LedgerError> {
        let doing = || format!("reading events after sequence {after}");
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Ok(after) = i64::try_from(after) else {
            // No sequence exceeds i64::MAX: SQLite's integers are 64-bit signed.
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = self.connection(doing)?;
        collect(
            &conn,
            SELECT_EVENTS_AFTER,
            params![after, limit],
            decode_event,
            &doing,
        )
    }

    fn count_events(
        &self,
        operation_ids: &[&str],
        event_type: &str,
    ) -> Result<Vec<u64>, LedgerError> {
        let doing = || format!("counting {event_type} events");
        let conn = self.connection(doing)?;
        let mut counts = std::collections::HashMap::new();
        // One walk of the `(operation_id, sequence)` index per operation,
        // in statements of at most COUNT_CHUNK operations.
        for chunk in operation_ids.chunks(COUNT_CHUNK) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!(
                "SELECT operation_id, COUNT(*) FROM effect_events \
                 WHERE event_type = ? AND operation_id IN ({marks}) GROUP BY operation_id"
            );
            let mut stmt = conn
                .prepare_cached(&sql)
                .map_err(|e| ledger_error(doing(), e))?;
            let values: Vec<&dyn rusqlite::ToSql> =
                std::iter::once(&event_type as &dyn rusqlite::ToSql)
                    .chain(chunk.iter().map(|id| id as &dyn rusqlite::ToSql))
                    .collect();
            let rows = stmt
                .query_map(values.as_slice(), |row| {
                    Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
                })
                .map_err(|e| ledger_error(doing(), e))?;
            for row in rows {
                let (id, count) = row.map_err(|e| ledger_error(doing(), e))?;
                counts.insert(id, u64::try_from(count).unwrap_or(0));
            }
        }
        Ok(operation_ids
            .iter()
            .map(|id| counts.get(*id).copied().unwrap_or(0))
            .collect())
    }

    fn longest_lock_wait(&self) -> Option<Duration> {
        Some(self.busy_timeout)
    }

    fn stats(&self) -> Result<LedgerStats, LedgerError> {
        let doing = || "computing ledger stats".to_owned();
        let mut conn = self.connection(doing)?;
        // One read transaction, so the counts and the oldest entry agree.
        let tx = conn.transaction().map_err(|e| ledger_error(doing(), e))?;
        let counts = if schema::has_status_counts(&tx).map_err(|e| ledger_error(doing(), e))? {
            crate::counts::status_counts(&tx)?
        } else {
            crate::counts::full_count(&tx)?
        };
        let oldest: Option<String> = tx
            .prepare_cached(
                "SELECT MIN(updated_at) FROM effect_operations \
                 WHERE status IN ('outcome_unknown', 'quarantined')",
            )
            .and_then(|mut stmt| stmt.query_row([], |row| row.get(0)))
            .map_err(|e| ledger_error(doing(), e))?;
        let now = effect_core::unix_seconds(self.clock.now());
        let stale: i64 = tx
            .prepare_cached(
                "SELECT COUNT(*) FROM effect_operations WHERE status = 'dispatched' \
                 AND (lease_until IS NULL OR lease_until <= ?1)",
            )
            .and_then(|mut stmt| stmt.query_row(params![now], |row| row.get(0)))
            .map_err(|e| ledger_error(doing(), e))?;
        let budgets = crate::budget::budget_uses(&tx, self.clock.now())?;
        Ok(LedgerStats {
            counts,
            oldest_unresolved_updated_at: oldest,
            stale_dispatched: u64::try_from(stale).unwrap_or(0),
            budgets,
        })
    }
}

/// Rejects paths that would not give a durable, file-backed ledger.
fn check_path(path: &Path) -> Result<(), SqliteError> {
    let invalid = |reason| {
        Err(SqliteError::InvalidPath {
            path: path.to_owned(),
            reason,
        })
    };
    let text = path.to_string_lossy();
    if text.trim().is_empty() {
        return invalid("the path is empty; pass the path of a database file");
    }
    if text == ":memory:" || text.starts_with("file:") {
        return invalid(
            "in-memory databases and sqlite uri file names are not accepted: the ledger must outlive the process; pass a plain file path",
        );
    }
    if path.is_dir() {
        return invalid("it is a directory; pass the path of a database file inside it");
    }
    Ok(())
}

fn read_only_handle_answer(answer: &Answer) -> bool {
    answer.as_ref().is_err_and(is_read_only_handle)
}

/// Refuses a read-write open that SQLite quietly made read-only.
///
/// SQLite falls back to a read-only handle when the file cannot be opened for
/// writing (its mode bits, an immutable attribute, a read-only mount): reads
/// then work and the first write fails, after the executor may already have
/// counted on the ledger. `sqlite3_db_readonly` tells at once.
fn refuse_read_only(conn: &Connection, path: &Path) -> Result<(), SqliteError> {
    let read_only = conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(|e| SqliteError::open(path.to_owned(), "checking write access", e))?;
    if !read_only {
        return Ok(());
    }
    Err(SqliteError::ReadOnly {
        path: path.to_owned(),
        source: read_only_handle(),
    })
}

/// SQLite's `SQLITE_READONLY`, for a handle it opened read-only when asked
/// to open the file for writing.
fn read_only_handle() -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_READONLY),
        Some("the database file could only be opened for reading".to_owned()),
    )
}

/// Switches the file to WAL mode and migrates it. Switching the journal mode
/// can fail with `SQLITE_BUSY` at once, without waiting in the busy handler,
/// while another connection opens the same new file: retry until the busy
/// timeout has passed.
#[allow(clippy::disallowed_methods)] // A real wait for another process's lock, bounded by the busy timeout.
fn prepare_file(
    conn: &mut Connection,
    path: &Path,
    busy_timeout: Duration,
) -> Result<(), SqliteError> {
    let deadline = std::time::Instant::now() + busy_timeout;
    loop {
        match enable_wal(conn, path).and_then(|()| schema::migrate(conn, path)) {
            Err(SqliteError::Busy { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            result => return result,
        }
    }
}

/// Switches the file to WAL mode (a property of the file, kept across opens).
fn enable_wal(conn: &Connection, path: &Path) -> Result<(), SqliteError> {
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| SqliteError::open(path.to_owned(), "switching to WAL mode", e))?;
    if mode.eq_ignore_ascii_case("wal") {
        Ok(())
    } else {
        Err(SqliteError::WalUnavailable {
            path: path.to_owned(),
            mode,
        })
    }
}

/// Opens `target` (the file, or its immutable URI) with read-only `flags`
/// and checks that it is a ledger this version can read; `path` names the
/// file in errors.
fn open_readable(
    target: &Path,
    path: &Path,
    flags: OpenFlags,
    settings: Settings,
) -> Result<Layout, SqliteError> {
    let fail = |step: &'static str| move |e| SqliteError::open(path.to_owned(), step, e);
    let conn = Connection::open_with_flags(target, flags).map_err(fail("opening the file"))?;
    settings
        .apply(&conn)
        .map_err(fail("configuring the connection"))?;
    schema::check_readable(&conn, path)
}

/// `file:PATH?immutable=1`, with the characters a URI path reserves escaped.
fn immutable_uri(path: &Path) -> PathBuf {
    let mut uri = String::from("file:");
    for byte in path.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_graphic() && !matches!(byte, b'%' | b'?' | b'#') {
            uri.push(char::from(*byte));
        } else {
            uri.push_str(&format!("%{byte:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    PathBuf::from(uri)
}

/// What every connection is configured with.
#[derive(Debug, Clone, Copy)]
struct Settings {
    busy_timeout: Duration,
    synchronous: &'static str,
    max_value_bytes: Option<i32>,
}

impl From<&SqliteOptions> for Settings {
    fn from(options: &SqliteOptions) -> Self {
        Settings {
            busy_timeout: options.busy_timeout,
            synchronous: options.synchronous.pragma_value(),
            max_value_bytes: options
                .max_value_bytes
                .map(|limit| i32::try_from(limit).unwrap_or(i32::MAX)),
        }
    }
}

impl Settings {
    fn apply(self, conn: &Connection) -> rusqlite::Result<()> {
        conn.busy_timeout(self.busy_timeout)?;
        conn.pragma_update(None, "synchronous", self.synchronous)?;
        // No foreign-key checks on the ledger's own statements: an event is
        // written only in the transaction that has just written its
        // operation's row (the record write must change one row first), and
        // prune deletes an operation's events before the operation, so the
        // check, a look-up of the operation per event, cannot fail. The
        // setting is this connection's: every other writer of the file (the
        // Python package's) keeps its own.
        conn.pragma_update(None, "foreign_keys", false)?;
        if let Some(limit) = self.max_value_bytes {
            conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, limit)?;
        }
        // The savepoints of a group commit journal pages in memory, not in a
        // temporary file.
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        // Room for every statement the ledger prepares, so none is re-prepared.
        conn.set_prepared_statement_cache_capacity(32);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
