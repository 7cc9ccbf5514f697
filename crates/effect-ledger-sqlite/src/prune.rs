//! [`SqliteLedger::prune`]: archive, then delete, old terminal operations,
//! in batches of short write transactions.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use effect_core::{
    ArchivedKey, ArchivedOperation, LedgerError, MAX_BATCH_ROWS, PruneArchive, PruneLimits,
    PruneReport, PruneRequest, write_archive_line,
};
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::busy::poll_for_lock;
use crate::counts::COUNTED;
use crate::error::ledger_error;
use crate::ledger::SqliteLedger;
use crate::row::{RECORD_COLUMNS, SELECT_EVENTS, collect, decode_event, decode_record};

impl SqliteLedger {
    /// Deletes the terminal operations `request` selects, and their events,
    /// after writing each one (record and history) to `archive` as one line
    /// of JSON ([`ArchivedOperation`]), oldest first (by `updated_at`, then
    /// id). Unresolved and active operations are never touched.
    ///
    /// It proceeds in batches ([`effect_core::PruneLimits`]):
    /// a reading thread, on a connection of its own, reads the oldest
    /// operations (at most
    /// [`batch_rows`](effect_core::PruneLimits::batch_rows), each batch after
    /// the last operation of the one before) and their events in read
    /// transactions, which take no write lock, one batch ahead of the
    /// deletions; each batch is appended to the archive, which returns once
    /// it is durable, then deleted, on a write connection of the prune's
    /// own, in write transactions that hold the lock for at most
    /// [`batch_time`](effect_core::PruneLimits::batch_time) each, commit
    /// included (800 µs by default), every operation only while its row is
    /// still the version archived (one that changed meanwhile stays, its
    /// line records the version read). After a write transaction it pauses
    /// at least as long as it held the lock, and at least
    /// [`writers_pause`](effect_core::PruneLimits::writers_pause) while
    /// other connections write, so an agent writing the same file that finds
    /// the lock taken gets it within 100 µs of its release (a ledger write
    /// looks at a taken lock every 100 µs for its first millisecond). The
    /// status counters `stats` reads stay true: while the ledger's counter
    /// triggers are the only triggers of its tables, the
    /// prune's connection runs without triggers and updates the counters
    /// once per transaction (a delete trigger made SQLite journal every page
    /// a deletion changes, and halved the deletions per millisecond); a
    /// trigger of the user's own keeps them on. The deletions commit at
    /// `synchronous = NORMAL`; a third connection checkpoints the log
    /// beside them and, while other connections write, syncs it first, so
    /// that an agent's commit neither syncs the prune's pages nor
    /// checkpoints them; the rest is synced when the prune ends. An
    /// operation is never deleted before its archive line is durable. When
    /// the archive was resumed ([`effect_core::ArchiveFile::resume`]), the
    /// operations of its last lines still in the ledger as archived (the
    /// batch of an interrupted prune whose deletion did not commit, or was
    /// undone by a power failure) are deleted first, without a second line.
    /// A dry run counts what would be pruned and writes nothing.
    ///
    /// ```
    /// use effect_core::{EffectLedger, EffectLedgerExt, NewOperation, PruneRequest, RequestFingerprint};
    /// use effect_core::{Confirmation, Evidence};
    /// use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ledger = SqliteLedger::open(dir.path().join("effects.sqlite3"), SqliteOptions::default())?;
    /// let op = NewOperation::new("send_email", "1", RequestFingerprint::of_canonical("{}"));
    /// ledger.prepare("email:1", &op)?;
    /// let confirmation = Confirmation { output: serde_json::json!({"id": 1}), provider_operation_id: None, evidence: Evidence::new() };
    /// ledger.mark_confirmed("email:1", None, &confirmation)?;
    ///
    /// let mut archive = Vec::new();
    /// let report = ledger.prune(&PruneRequest::before("9999-01-01T00:00:00+00:00"), &mut archive)?;
    /// assert_eq!(report.operations, 1);
    /// assert_eq!(String::from_utf8(archive)?.lines().count(), 1);
    /// assert!(ledger.get("email:1")?.is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a request [`PruneRequest::validate`]
    /// refuses; [`LedgerError::Backend`] when the archive cannot be written
    /// (then nothing of that batch is deleted; the batches before it stay
    /// pruned); store failures.
    pub fn prune(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
    ) -> Result<PruneReport, LedgerError> {
        self.prune_with_progress(request, archive, &mut |_| {})
    }

    /// [`prune`](Self::prune), calling `progress` with the report so far
    /// after each batch.
    ///
    /// # Errors
    ///
    /// As [`prune`](Self::prune).
    pub fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        request.validate()?;
        if request.dry_run {
            let mut conn = self.pool.get().map_err(|e| {
                crate::error::pool_error("counting operations to prune".to_owned(), e)
            })?;
            return count_prunable(&mut conn, request);
        }
        let mut deleting = Deleting::open(self.path())?;
        let result = self.prune_batches(&mut deleting, request, archive, progress);
        // A passive checkpoint waits for nobody; when another connection is
        // checkpointing, that one syncs the log.
        let synced = checkpoint(&deleting.conn);
        let report = result?;
        synced.map_err(|e| ledger_error("syncing the pruned ledger".to_owned(), e))?;
        Ok(report)
    }

    #[allow(clippy::disallowed_methods)] // --max-duration is real elapsed time.
    fn prune_batches(
        &self,
        deleting: &mut Deleting,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        let limits = request.limits;
        let started = Instant::now();
        let mut report = PruneReport::new(0, 0, false);
        let path = self.path();
        let busy_timeout = self.busy_timeout;
        let checkpointing = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| ledger_error("opening the ledger to checkpoint its log".to_owned(), e))?;
        let log_frames = AtomicI64::new(0);
        // Held by the reading thread around each of its read transactions,
        // and by the deleting one while it checkpoints the whole log.
        let gate = Mutex::new(());
        std::thread::scope(|scope| {
            // The log is synced and checkpointed on a connection of its
            // own, beside the deletions.
            let (log_work, requests) = std::sync::mpsc::sync_channel(1);
            let log_frames = &log_frames;
            let gate = &gate;
            scope.spawn(move || work_on_log(path, &checkpointing, &requests, log_frames));
            let mut pause = Pause::new(log_work, log_frames, gate);
            let resumed: Vec<Pending> = resumed_batch(&deleting.conn, archive)?
                .into_iter()
                .map(Pending::resumed)
                .collect();
            if !resumed.is_empty() {
                let deleted =
                    self.delete_archived(deleting, &limits, &resumed, &mut report, &mut pause)?;
                report.resumed += deleted;
                progress(&report);
            }
            // The next batch is read on another connection while this one
            // deletes: the reads then fill the pauses owed to the agents.
            let (sender, batches) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || read_ahead(path, busy_timeout, request, &sender, gate));
            loop {
                if limits.reached(report.batches, started.elapsed()) {
                    report.complete = false;
                    break;
                }
                // The reader stops after its last batch, or its error.
                let Ok(batch) = batches.recv() else { break };
                let batch = batch?;
                if batch.pending.is_empty() {
                    break;
                }
                // Durable before anything of the batch is deleted.
                archive.append(&batch.lines)?;
                self.delete_archived(deleting, &limits, &batch.pending, &mut report, &mut pause)?;
                progress(&report);
                if !batch.more {
                    break;
                }
            }
            // Dropping `batches` and `pause` as the scope ends stops the
            // reader and the log's thread.
            Ok(report)
        })
    }

    /// Deletes the archived operations `pending` names, each only while its
    /// row is still the version archived, in as many write transactions as
    /// [`batch_time`](effect_core::PruneLimits::batch_time) allows, each after
    /// the pause the one before it owes the other writers. The number of
    /// operations deleted.
    #[allow(clippy::disallowed_methods)] // The write lock's real holding time is what a batch bounds.
    fn delete_archived(
        &self,
        deleting: &mut Deleting,
        limits: &PruneLimits,
        pending: &[Pending],
        report: &mut PruneReport,
        pause: &mut Pause<'_>,
    ) -> Result<u64, LedgerError> {
        let doing = || "deleting a batch of pruned operations".to_owned();
        let mut deleted_total = 0;
        let mut next = 0;
        while next < pending.len() {
            pause.wait();
            let tx = deleting
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|e| ledger_error(doing(), e))?;
            let locked = Instant::now();
            let mut deleted = 0;
            let mut forgotten = Vec::new();
            let mut counted = [0_i64; COUNTED.len()];
            while let Some(key) = pending.get(next) {
                next += 1;
                if let Some(events) = delete_operation(&tx, key)? {
                    deleted += 1;
                    report.events += events;
                    forgotten.push(key.operation_id.as_str());
                    if let Some(i) = COUNTED.iter().position(|s| s.as_str() == key.status) {
                        counted[i] += 1;
                    }
                }
                if locked.elapsed() + deleting.commit_time >= limits.batch_time {
                    break;
                }
            }
            if deleting.keeps_counts {
                uncount(&tx, &counted)?;
            }
            let committing = Instant::now();
            tx.commit().map_err(|e| ledger_error(doing(), e))?;
            deleting.committed(committing.elapsed());
            pause.after_commit(&deleting.conn, limits, locked.elapsed());
            for id in forgotten {
                self.confirmed.forget(id);
            }
            report.operations += deleted;
            report.batches += 1;
            deleted_total += deleted;
        }
        Ok(deleted_total)
    }
}

/// The pause a prune owes the other writers of the file after a write
/// transaction (the time since it released the lock counts), and the work
/// on the log it asks for meanwhile.
struct Pause<'a> {
    owed: Option<(Instant, Duration)>,
    log_work: std::sync::mpsc::SyncSender<LogWork>,
    others: OtherWriters,
    /// Write transactions since the last checkpoint asked for.
    unchecked: u32,
    /// The log's length in frames at the last checkpoint.
    log_frames: &'a AtomicI64,
    /// Keeps the reading thread off an older snapshot of the log while the
    /// prune checkpoints it wholly: a reader that starts after that reads
    /// the database file alone, and so leaves the next transaction free to
    /// start the log again from the beginning.
    gate: &'a Mutex<()>,
}

/// A prune with no other writer checkpoints after this many of its write
/// transactions (each writes some tens of pages), so the log stays under
/// the size at which SQLite would checkpoint it.
const CHECKPOINT_EVERY: u32 = 8;

/// With no other writer, a prune whose log has grown to this many frames
/// (16 MB of 4 KB pages) checkpoints what is left of it itself, in its
/// pause, so that its next transaction finds the log wholly checkpointed
/// and starts it again from the beginning (SQLite does so when no reader
/// is on it). Its own transactions, one after another, keep the log's
/// thread from ever reaching the end: without this, pruning 500,000
/// operations alone grew the log to 441 MB.
const RESTART_FRAMES: i64 = 4096;

impl<'a> Pause<'a> {
    fn new(
        log_work: std::sync::mpsc::SyncSender<LogWork>,
        log_frames: &'a AtomicI64,
        gate: &'a Mutex<()>,
    ) -> Self {
        Pause {
            owed: None,
            log_work,
            others: OtherWriters::default(),
            unchecked: 0,
            log_frames,
            gate,
        }
    }

    /// After a write transaction that held the lock for `held`: the pause
    /// it owes (longer while other connections write), and the work on the
    /// log it asks for. While other connections write, the deletions just
    /// committed without a sync would be synced by the next agent commit,
    /// with its own, under the lock, and the log grows towards the size at
    /// which an agent's commit checkpoints it: sync and checkpoint it now.
    /// With no other writer, checkpoint every [`CHECKPOINT_EVERY`]
    /// transactions. The log's thread does it, beside the next
    /// transactions; while it is still at the last request, the next pause
    /// asks again. With no other writer and a log of [`RESTART_FRAMES`] at
    /// the last checkpoint, the prune checkpoints the rest itself.
    #[allow(clippy::disallowed_methods)] // The pause is real time other writers get the lock in.
    fn after_commit(&mut self, conn: &Connection, limits: &PruneLimits, held: Duration) {
        let released = Instant::now();
        self.unchecked += 1;
        let others = self.others.wrote(conn);
        let pause = if others {
            limits.pause_beside_writers(held)
        } else {
            limits.pause_after(held)
        };
        self.owed = Some((released, pause));
        if !others && self.log_frames.load(Ordering::Acquire) >= RESTART_FRAMES {
            // With the reading thread off the log. Best effort: busy while
            // the log's thread checkpoints, partial while an agent reads an
            // older snapshot; the next pause tries again.
            let held = self.gate.lock();
            let checkpointed = checkpoint(conn);
            drop(held);
            if let Ok(Some(log)) = checkpointed {
                if log.left == 0 {
                    self.log_frames.store(0, Ordering::Release);
                }
                self.unchecked = 0;
                return;
            }
        }
        let work = if others {
            LogWork::SyncAndCheckpoint
        } else if self.unchecked >= CHECKPOINT_EVERY {
            LogWork::Checkpoint
        } else {
            return;
        };
        if self.log_work.try_send(work).is_ok() {
            self.unchecked = 0;
        }
    }

    fn wait(&mut self) {
        if let Some((released, pause)) = self.owed.take() {
            std::thread::sleep(pause.saturating_sub(released.elapsed()));
        }
    }
}

/// What a prune asks of the thread that works on the ledger's log.
#[derive(Clone, Copy)]
enum LogWork {
    Checkpoint,
    /// Sync the log (what the prune committed without a sync), then
    /// checkpoint it.
    SyncAndCheckpoint,
}

/// The log's thread: does what `requests` asks, on `conn`, until the prune
/// stops asking. Best effort: a sync or checkpoint that fails leaves the
/// log to the next one, and to the checkpoint that ends the prune.
fn work_on_log(
    ledger: &std::path::Path,
    conn: &Connection,
    requests: &std::sync::mpsc::Receiver<LogWork>,
    log_frames: &AtomicI64,
) {
    let log = WriteAheadLog::of(ledger);
    for work in requests {
        if matches!(work, LogWork::SyncAndCheckpoint) {
            log.sync();
        }
        if let Ok(Some(checkpointed)) = checkpoint(conn) {
            log_frames.store(checkpointed.frames, Ordering::Release);
        }
    }
}

/// The prune's own write connection, opened for it and closed when it ends.
struct Deleting {
    conn: Connection,
    /// Its triggers are off and the prune keeps the status counters itself
    /// ([`uncount`]): the ledger's counter triggers are the only triggers of
    /// the tables the prune writes. Each deletion would otherwise run the
    /// delete trigger and, to undo it should the trigger fail, journal
    /// every page it changes.
    keeps_counts: bool,
    /// How long a commit takes, the longest of the last ones (each counting
    /// less as more follow): a transaction stops taking operations that
    /// long before its time bound, so it holds the lock no longer than the
    /// bound, commit included.
    commit_time: Duration,
}

/// The triggers of a ledger's tables the prune may turn off on its own
/// connection: the status counters' (`migrations/0005_status_counters.sql`).
const COUNTER_TRIGGERS: [&str; 3] = [
    "effect_status_counts_insert",
    "effect_status_counts_update",
    "effect_status_counts_delete",
];

impl Deleting {
    /// Opens the ledger at `path` for a prune's deletions, configured as the
    /// ledger's connections are, but for these: its commits do not sync
    /// (`synchronous = NORMAL`; an operation is deleted only after its
    /// archive line was synced, so a power failure that undoes the last
    /// deletions leaves operations that are archived and still in the
    /// ledger, which a resumed prune deletes without a second line; the
    /// checkpoint at the end syncs them), it never checkpoints in a commit
    /// (SQLite checkpoints the log in the commit that grows it past 1,000
    /// pages, after the lock is released but before the commit returns,
    /// which the prune would count as time it held the lock; the log's
    /// thread checkpoints instead, [`work_on_log`]), and it looks at a
    /// taken write lock every [`crate::busy::LOCK_POLL`] ([`poll_for_lock`]).
    fn open(path: &std::path::Path) -> Result<Self, LedgerError> {
        let doing = || "opening the ledger to prune it".to_owned();
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| ledger_error(doing(), e))?;
        let configured = (|| {
            conn.busy_handler(Some(poll_for_lock::<LOCK_WAIT_MICROS>))?;
            // As the ledger's connections (`ledger.rs`): no foreign-key
            // look-ups; events are deleted before their operation.
            conn.pragma_update(None, "foreign_keys", false)?;
            conn.pragma_update(None, "synchronous", "NORMAL")?;
            conn.pragma_update(None, "wal_autocheckpoint", 0)?;
            let triggers: Vec<String> = conn
                .prepare(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' \
                     AND tbl_name IN ('effect_operations', 'effect_events', 'effect_status_counts')",
                )?
                .query_map([], |row| row.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let keeps_counts = triggers.iter().any(|t| t == COUNTER_TRIGGERS[2])
                && triggers
                    .iter()
                    .all(|t| COUNTER_TRIGGERS.contains(&t.as_str()));
            if keeps_counts {
                conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
            }
            Ok(keeps_counts)
        })();
        let keeps_counts = configured.map_err(|e| ledger_error(doing(), e))?;
        Ok(Deleting {
            conn,
            keeps_counts,
            commit_time: Duration::ZERO,
        })
    }

    /// A commit took `took`: [`commit_time`](Self::commit_time) follows.
    fn committed(&mut self, took: Duration) {
        self.commit_time = took.max(self.commit_time - self.commit_time / 8);
    }
}

/// What the delete trigger would have done for the operations a
/// transaction deleted: `counted[i]` of status `COUNTED[i]`.
fn uncount(tx: &Transaction<'_>, counted: &[i64; COUNTED.len()]) -> Result<(), LedgerError> {
    for (status, n) in COUNTED.iter().zip(counted) {
        if *n > 0 {
            tx.prepare_cached(
                "UPDATE effect_status_counts SET operations = operations - ?2 WHERE status = ?1",
            )
            .and_then(|mut stmt| stmt.execute(params![status.as_str(), n]))
            .map_err(|e| ledger_error("counting pruned operations".to_owned(), e))?;
        }
    }
    Ok(())
}

/// An archived operation waiting for its deletion, and the version of its
/// row the archive holds.
struct Pending {
    operation_id: String,
    status: String,
    updated_at: String,
    /// Its latest event when archived (`None`: not checked, for the lines of
    /// a resumed archive, which do not say).
    last_event: Option<i64>,
}

impl Pending {
    fn resumed(key: ArchivedKey) -> Self {
        Pending {
            operation_id: key.operation_id,
            status: key.status.as_str().to_owned(),
            updated_at: key.updated_at,
            last_event: None,
        }
    }
}

/// One batch read for the archive: its lines, and the operations to delete
/// once they are durable.
struct ReadBatch {
    lines: Vec<u8>,
    pending: Vec<Pending>,
    /// It stopped at its row bound, so more operations may be left.
    more: bool,
}

/// Reads the batches of a prune, each after the last operation of the one
/// before, on a connection of its own, and hands them to the deleting
/// thread, at most one ahead of it; stops after the last batch, after an
/// error (handed over too), or when the deleting thread stops taking them.
fn read_ahead(
    path: &std::path::Path,
    busy_timeout: Duration,
    request: &PruneRequest,
    batches: &std::sync::mpsc::SyncSender<Result<ReadBatch, LedgerError>>,
    gate: &Mutex<()>,
) {
    let doing = || "opening the ledger to read operations to prune".to_owned();
    let opened = Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|conn| conn.busy_timeout(busy_timeout).map(|()| conn))
    .map_err(|e| ledger_error(doing(), e));
    let mut conn = match opened {
        Ok(conn) => conn,
        Err(error) => {
            // The deleting thread reports it; nothing else is left to do.
            let _ = batches.send(Err(error));
            return;
        }
    };
    let mut after = (String::new(), String::new());
    loop {
        let batch = read_batch(&mut conn, request, &after, gate);
        let last = match &batch {
            Ok(batch) if batch.more => batch.pending.last(),
            // The last batch, or an error: nothing more to read.
            _ => None,
        };
        let next = last.map(|p| (p.updated_at.clone(), p.operation_id.clone()));
        if batches.send(batch).is_err() {
            return;
        }
        match next {
            Some(next) => after = next,
            None => return,
        }
    }
}

/// The ledger's write-ahead log, opened to sync what a prune committed
/// without a sync (`synchronous = NORMAL`) outside the write lock. `None`
/// when it cannot be opened: the prune's deletions are then synced by the
/// next commit that syncs, or the prune's closing checkpoint.
struct WriteAheadLog(Option<std::fs::File>);

impl WriteAheadLog {
    fn of(ledger: &std::path::Path) -> Self {
        let mut log = ledger.as_os_str().to_owned();
        log.push("-wal");
        WriteAheadLog(std::fs::File::open(log).ok())
    }

    /// Best effort: a failure leaves the deletions to be synced by the next
    /// commit that syncs, as without this call; the archive already holds
    /// them.
    fn sync(&self) {
        if let Some(file) = &self.0 {
            let _ = file.sync_data();
        }
    }
}

/// Reads the oldest operations after `after` (`updated_at`, id; at most
/// [`batch_rows`](effect_core::PruneLimits::batch_rows)) and their events,
/// [`READ_CHUNK`] operations (each with its events) per read transaction,
/// which holds no write lock, each under `gate`, and writes their archive
/// lines.
fn read_batch(
    conn: &mut Connection,
    request: &PruneRequest,
    after: &(String, String),
    gate: &Mutex<()>,
) -> Result<ReadBatch, LedgerError> {
    let mut batch = ReadBatch {
        lines: Vec::new(),
        pending: Vec::new(),
        more: false,
    };
    let mut after = after.clone();
    while batch.pending.len() < request.limits.batch_rows {
        let chunk = READ_CHUNK.min(request.limits.batch_rows - batch.pending.len());
        // A poisoned gate only means the deleting thread panicked; the
        // reads go on without it.
        let held = gate.lock();
        let read = read_chunk(conn, request, &after, chunk, &mut batch)?;
        drop(held);
        if read < chunk {
            return Ok(batch);
        }
        if let Some(last) = batch.pending.last() {
            after = (last.updated_at.clone(), last.operation_id.clone());
        }
    }
    batch.more = true;
    Ok(batch)
}

/// The operations one read transaction of a prune reads at most: short
/// enough that a prune starting its log again ([`RESTART_FRAMES`]) waits
/// little for the reading thread to leave the log.
const READ_CHUNK: usize = 100;

/// Reads at most `limit` operations after `after` and their events in one
/// read transaction into `batch`. How many it read.
fn read_chunk(
    conn: &mut Connection,
    request: &PruneRequest,
    after: &(String, String),
    limit: usize,
    batch: &mut ReadBatch,
) -> Result<usize, LedgerError> {
    let doing = || "reading a batch of operations to prune".to_owned();
    let tx = conn.transaction().map_err(|e| ledger_error(doing(), e))?;
    let mut read = 0;
    {
        let mut select = tx
            .prepare_cached(&select_sql(request.statuses.len()))
            .map_err(|e| ledger_error(doing(), e))?;
        let mut values: Vec<&dyn rusqlite::ToSql> = vec![&request.before];
        let rows_limit = i64::try_from(limit).unwrap_or(i64::MAX);
        values.push(&rows_limit);
        values.push(&after.0);
        values.push(&after.1);
        let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
        for status in &statuses {
            values.push(status);
        }
        let mut rows = select
            .query(values.as_slice())
            .map_err(|e| ledger_error(doing(), e))?;
        while let Some(row) = rows.next().map_err(|e| ledger_error(doing(), e))? {
            let record = decode_record(row)?;
            let last_event: Option<i64> = row.get(LAST_EVENT_INDEX).map_err(|e| {
                LedgerError::corrupt(
                    format!(
                        "operation {:?} has an unreadable last_event_sequence",
                        record.operation_id
                    ),
                    Some(Box::new(e) as effect_core::BoxError),
                )
            })?;
            let events = collect(
                &tx,
                SELECT_EVENTS,
                [&record.operation_id],
                decode_event,
                &doing,
            )?;
            batch.pending.push(Pending {
                operation_id: record.operation_id.clone(),
                status: record.status.as_str().to_owned(),
                updated_at: record.updated_at.clone(),
                last_event,
            });
            write_archive_line(
                &mut batch.lines,
                &ArchivedOperation {
                    operation: record,
                    events,
                },
            )?;
            read += 1;
        }
    }
    drop(tx);
    Ok(read)
}

/// How long a batch waits for the write lock before it fails as busy, in
/// microseconds ([`poll_for_lock`]).
const LOCK_WAIT_MICROS: u64 = 5_000_000;

/// The oldest `?2` operations of the statuses `?5...` updated before `?1`
/// and after the operation `(?3, ?4)` (`updated_at`, id) last read: one walk
/// of the `(status, updated_at)` index per status, merged.
fn select_sql(statuses: usize) -> String {
    let one = |i: usize| {
        format!(
            "SELECT * FROM (SELECT {RECORD_COLUMNS}, last_event_sequence FROM effect_operations \
             WHERE status = ?{} AND updated_at < ?1 AND (updated_at, operation_id) > (?3, ?4) \
             ORDER BY updated_at, operation_id LIMIT ?2)",
            i + 5
        )
    };
    let union: Vec<String> = (0..statuses).map(one).collect();
    format!(
        "{} ORDER BY updated_at, operation_id LIMIT ?2",
        union.join(" UNION ALL ")
    )
}

/// The column after [`RECORD_COLUMNS`] in [`select_sql`]'s rows.
const LAST_EVENT_INDEX: usize = 15;

/// Deletes an archived operation and its events while its row is still the
/// version archived: one look-up by primary key, one walk of the events'
/// `(operation_id, sequence)` index. The number of events deleted, or
/// `None` when the operation is gone or changed since.
fn delete_operation(tx: &Transaction<'_>, key: &Pending) -> Result<Option<u64>, LedgerError> {
    let doing = || "deleting a pruned operation".to_owned();
    let operations = tx
        .prepare_cached(
            "DELETE FROM effect_operations WHERE operation_id = ?1 AND status = ?2 \
             AND updated_at = ?3 AND (?4 IS NULL OR last_event_sequence = ?4)",
        )
        .and_then(|mut stmt| {
            stmt.execute(params![
                key.operation_id,
                key.status,
                key.updated_at,
                key.last_event
            ])
        })
        .map_err(|e| ledger_error(doing(), e))?;
    if operations == 0 {
        return Ok(None);
    }
    let events = tx
        .prepare_cached("DELETE FROM effect_events WHERE operation_id = ?1")
        .and_then(|mut stmt| stmt.execute([&key.operation_id]))
        .map_err(|e| ledger_error(doing(), e))?;
    Ok(Some(events as u64))
}

/// The keys of a resumed archive's last lines whose operations are still in
/// the ledger as archived: the batch of an interrupted prune that did not
/// commit. Read backwards until an operation is gone (its batch committed);
/// a line whose operation changed since is skipped (the prune archives the
/// new version, if it still qualifies).
fn resumed_batch(
    conn: &Connection,
    archive: &mut dyn PruneArchive,
) -> Result<Vec<ArchivedKey>, LedgerError> {
    let doing = || "reading the operations of a resumed prune archive".to_owned();
    let mut stmt = conn
        .prepare_cached("SELECT status, updated_at FROM effect_operations WHERE operation_id = ?1")
        .map_err(|e| ledger_error(doing(), e))?;
    let mut pending = Vec::new();
    for _ in 0..=MAX_BATCH_ROWS {
        let Some(key) = archive.previous()? else {
            break;
        };
        let current: Option<(String, String)> = stmt
            .query_row([&key.operation_id], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .map_err(|e| ledger_error(doing(), e))?;
        match current {
            None => break,
            Some((status, updated_at))
                if status == key.status.as_str() && updated_at == key.updated_at =>
            {
                pending.push(key);
            }
            Some(_) => {}
        }
    }
    Ok(pending)
}

/// A dry run: how many operations and events a prune would delete, in one
/// read transaction.
fn count_prunable(
    conn: &mut Connection,
    request: &PruneRequest,
) -> Result<PruneReport, LedgerError> {
    let doing = || "counting operations to prune".to_owned();
    let tx = conn.transaction().map_err(|e| ledger_error(doing(), e))?;
    let mut report = PruneReport::new(0, 0, true);
    for status in &request.statuses {
        let (operations, events): (i64, i64) = tx
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM((SELECT COUNT(*) FROM effect_events e \
                 WHERE e.operation_id = o.operation_id)), 0) \
                 FROM effect_operations o WHERE o.status = ?1 AND o.updated_at < ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![status.as_str(), request.before], |row| {
                    Ok((row.get(0)?, row.get(1)?))
                })
            })
            .map_err(|e| ledger_error(doing(), e))?;
        report.operations += u64::try_from(operations).unwrap_or(0);
        report.events += u64::try_from(events).unwrap_or(0);
    }
    drop(tx);
    Ok(report)
}

/// The store's batched prune, for a [`RetentionPolicy`](effect_core::RetentionPolicy)
/// (a recovery worker's, or `agent-effect-ops prune --policy`).
impl effect_core::PruneLedger for SqliteLedger {
    fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        SqliteLedger::prune_with_progress(self, request, archive, progress)
    }
}

/// Whether another connection committed since the prune last looked:
/// `PRAGMA data_version` changes with every commit of another connection.
#[derive(Default)]
struct OtherWriters {
    seen: Option<i64>,
}

impl OtherWriters {
    /// True when another connection committed since the last call (and at
    /// the first call, or when that cannot be told).
    fn wrote(&mut self, conn: &Connection) -> bool {
        let Ok(version) = conn.query_row("PRAGMA data_version", [], |row| row.get::<_, i64>(0))
        else {
            return true;
        };
        let changed = self.seen != Some(version);
        self.seen = Some(version);
        changed
    }
}

/// Copies what the log holds into the database file and syncs it: a
/// passive checkpoint, which waits for nobody and takes no write lock.
/// `None` when another connection was checkpointing.
/// Beside the prune's transactions it keeps the log short, so the agents'
/// commits, which checkpoint once it grows past SQLite's threshold, leave
/// that work to the prune.
fn checkpoint(conn: &Connection) -> rusqlite::Result<Option<LogLength>> {
    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        let busy: i64 = row.get(0)?;
        let frames: i64 = row.get(1)?;
        let checkpointed: i64 = row.get(2)?;
        Ok((busy == 0).then_some(LogLength {
            frames,
            left: frames - checkpointed,
        }))
    })
}

/// What a checkpoint found of the log.
struct LogLength {
    /// Its frames, since SQLite last started it from the beginning.
    frames: i64,
    /// Those it could not copy to the database file (committed meanwhile,
    /// or after the snapshot of a reader still on the log).
    left: i64,
}
