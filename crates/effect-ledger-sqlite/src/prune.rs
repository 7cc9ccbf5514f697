//! [`SqliteLedger::prune`]: archive, then delete, old terminal operations.

use std::io::Write;

use effect_core::{ArchivedOperation, LedgerError, PruneReport, PruneRequest};
use rusqlite::{TransactionBehavior, params_from_iter};

use crate::error::ledger_error;
use crate::ledger::SqliteLedger;
use crate::row::{SELECT_EVENTS, collect, decode_event, decode_record};

impl SqliteLedger {
    /// Deletes the terminal operations `request` selects, and their events,
    /// after writing each one (record and history) to `archive` as one line
    /// of JSON ([`ArchivedOperation`]). Unresolved and active operations are
    /// never touched. Everything happens in one write transaction: the
    /// deletion commits only after the whole archive was written (and
    /// flushed), so an operation is never deleted without its archive line.
    /// A dry run reads the same operations and writes nothing.
    ///
    /// ```
    /// use effect_core::{EffectLedger, EffectLedgerExt, NewOperation, PruneRequest, RequestFingerprint};
    /// use effect_core::{Confirmation, Evidence};
    /// use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ledger = SqliteLedger::open(dir.path().join("effects.sqlite3"), SqliteOptions::default())?;
    /// let op = NewOperation {
    ///     requires_approval: false,
    ///     contract_name: "send_email".into(),
    ///     contract_version: "1".into(),
    ///     fingerprint: RequestFingerprint::of_canonical("{}"),
    ///     provider_idempotency_key: None,
    ///     intent: None,
    /// };
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
    /// (then nothing is deleted); store failures.
    pub fn prune(
        &self,
        request: &PruneRequest,
        archive: &mut dyn Write,
    ) -> Result<PruneReport, LedgerError> {
        request.validate()?;
        let doing = || "pruning operations".to_owned();
        let mut conn = self
            .pool
            .get()
            .map_err(|e| crate::error::pool_error(doing(), e))?;
        let behavior = if request.dry_run {
            TransactionBehavior::Deferred
        } else {
            TransactionBehavior::Immediate
        };
        let tx = conn
            .transaction_with_behavior(behavior)
            .map_err(|e| ledger_error(doing(), e))?;
        let placeholders = vec!["?"; request.statuses.len()].join(", ");
        let select = format!(
            "SELECT {} FROM effect_operations WHERE updated_at < ?1 AND status IN ({placeholders}) \
             ORDER BY updated_at, operation_id",
            crate::row::RECORD_COLUMNS
        );
        let mut values: Vec<String> = vec![request.before.clone()];
        values.extend(request.statuses.iter().map(|s| s.as_str().to_owned()));
        let records = collect(
            &tx,
            &select,
            params_from_iter(values.iter()),
            decode_record,
            &doing,
        )?;
        let mut report = PruneReport::new(0, 0, request.dry_run);
        for record in records {
            let id = record.operation_id.clone();
            let events = collect(&tx, SELECT_EVENTS, [&id], decode_event, &doing)?;
            report.operations += 1;
            report.events += u64::try_from(events.len()).unwrap_or(u64::MAX);
            if request.dry_run {
                continue;
            }
            let line = ArchivedOperation {
                operation: record,
                events,
            };
            let archive_error = |e: Box<dyn std::error::Error + Send + Sync>| {
                LedgerError::backend("cannot write the prune archive", Some(e))
            };
            serde_json::to_writer(&mut *archive, &line).map_err(|e| archive_error(e.into()))?;
            archive
                .write_all(b"\n")
                .map_err(|e| archive_error(e.into()))?;
            tx.execute("DELETE FROM effect_events WHERE operation_id = ?1", [&id])
                .map_err(|e| ledger_error(doing(), e))?;
            tx.execute(
                "DELETE FROM effect_operations WHERE operation_id = ?1",
                [&id],
            )
            .map_err(|e| ledger_error(doing(), e))?;
            self.confirmed.forget(&id);
        }
        if request.dry_run {
            return Ok(report);
        }
        archive
            .flush()
            .map_err(|e| LedgerError::backend("cannot write the prune archive", Some(e.into())))?;
        tx.commit().map_err(|e| ledger_error(doing(), e))?;
        Ok(report)
    }
}
