//! What each mode does; output goes to an injected writer.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, anyhow};
use effect_testkit::matrix::Matrix;
use effect_testkit::scenario::crash::{self, CrashFiles};
use effect_testkit::scenario::{ContractVariant, FaultPoint, Scenario, ScenarioReport};

use crate::cli::{Cli, Command as Subcommand, DbArg, Format};
use crate::output::{CliError, Outcome, emit_to};
use crate::store::{
    Postgres, RunDir, first_ledger_file, ledger_factory, open_sqlite, prepare_ledger_file,
};

/// Runs the mode `cli` selects, writing its output to `out`.
///
/// # Errors
///
/// [`CliError`] with exit code 2 for an unknown scenario name, 3 when the run
/// or writing its output failed.
pub fn run(cli: &Cli, out: &mut dyn Write) -> Result<Outcome, CliError> {
    if let Some(Subcommand::Certify(args)) = &cli.command {
        return crate::certify::run(args, out);
    }
    if let Some(worker) = &cli.worker {
        return run_worker(cli, worker).map_err(CliError::failed);
    }
    if cli.list {
        return list(out).map_err(CliError::failed);
    }
    if cli.matrix {
        if matches!(cli.db(), DbArg::Postgres(_)) {
            return Err(CliError::usage(anyhow!(
                "--matrix runs on SQLite or --db memory:; run one --scenario at a time on PostgreSQL"
            )));
        }
        return matrix(cli, out).map_err(CliError::failed);
    }
    // With no mode, the main job: as the Python CLI does.
    let name = cli.scenario.as_deref().unwrap_or(DEFAULT_SCENARIO);
    let fault = name
        .parse::<FaultPoint>()
        .map_err(|e| CliError::usage(anyhow!(e)))?;
    scenario(cli, fault, out).map_err(CliError::failed)
}

/// The scenario `agent-effect` runs without arguments.
pub const DEFAULT_SCENARIO: &str = "after-commit-before-ack";

fn list(out: &mut dyn Write) -> anyhow::Result<Outcome> {
    for fault in FaultPoint::ALL {
        writeln!(out, "{:<24} {}", fault.as_str(), fault.description())
            .context("could not write the list")?;
    }
    Ok(Outcome::Passed)
}

fn scenario(cli: &Cli, fault: FaultPoint, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let dir = RunDir::new(run_dir(cli)?)?;
    prepare_ledger_file(&cli.db())?;
    let variant = ContractVariant::from(cli.contract);
    let db = match cli.db() {
        DbArg::Postgres(url) => Some(Postgres::new(&url, None)),
        _ => None,
    };
    let durable = cli.db() != DbArg::Memory;
    let report = if fault == FaultPoint::CrashAfterCommit && durable {
        let ledger_file = first_ledger_file(&cli.db(), dir.path());
        crash_in_a_child_process(dir.path(), &ledger_file, variant, db.as_ref())?
    } else {
        Scenario::payment(fault, variant)
            .ledger(ledger_factory(&cli.db(), dir.path(), db.clone()))
            .run()
            .with_context(|| format!("could not run scenario {}", fault.as_str()))?
    };
    let mut json = serde_json::to_string_pretty(&report).context("could not encode the report")?;
    json.push('\n');
    emit(cli, &json, out)?;
    Ok(if report.passed {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// The parent side of crash-after-commit: this binary, re-executed as the
/// hidden worker, aborts right after the provider committed.
fn crash_in_a_child_process(
    dir: &Path,
    ledger_file: &Path,
    variant: ContractVariant,
    db: Option<&Postgres>,
) -> anyhow::Result<ScenarioReport> {
    let mut files = CrashFiles::in_dir(dir);
    // Absolute, as the run's directory: the worker runs in that directory.
    files.ledger = std::path::absolute(ledger_file)
        .with_context(|| format!("could not resolve {}", ledger_file.display()))?;
    let exe = std::env::current_exe().context("could not locate this executable")?;
    let mut worker = Command::new(exe);
    // The worker runs in the run's directory, so whatever its abort leaves
    // behind (a core file, where the system writes them) stays there too.
    worker
        .current_dir(dir)
        .arg("--worker")
        .arg(FaultPoint::CrashAfterCommit.as_str())
        .arg("--contract")
        .arg(contract_name(variant))
        .arg("--dir")
        .arg(dir);
    let ledger_path = files.ledger.clone();
    // Parent and worker share one schema; the parent drops it at the end.
    // It exists before the worker opens it.
    let schema = match db {
        Some(db) => {
            let (_, schema) = db
                .create()
                .context("could not open the PostgreSQL ledger")?;
            worker
                .arg("--db")
                .arg(db.url())
                .arg("--schema")
                .arg(&schema);
            Some(schema)
        }
        None => {
            worker.arg("--db").arg(&files.ledger);
            None
        }
    };
    let open_ledger = || match (db, &schema) {
        (Some(db), Some(schema)) => db.open(schema),
        _ => open_sqlite(&ledger_path),
    };
    let run = crash::run_parent(&mut worker, &open_ledger, &files, variant)
        .context("could not run scenario crash-after-commit")?;
    eprintln!(
        "agent-effect: worker process died after the provider commit ({}); reconciled after its lease expired",
        run.worker_status
    );
    Ok(run.report)
}

/// The worker side: only returns when it failed to reach the crash point.
fn run_worker(cli: &Cli, name: &str) -> anyhow::Result<Outcome> {
    let fault: FaultPoint = name.parse()?;
    anyhow::ensure!(
        fault == FaultPoint::CrashAfterCommit,
        "no worker mode for scenario {name}"
    );
    let dir = cli.dir.as_deref().context("the worker needs --dir")?;
    let mut files = CrashFiles::in_dir(dir);
    if let DbArg::SqliteFile(file) = cli.db() {
        files.ledger = file;
    }
    let ledger = match (&cli.db(), &cli.schema) {
        (DbArg::Postgres(url), Some(schema)) => {
            let db = Postgres::new(url, Some(schema.clone()));
            ledger_factory(&cli.db(), dir, Some(db))(std::sync::Arc::new(effect_core::SystemClock))
                .context("could not open the PostgreSQL ledger")?
        }
        _ => open_sqlite(&files.ledger)
            .with_context(|| format!("could not open ledger {}", files.ledger.display()))?,
    };
    crash::run_worker(ledger, &files, cli.contract.into()).context("crash worker failed")?;
    Err(anyhow!("crash worker returned without crashing"))
}

/// The directory the run keeps its files in: `--dir`, or the directory the
/// deprecated form of `--db` names (they must agree when both are given).
fn run_dir(cli: &Cli) -> anyhow::Result<Option<&Path>> {
    let from_db = match &cli.db {
        Some(DbArg::SqliteIn(path)) => Some(path.as_path()),
        _ => None,
    };
    match (cli.dir.as_deref(), from_db) {
        (Some(dir), Some(db)) if dir != db => Err(anyhow!(
            "--db {} and --dir {} name two directories; give one",
            db.display(),
            dir.display()
        )),
        (dir, db) => Ok(dir.or(db)),
    }
}

fn matrix(cli: &Cli, out: &mut dyn Write) -> anyhow::Result<Outcome> {
    let dir = RunDir::new(run_dir(cli)?)?;
    prepare_ledger_file(&cli.db())?;
    let report = Matrix::new()
        .ledger(ledger_factory(&cli.db(), dir.path(), None))
        .run()
        .context("could not run the fault matrix")?;
    let text = match cli.format {
        Format::Table => report.to_table(),
        Format::Json => {
            let mut json =
                serde_json::to_string_pretty(&report).context("could not encode the report")?;
            json.push('\n');
            json
        }
    };
    emit(cli, &text, out)?;
    Ok(if report.guarantee_kept {
        Outcome::Passed
    } else {
        Outcome::Failed
    })
}

/// Prints `text` and, with `--output`, writes it to the file (creating its directory).
fn emit(cli: &Cli, text: &str, out: &mut dyn Write) -> anyhow::Result<()> {
    emit_to(cli.output.as_deref(), text, out)
}

fn contract_name(variant: ContractVariant) -> &'static str {
    variant.as_str()
}
