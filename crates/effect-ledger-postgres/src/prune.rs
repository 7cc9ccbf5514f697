//! [`PostgresLedger::prune`]: archive, then delete, old terminal operations.

use std::io::Write;

use effect_core::{ArchivedOperation, LedgerError, PruneReport, PruneRequest};

use crate::error::{from_pg, from_pool};
use crate::ledger::PostgresLedger;
use crate::row;
use crate::statements::{COLUMNS, EVENT_COLUMNS};

impl PostgresLedger {
    /// Deletes the terminal operations `request` selects, and their events,
    /// after writing each one (record and history) to `archive` as one line
    /// of JSON ([`ArchivedOperation`]); unresolved and active operations are
    /// never touched. One transaction locks the selected rows, writes the
    /// archive, deletes, and commits only after the archive was flushed. A
    /// dry run reads the same operations and writes nothing.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a request [`PruneRequest::validate`]
    /// refuses; [`LedgerError::Backend`] when the archive cannot be written
    /// (then nothing is deleted); store failures.
    pub fn prune(
        &self,
        request: &PruneRequest,
        archive: &mut dyn Write,
    ) -> Result<PruneReport, LedgerError> {
        request.validate()?;
        let q = &self.schema.quoted;
        let statuses: Vec<&str> = request.statuses.iter().map(|s| s.as_str()).collect();
        let mut conn = self.pool.get().map_err(from_pool)?;
        let pg = |doing: &'static str| move |err| from_pg(doing, err);
        let mut tx = conn.client.transaction().map_err(pg("beginning a prune"))?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM {q}.effect_operations \
                     WHERE updated_at < $1 AND status = ANY($2) \
                     ORDER BY updated_at, operation_id FOR UPDATE"
                ),
                &[&request.before, &statuses],
            )
            .map_err(pg("selecting operations to prune"))?;
        let mut report = PruneReport::new(0, 0, request.dry_run);
        let archive_error = |e: Box<dyn std::error::Error + Send + Sync>| {
            LedgerError::backend("cannot write the prune archive", Some(e))
        };
        for found in &rows {
            let record = row::record(found)?;
            let id = record.operation_id.clone();
            let events = tx
                .query(
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM {q}.effect_events \
                         WHERE operation_id = $1 ORDER BY sequence"
                    ),
                    &[&id],
                )
                .map_err(pg("reading events to prune"))?
                .iter()
                .map(row::event)
                .collect::<Result<Vec<_>, _>>()?;
            report.operations += 1;
            report.events += u64::try_from(events.len()).unwrap_or(u64::MAX);
            if request.dry_run {
                continue;
            }
            let line = ArchivedOperation {
                operation: record,
                events,
            };
            serde_json::to_writer(&mut *archive, &line).map_err(|e| archive_error(e.into()))?;
            archive
                .write_all(b"\n")
                .map_err(|e| archive_error(e.into()))?;
            tx.execute(
                &format!("DELETE FROM {q}.effect_events WHERE operation_id = $1"),
                &[&id],
            )
            .map_err(pg("deleting pruned events"))?;
            tx.execute(
                &format!("DELETE FROM {q}.effect_operations WHERE operation_id = $1"),
                &[&id],
            )
            .map_err(pg("deleting a pruned operation"))?;
        }
        if request.dry_run {
            return Ok(report);
        }
        archive.flush().map_err(|e| archive_error(e.into()))?;
        tx.commit().map_err(pg("committing a prune"))?;
        Ok(report)
    }
}
