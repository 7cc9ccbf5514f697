//! The command line.

use std::path::PathBuf;

use clap::{ArgGroup, Parser, ValueEnum};
use effect_testkit::scenario::ContractVariant;
use production_agent_systems::open::LedgerUrl;

/// Run fault scenarios against the recovery executor and count what the
/// provider committed.
#[derive(Debug, Clone, Parser)]
#[command(name = "agent-effect", version)]
#[command(group(
    ArgGroup::new("mode").args(["scenario", "matrix", "list"]),
))]
#[command(
    after_help = "Without --scenario, --matrix or --list, runs the after-commit-before-ack scenario."
)]
pub struct Cli {
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

    /// The ledger, as every binary names one: a path (the directory to keep
    /// the run's SQLite ledger files in, as --dir), `memory:` (throwaway), or
    /// a PostgreSQL database as a postgres://... URL (--scenario only: each
    /// run uses fresh schemas, dropped when it ends, and leases are measured
    /// on the database's clock). Without it, SQLite files in a temporary
    /// directory. `sqlite` and `memory` still work, deprecated.
    #[arg(long, alias = "ledger", value_name = "PATH|memory:|URL", value_parser = parse_db)]
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
    /// SQLite files in this directory (a path, as `--dir`).
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

/// Reads `--db` with the facade's grammar; `sqlite` and `memory` are the
/// deprecated spellings of the default and of `memory:`.
pub fn parse_db(text: &str) -> Result<DbArg, String> {
    let deprecated = |new: &str| {
        eprintln!("warning: --db {text} is deprecated; write {new}");
    };
    match text {
        "sqlite" => {
            deprecated("a directory path, or leave --db out");
            return Ok(DbArg::Sqlite);
        }
        "memory" => {
            deprecated(LedgerUrl::MEMORY);
            return Ok(DbArg::Memory);
        }
        _ => {}
    }
    match LedgerUrl::parse(text).map_err(|err| err.to_string())? {
        LedgerUrl::Postgres(url) => Ok(DbArg::Postgres(url)),
        LedgerUrl::Memory => Ok(DbArg::Memory),
        LedgerUrl::Sqlite(path) => Ok(DbArg::SqliteIn(path)),
        other => Err(format!("{other} names no ledger agent-effect can use")),
    }
}
