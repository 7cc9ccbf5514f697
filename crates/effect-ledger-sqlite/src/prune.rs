//! [`SqliteLedger::prune`]: archive, then delete, old terminal operations,
//! in batches of short write transactions.

use std::time::{Duration, Instant};

use effect_core::{
    ArchivedKey, ArchivedOperation, LedgerError, MAX_BATCH_ROWS, PruneArchive, PruneReport,
    PruneRequest, write_archive_line,
};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};

use crate::error::ledger_error;
use crate::ledger::SqliteLedger;
use crate::row::{RECORD_COLUMNS, SELECT_EVENTS, collect, decode_event, decode_record};

impl SqliteLedger {
    /// Deletes the terminal operations `request` selects, and their events,
    /// after writing each one (record and history) to `archive` as one line
    /// of JSON ([`ArchivedOperation`]), oldest first (by `updated_at`, then
    /// id). Unresolved and active operations are never touched.
    ///
    /// It proceeds in batches ([`PruneLimits`](effect_core::PruneLimits)):
    /// each is one write transaction that selects the oldest operations
    /// left, until it has [`batch_rows`](effect_core::PruneLimits::batch_rows)
    /// or has held the write lock for
    /// [`batch_time`](effect_core::PruneLimits::batch_time), appends them to
    /// the archive, which returns once they are durable, then deletes them
    /// and commits. Between batches it pauses at least as long as the batch
    /// held the lock, so agents writing the same file wait for one short
    /// batch at most. An operation is never deleted before its archive line
    /// is durable. When the archive was resumed ([`effect_core::ArchiveFile::resume`]),
    /// the operations of its last lines still in the ledger as archived (the
    /// batch of an interrupted prune whose deletion did not commit) are
    /// deleted first, without a second line. A dry run counts what would be
    /// pruned and writes nothing.
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
    #[allow(clippy::disallowed_methods)] // --max-duration is real elapsed time.
    pub fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        request.validate()?;
        let doing = || "pruning operations".to_owned();
        let mut conn = self
            .pool
            .get()
            .map_err(|e| crate::error::pool_error(doing(), e))?;
        if request.dry_run {
            return count_prunable(&mut conn, request);
        }
        // SQLite's own busy handler sleeps up to 100 ms between looks at
        // the lock, which agents writing back to back hold most of the
        // time: a batch would rarely find it free. Look every millisecond
        // instead, then give the connection its busy timeout back.
        conn.busy_handler(Some(poll_for_lock))
            .map_err(|e| ledger_error(doing(), e))?;
        let result = self.prune_batches(&mut conn, request, archive, progress);
        conn.busy_timeout(self.busy_timeout)
            .map_err(|e| ledger_error(doing(), e))?;
        result
    }

    #[allow(clippy::disallowed_methods)] // --max-duration is real elapsed time.
    fn prune_batches(
        &self,
        conn: &mut Connection,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        let limits = request.limits;
        let started = Instant::now();
        let mut report = PruneReport::new(0, 0, false);
        let resumed = resumed_batch(conn, archive)?;
        if !resumed.is_empty() {
            let held = self.delete_resumed(conn, &resumed, &mut report)?;
            progress(&report);
            std::thread::sleep(limits.pause_after(held));
        }
        loop {
            if limits.reached(report.batches, started.elapsed()) {
                report.complete = false;
                break;
            }
            let batch = self.prune_batch(conn, request, archive, &mut report)?;
            if batch.operations > 0 {
                progress(&report);
            }
            if !batch.more {
                break;
            }
            std::thread::sleep(limits.pause_after(batch.held));
        }
        Ok(report)
    }

    /// One batch: select, archive (durably), delete, commit.
    #[allow(clippy::disallowed_methods)] // The write lock's real holding time is what a batch bounds.
    fn prune_batch(
        &self,
        conn: &mut Connection,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        report: &mut PruneReport,
    ) -> Result<Batch, LedgerError> {
        let doing = || "pruning a batch of operations".to_owned();
        let limits = request.limits;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| ledger_error(doing(), e))?;
        let locked = Instant::now();
        let mut lines = Vec::new();
        let mut ids = Vec::new();
        let mut more = false;
        {
            let mut select = tx
                .prepare_cached(&select_sql(request.statuses.len()))
                .map_err(|e| ledger_error(doing(), e))?;
            let mut values: Vec<&dyn rusqlite::ToSql> = vec![&request.before];
            let rows_limit = i64::try_from(limits.batch_rows).unwrap_or(i64::MAX);
            values.push(&rows_limit);
            let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
            for status in &statuses {
                values.push(status);
            }
            let mut rows = select
                .query(values.as_slice())
                .map_err(|e| ledger_error(doing(), e))?;
            while let Some(row) = rows.next().map_err(|e| ledger_error(doing(), e))? {
                let record = decode_record(row)?;
                let events = collect(
                    &tx,
                    SELECT_EVENTS,
                    [&record.operation_id],
                    decode_event,
                    &doing,
                )?;
                report.events += events.len() as u64;
                ids.push(record.operation_id.clone());
                write_archive_line(
                    &mut lines,
                    &ArchivedOperation {
                        operation: record,
                        events,
                    },
                )?;
                if ids.len() >= limits.batch_rows || locked.elapsed() >= limits.batch_time {
                    more = true;
                    break;
                }
            }
        }
        if ids.is_empty() {
            tx.commit().map_err(|e| ledger_error(doing(), e))?;
            return Ok(Batch {
                operations: 0,
                more: false,
                held: locked.elapsed(),
            });
        }
        // Durable before anything of the batch is deleted; on failure the
        // transaction rolls back as it drops.
        archive.append(&lines)?;
        for id in &ids {
            delete_operation(&tx, id, None)?;
            self.confirmed.forget(id);
        }
        tx.commit().map_err(|e| ledger_error(doing(), e))?;
        report.operations += ids.len() as u64;
        report.batches += 1;
        Ok(Batch {
            operations: ids.len(),
            more,
            held: locked.elapsed(),
        })
    }

    /// Deletes the operations a resumed archive already holds, those still
    /// as it archived them, in one transaction.
    #[allow(clippy::disallowed_methods)] // The write lock's real holding time decides the pause.
    fn delete_resumed(
        &self,
        conn: &mut Connection,
        keys: &[ArchivedKey],
        report: &mut PruneReport,
    ) -> Result<Duration, LedgerError> {
        let doing = || "pruning the operations a resumed archive holds".to_owned();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| ledger_error(doing(), e))?;
        let locked = Instant::now();
        let mut deleted = 0;
        for key in keys {
            if let Some(events) = delete_operation(&tx, &key.operation_id, Some(key))? {
                deleted += 1;
                report.events += events;
                self.confirmed.forget(&key.operation_id);
            }
        }
        tx.commit().map_err(|e| ledger_error(doing(), e))?;
        report.operations += deleted;
        report.resumed += deleted;
        report.batches += 1;
        Ok(locked.elapsed())
    }
}

/// How many milliseconds a batch waits for the write lock, looking every
/// millisecond, before it fails as busy.
const LOCK_WAIT_MS: i32 = 5000;

/// The prune's busy handler: another look at the lock in a millisecond, for
/// [`LOCK_WAIT_MS`] at most.
fn poll_for_lock(attempts: i32) -> bool {
    if attempts >= LOCK_WAIT_MS {
        return false;
    }
    std::thread::sleep(Duration::from_millis(1));
    true
}

/// What one batch did.
struct Batch {
    operations: usize,
    /// It stopped at a bound, so more operations may be left.
    more: bool,
    /// How long it held the write lock.
    held: Duration,
}

/// The oldest `?2` operations of the statuses `?3...` updated before `?1`:
/// one walk of the `(status, updated_at, ...)` index per status, merged.
fn select_sql(statuses: usize) -> String {
    let one = |i: usize| {
        format!(
            "SELECT * FROM (SELECT {RECORD_COLUMNS} FROM effect_operations \
             WHERE status = ?{} AND updated_at < ?1 ORDER BY updated_at, operation_id LIMIT ?2)",
            i + 3
        )
    };
    let union: Vec<String> = (0..statuses).map(one).collect();
    format!(
        "{} ORDER BY updated_at, operation_id LIMIT ?2",
        union.join(" UNION ALL ")
    )
}

/// Deletes an operation and its events; with `key`, only while its row is
/// still that version. The number of events deleted, or `None` when no
/// operation was.
fn delete_operation(
    tx: &Transaction<'_>,
    id: &str,
    key: Option<&ArchivedKey>,
) -> Result<Option<u64>, LedgerError> {
    let doing = || "deleting a pruned operation".to_owned();
    if let Some(key) = key {
        let current: Option<(String, String)> = tx
            .prepare_cached(
                "SELECT status, updated_at FROM effect_operations WHERE operation_id = ?1",
            )
            .and_then(|mut stmt| {
                stmt.query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
                    .optional()
            })
            .map_err(|e| ledger_error(doing(), e))?;
        match current {
            Some((status, updated_at))
                if status == key.status.as_str() && updated_at == key.updated_at => {}
            _ => return Ok(None),
        }
    }
    let events = tx
        .prepare_cached("DELETE FROM effect_events WHERE operation_id = ?1")
        .and_then(|mut stmt| stmt.execute([id]))
        .map_err(|e| ledger_error(doing(), e))?;
    let operations = tx
        .prepare_cached("DELETE FROM effect_operations WHERE operation_id = ?1")
        .and_then(|mut stmt| stmt.execute([id]))
        .map_err(|e| ledger_error(doing(), e))?;
    Ok((operations > 0).then_some(events as u64))
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
