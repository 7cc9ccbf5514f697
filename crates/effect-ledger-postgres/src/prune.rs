//! [`PostgresLedger::prune`]: archive, then delete, old terminal operations,
//! in batches of short transactions.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use effect_core::{
    ArchivedKey, ArchivedOperation, LedgerError, LedgerEvent, MAX_BATCH_ROWS, PruneArchive,
    PruneReport, PruneRequest, write_archive_line,
};

use crate::error::{from_pg, from_pool};
use crate::ledger::PostgresLedger;
use crate::row;
use crate::statements::{COLUMNS, EVENT_COLUMNS};

impl PostgresLedger {
    /// Deletes the terminal operations `request` selects, and their events,
    /// after writing each one (record and history) to `archive` as one line
    /// of JSON ([`ArchivedOperation`]), oldest first (by `updated_at`, then
    /// id); unresolved and active operations are never touched.
    ///
    /// It proceeds in batches ([`PruneLimits`](effect_core::PruneLimits)),
    /// as `SqliteLedger::prune` does: each is one transaction that locks at
    /// most [`batch_rows`](effect_core::PruneLimits::batch_rows) rows
    /// (`FOR UPDATE`, so no transaction ever holds millions of row locks),
    /// appends them to the archive, which returns once they are durable,
    /// deletes them and commits; a pause follows as long as the batch took.
    /// A batch stops decoding its rows after
    /// [`batch_time`](effect_core::PruneLimits::batch_time) and deletes what
    /// it decoded; the next selects (and locks) that many and a quarter
    /// more, up to `batch_rows`, so a batch locks few rows it does not
    /// delete. The counters' delete trigger runs once per statement (schema
    /// version 8).
    /// The operations of a resumed archive's last lines still in the ledger
    /// as archived are deleted first, without a second line. Deleted rows
    /// are reclaimed by autovacuum (docs/operations.md). A dry run counts
    /// what would be pruned and writes nothing.
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
        if request.dry_run {
            return self.count_prunable(request);
        }
        let limits = request.limits;
        let started = Instant::now();
        let mut report = PruneReport::new(0, 0, false);
        // How many rows a batch selects (and locks): what the last one
        // decoded within `batch_time`, and a quarter more, up to
        // `batch_rows`; a batch that selected more than it decoded locked
        // rows it did not delete.
        let mut selecting = limits.batch_rows;
        let resumed = self.resumed_batch(archive)?;
        if !resumed.is_empty() {
            let held = self.delete_resumed(&resumed, &mut report)?;
            progress(&report);
            std::thread::sleep(limits.pause_after(held));
        }
        loop {
            if limits.reached(report.batches, started.elapsed()) {
                report.complete = false;
                break;
            }
            let (operations, more, held) =
                self.prune_batch(request, selecting, archive, &mut report)?;
            selecting = (operations + operations / 4 + 1).min(limits.batch_rows);
            if operations > 0 {
                progress(&report);
            }
            if !more {
                break;
            }
            std::thread::sleep(limits.pause_after(held));
        }
        Ok(report)
    }

    /// One batch: lock, archive (durably), delete, commit. Answers how many
    /// operations it pruned, whether more may be left, and how long it took.
    #[allow(clippy::disallowed_methods)] // The batch's real duration decides the pause.
    fn prune_batch(
        &self,
        request: &PruneRequest,
        selecting: usize,
        archive: &mut dyn PruneArchive,
        report: &mut PruneReport,
    ) -> Result<(usize, bool, Duration), LedgerError> {
        let q = &self.schema.quoted;
        let limits = request.limits;
        let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
        let rows_limit = i64::try_from(selecting).unwrap_or(i64::MAX);
        let mut conn = self.pool.get().map_err(from_pool)?;
        let pg = |doing: &'static str| move |err| from_pg(doing, err);
        let started = Instant::now();
        let mut tx = conn
            .client
            .transaction()
            .map_err(pg("beginning a prune batch"))?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {q}.effect_operations \
                     WHERE updated_at < $1 AND status = ANY($2) \
                     ORDER BY updated_at, operation_id LIMIT $3 FOR UPDATE"
                ),
                &[&request.before, &statuses, &rows_limit],
            )
            .map_err(pg("selecting operations to prune"))?;
        let mut more = rows.len() >= selecting;
        let mut records = Vec::with_capacity(rows.len());
        let selected = Instant::now();
        for found in &rows {
            records.push(row::record(found)?);
            if selected.elapsed() >= limits.batch_time {
                more = true;
                break;
            }
        }
        if records.is_empty() {
            tx.commit().map_err(pg("committing a prune batch"))?;
            return Ok((0, false, started.elapsed()));
        }
        let ids: Vec<String> = records.iter().map(|r| r.operation_id.clone()).collect();
        let mut events: HashMap<String, Vec<LedgerEvent>> = HashMap::new();
        for found in tx
            .query(
                &format!(
                    "SELECT {EVENT_COLUMNS} FROM {q}.effect_events \
                     WHERE operation_id = ANY($1) ORDER BY sequence"
                ),
                &[&ids],
            )
            .map_err(pg("reading events to prune"))?
            .iter()
        {
            let event = row::event(found)?;
            report.events += 1;
            events
                .entry(event.operation_id.clone())
                .or_default()
                .push(event);
        }
        let mut lines = Vec::new();
        for record in records {
            let own = events.remove(&record.operation_id).unwrap_or_default();
            write_archive_line(
                &mut lines,
                &ArchivedOperation {
                    operation: record,
                    events: own,
                },
            )?;
        }
        // Durable before anything of the batch is deleted; on failure the
        // transaction rolls back as it drops.
        archive.append(&lines)?;
        tx.execute(
            &format!("DELETE FROM {q}.effect_events WHERE operation_id = ANY($1)"),
            &[&ids],
        )
        .map_err(pg("deleting pruned events"))?;
        tx.execute(
            &format!("DELETE FROM {q}.effect_operations WHERE operation_id = ANY($1)"),
            &[&ids],
        )
        .map_err(pg("deleting pruned operations"))?;
        tx.commit().map_err(pg("committing a prune batch"))?;
        report.operations += ids.len() as u64;
        report.batches += 1;
        Ok((ids.len(), more, started.elapsed()))
    }

    /// The keys of a resumed archive's last lines whose operations are still
    /// in the ledger as archived (see `SqliteLedger::prune`).
    fn resumed_batch(
        &self,
        archive: &mut dyn PruneArchive,
    ) -> Result<Vec<ArchivedKey>, LedgerError> {
        let q = &self.schema.quoted;
        let mut conn = self.pool.get().map_err(from_pool)?;
        let mut pending = Vec::new();
        for _ in 0..=MAX_BATCH_ROWS {
            let Some(key) = archive.previous()? else {
                break;
            };
            let current = conn
                .client
                .query_opt(
                    &format!(
                        "SELECT status, updated_at FROM {q}.effect_operations WHERE operation_id = $1"
                    ),
                    &[&key.operation_id],
                )
                .map_err(|e| from_pg("reading the operations of a resumed prune archive", e))?;
            let Some(current) = current else {
                break;
            };
            let status: String = current.get(0);
            let updated_at: String = current.get(1);
            if status == key.status.as_str() && updated_at == key.updated_at {
                pending.push(key);
            }
        }
        Ok(pending)
    }

    /// Deletes the operations a resumed archive already holds, those still
    /// as it archived them, in one transaction.
    #[allow(clippy::disallowed_methods)] // The batch's real duration decides the pause.
    fn delete_resumed(
        &self,
        keys: &[ArchivedKey],
        report: &mut PruneReport,
    ) -> Result<Duration, LedgerError> {
        let q = &self.schema.quoted;
        let mut conn = self.pool.get().map_err(from_pool)?;
        let pg = |doing: &'static str| move |err| from_pg(doing, err);
        let started = Instant::now();
        let mut tx = conn
            .client
            .transaction()
            .map_err(pg("beginning a prune batch"))?;
        for key in keys {
            let locked = tx
                .query_opt(
                    &format!(
                        "SELECT 1 FROM {q}.effect_operations WHERE operation_id = $1 \
                         AND status = $2 AND updated_at = $3 FOR UPDATE"
                    ),
                    &[&key.operation_id, &key.status.as_str(), &key.updated_at],
                )
                .map_err(pg("locking an archived operation"))?;
            if locked.is_none() {
                continue;
            }
            let events = tx
                .execute(
                    &format!("DELETE FROM {q}.effect_events WHERE operation_id = $1"),
                    &[&key.operation_id],
                )
                .map_err(pg("deleting pruned events"))?;
            tx.execute(
                &format!("DELETE FROM {q}.effect_operations WHERE operation_id = $1"),
                &[&key.operation_id],
            )
            .map_err(pg("deleting a pruned operation"))?;
            report.operations += 1;
            report.resumed += 1;
            report.events += events;
        }
        tx.commit().map_err(pg("committing a prune batch"))?;
        report.batches += 1;
        Ok(started.elapsed())
    }

    /// A dry run: how many operations and events a prune would delete.
    fn count_prunable(&self, request: &PruneRequest) -> Result<PruneReport, LedgerError> {
        let q = &self.schema.quoted;
        let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
        let mut conn = self.pool.get().map_err(from_pool)?;
        let found = conn
            .client
            .query_one(
                &format!(
                    "SELECT COUNT(*), COALESCE(SUM((SELECT COUNT(*) FROM {q}.effect_events e \
                     WHERE e.operation_id = o.operation_id)), 0)::bigint \
                     FROM {q}.effect_operations o WHERE o.updated_at < $1 AND o.status = ANY($2)"
                ),
                &[&request.before, &statuses],
            )
            .map_err(|e| from_pg("counting operations to prune", e))?;
        let operations: i64 = found.get(0);
        let events: i64 = found.get(1);
        Ok(PruneReport::new(
            u64::try_from(operations).unwrap_or(0),
            u64::try_from(events).unwrap_or(0),
            true,
        ))
    }
}

/// The store's batched prune, for a [`RetentionPolicy`](effect_core::RetentionPolicy)
/// (a recovery worker's, or `agent-effect-ops prune --policy`).
impl effect_core::PruneLedger for PostgresLedger {
    fn prune_with_progress(
        &self,
        request: &PruneRequest,
        archive: &mut dyn PruneArchive,
        progress: &mut dyn FnMut(&PruneReport),
    ) -> Result<PruneReport, LedgerError> {
        PostgresLedger::prune_with_progress(self, request, archive, progress)
    }
}
