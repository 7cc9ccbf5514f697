//! [`SqliteLedger::backup`]: a consistent copy of a live ledger.

use std::path::Path;
use std::time::Duration;

use effect_core::LedgerError;
use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use crate::error::ledger_error;
use crate::ledger::SqliteLedger;

/// How long a backup waits for writers' locks, in steps of [`BUSY_PAUSE`].
const BUSY_LIMIT: Duration = Duration::from_secs(5);
const BUSY_PAUSE: Duration = Duration::from_millis(10);

impl SqliteLedger {
    /// Copies the whole ledger to a new file at `destination` with SQLite's
    /// online backup API, while agents keep writing.
    ///
    /// The copy is one consistent snapshot of the database, committed
    /// transactions in the `-wal` file included (copying the main file alone
    /// can miss them), and a single file: it needs no `-wal` beside it. The
    /// copy is written to `destination` plus `.partial`, synced, then renamed,
    /// so `destination` is never a half-written file.
    ///
    /// ```
    /// use effect_core::{EffectLedger, EffectLedgerExt, NewOperation, RequestFingerprint};
    /// use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let ledger = SqliteLedger::open(dir.path().join("effects.sqlite3"), SqliteOptions::default())?;
    /// let op = NewOperation::new("send_email", "1", RequestFingerprint::of_canonical("{}"));
    /// ledger.prepare("email:1", &op)?;
    /// let copy = dir.path().join("backup.sqlite3");
    /// ledger.backup(&copy)?;
    /// let restored = SqliteLedger::open(&copy, SqliteOptions::default().read_only(true))?;
    /// assert!(restored.get("email:1")?.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] when `destination` exists (a backup
    /// never overwrites); [`LedgerError::Backend`] when the copy cannot be
    /// written; store failures.
    pub fn backup(&self, destination: &Path) -> Result<(), LedgerError> {
        if destination.exists() {
            return Err(LedgerError::invalid_input(format!(
                "the backup destination {destination:?} already exists"
            )));
        }
        let mut partial = destination.as_os_str().to_owned();
        partial.push(".partial");
        let partial = std::path::PathBuf::from(partial);
        let doing = || format!("backing up the ledger to {destination:?}");
        let source = self
            .pool
            .get()
            .map_err(|e| crate::error::pool_error(doing(), e))?;
        let result = (|| {
            let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            let mut copy = Connection::open_with_flags(&partial, flags)
                .map_err(|e| ledger_error(doing(), e))?;
            {
                let backup =
                    Backup::new(&source, &mut copy).map_err(|e| ledger_error(doing(), e))?;
                // All pages in one step: one snapshot, however busy the
                // writers. A lock held by a writer only delays the step.
                let mut waited = Duration::ZERO;
                loop {
                    match backup.step(-1).map_err(|e| ledger_error(doing(), e))? {
                        StepResult::Done => break,
                        StepResult::More | StepResult::Busy | StepResult::Locked
                            if waited < BUSY_LIMIT =>
                        {
                            std::thread::sleep(BUSY_PAUSE);
                            waited += BUSY_PAUSE;
                        }
                        _ => {
                            return Err(LedgerError::unavailable(
                                format!("{}: the ledger stayed locked", doing()),
                                None,
                            ));
                        }
                    }
                }
            }
            // A single self-contained file: fold any WAL of the copy into it.
            copy.pragma_update(None, "journal_mode", "DELETE")
                .map_err(|e| ledger_error(doing(), e))?;
            drop(copy);
            let file = std::fs::File::open(&partial)
                .map_err(|e| LedgerError::backend(doing(), Some(e.into())))?;
            file.sync_all()
                .map_err(|e| LedgerError::backend(doing(), Some(e.into())))?;
            std::fs::rename(&partial, destination)
                .map_err(|e| LedgerError::backend(doing(), Some(e.into())))
        })();
        if result.is_err() {
            // Leave no half-written copy behind; the error says what failed.
            let _ = std::fs::remove_file(&partial);
        }
        result
    }
}
