//! The command line.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};
use effect_testkit::certify::CertifyFault;
use effect_testkit::scenario::ContractVariant;
use production_agent_systems::open::LedgerUrl;

/// Run fault scenarios against the recovery executor and count what the
/// provider committed.
#[derive(Debug, Clone, Parser)]
#[command(name = "agent-effect", version, args_conflicts_with_subcommands = true)]
#[command(group(
    ArgGroup::new("mode").args(["scenario", "matrix", "list"]),
))]
#[command(
    after_help = "Without --scenario, --matrix or --list, runs the after-commit-before-ack scenario."
)]
pub struct Cli {
    /// `certify`: run the faults against your own endpoint or MCP server.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// Run one scenario and print its JSON report; exit 0 iff it passed
    /// (default: after-commit-before-ack).
    #[arg(long, value_name = "NAME")]
    pub scenario: Option<String>,

    /// Run every fault point against every contract variant, with the naive
    /// retry-on-error baseline beside it.
    #[arg(long)]
    pub matrix: bool,

    /// Name the scenarios, one line each.
    #[arg(long)]
    pub list: bool,

    /// Output format of --matrix (--scenario always prints JSON).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Also write the report to FILE; missing directories are created.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// The contract of --scenario: what makes a retry safe.
    #[arg(long, value_enum, default_value_t = ContractArg::Both)]
    pub contract: ContractArg,

    /// The ledger, as every binary names one: a SQLite file path (created;
    /// it must not exist yet; a run needing more ledgers adds `-2`, `-3`,
    /// ... to its stem), `memory:` (throwaway), or a PostgreSQL database as
    /// a postgres://... URL (--scenario only: each run uses fresh schemas,
    /// dropped when it ends, and leases are measured on the database's
    /// clock). Without it, SQLite files in the run's directory. A directory
    /// (use --dir), `sqlite` and `memory` still work, deprecated.
    #[arg(long, alias = "ledger", value_name = "FILE|memory:|URL", value_parser = parse_db)]
    pub db: Option<DbArg>,

    /// Internal: the PostgreSQL schema the crash worker shares with its parent.
    #[arg(long, hide = true, value_name = "SCHEMA", requires = "worker")]
    pub schema: Option<String>,

    /// Keep the ledger and provider files in DIR (created if missing; it must
    /// not hold a ledger yet) instead of a fresh temporary directory.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,

    /// Internal: run as the crash-after-commit worker process.
    #[arg(
        long,
        hide = true,
        value_name = "NAME",
        requires = "dir",
        conflicts_with_all = ["scenario", "matrix", "list"]
    )]
    pub worker: Option<String>,
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run the fault matrix against your contract for an HTTP endpoint
    /// (--url) or an MCP server over stdio (--mcp-command); exit 1 when a
    /// guarantee failed.
    Certify(CertifyArgs),
}

/// `agent-effect certify`: the contract, the target and how to look an
/// operation up and count its effects.
#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("target").args(["url", "mcp_command"]).required(true)))]
pub struct CertifyArgs {
    /// HTTP: the endpoint the effect is sent to, the arguments as its JSON body.
    #[arg(long, value_name = "URL")]
    pub url: Option<String>,

    /// HTTP: the effect's method (POST, PUT or DELETE).
    #[arg(long, default_value = "POST", requires = "url")]
    pub method: String,

    /// HTTP: the header the provider key is sent in.
    #[arg(long, default_value = "Idempotency-Key", requires = "url")]
    pub key_header: String,

    /// HTTP: the contract's outcome probe, a GET of this URL template
    /// (`{key}` is the provider key, `{NAME}` an argument): 2xx is
    /// committed, 404 not found.
    #[arg(long, value_name = "URL_TEMPLATE", requires = "url")]
    pub probe_url: Option<String>,

    /// HTTP: a GET of this URL template answers the effects the provider
    /// holds for the arguments (a number, an array, or `count`/`data`).
    /// Count by the arguments, never by key (`{key}` is refused): a
    /// provider that ignores keys files duplicates under other keys.
    #[arg(long, value_name = "URL_TEMPLATE", requires = "url")]
    pub count_url: Option<String>,

    /// MCP: the server to spawn over stdio, as a command line
    /// (shell-style quoting, no shell).
    #[arg(long, value_name = "COMMAND")]
    pub mcp_command: Option<String>,

    /// MCP: the tool that performs the effect; the provider key goes in
    /// the request's `_meta`.
    #[arg(long, value_name = "NAME", requires = "mcp_command")]
    pub tool: Option<String>,

    /// MCP: the contract's outcome probe, a tool called with the same
    /// arguments and `_meta`: a result is committed, an error result not found.
    #[arg(long, value_name = "NAME", requires = "mcp_command")]
    pub probe_tool: Option<String>,

    /// MCP: a tool called with the same arguments that answers how many
    /// effects the server holds for them (as --count-url).
    #[arg(long, value_name = "NAME", requires = "mcp_command")]
    pub count_tool: Option<String>,

    /// The probe's "not found" is authoritative (`not_committed`: a retry
    /// is safe); otherwise it is `unknown`.
    #[arg(long)]
    pub probe_authoritative: bool,

    /// A top-level argument the probe's answer must carry with the
    /// request's value (repeatable): an effect found with another value
    /// (the invoice captured with another amount) is a `conflict`, which
    /// the library quarantines instead of confirming.
    #[arg(long, value_name = "NAME")]
    pub probe_match: Vec<String>,

    /// The arguments of a request that contradicts --arguments under the
    /// same operation (the same invoice, another amount), as JSON with
    /// `{run}` and `{fault}`: the conflicting-provider fault sends it first,
    /// as another client would (without the provider key). Without it that
    /// fault is not run.
    #[arg(long, value_name = "JSON")]
    pub conflicting_arguments: Option<String>,

    /// The contract's name.
    #[arg(long, default_value = "capture_payment", value_name = "NAME")]
    pub contract_name: String,

    /// Each fault's arguments, as JSON; `{run}` is replaced by the run's id
    /// and `{fault}` by the fault's name, so each fault of each run is its
    /// own operation at the provider.
    #[arg(
        long,
        value_name = "JSON",
        default_value = r#"{"invoice_id": "INV-certify-{run}-{fault}", "amount_cents": 1250}"#
    )]
    pub arguments: String,

    /// The run's id, put in the arguments where they say `{run}`: every run
    /// gets fresh operations at the provider, so a rerun against the same
    /// sandbox exercises the faults again (default: random).
    #[arg(long, value_name = "ID")]
    pub run_id: Option<String>,

    /// The contract stores its intent (the arguments, sealed when they hold
    /// secrets), as a contract with `store_intent` does.
    #[arg(long)]
    pub store_intent: bool,

    /// A JSON Pointer of a secret argument, redacted from what the ledger
    /// stores (repeatable), as the contract's `redact` paths.
    #[arg(long, value_name = "POINTER")]
    pub redact: Vec<String>,

    /// A file holding the 32-byte key (64 hex digits) that seals stored
    /// intent holding secrets, as the deployment's keyring does.
    #[arg(long, value_name = "FILE")]
    pub sealing_key: Option<PathBuf>,

    /// A file holding the key (64 hex digits) that fingerprints secret
    /// arguments, as the deployment's fingerprint key does.
    #[arg(long, value_name = "FILE")]
    pub fingerprint_key: Option<PathBuf>,

    /// The operation id template (`{NAME}` is an argument).
    #[arg(
        long,
        value_name = "TEMPLATE",
        default_value = "invoice:{invoice_id}:capture"
    )]
    pub operation_id: String,

    /// The provider idempotency key template; without it, no key.
    #[arg(long, value_name = "TEMPLATE")]
    pub key: Option<String>,

    /// The contract claims the provider applies at most one effect per key
    /// (`provider_idempotency_guaranteed`).
    #[arg(long, requires = "key")]
    pub key_guaranteed: bool,

    /// The faults to run, comma-separated (default: all).
    #[arg(long, value_delimiter = ',', value_parser = parse_fault, value_name = "FAULT,...")]
    pub faults: Vec<CertifyFault>,

    /// The caller's deadline in the timeout faults, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "MS")]
    pub deadline_ms: u64,

    /// Output format of the report.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,

    /// Also write the report to FILE; missing directories are created.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

fn parse_fault(name: &str) -> Result<CertifyFault, String> {
    name.parse::<CertifyFault>().map_err(|err| {
        let names: Vec<&str> = CertifyFault::ALL.iter().map(|f| f.name()).collect();
        format!("{err}; the faults are {}", names.join(", "))
    })
}

/// Output format of the matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for a terminal.
    Table,
    /// The JSON matrix report.
    Json,
}

/// The contract variants (see `effect_testkit::scenario::ContractVariant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ContractArg {
    /// A guaranteed idempotent provider key, no probe.
    GuaranteedKey,
    /// An outcome probe, a key without a guarantee.
    ProbeOnly,
    /// A guaranteed key and an outcome probe.
    Both,
    /// Neither probe nor key.
    Neither,
}

impl From<ContractArg> for ContractVariant {
    fn from(arg: ContractArg) -> Self {
        match arg {
            ContractArg::GuaranteedKey => ContractVariant::GuaranteedKey,
            ContractArg::ProbeOnly => ContractVariant::ProbeOnly,
            ContractArg::Both => ContractVariant::Both,
            ContractArg::Neither => ContractVariant::Neither,
        }
    }
}

/// Where the ledger lives.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DbArg {
    /// SQLite files in the run's directory (the embedded default).
    Sqlite,
    /// This SQLite ledger file (the run's further ledgers beside it).
    SqliteFile(PathBuf),
    /// SQLite files in this directory: the deprecated directory form of
    /// `--db`, as `--dir`.
    SqliteIn(PathBuf),
    /// In memory (faster; nothing survives the process).
    Memory,
    /// A PostgreSQL database, by its URL.
    Postgres(String),
}

impl Cli {
    /// The ledger `--db` names (SQLite files in the run's directory without it).
    pub fn db(&self) -> DbArg {
        self.db.clone().unwrap_or(DbArg::Sqlite)
    }
}

/// Reads `--db` with the facade's grammar: a path names the ledger file, as
/// for every binary; an existing directory is the deprecated spelling of
/// `--dir`. The bare words `sqlite` and `memory` are refused with the
/// spelling to use (`memory:`, or no `--db` at all).
pub fn parse_db(text: &str) -> Result<DbArg, String> {
    let deprecated = |new: &str| {
        eprintln!("warning: --db {text} is deprecated; write {new}");
    };
    match text {
        "sqlite" => {
            return Err(
                "--db names a ledger file or URL: leave --db out for SQLite files in the run's directory, or give a path such as ledger.sqlite3".to_owned(),
            );
        }
        "memory" => {
            return Err(format!(
                "--db names a ledger file or URL: write --db {} for an in-memory ledger",
                LedgerUrl::MEMORY
            ));
        }
        _ => {}
    }
    match LedgerUrl::parse(text).map_err(|err| err.to_string())? {
        LedgerUrl::Postgres(url) => Ok(DbArg::Postgres(url)),
        LedgerUrl::Memory => Ok(DbArg::Memory),
        LedgerUrl::Sqlite(path) if path.is_dir() => {
            deprecated(&format!(
                "--dir {0} (--db names the ledger file, as {0}/ledger.sqlite3)",
                path.display()
            ));
            Ok(DbArg::SqliteIn(path))
        }
        LedgerUrl::Sqlite(path) => Ok(DbArg::SqliteFile(path)),
        other => Err(format!("{other} names no ledger agent-effect can use")),
    }
}
