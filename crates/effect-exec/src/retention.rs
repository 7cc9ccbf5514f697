//! [`Retention`]: a [`RecoveryWorker`](crate::RecoveryWorker) applies a
//! retention policy on a schedule, a bounded share per pass
//! (docs/operations.md#retention).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use effect_core::{ArchiveFile, Clock, LedgerError, PruneLedger, RetentionPolicy, RetentionReport};

/// How many write transactions one recovery pass commits before it starts
/// no other batch, unless the policy's limits say otherwise: on SQLite each
/// holds the lock for under a millisecond (a batch of 2,000 operations
/// takes some 35 of them), on PostgreSQL each deletes one batch.
pub const DEFAULT_BATCHES_PER_PASS: u64 = 20;

/// The default of [`Retention::every`]: once an hour.
pub const DEFAULT_RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// A retention policy a recovery worker applies
/// ([`RecoveryWorker::retention`](crate::RecoveryWorker::retention)): the
/// store that prunes, and the directory its archives go to.
///
/// A pass applies the policy when [`every`](Self::every) has passed since
/// the last application finished, or at once when the last one stopped at
/// its bound with work left. Each pass starts no batch after it has
/// committed the policy's
/// [`max_batches`](effect_core::PruneLimits::max_batches) write transactions
/// (default [`DEFAULT_BATCHES_PER_PASS`]), each short, so a pass never holds
/// the store long. What it deletes is archived first into
/// `effect-retention-YYYYMMDD.jsonl` (the day by the executor's clock, UTC)
/// in the archive directory: appended to that day's file, resumed after a
/// crash like `agent-effect-ops prune --resume`, so an operation is never
/// deleted unarchived nor archived twice. Give each worker that applies a
/// policy a directory of its own.
#[derive(Clone)]
pub struct Retention {
    policy: RetentionPolicy,
    store: Arc<dyn PruneLedger>,
    archive_dir: PathBuf,
    every: Duration,
    state: Arc<Mutex<Schedule>>,
}

#[derive(Debug, Default)]
struct Schedule {
    /// When the last application that finished its work ended.
    last_complete: Option<SystemTime>,
}

impl fmt::Debug for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Retention")
            .field("policy", &self.policy.to_string())
            .field("archive_dir", &self.archive_dir)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

impl Retention {
    /// Applies `policy` through `store` (the ledger the worker's executor
    /// writes), archiving into `archive_dir`, which must exist.
    ///
    /// # Errors
    ///
    /// [`LedgerError::InvalidInput`] for a policy
    /// [`RetentionPolicy::validate`] refuses, or an archive directory that is
    /// not a directory.
    pub fn new(
        policy: RetentionPolicy,
        store: Arc<dyn PruneLedger>,
        archive_dir: impl Into<PathBuf>,
    ) -> Result<Self, LedgerError> {
        let mut policy = policy;
        if policy.limits.max_batches.is_none() {
            policy.limits.max_batches = Some(DEFAULT_BATCHES_PER_PASS);
        }
        policy.validate()?;
        let archive_dir = archive_dir.into();
        if !archive_dir.is_dir() {
            return Err(LedgerError::invalid_input(format!(
                "the retention archive directory {} is not a directory",
                archive_dir.display()
            )));
        }
        Ok(Retention {
            policy,
            store,
            archive_dir,
            every: DEFAULT_RETENTION_EVERY,
            state: Arc::default(),
        })
    }

    /// How long after an application that finished its work the next one
    /// starts (default [`DEFAULT_RETENTION_EVERY`]); `Duration::ZERO` applies
    /// the policy at every pass.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The policy, with the per-pass bound in its limits.
    pub fn policy(&self) -> &RetentionPolicy {
        &self.policy
    }

    /// Applies the policy when it is due: `None` when it is not.
    pub(crate) fn run_if_due(
        &self,
        clock: &dyn Clock,
    ) -> Option<Result<RetentionReport, LedgerError>> {
        let now = clock.now();
        let mut state = match self.state.lock() {
            Ok(state) => state,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(last) = state.last_complete
            && now.duration_since(last).unwrap_or(Duration::ZERO) < self.every
        {
            return None;
        }
        let result = self.apply(now);
        if let Ok(report) = &result
            && report.total.complete
        {
            state.last_complete = Some(now);
        }
        Some(result)
    }

    fn apply(&self, now: SystemTime) -> Result<RetentionReport, LedgerError> {
        let day: String = effect_core::format_timestamp(now)
            .chars()
            .take(10)
            .filter(char::is_ascii_digit)
            .collect();
        let path = self
            .archive_dir
            .join(format!("effect-retention-{day}.jsonl"));
        let created = !path.exists();
        let mut archive = if created {
            ArchiveFile::create(&path)?
        } else {
            ArchiveFile::resume(&path)?
        };
        let result = self
            .policy
            .apply(self.store.as_ref(), now, false, &mut archive, &mut |_| {});
        let empty = archive.lines() == 0;
        drop(archive);
        if created && empty {
            remove_empty(&path);
        }
        result
    }
}

/// A new archive this application wrote nothing to is removed: an empty
/// file per quiet day would only mislead.
fn remove_empty(path: &Path) {
    if let Err(err) = std::fs::remove_file(path) {
        tracing::warn!(path = %path.display(), error = %err, "cannot remove an empty retention archive");
    }
}
