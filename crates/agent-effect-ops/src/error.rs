//! Errors of the CLI itself, and the mapping of every error onto an exit code.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use effect_core::{LedgerError, LedgerErrorKind};
use effect_exec::ExecError;

/// Invalid input caught by the CLI before anything is opened or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// No `--db`.
    #[error(
        "--db is required: pass the path of a ledger file or a postgres:// URL, before or after the command"
    )]
    MissingDb,
    /// `prune` with a cutoff after now.
    #[error(
        "the prune cutoff {cutoff} is in the future; pass a past time with --before, or an age with --older-than 30d"
    )]
    FutureCutoff {
        /// The cutoff.
        cutoff: String,
    },
    /// `prune` with a cutoff younger than the minimum retention.
    #[error(
        "the prune cutoff {cutoff} is younger than the minimum retention of {retention}: an agent may still repeat those calls, and a pruned one dispatches again; choose an older cutoff, or pass --ignore-min-retention"
    )]
    RecentCutoff {
        /// The cutoff.
        cutoff: String,
        /// The retention, as given.
        retention: String,
    },
    /// `prune --policy` with a rule shorter than the minimum retention.
    #[error(
        "the retention policy keeps {status} operations {keep}, less than the minimum retention of {retention}: an agent may still repeat those calls, and a pruned one dispatches again; keep them longer, or pass --ignore-min-retention"
    )]
    ShortRetention {
        /// The rule's status.
        status: String,
        /// The rule's age, as given.
        keep: String,
        /// The minimum retention, as given.
        retention: String,
    },
    /// `--db` names no file.
    #[error(
        "ledger file {location} does not exist; pass the path of an existing ledger with --db, or --create to make a new one"
    )]
    MissingLedger {
        /// The path given, quoted.
        location: String,
    },
    /// `--db` names an empty file: SQLite would make a new database of it.
    #[error(
        "ledger file {location} is empty, not a ledger; pass the path of an existing ledger with --db, or --create to make a new one"
    )]
    EmptyLedger {
        /// The path given, quoted.
        location: String,
    },
    /// The ledger must be migrated before this version can read it.
    #[error(
        "ledger {location} has an older schema (version {found}) and must be migrated before use; re-run with --migrate to migrate it in place"
    )]
    NeedsMigration {
        /// The ledger file (quoted), or its PostgreSQL schema and database.
        location: String,
        /// Its schema version.
        found: i64,
    },
    /// `--db` is a PostgreSQL URL, but this build has no PostgreSQL support.
    #[error(
        "--db names a PostgreSQL ledger, but agent-effect-ops was built without the postgres feature; rebuild with --features postgres"
    )]
    PostgresNotBuilt,
    /// `backup` of a ledger that is not a SQLite file.
    #[error(
        "backup copies a SQLite ledger file; back a PostgreSQL ledger up with the server's own tools (pg_dump)"
    )]
    BackupNotSqlite,
    /// `prune --before` is not a timestamp.
    #[error(
        "--before must be an ISO-8601 timestamp with offset, such as 2026-01-01T00:00:00+00:00"
    )]
    InvalidBefore,
    /// `confirm --output-json` cannot be an output of the contract.
    #[error(
        "--output-json is {given}, but the last confirmed output of {contract} ({operation_id:?}) is {expected}; pass an output of that shape, or --ignore-output-shape if this one is right"
    )]
    OutputShape {
        /// The contract, `name vVERSION`.
        contract: String,
        /// The operation whose output was compared.
        operation_id: String,
        /// Its shape.
        expected: String,
        /// The given value's shape.
        given: String,
    },
    /// `--output-json` is not JSON.
    #[error("--output-json is not valid JSON")]
    InvalidOutputJson {
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// `--output-json` nests deeper than the ledger stores.
    #[error("--output-json cannot be stored")]
    UnstorableOutputJson {
        /// Why.
        #[source]
        source: effect_core::CanonicalError,
    },
    /// `approve --expires 0`: an approval nobody could use.
    #[error("--expires must be longer than zero, such as 30m or 1h")]
    ZeroExpiry,
    /// An audit field or an id is empty or only whitespace.
    #[error("{flag} must not be empty")]
    Blank {
        /// The flag, e.g. `--actor`.
        flag: &'static str,
    },
}

/// `authorize-retry` while a previous handler may still send the request
/// (exit code 4).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot authorize a retry of operation {operation_id:?}: {why}, so a retry could send the request twice; pass --handler-stopped once you know it stopped"
)]
pub struct HandlerMayStillRun {
    /// The operation id.
    pub operation_id: String,
    /// What the record shows.
    pub why: String,
}

/// `compensate` of an operation whose compensation was rejected (denied by
/// an approver, or refused by the provider): a rejected operation is never
/// run again, so a new request could only be ignored (exit code 4).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot request the compensation of operation {operation_id:?}: its compensation {compensation:?} was rejected ({why}), and a rejected compensation is final and never runs again; if the effect must still be undone, undo it at the provider directly and keep the evidence with your ticket, or look at the decision with: agent-effect-ops show {compensation}"
)]
pub struct CompensationRejected {
    /// The original operation.
    pub operation_id: String,
    /// Its compensation's operation id.
    pub compensation: String,
    /// The compensation's error (the denial's actor and reason).
    pub why: String,
}

/// A ledger file the CLI cannot use, in the CLI's words (exit code 2 for a
/// file that is not a ledger, 1 otherwise). The
/// store's error is not kept as a source: its text would repeat SQLite's
/// and name library options.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// Not a SQLite database, or a database or schema without the ledger's tables.
    #[error("{location} is not a ledger: {why}")]
    NotALedger {
        /// The file (quoted), or the PostgreSQL schema and database.
        location: String,
        /// Why not.
        why: &'static str,
    },
    /// Another process held the lock too long.
    #[error("ledger {location} stayed locked by another process for more than 5 seconds; retry")]
    Busy {
        /// The file (quoted).
        location: String,
    },
    /// The file or its directory cannot be written.
    #[error(
        "ledger {location} cannot be opened for writing: the file or its directory is read-only for this user (writing needs the -wal and -shm files beside it)"
    )]
    ReadOnly {
        /// The file (quoted).
        location: String,
    },
}

/// A documented exit code (see `--help` and docs/operations.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Exit {
    /// 0: the command succeeded.
    Success,
    /// 1: the ledger or the output failed.
    Failure,
    /// 2: usage error or invalid input.
    Usage,
    /// 3: the operation does not exist.
    NotFound,
    /// 4: the transition is not allowed from the current status.
    NotAllowed,
}

impl Exit {
    /// The numeric code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::NotFound => 3,
            Exit::NotAllowed => 4,
        }
    }

    /// Classifies an error by the first cause in its chain that has a kind.
    pub fn of(error: &anyhow::Error) -> Exit {
        for cause in error.chain() {
            if cause.downcast_ref::<ChangedSinceSeen>().is_some()
                || cause.downcast_ref::<NotCancellable>().is_some()
                || cause.downcast_ref::<HandlerMayStillRun>().is_some()
                || cause.downcast_ref::<ApprovalMismatch>().is_some()
                || cause.downcast_ref::<CompensationRejected>().is_some()
            {
                return Exit::NotAllowed;
            }
            if cause.downcast_ref::<InputError>().is_some()
                || cause
                    .downcast_ref::<ConsoleError>()
                    .is_some_and(ConsoleError::is_usage)
                || matches!(
                    cause.downcast_ref::<OpenError>(),
                    Some(OpenError::NotALedger { .. })
                )
            {
                return Exit::Usage;
            }
            if let Some(kind) = cause
                .downcast_ref::<ExecError>()
                .and_then(ExecError::ledger_kind)
                .or_else(|| cause.downcast_ref::<LedgerError>().map(LedgerError::kind))
            {
                return Exit::of_kind(kind);
            }
        }
        Exit::Failure
    }

    fn of_kind(kind: LedgerErrorKind) -> Exit {
        match kind {
            LedgerErrorKind::NotFound => Exit::NotFound,
            LedgerErrorKind::InvalidTransition => Exit::NotAllowed,
            LedgerErrorKind::InvalidInput => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

/// True when the error is a closed stdout (`agent-effect-ops ... | head`),
/// which is not a failure of the command.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// `approve --fingerprint` naming another request than the operation's
/// (exit code 4).
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot approve operation {operation_id:?}: its request fingerprint is {fingerprint}, not the one given; look again with show before approving it"
)]
pub struct ApprovalMismatch {
    /// The operation id.
    pub operation_id: String,
    /// The operation's fingerprint.
    pub fingerprint: String,
}

/// A resolution refused because the operation moved on since the operator
/// looked at it (`--expect-attempts`, or a change between the check and the write).
#[derive(Debug, thiserror::Error)]
#[error(
    "operation {operation_id:?} changed since you looked (attempts now {attempts}, status {status}); \
     look again with show before resolving it"
)]
pub struct ChangedSinceSeen {
    /// The operation id.
    pub operation_id: String,
    /// Its attempts now.
    pub attempts: u32,
    /// Its status now.
    pub status: effect_core::EffectStatus,
}

/// `cancel` of an operation that was dispatched or settled (exit code 4),
/// with the command to use instead.
#[derive(Debug, thiserror::Error)]
#[error("cannot cancel operation {operation_id:?}: its status is {status}; {instead}")]
pub struct NotCancellable {
    /// The operation id.
    pub operation_id: String,
    /// Its status now.
    pub status: effect_core::EffectStatus,
    /// What to do instead.
    pub instead: String,
}

/// Why the console does not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConsoleError {
    /// The configuration file cannot be read.
    #[error("cannot read the console configuration {}", path.display())]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not one.
    #[error("the console configuration {} is invalid: {why}", path.display())]
    Config {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// The tokens file cannot be read.
    #[error("cannot read the console tokens file {}", path.display())]
    ReadTokens {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A line of the tokens file is not a token.
    #[error("the console tokens file {} is invalid at line {line}: {why}", path.display())]
    Tokens {
        /// The file.
        path: PathBuf,
        /// The line, from 1 (0: the whole file).
        line: usize,
        /// What is wrong.
        why: String,
    },
    /// Another invalid setting.
    #[error("invalid console configuration: {why}")]
    Invalid {
        /// What is wrong.
        why: String,
    },
    /// Actions without authentication: anyone reaching the port could act.
    #[error(
        "actions are enabled but no authentication is configured; configure [auth] tokens_file or [auth.trusted_header] (docs/console.md)"
    )]
    ActionsNeedAuth,
    /// A non-loopback address without authentication.
    #[error(
        "refusing to listen on {listen} without authentication: anyone who reaches it would read the ledger; listen on 127.0.0.1 or configure [auth] (docs/console.md)"
    )]
    ExposedWithoutAuth {
        /// The address given.
        listen: SocketAddr,
    },
}

impl ConsoleError {
    /// Whether this is the operator's input to correct (exit code 2).
    pub(crate) fn is_usage(&self) -> bool {
        !matches!(
            self,
            ConsoleError::ReadConfig { .. } | ConsoleError::ReadTokens { .. }
        )
    }
}
