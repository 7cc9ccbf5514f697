//! [`PostgresLedger::prune`]: archive, then delete, old terminal operations,
//! in batches of short transactions.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use effect_core::{
    ArchivedKey, ArchivedOperation, LedgerError, LedgerEvent, MAX_BATCH_ROWS, PruneArchive,
    PruneReport, PruneRequest, write_archive_line,
};

use postgres::SimpleQueryMessage;

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
    /// more, up to `batch_rows`, and at most 50 while other sessions write
    /// on the server. Batches commit without waiting for the log's flush,
    /// except the last and one in every [`MAX_BATCH_ROWS`] operations: a
    /// server crash can undo at most that many deletions, whose operations
    /// stay in the ledger as archived and are deleted, without a second
    /// line, when the prune resumes on the same archive. The counters'
    /// delete trigger runs once per statement (schema version 8).
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
        let mut pace = Pace::new(limits.batch_rows);
        let resumed = self.resumed_batch(archive)?;
        if !resumed.is_empty() {
            let held = self.delete_resumed(&resumed, &mut report)?;
            progress(&report);
            std::thread::sleep(limits.pause_after(held));
        }
        if limits.reached(report.batches, started.elapsed()) {
            report.complete = false;
            return Ok(report);
        }
        loop {
            let batch = self.prune_batch(request, started, &mut pace, archive, &mut report)?;
            if batch.operations > 0 {
                progress(&report);
            }
            if !batch.more {
                break;
            }
            if batch.last {
                report.complete = false;
                break;
            }
            std::thread::sleep(limits.pause_after(batch.held));
        }
        if pace.unsynced > 0 {
            // The last batch found nothing left (the one before took what
            // was), so the deletions before it still wait for the log.
            self.sync_deletions()?;
        }
        Ok(report)
    }

    /// Makes every deletion committed so far durable: a transaction that
    /// writes (a counter row, unchanged: a commit that wrote nothing does
    /// not wait for the log) and commits synchronously, which flushes the
    /// log up to it.
    fn sync_deletions(&self) -> Result<(), LedgerError> {
        let q = &self.schema.quoted;
        let mut conn = self.pool.get().map_err(from_pool)?;
        let pg = |doing: &'static str| move |err| from_pg(doing, err);
        let mut tx = conn
            .client
            .transaction()
            .map_err(pg("syncing a prune's deletions"))?;
        tx.batch_execute(&format!(
            "SET LOCAL synchronous_commit = on; \
             INSERT INTO {q}.effect_status_counts AS c (status, shard, operations) \
             VALUES ('confirmed', (pg_backend_pid() % 64)::smallint, 0) \
             ON CONFLICT (status, shard) DO UPDATE SET operations = c.operations"
        ))
        .map_err(pg("syncing a prune's deletions"))?;
        tx.commit().map_err(pg("syncing a prune's deletions"))
    }

    /// One batch: lock, archive (durably), delete, commit (asynchronously
    /// unless [`Pace::commit_synchronously`] says otherwise).
    #[allow(clippy::disallowed_methods)] // The batch's real duration decides the pause.
    fn prune_batch(
        &self,
        request: &PruneRequest,
        prune_started: Instant,
        pace: &mut Pace,
        archive: &mut dyn PruneArchive,
        report: &mut PruneReport,
    ) -> Result<Batch, LedgerError> {
        let q = &self.schema.quoted;
        let limits = request.limits;
        let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
        let mut conn = self.pool.get().map_err(from_pool)?;
        let pg = |doing: &'static str| move |err| from_pg(doing, err);
        let started = Instant::now();
        let mut tx = conn
            .client
            .transaction()
            .map_err(pg("beginning a prune batch"))?;
        let xmax = tx
            .simple_query(
                "SET LOCAL synchronous_commit = off; \
                 SELECT pg_snapshot_xmax(pg_current_snapshot())::text",
            )
            .map_err(pg("starting a prune batch"))?
            .iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => row.get(0).and_then(|xmax| xmax.parse().ok()),
                _ => None,
            });
        let selecting = pace.selecting(xmax);
        let rows_limit = i64::try_from(selecting).unwrap_or(i64::MAX);
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
            return Ok(Batch {
                operations: 0,
                more: false,
                last: true,
                held: started.elapsed(),
            });
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
        // The last batch before a stop, and one after which the next could
        // leave more than `MAX_BATCH_ROWS` operations archived but not
        // durably deleted, commit synchronously (see `Pace`).
        let last = !more
            || limits.reached(
                report.batches + 1,
                prune_started.elapsed() + limits.pause_after(started.elapsed()),
            );
        let synchronously = last || pace.commit_synchronously(ids.len());
        if synchronously {
            tx.batch_execute("SET LOCAL synchronous_commit = on")
                .map_err(pg("committing a prune batch"))?;
        }
        tx.commit().map_err(pg("committing a prune batch"))?;
        pace.committed(ids.len(), synchronously);
        report.operations += ids.len() as u64;
        report.batches += 1;
        Ok(Batch {
            operations: ids.len(),
            more,
            last,
            held: started.elapsed(),
        })
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

/// While other sessions write on the server, a batch selects at most this
/// many operations: a batch's statements and its log records come in one
/// burst beside the agents' commits, and W8 measured the writer's p99
/// rising with that burst (docs/performance.md).
const BESIDE_WRITERS_ROWS: usize = 50;

/// What one batch did.
struct Batch {
    /// Operations deleted.
    operations: usize,
    /// Whether more may be left.
    more: bool,
    /// Whether the prune stops after it (nothing more, or a limit reached).
    last: bool,
    /// How long it took, its commit included.
    held: Duration,
}

/// How a prune's batches are sized and committed.
///
/// Sizing: a batch selects (and locks) what the previous one decoded
/// within `batch_time` and a quarter more, up to `batch_rows`, and at most
/// [`BESIDE_WRITERS_ROWS`] while other sessions write. Others write when
/// the server's snapshot `xmax` (one past the newest finished transaction)
/// moved further since the previous batch than the prune's own
/// transactions account for.
///
/// Committing: a batch commits with `synchronous_commit = off`, so it does
/// not wait for the log to reach the disk, and the agents' commits, which
/// flush the log anyway, carry its records in small pieces instead of
/// queueing behind one flush of the whole batch. A server crash can lose
/// the deletions of such batches, never their archive lines, which are
/// durable first: the operations stay in the ledger as archived, and a
/// resumed prune deletes them without a second line, as it does a batch
/// whose commit never ran. A resumed prune looks back at most
/// [`MAX_BATCH_ROWS`] lines, so a batch commits synchronously (flushing the
/// log of every batch before it) whenever the next could otherwise leave
/// more than that archived and not durably deleted; so does the last (or,
/// when the last found nothing left, a transaction of its own).
#[derive(Debug)]
struct Pace {
    next: usize,
    batch_rows: usize,
    /// `xmax` when the previous batch started.
    xmax: Option<u64>,
    /// Transactions of the prune committed since then.
    own: u64,
    /// Operations deleted by commits not yet known durable.
    unsynced: usize,
}

impl Pace {
    fn new(batch_rows: usize) -> Self {
        Pace {
            next: batch_rows,
            batch_rows,
            xmax: None,
            own: 0,
            unsynced: 0,
        }
    }

    /// How many operations the batch starting at `xmax` selects.
    fn selecting(&mut self, xmax: Option<u64>) -> usize {
        let others = match (self.xmax, xmax) {
            (Some(before), Some(now)) => now.saturating_sub(before) > self.own,
            _ => false,
        };
        self.xmax = xmax;
        self.own = 0;
        if others {
            self.next.min(BESIDE_WRITERS_ROWS)
        } else {
            self.next
        }
    }

    /// Whether a batch deleting `operations` commits synchronously, so the
    /// next batch (at most `batch_rows`) cannot leave more than
    /// `MAX_BATCH_ROWS` archived and not durably deleted.
    fn commit_synchronously(&self, operations: usize) -> bool {
        self.unsynced + operations + self.batch_rows > MAX_BATCH_ROWS
    }

    /// A batch that deleted `operations` committed.
    fn committed(&mut self, operations: usize, synchronously: bool) {
        self.own += 1;
        self.next = (operations + operations / 4 + 1).min(self.batch_rows);
        self.unsynced = if synchronously {
            0
        } else {
            self.unsynced + operations
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_beside_other_writers_selects_few_rows() {
        let mut pace = Pace::new(2_000);
        assert_eq!(pace.selecting(Some(100)), 2_000, "the first batch");
        pace.committed(400, false);
        assert_eq!(pace.selecting(Some(101)), 501, "only its own commit");
        pace.committed(501, false);
        assert_eq!(
            pace.selecting(Some(104)),
            BESIDE_WRITERS_ROWS,
            "two other transactions finished"
        );
        pace.committed(50, false);
        assert_eq!(pace.selecting(Some(105)), 63, "alone again: grows back");
        assert_eq!(pace.selecting(None), 63, "no xmax read: no writers seen");
    }

    #[test]
    fn no_more_than_the_resumable_lines_are_left_undurable() {
        let mut pace = Pace::new(2_000);
        let mut unsynced_at_most = 0;
        for _ in 0..100 {
            let synchronously = pace.commit_synchronously(2_000);
            // What a crash could leave: the commits not known durable and
            // the next batch's archived lines.
            unsynced_at_most = unsynced_at_most.max(pace.unsynced + 2_000);
            pace.committed(2_000, synchronously);
            assert!(pace.unsynced + 2_000 <= MAX_BATCH_ROWS, "{pace:?}");
        }
        assert_eq!(unsynced_at_most, MAX_BATCH_ROWS);
        let mut small = Pace::new(50);
        let syncs = (0..1_000)
            .filter(|_| {
                let synchronously = small.commit_synchronously(50);
                small.committed(50, synchronously);
                synchronously
            })
            .count();
        assert_eq!(syncs, 5, "one synchronous commit in 200 batches of 50");
    }
}
