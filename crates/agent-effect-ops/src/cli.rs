//! The command line: every command, flag and help text, as clap types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use effect_core::{EffectStatus, RetentionPolicy};
use production_agent_systems::open::LedgerUrl;

/// Exit codes, for `--help` and docs/operations.md (keep the two in step).
const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  the ledger failed (unreadable, locked past the busy timeout, corrupt) or output could not be written
  2  usage error or invalid input: a bad flag, a missing or empty --db file or schema (without
     --create), a file or schema that is not a ledger, invalid --output-json, a prune cutoff in
     the future or younger than --min-retention, an empty --actor/--reason/--evidence-reference,
     a zero --expires, a ledger that needs --migrate
  3  the operation does not exist
  4  the transition is not allowed from the operation's current status
     (only outcome_unknown and quarantined operations can be resolved manually; authorize-retry
     of one whose previous handler may still run needs --handler-stopped; only awaiting_approval
     operations can be approved or denied, an approval is refused while an unused one stands or
     when --fingerprint differs from the operation's; only confirmed operations can be
     compensated; only prepared and awaiting_approval operations can be cancelled, and the
     message names the command to use instead)

Errors are one line on stderr, starting with \"error: \". Nothing is written to the
ledger when a command fails.";

const ABOUT: &str = "Inspect an effect ledger and resolve uncertain operations with an audit trail";

const LONG_ABOUT: &str = "\
Inspect an effect ledger and resolve uncertain operations with an audit trail.

Read commands (list, show, events, stats, export) open the ledger read-only.
confirm, reject and authorize-retry apply an audited manual resolution through the
executor's rules: only from outcome_unknown or quarantined, with a non-empty actor,
reason and evidence reference. approve and deny decide an operation awaiting
approval (its contract requires one before each dispatch). compensate asks for
the compensation of a confirmed operation (a refund for a capture), which a
recovery worker holding the compensation's handler runs. cancel ends an
operation that was never dispatched (prepared, deferred by a budget, or
awaiting approval), so no caller or worker ever sends it. expire records a
stale dispatch (lease expired) as outcome_unknown, with the same audit fields. The tool does not authenticate --actor; that is the
deployment's job.

--db must name an existing ledger, a SQLite file or a postgres:// URL: the tool
creates one only with --create. Global flags go before or after the command.

Output is JSON (stable field names, see docs/operations.md); --format table is for
people. list never prints outputs, arguments or evidence.";

/// `agent-effect-ops --db PATH|URL <command>`.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "agent-effect-ops",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = "Exit codes: 0 ok, 1 ledger failure, 2 usage or invalid input, 3 not found, 4 transition not allowed (see --help).",
    after_long_help = EXIT_CODES,
)]
pub struct Cli {
    /// The ledger: the path of an existing SQLite file, or a PostgreSQL
    /// database as a postgres:// URL (schema from EFFECT_LEDGER_SCHEMA,
    /// default effect_ledger); either is created only with --create.
    /// Accepted before or after the command.
    #[arg(long, value_name = "PATH|URL", global = true)]
    pub db: Option<LedgerUrl>,

    /// Create a new, empty ledger when --db names no file (or an empty one),
    /// or a PostgreSQL schema that does not exist (or holds nothing). Without
    /// it either is refused (exit code 2): a ledger made on the spot would
    /// show no operations, a false all-clear.
    #[arg(long, global = true)]
    pub create: bool,

    /// Output format: JSON for scripts, a table for people.
    #[arg(long, value_enum, default_value_t = Format::Json, global = true)]
    pub format: Format,

    /// Migrate a ledger with an older schema (for example one written by the
    /// Python package) in place before running the command, as any agent
    /// process opening it would. Without it nothing is migrated: read commands
    /// read an older schema as it is where they can and refuse it otherwise;
    /// confirm, reject and authorize-retry refuse it.
    #[arg(long, global = true)]
    pub migrate: bool,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Pretty JSON documents; JSON Lines for `export`.
    Json,
    /// Aligned columns for a terminal.
    Table,
}

/// One command.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// List operations, most recently updated first: summaries only, never
    /// outputs, arguments or evidence.
    List {
        /// Only operations in this status: prepared, awaiting_approval,
        /// dispatched, confirmed, outcome_unknown, quarantined, rejected.
        #[arg(long, value_name = "STATUS", value_parser = parse_status)]
        status: Option<EffectStatus>,
        /// Only operations waiting for a human's approval (the same as
        /// --status awaiting_approval); see `approve` and `deny`.
        #[arg(long, conflicts_with_all = ["status", "stale"])]
        waiting_approval: bool,
        /// At most this many operations (1..=1000).
        #[arg(long, value_name = "N", default_value_t = 100, allow_negative_numbers = true,
              value_parser = parse_limit)]
        limit: u16,
        /// Only stale dispatches: dispatched operations whose lease has
        /// expired (their worker is gone); see `expire`.
        #[arg(long)]
        stale: bool,
        /// The next page: the operations listed after this one (the
        /// operation_id of the last element of the previous page).
        #[arg(long, value_name = "ID")]
        after: Option<String>,
    },
    /// One operation: summary, evidence and event history; its stored output
    /// only with --include-output.
    Show {
        /// The operation id.
        id: String,
        /// Also print the stored output (it can hold customer data).
        #[arg(long)]
        include_output: bool,
    },
    /// An operation's event history, in sequence order.
    Events {
        /// The operation id.
        id: String,
    },
    /// Operations per status and the age of the oldest unresolved
    /// (outcome_unknown or quarantined) operation.
    Stats,
    /// Every event after --since, in sequence order, as JSON Lines for a log
    /// pipeline. Store the last sequence you read and pass it as --since next time.
    Export {
        /// A sequence number: export events whose sequence is greater than it
        /// (0, the default: everything). Or an ISO-8601 timestamp with offset
        /// (2026-01-01T00:00:00+00:00): export events stamped at or after it.
        #[arg(long, value_name = "SEQ|TIMESTAMP", default_value = "0", value_parser = parse_since)]
        since: Since,
    },
    /// Record that a stale dispatch (lease expired, its worker gone) has an
    /// unknown outcome, so it can be confirmed, rejected or retried. Refused
    /// while the lease is live.
    Expire {
        /// The operation id.
        id: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Delete confirmed and rejected operations last updated before --before
    /// (or past their age in --policy), and their events, after writing them
    /// to a JSON Lines archive. Never touches unresolved or active
    /// operations. A pruned operation is forgotten: executing the same call
    /// again dispatches it anew. Works in short batches (agents keep writing
    /// meanwhile), each archived and synced before it is deleted; progress
    /// goes to stderr.
    Prune {
        /// The cutoff: an ISO-8601 timestamp with offset (2026-01-01T00:00:00+00:00).
        #[arg(
            long,
            value_name = "TIMESTAMP",
            required_unless_present_any = ["older_than", "policy"],
            conflicts_with_all = ["older_than", "policy"]
        )]
        before: Option<String>,
        /// The cutoff as an age: operations last updated longer ago than this
        /// (30d, 12h, 1w).
        #[arg(long, value_name = "DURATION", value_parser = parse_duration,
              conflicts_with = "policy")]
        older_than: Option<std::time::Duration>,
        /// A retention policy: how long each terminal status is kept after
        /// its last update (confirmed=30d,rejected=90d; a cancelled operation
        /// is rejected). A status it does not name is kept. The same text as
        /// a recovery worker's `RetentionPolicy`.
        #[arg(long, value_name = "STATUS=AGE,...", conflicts_with = "status",
              value_parser = parse_policy)]
        policy: Option<RetentionPolicy>,
        /// Refuse a cutoff younger than this (default 24h): recent operations
        /// are the ones an agent may still repeat.
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = parse_duration)]
        min_retention: std::time::Duration,
        /// Prune up to a cutoff younger than --min-retention anyway.
        #[arg(long)]
        ignore_min_retention: bool,
        /// Only these statuses (comma-separated): confirmed, rejected.
        #[arg(long, value_name = "STATUS,...", value_delimiter = ',',
              default_value = "confirmed,rejected", value_parser = parse_status)]
        status: Vec<EffectStatus>,
        /// The archive to write (it must not exist, unless --resume). Default:
        /// effect-archive-TIME.jsonl (UTC) in the current directory.
        #[arg(long, value_name = "PATH")]
        archive: Option<PathBuf>,
        /// Go on with the prune that wrote --archive and was stopped (a
        /// crash, --max-duration, an error): append to it, and delete
        /// without a second line the operations it already holds.
        #[arg(long, requires = "archive", conflicts_with = "dry_run")]
        resume: bool,
        /// Stop starting batches after this long (10m, 1h); what was pruned
        /// stays pruned, and the report says "complete": false. Continue
        /// with --resume and the same --archive.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        max_duration: Option<std::time::Duration>,
        /// At most this many operations per batch, read and archived
        /// together (1..=10000); SQLite deletes a batch in write
        /// transactions of under a millisecond, PostgreSQL in one.
        #[arg(long, value_name = "N", default_value_t = 2_000,
              value_parser = clap::value_parser!(u16).range(1..=10_000))]
        batch_size: u16,
        /// Say what would be pruned; write and delete nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Copy a SQLite ledger to DEST (a new file) with SQLite's online backup
    /// API: complete and consistent while agents write.
    Backup {
        /// The copy to create; it must not exist.
        dest: PathBuf,
    },
    /// Record that the effect happened, with the output the provider shows.
    /// The next execution replays this output instead of dispatching.
    Confirm {
        /// The operation id.
        id: String,
        /// The effect's output as JSON, stored and replayed to the agent.
        #[arg(long, value_name = "JSON")]
        output_json: String,
        /// The provider's id for the effect (payment id, message id, ...).
        #[arg(long, value_name = "ID")]
        provider_operation_id: Option<String>,
        /// Store --output-json even though it has not the shape of the last
        /// confirmed output of the same contract (another JSON type, or
        /// missing top-level keys), which the agent's replay may fail to decode.
        #[arg(long)]
        ignore_output_shape: bool,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Record that the effect did not happen and must not be retried (terminal).
    Reject {
        /// The operation id.
        id: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Approve one dispatch of an operation awaiting approval, bound to its
    /// request fingerprint: the next execution dispatches it once and uses
    /// the approval up (docs/approval.md).
    Approve {
        /// The operation id.
        id: String,
        #[command(flatten)]
        decision: DecisionArgs,
        /// How long the approval may be used (30m, 1h, 1d); an approval
        /// unused by then dispatches nothing.
        #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
        expires: std::time::Duration,
        /// Approve only if the operation's request fingerprint is this one
        /// (the request_fingerprint `show` gave you): refused, writing
        /// nothing, otherwise.
        #[arg(long, value_name = "FINGERPRINT")]
        fingerprint: Option<String>,
    },
    /// Deny an operation awaiting approval: it becomes rejected, terminally,
    /// and is never dispatched.
    Deny {
        /// The operation id.
        id: String,
        #[command(flatten)]
        decision: DecisionArgs,
    },
    /// Ask for the compensation of a confirmed operation (a refund for a
    /// capture), which a recovery worker runs (docs/compensation.md).
    ///
    /// Recorded on the operation as compensation_requested; a recovery
    /// worker holding the compensation's handler runs it, once, as an effect
    /// of its own. Refused unless the operation is confirmed; a repeat
    /// writes nothing.
    Compensate {
        /// The operation id of the confirmed original.
        id: String,
        #[command(flatten)]
        request: RequestArgs,
    },
    /// Cancel an operation that has not been dispatched (prepared, whoever
    /// it waits for, deferred by a budget, or awaiting approval): it becomes
    /// rejected, terminally, and no caller or recovery worker dispatches it.
    ///
    /// Applied in the ledger's transaction, as a claim is: a worker racing
    /// the cancel either dispatched first (the cancel is then refused, exit
    /// 4, naming the command to use instead) or never dispatches. Budget
    /// charges of the operation, if any, are given back.
    Cancel {
        /// The operation id.
        id: String,
        #[command(flatten)]
        audit: AuditArgs,
    },
    /// Serve the operator console over HTTP: the queue, timelines,
    /// approvals, budgets, charts and /metrics (docs/console.md).
    ///
    /// Read-only unless the --config file enables actions, which then need
    /// authentication on every request. Listening beyond loopback needs
    /// authentication configured.
    Serve(ServeArgs),
    /// Record that the effect did not happen and let the next execution
    /// dispatch it again.
    AuthorizeRetry {
        /// The operation id.
        id: String,
        /// State that no previous handler of this operation is still running
        /// (its process is gone, the request was never sent). Required when
        /// the evidence says one may be (a missed deadline, an expired lease);
        /// recorded in the event as handler_stopped_asserted.
        #[arg(long)]
        handler_stopped: bool,
        #[command(flatten)]
        audit: AuditArgs,
    },
}

/// `serve`: where the console listens and how it is configured.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The address to listen on; port 0 picks a free one (printed on start).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7341")]
    pub listen: std::net::SocketAddr,
    /// The console's configuration (TOML, docs/console.md): actions,
    /// authentication, provider dashboard links. Without it the console is
    /// read-only and unauthenticated, on loopback only.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// The audit trail every manual resolution carries.
#[derive(Debug, Clone, Args)]
pub struct AuditArgs {
    /// Who decides (recorded, not authenticated).
    #[arg(long, value_name = "WHO")]
    pub actor: String,
    /// Why, in a sentence.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Where the evidence is: a ticket, an incident, a provider dashboard
    /// reference. Never a secret or customer data.
    #[arg(long, value_name = "REF")]
    pub evidence_reference: String,
    /// Resolve only if the operation still has this many attempts (the
    /// number `show` gave you): refused, writing nothing, when it was
    /// dispatched again since you looked.
    #[arg(long, value_name = "N")]
    pub expect_attempts: Option<u32>,
}

/// Who asks for a compensation, why, and on what evidence.
#[derive(Debug, Clone, Args)]
pub struct RequestArgs {
    /// Who asks (recorded, not authenticated).
    #[arg(long, value_name = "WHO")]
    pub actor: String,
    /// Why, in a sentence.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
    /// Where the evidence is: a ticket, an incident, a provider dashboard
    /// reference. Never a secret or customer data.
    #[arg(long, value_name = "REF", visible_alias = "evidence")]
    pub evidence_reference: String,
}

/// Who approves or denies, and why.
#[derive(Debug, Clone, Args)]
pub struct DecisionArgs {
    /// Who decides (recorded, not authenticated).
    #[arg(long, value_name = "WHO")]
    pub actor: String,
    /// Why, in a sentence.
    #[arg(long, value_name = "TEXT")]
    pub reason: String,
}

/// Where `export` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Events with a greater sequence.
    Sequence(u64),
    /// Events stamped at or after this many microseconds since the Unix epoch.
    Time(i128),
}

fn parse_since(value: &str) -> Result<Since, String> {
    if let Ok(sequence) = value.parse::<u64>() {
        return Ok(Since::Sequence(sequence));
    }
    crate::timestamp::parse_unix_micros(value)
        .map(Since::Time)
        .ok_or_else(|| {
            "expected a sequence number or an ISO-8601 timestamp with offset, such as 2026-01-01T00:00:00+00:00".to_owned()
        })
}

fn parse_limit(value: &str) -> Result<u16, String> {
    value
        .parse::<u16>()
        .ok()
        .filter(|n| (1..=1000).contains(n))
        .ok_or_else(|| "must be between 1 and 1000".to_owned())
}

/// A duration such as `30d`, `12h` or `1w` (jiff's friendly format; a day is 24 hours).
pub(crate) fn parse_duration(value: &str) -> Result<std::time::Duration, String> {
    let invalid = || format!("expected a duration such as 30d, 12h or 1w, not {value:?}");
    let span: jiff::Span = value.trim().parse().map_err(|_| invalid())?;
    let seconds = span
        .total(jiff::SpanTotal::from(jiff::Unit::Second).days_are_24_hours())
        .map_err(|_| invalid())?;
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(invalid());
    }
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| invalid())
}

fn parse_policy(value: &str) -> Result<RetentionPolicy, effect_core::ParseRetentionError> {
    value.parse()
}

fn parse_status(value: &str) -> Result<EffectStatus, effect_core::ParseStatusError> {
    value.parse()
}
