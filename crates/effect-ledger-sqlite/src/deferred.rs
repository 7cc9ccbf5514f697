//! Deferred outcomes: commits at `synchronous=NORMAL`, made durable later.
//!
//! A batch whose transitions are all
//! [`WriteDurability::Deferrable`](effect_core::WriteDurability::Deferrable)
//! commits with `PRAGMA synchronous = NORMAL`: SQLite appends its frames to
//! the write-ahead log without syncing it, so the commit survives a crash of
//! the process (the frames are in the operating system's page cache) but not
//! a power loss. It becomes durable at the first of:
//!
//! - the next commit at `synchronous = FULL` of this process or another one:
//!   that commit syncs the log file, and with it every frame before its own;
//! - the background sync of this module, at most
//!   [`SqliteOptions::deferred_sync_delay`](crate::SqliteOptions::deferred_sync_delay)
//!   after the commit;
//! - [`SqliteLedger::sync`](effect_core::EffectLedger::sync), or dropping the
//!   last clone of the ledger.
//!
//! The background sync opens the log file (`<ledger>-wal`) and calls
//! `fdatasync` on it, as SQLite's own FULL commit does: on Linux a sync
//! through any descriptor of a file writes all of that file's dirty pages.
//! It does not checkpoint (a checkpoint syncs the log only when it can copy
//! frames, which a reader can prevent), and it writes nothing. No log file
//! means nothing is pending: SQLite removes it only after a checkpoint that
//! synced it.
//!
//! A failed `fdatasync` poisons the ledger, as a failed sync during a commit
//! does (see "After a failed sync" in the crate docs): the operating system
//! may have dropped the log's dirty pages, so no later sync can prove that
//! the deferred commits reached the disk, and the ledger refuses writes
//! until it is opened again. A log file that cannot be opened syncs nothing
//! and loses nothing: the commits stay pending for the next attempt.

use std::fs::File;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use effect_core::LedgerError;

/// The default of [`SqliteOptions::deferred_sync_delay`](crate::SqliteOptions::deferred_sync_delay).
pub(crate) const DEFAULT_SYNC_DELAY: Duration = Duration::from_millis(100);

/// Makes deferred commits of one ledger durable; shared by its clones.
#[derive(Debug)]
pub(crate) struct Syncer {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    wake: Condvar,
    wal: PathBuf,
    delay: Duration,
    /// The ledger's poison flag, set when a sync of the log fails.
    poisoned: Arc<AtomicBool>,
    /// `File::sync_data`; a failing one in this module's tests.
    sync_file: fn(&File) -> io::Result<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Deferred commits so far.
    deferred: u64,
    /// Deferred commits known to be durable (up to this count).
    synced: u64,
    shutdown: bool,
}

impl Syncer {
    /// A syncer for the ledger file `database`; its thread starts with the
    /// first deferred commit. A failed sync sets `poisoned`.
    pub(crate) fn new(
        database: &std::path::Path,
        delay: Duration,
        poisoned: Arc<AtomicBool>,
    ) -> Self {
        let mut wal = database.as_os_str().to_owned();
        wal.push("-wal");
        Syncer {
            shared: Arc::new(Shared {
                state: Mutex::default(),
                wake: Condvar::new(),
                wal: PathBuf::from(wal),
                delay,
                poisoned,
                sync_file: File::sync_data,
            }),
            thread: Mutex::new(None),
        }
    }

    /// Records that a batch committed at `synchronous = NORMAL`, and makes
    /// sure the background sync will see it.
    pub(crate) fn deferred_committed(&self) {
        self.shared.lock().deferred += 1;
        self.shared.wake.notify_all();
        let mut thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner);
        if thread.is_some() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        match thread::Builder::new()
            .name("effect-ledger-sync".into())
            .spawn(move || shared.run())
        {
            Ok(handle) => *thread = Some(handle),
            Err(_) => {
                // No background thread: make this commit durable now. Should
                // the sync fail too, the commit stays pending for the next
                // durable commit, `sync` or the close.
                drop(thread);
                let _ = self.shared.sync_pending();
            }
        }
    }

    /// How many batches committed at `NORMAL` so far.
    #[cfg(test)]
    pub(crate) fn deferred_commits(&self) -> u64 {
        self.shared.lock().deferred
    }

    /// Makes every deferred commit so far durable.
    pub(crate) fn sync(&self) -> Result<(), LedgerError> {
        self.shared.sync_pending().map_err(|failure| {
            let wal = self.shared.wal.display();
            let (message, source) = match failure {
                SyncFailure::Open(source) => (
                    format!(
                        "cannot open the write-ahead log {wal} to sync deferred commits; they \
                         stay pending, retry later"
                    ),
                    source,
                ),
                SyncFailure::Sync(source) => (
                    format!(
                        "the disk did not confirm a sync of the write-ahead log {wal}: deferred \
                         commits may or may not be durable, and this ledger refuses writes \
                         until it is opened again"
                    ),
                    source,
                ),
            };
            LedgerError::unavailable(message, Some(Box::new(source) as effect_core::BoxError))
        })
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.shared.lock().shutdown = true;
        self.shared.wake.notify_all();
        let thread = self
            .thread
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(thread) = thread {
            // The thread syncs what is pending before it ends.
            let _ = thread.join();
        }
        // Nobody is left to tell of a failure: the commits are then as
        // durable as the next FULL commit of another process makes them.
        let _ = self.shared.sync_pending();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Two counters and a flag: valid after any panic.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The background sync: waits for a deferred commit, lets up to `delay`
    /// pass (more commits join the same sync), syncs the log, repeats.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            if state.synced < state.deferred {
                let (waited, _) = self
                    .wake
                    .wait_timeout_while(state, self.delay, |s| !s.shutdown)
                    .unwrap_or_else(PoisonError::into_inner);
                drop(waited);
                // A failed sync leaves the commits pending: the next round
                // (or `sync`, which reports the error) tries again.
                let _ = self.sync_pending();
                state = self.lock();
                if state.shutdown {
                    // Closing syncs once more, on the closing thread.
                    return;
                }
            } else if state.shutdown {
                return;
            } else {
                state = self
                    .wake
                    .wait_while(state, |s| s.synced >= s.deferred && !s.shutdown)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Syncs the log if a deferred commit may not be durable yet; a failed
    /// sync poisons the ledger.
    fn sync_pending(&self) -> Result<(), SyncFailure> {
        let target = {
            let state = self.lock();
            if state.synced >= state.deferred {
                return Ok(());
            }
            state.deferred
        };
        match File::open(&self.wal) {
            Ok(file) => {
                if let Err(err) = (self.sync_file)(&file) {
                    self.poisoned.store(true, Ordering::Release);
                    return Err(SyncFailure::Sync(err));
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(SyncFailure::Open(err)),
        }
        let mut state = self.lock();
        state.synced = state.synced.max(target);
        Ok(())
    }
}

/// Why the log of deferred commits was not synced.
#[derive(Debug)]
enum SyncFailure {
    /// It could not be opened: nothing was synced, nothing is lost.
    Open(io::Error),
    /// `fdatasync` failed: what it should have written may be lost.
    Sync(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(shared: &Shared) -> u64 {
        let state = shared.lock();
        state.deferred - state.synced
    }

    #[test]
    fn closing_syncs_what_the_timer_has_not_yet() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let database = dir.path().join("effects.sqlite3");
        std::fs::write(dir.path().join("effects.sqlite3-wal"), b"frames")
            .unwrap_or_else(|err| panic!("{err}"));
        // A timer that never fires within the test.
        let syncer = Syncer::new(&database, Duration::from_secs(600), Arc::default());
        let shared = Arc::clone(&syncer.shared);
        syncer.deferred_committed();
        syncer.deferred_committed();
        assert_eq!(pending(&shared), 2, "the timer has not synced yet");
        drop(syncer);
        assert_eq!(pending(&shared), 0, "closing synced both commits");
    }

    #[test]
    fn sync_makes_every_deferred_commit_durable_at_once() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let database = dir.path().join("effects.sqlite3");
        std::fs::write(dir.path().join("effects.sqlite3-wal"), b"frames")
            .unwrap_or_else(|err| panic!("{err}"));
        let syncer = Syncer::new(&database, Duration::from_secs(600), Arc::default());
        syncer.deferred_committed();
        syncer.sync().unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(pending(&syncer.shared), 0);
    }

    #[test]
    fn the_timer_syncs_within_its_delay() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let database = dir.path().join("effects.sqlite3");
        std::fs::write(dir.path().join("effects.sqlite3-wal"), b"frames")
            .unwrap_or_else(|err| panic!("{err}"));
        let syncer = Syncer::new(&database, Duration::from_millis(10), Arc::default());
        syncer.deferred_committed();
        // Generous: the point is that it happens without a sync or a close.
        for _ in 0..500 {
            if pending(&syncer.shared) == 0 {
                return;
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("the background sync never ran");
    }

    fn failing_sync(_: &File) -> io::Result<()> {
        Err(io::Error::from_raw_os_error(5))
    }

    /// A failed sync of the log leaves the commits pending and poisons the
    /// ledger: no later sync proves they reached the disk.
    #[test]
    fn a_failed_sync_poisons_the_ledger_and_leaves_the_commits_pending() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let database = dir.path().join("effects.sqlite3");
        std::fs::write(dir.path().join("effects.sqlite3-wal"), b"frames")
            .unwrap_or_else(|err| panic!("{err}"));
        let poisoned = Arc::new(AtomicBool::new(false));
        let mut syncer = Syncer::new(&database, Duration::from_secs(600), Arc::clone(&poisoned));
        Arc::get_mut(&mut syncer.shared)
            .unwrap_or_else(|| panic!("no thread holds the state yet"))
            .sync_file = failing_sync;
        syncer.deferred_committed();
        let err = syncer
            .sync()
            .err()
            .unwrap_or_else(|| panic!("the sync failed"));
        assert_eq!(err.kind(), effect_core::LedgerErrorKind::Unavailable);
        assert!(
            err.to_string().contains("may or may not be durable"),
            "{err}"
        );
        assert!(poisoned.load(Ordering::Acquire));
        assert_eq!(pending(&syncer.shared), 1, "still pending");
    }

    /// A log that cannot be opened was not synced: nothing lost, no poison.
    #[cfg(unix)]
    #[test]
    fn a_log_that_cannot_be_opened_does_not_poison() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{err}"));
        let database = dir.path().join("effects.sqlite3");
        // A link to itself where the log should be: opening it fails (ELOOP).
        let wal = dir.path().join("effects.sqlite3-wal");
        std::os::unix::fs::symlink(&wal, &wal).unwrap_or_else(|err| panic!("{err}"));
        let poisoned = Arc::new(AtomicBool::new(false));
        let syncer = Syncer::new(&database, Duration::from_secs(600), Arc::clone(&poisoned));
        syncer.deferred_committed();
        let err = syncer
            .sync()
            .err()
            .unwrap_or_else(|| panic!("the log cannot be opened"));
        assert_eq!(err.kind(), effect_core::LedgerErrorKind::Unavailable);
        assert!(err.to_string().contains("stay pending"), "{err}");
        assert!(!poisoned.load(Ordering::Acquire), "{err}");
        assert_eq!(pending(&syncer.shared), 1);
    }
}
