//! [`SqliteOptions`]: how a ledger file is opened.

use std::sync::Arc;
use std::time::Duration;

use effect_core::{Clock, SystemClock};

/// How hard a commit tries to reach stable storage before it returns.
///
/// The ledger always runs in WAL mode. The difference is what a committed
/// transition survives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Synchronous {
    /// `PRAGMA synchronous = FULL`: every commit syncs the write-ahead log, so a
    /// committed transition survives a power loss or an operating-system crash.
    /// The default: a ledger that forgets a dispatch can cause a duplicate effect.
    #[default]
    Full,
    /// `PRAGMA synchronous = NORMAL`: commits survive a crash of the process but
    /// the last ones may be lost on power loss. Faster; use it only where the
    /// machine's storage is itself protected.
    Normal,
}

impl Synchronous {
    pub(crate) fn pragma_value(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

/// Options for [`SqliteLedger::open`](crate::SqliteLedger::open).
///
/// The fingerprint new records carry is the executor's setting
/// (`ExecutorOptions::fingerprint_form` in effect-exec): a ledger shared with
/// Python workers needs `FingerprintForm::Sha256` there.
///
/// ```
/// use std::time::Duration;
/// use effect_ledger_sqlite::{Synchronous, SqliteOptions};
///
/// let options = SqliteOptions::default()
///     .synchronous(Synchronous::Normal)
///     .busy_timeout(Duration::from_secs(10))
///     .pool_size(8);
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub(crate) synchronous: Synchronous,
    pub(crate) busy_timeout: Duration,
    pub(crate) pool_size: u32,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) read_only: bool,
    pub(crate) group_commit: bool,
    pub(crate) confirmed_cache: usize,
    pub(crate) max_value_bytes: Option<usize>,
    pub(crate) migrate: bool,
    pub(crate) deferred_sync_delay: Duration,
}

impl Default for SqliteOptions {
    /// Full durability, a 5 s busy timeout, 4 pooled connections, the system
    /// clock, read-write, group commit, a cache of 4096 confirmed records,
    /// deferred commits synced within 100 ms.
    fn default() -> Self {
        SqliteOptions {
            synchronous: Synchronous::default(),
            busy_timeout: Duration::from_secs(5),
            pool_size: 4,
            clock: Arc::new(SystemClock),
            read_only: false,
            group_commit: true,
            confirmed_cache: 4096,
            max_value_bytes: None,
            migrate: true,
            deferred_sync_delay: crate::deferred::DEFAULT_SYNC_DELAY,
        }
    }
}

impl SqliteOptions {
    /// What a committed transition survives (default [`Synchronous::Full`]).
    #[must_use]
    pub fn synchronous(mut self, synchronous: Synchronous) -> Self {
        self.synchronous = synchronous;
        self
    }

    /// The largest value (an output, evidence, an event's data, as JSON
    /// text) the ledger stores; `None` (the default) keeps SQLite's own limit
    /// of 1,000,000,000 bytes. A transition carrying a larger value is refused
    /// with [`LedgerError::InvalidInput`](effect_core::LedgerError::InvalidInput)
    /// and writes nothing; the executor then records the handler's output as
    /// unstorable (`outcome_unknown`), never as confirmed.
    #[must_use]
    pub fn max_value_bytes(mut self, limit: Option<usize>) -> Self {
        self.max_value_bytes = limit;
        self
    }

    /// How long a connection waits for another connection's (or process's) lock
    /// before failing with [`LedgerError::Unavailable`](effect_core::LedgerError::Unavailable)
    /// (default 5 s). Also bounds the wait for a free pooled connection.
    #[must_use]
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How many connections the pool keeps (default 4, at least 1). Writers
    /// take turns on the database lock; more connections let reads run
    /// alongside a write.
    #[must_use]
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// The clock that stamps transitions and judges leases (default the system clock).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Opens the file read-only (default false): reads work, every transition
    /// fails, and nothing is migrated. For inspecting a ledger another process owns.
    #[must_use]
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Group commit (default on): the transitions of concurrent callers of
    /// this ledger (and its clones) share one transaction and one fsync. Each
    /// caller's transition is still decided on its own, inside its own
    /// savepoint, so a failing one affects only its caller, and each caller
    /// is answered only once the shared commit is durable. Off, every
    /// transition is a transaction of its own.
    #[must_use]
    pub fn group_commit(mut self, enabled: bool) -> Self {
        self.group_commit = enabled;
        self
    }

    /// How many confirmed records to keep in memory (default 4096; 0 turns the
    /// cache off). `confirmed` is terminal, so a cached record never goes stale
    /// and replaying it needs no transaction.
    #[must_use]
    pub fn confirmed_cache(mut self, records: usize) -> Self {
        self.confirmed_cache = records;
        self
    }

    /// The longest a deferred commit waits for its sync (default 100 ms).
    ///
    /// A transition applied with
    /// [`WriteDurability::Deferrable`](effect_core::WriteDurability::Deferrable)
    /// (the executor's deferred outcomes) commits, in a batch of deferrable
    /// transitions only, with `PRAGMA synchronous = NORMAL`, and its caller is
    /// answered before the write-ahead log is synced. The log is then synced
    /// by the next `FULL` commit (which syncs every frame before it), by a
    /// background thread at most this long after the commit, by
    /// [`sync`](effect_core::EffectLedger::sync), or when the last clone of
    /// the ledger is dropped. So a power loss loses at most the deferred
    /// commits of this window; a crash of the process loses none. With
    /// [`Synchronous::Normal`] every commit is already at `NORMAL` and this
    /// does not apply.
    ///
    /// ```
    /// use std::time::Duration;
    /// use effect_core::{EffectLedger, Transition, WriteDurability};
    /// use effect_core::{NewOperation, RequestFingerprint};
    /// use effect_ledger_sqlite::{SqliteOptions, TempLedger};
    ///
    /// let options = SqliteOptions::default().deferred_sync_delay(Duration::from_millis(20));
    /// let ledger = TempLedger::with_options(options)?;
    /// let op = NewOperation::new("send_email", "1", RequestFingerprint::of_canonical(r#"{"to":"ada@example.com"}"#));
    /// let prepared = ledger.apply_with("email:ada", &Transition::Prepare(op), WriteDurability::Deferrable)?;
    /// assert!(prepared.applied);
    /// // Durable now, without waiting for the background sync.
    /// ledger.sync()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn deferred_sync_delay(mut self, delay: Duration) -> Self {
        self.deferred_sync_delay = delay;
        self
    }

    /// Whether opening read-write may migrate a file with an older schema
    /// (default true). False: such a file fails to open with
    /// [`SqliteError::NeedsMigration`](crate::SqliteError::NeedsMigration)
    /// and is left untouched, not even switched to WAL mode; a current file
    /// opens, and a missing one is created. For tools that must migrate only
    /// when asked, such as an operator's command line.
    #[must_use]
    pub fn migrate(mut self, allowed: bool) -> Self {
        self.migrate = allowed;
        self
    }
}
