//! Retiring old operations: what a store's `prune` is asked and answers.
//!
//! Pruning deletes terminal operations (`confirmed`, `rejected`) last updated
//! before a cutoff, with their events, after writing each one to an archive
//! (JSON Lines of [`ArchivedOperation`]). It never touches an unresolved or
//! active operation. A pruned operation is forgotten: executing the same
//! call again later prepares and dispatches it anew, so prune only what is
//! past every retry horizon.
//!
//! A store prunes in batches ([`PruneLimits`]): it selects the oldest
//! operations left (at most [`PruneLimits::batch_rows`]), appends them to the
//! archive, waits until the archive says they are durable
//! ([`PruneArchive::append`]), and deletes them in short transactions
//! (SQLite reads the batch without its write lock and deletes it in
//! transactions that hold the file's write lock for at most
//! [`PruneLimits::batch_time`], 800 µs by default; PostgreSQL locks
//! only the batch's rows, in one transaction). After each write
//! transaction the store pauses at least as long as it held its write
//! lock, so agents writing beside a prune wait for one short transaction
//! at most. The archive is ordered by `(updated_at, operation_id)` across
//! batches. A prune stopped anywhere (a crash, [`PruneLimits::max_duration`])
//! loses nothing: an operation is deleted only in the transaction after its
//! line was durable, and a resumed archive ([`ArchiveFile::resume`]) names the
//! operations of a batch whose deletion may not have committed, which the
//! next prune deletes without archiving them twice.

mod archive;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::record::{EffectRecord, LedgerEvent};
use crate::status::EffectStatus;

pub use archive::ArchiveFile;

/// Which operations to prune, and in what steps.
///
/// ```
/// use effect_core::{EffectStatus, PruneRequest};
/// let request = PruneRequest::before("2026-01-01T00:00:00.000000+00:00");
/// assert_eq!(request.statuses, [EffectStatus::Confirmed, EffectStatus::Rejected]);
/// assert!(request.validate().is_ok());
/// let unresolved = request.statuses(vec![EffectStatus::Quarantined]);
/// assert!(unresolved.validate().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneRequest {
    /// Operations last updated strictly before this ISO-8601 UTC time, in the
    /// ledger's own format (`2026-01-01T00:00:00.000000+00:00`); the stores
    /// compare the text.
    pub before: String,
    /// Only operations in these statuses; terminal ones only.
    pub statuses: Vec<EffectStatus>,
    /// Say what would be pruned, and write and delete nothing.
    pub dry_run: bool,
    /// How large each batch may be, and how long the whole prune may run.
    pub limits: PruneLimits,
}

/// The steps a prune takes: each batch is one write transaction.
///
/// ```
/// use std::time::Duration;
/// use effect_core::PruneLimits;
/// let limits = PruneLimits::default().max_duration(Some(Duration::from_secs(60)));
/// assert_eq!(limits.batch_rows, 2_000);
/// assert!(limits.batch_time < Duration::from_millis(100));
/// // A batch that held the lock 20 ms is followed by a pause at least as long.
/// assert!(limits.pause_after(Duration::from_millis(20)) >= Duration::from_millis(20));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PruneLimits {
    /// At most this many operations per batch (1..=[`MAX_BATCH_ROWS`]);
    /// PostgreSQL takes at most 50 while other sessions write on the
    /// server.
    pub batch_rows: usize,
    /// How long one write transaction of a prune may hold the lock, its
    /// commit included (default 800 µs): SQLite commits its deletions before
    /// this long and goes on in another, so an agent that finds the file's
    /// write lock taken gets it while it still looks every 100 µs (a SQLite
    /// ledger's write does for its first millisecond, then leaves the rest
    /// of its busy timeout to SQLite's handler); PostgreSQL, whose prune
    /// locks only the rows it deletes, stops decoding a batch's rows after
    /// it. Keep it under a millisecond on SQLite.
    pub batch_time: Duration,
    /// The shortest pause between two write transactions (default 1 ms, so
    /// an agent waiting for the lock takes it inside the pause; the pause
    /// is at least as long as the transaction held the lock, too).
    pub min_pause: Duration,
    /// The shortest pause after a SQLite write transaction while other
    /// connections write the file (one committed since the prune's previous
    /// transaction; default 5 ms): an agent executing effects back to back
    /// then gets several transactions through between two of the prune's,
    /// rather than one. PostgreSQL, whose prune does not lock the agents'
    /// rows, does not use it.
    pub writers_pause: Duration,
    /// Stop starting batches after this long (what was pruned stays pruned;
    /// run the prune again, with the same archive resumed, to go on).
    pub max_duration: Option<Duration>,
    /// Stop after this many batches (none: run to the end), as
    /// [`max_duration`](Self::max_duration) does: a bound a recovery worker's
    /// pass puts on its share of a retention policy.
    pub max_batches: Option<u64>,
}

/// The largest batch a store accepts, and so the most operations a resumed
/// archive can name whose deletion was not committed.
pub const MAX_BATCH_ROWS: usize = 10_000;

impl Default for PruneLimits {
    fn default() -> Self {
        PruneLimits {
            batch_rows: 2_000,
            batch_time: Duration::from_micros(800),
            min_pause: Duration::from_millis(1),
            writers_pause: Duration::from_millis(5),
            max_duration: None,
            max_batches: None,
        }
    }
}

impl PruneLimits {
    /// Batches of at most `rows` operations.
    #[must_use]
    pub fn batch_rows(mut self, rows: usize) -> Self {
        self.batch_rows = rows;
        self
    }

    /// Write transactions that hold the lock about `time` at most.
    #[must_use]
    pub fn batch_time(mut self, time: Duration) -> Self {
        self.batch_time = time;
        self
    }

    /// At least `pause` between two batches.
    #[must_use]
    pub fn min_pause(mut self, pause: Duration) -> Self {
        self.min_pause = pause;
        self
    }

    /// At least `pause` after a write transaction while other connections
    /// write (SQLite).
    #[must_use]
    pub fn writers_pause(mut self, pause: Duration) -> Self {
        self.writers_pause = pause;
        self
    }

    /// No batch starts after `max` (none: run to the end).
    #[must_use]
    pub fn max_duration(mut self, max: Option<Duration>) -> Self {
        self.max_duration = max;
        self
    }

    /// No batch starts after `max` batches (none: run to the end).
    #[must_use]
    pub fn max_batches(mut self, max: Option<u64>) -> Self {
        self.max_batches = max;
        self
    }

    /// True when a prune that has committed `batches` batches and run for
    /// `elapsed` must start no other: it stops there, not complete.
    pub fn reached(&self, batches: u64, elapsed: Duration) -> bool {
        self.max_duration.is_some_and(|max| elapsed >= max)
            || self.max_batches.is_some_and(|max| batches >= max)
    }

    /// How long to pause after a batch that held the write lock for `held`:
    /// as long again, and at least [`min_pause`](Self::min_pause), so
    /// writers waiting for the lock get it between batches.
    pub fn pause_after(&self, held: Duration) -> Duration {
        held.max(self.min_pause)
    }

    /// [`pause_after`](Self::pause_after), and at least
    /// [`writers_pause`](Self::writers_pause), for a transaction after which
    /// the store saw other connections writing.
    pub fn pause_beside_writers(&self, held: Duration) -> Duration {
        self.pause_after(held).max(self.writers_pause)
    }

    fn validate(&self) -> Result<(), LedgerError> {
        if self.batch_rows == 0 || self.batch_rows > MAX_BATCH_ROWS {
            return Err(LedgerError::invalid_input(format!(
                "a prune batch holds 1 to {MAX_BATCH_ROWS} operations, not {}",
                self.batch_rows
            )));
        }
        if self.batch_time.is_zero() {
            return Err(LedgerError::invalid_input(
                "a prune batch needs a time bound above zero",
            ));
        }
        Ok(())
    }
}

impl PruneRequest {
    /// Confirmed and rejected operations last updated before `before`, in
    /// batches of the default [`PruneLimits`].
    pub fn before(before: impl Into<String>) -> Self {
        PruneRequest {
            before: before.into(),
            statuses: vec![EffectStatus::Confirmed, EffectStatus::Rejected],
            dry_run: false,
            limits: PruneLimits::default(),
        }
    }

    /// Only operations in `statuses`.
    #[must_use]
    pub fn statuses(mut self, statuses: Vec<EffectStatus>) -> Self {
        self.statuses = statuses;
        self
    }

    /// A dry run: nothing is written or deleted.
    #[must_use]
    pub fn dry_run(mut self, dry_run: bool) -> Self {
        self.dry_run = dry_run;
        self
    }

    /// In steps of `limits`.
    #[must_use]
    pub fn limits(mut self, limits: PruneLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Checks that only terminal statuses are asked for, and the limits.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for no status, a status that is not
    /// `confirmed` or `rejected`, an empty cutoff, or a batch of no rows (or
    /// more than [`MAX_BATCH_ROWS`]) or no time.
    pub fn validate(&self) -> Result<(), LedgerError> {
        if self.statuses.is_empty() {
            return Err(LedgerError::invalid_input(
                "prune needs at least one status",
            ));
        }
        if let Some(status) = self
            .statuses
            .iter()
            .find(|s| !matches!(s, EffectStatus::Confirmed | EffectStatus::Rejected))
        {
            return Err(LedgerError::invalid_input(format!(
                "only confirmed and rejected operations can be pruned, not {status}"
            )));
        }
        if self.before.trim().is_empty() {
            return Err(LedgerError::invalid_input("prune needs a cutoff time"));
        }
        self.limits.validate()
    }
}

/// One line of a prune archive: an operation and its history, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArchivedOperation {
    /// The record (its output and evidence included).
    pub operation: EffectRecord,
    /// Its events, in sequence order.
    pub events: Vec<LedgerEvent>,
}

/// What identifies the version of an operation an archive line holds: a
/// store deletes the operation of a resumed line only while its row is still
/// that version.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ArchivedKey {
    /// The operation.
    pub operation_id: String,
    /// Its status when archived.
    pub status: EffectStatus,
    /// Its update time when archived, as stored.
    pub updated_at: String,
}

impl ArchivedKey {
    /// The key of `record`.
    pub fn of(record: &EffectRecord) -> Self {
        ArchivedKey {
            operation_id: record.operation_id.clone(),
            status: record.status,
            updated_at: record.updated_at.clone(),
        }
    }
}

/// Where a prune writes what it deletes.
///
/// [`ArchiveFile`] is the durable one (each batch synced, resumable); any
/// [`std::io::Write`] is an archive too, flushed after each batch and never
/// resumed (a `Vec<u8>` in tests, [`std::io::sink`] to discard).
pub trait PruneArchive {
    /// Appends the JSON lines of one batch (each ends with a newline) and
    /// returns once they are durable: the store deletes the batch only after.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Backend`] when the lines cannot be written or synced;
    /// the store then deletes nothing of the batch.
    fn append(&mut self, lines: &[u8]) -> Result<(), LedgerError>;

    /// For an archive a prune is resumed into: the key of the line before
    /// those already returned, from the last line backwards; `None` past the
    /// first line, or for an archive that was not resumed. The store reads
    /// these while their operations are still in the ledger as archived: the
    /// batch whose deletion did not commit.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Corrupt`] for a line that is not an archived operation;
    /// [`LedgerError::Backend`] when the archive cannot be read.
    fn previous(&mut self) -> Result<Option<ArchivedKey>, LedgerError> {
        Ok(None)
    }
}

impl<W: std::io::Write> PruneArchive for W {
    fn append(&mut self, lines: &[u8]) -> Result<(), LedgerError> {
        self.write_all(lines)
            .and_then(|()| self.flush())
            .map_err(|e| LedgerError::backend("cannot write the prune archive", Some(e.into())))
    }
}

/// What a prune did (or, for a dry run, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct PruneReport {
    /// Operations deleted (for a dry run: that would be), each with its
    /// archive line: written by this prune, or by the one it resumed
    /// (see [`resumed`](Self::resumed)).
    pub operations: u64,
    /// Their events, deleted.
    pub events: u64,
    /// True for a dry run: nothing was written or deleted.
    pub dry_run: bool,
    /// Of [`operations`](Self::operations), those whose lines a previous,
    /// interrupted prune had written to the resumed archive.
    pub resumed: u64,
    /// Write transactions committed.
    pub batches: u64,
    /// False when [`PruneLimits::max_duration`] or
    /// [`PruneLimits::max_batches`] stopped the prune before the last
    /// operation it selects was pruned.
    pub complete: bool,
}

impl PruneReport {
    /// A complete report of `operations` with `events`.
    pub fn new(operations: u64, events: u64, dry_run: bool) -> Self {
        PruneReport {
            operations,
            events,
            dry_run,
            resumed: 0,
            batches: 0,
            complete: true,
        }
    }
}

/// Serializes `line` as one archive line (JSON and a newline) onto `out`.
///
/// # Errors
///
/// [`LedgerError::Backend`] when the operation cannot be serialized.
pub fn write_archive_line(out: &mut Vec<u8>, line: &ArchivedOperation) -> Result<(), LedgerError> {
    serde_json::to_writer(&mut *out, line)
        .map_err(|e| LedgerError::backend("cannot write the prune archive", Some(e.into())))?;
    out.push(b'\n');
    Ok(())
}
