//! The store: SQLite files in the run's directory, or memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use effect_core::{Clock, EffectLedger, LedgerError, MemoryLedger};
use effect_ledger_sqlite::SqliteOptions;
use production_agent_systems::open::{
    FreshLedger, LedgerUrl, OpenOptions, open, open_fresh, open_url,
};
use tempfile::TempDir;

use crate::cli::DbArg;

/// The directory a run keeps its files in: temporary (deleted at the end) or
/// the user's `--dir`.
#[derive(Debug)]
pub(crate) enum RunDir {
    Temporary(TempDir),
    Kept(PathBuf),
}

impl RunDir {
    pub(crate) fn new(dir: Option<&Path>) -> anyhow::Result<Self> {
        match dir {
            None => Ok(RunDir::Temporary(
                tempfile::Builder::new()
                    .prefix("agent-effect-")
                    .tempdir()
                    .context("could not create a temporary directory")?,
            )),
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("could not create directory {}", dir.display()))?;
                let taken = std::fs::read_dir(dir)
                    .with_context(|| format!("could not read directory {}", dir.display()))?
                    .filter_map(Result::ok)
                    .any(|entry| entry.file_name().to_string_lossy().starts_with("ledger"));
                if taken {
                    bail!(
                        "{} already holds a ledger; use a fresh directory",
                        dir.display()
                    );
                }
                // Absolute, so a worker process started elsewhere finds it.
                let dir = std::path::absolute(dir)
                    .with_context(|| format!("could not resolve directory {}", dir.display()))?;
                Ok(RunDir::Kept(dir))
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            RunDir::Temporary(dir) => dir.path(),
            RunDir::Kept(dir) => dir,
        }
    }
}

/// The first SQLite ledger file of a run: `--db FILE`, or `ledger.sqlite3`
/// in the run's directory.
pub(crate) fn first_ledger_file(kind: &DbArg, dir: &Path) -> PathBuf {
    match kind {
        DbArg::SqliteFile(file) => file.clone(),
        _ => dir.join("ledger.sqlite3"),
    }
}

/// The `n`th ledger file of a run whose first is `first` (`n` from 1):
/// `ledger.sqlite3`, then `ledger-2.sqlite3`, ...
pub(crate) fn nth_ledger_file(first: &Path, n: usize) -> PathBuf {
    if n <= 1 {
        return first.to_path_buf();
    }
    let stem = first
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match first.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    first.with_file_name(name)
}

/// Refuses a `--db FILE` that exists (a scenario starts on a fresh ledger)
/// and creates its missing parent directories.
pub(crate) fn prepare_ledger_file(kind: &DbArg) -> anyhow::Result<()> {
    let DbArg::SqliteFile(file) = kind else {
        return Ok(());
    };
    if file.exists() {
        bail!(
            "{} already exists; name a new ledger file (a run starts on a fresh ledger)",
            file.display()
        );
    }
    if let Some(parent) = file.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("could not create directory {}", parent.display()))?;
    }
    Ok(())
}

/// A factory of fresh ledgers on the scenario's clock: a new SQLite file per
/// call (see [`nth_ledger_file`]), a memory ledger, or (with `db`) a new
/// schema of a PostgreSQL database per call, on its clock.
pub(crate) fn ledger_factory(
    kind: &DbArg,
    dir: &Path,
    db: Option<Postgres>,
) -> impl Fn(Arc<dyn Clock>) -> Result<Arc<dyn EffectLedger>, LedgerError> + Send + Sync + 'static {
    let memory = *kind == DbArg::Memory;
    let first = first_ledger_file(kind, dir);
    let count = AtomicUsize::new(0);
    move |clock| match &db {
        Some(db) => db.open_fresh(),
        None if memory => Ok(Arc::new(MemoryLedger::with_clock(clock)) as Arc<dyn EffectLedger>),
        None => {
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            open_sqlite_with(&nth_ledger_file(&first, n), clock)
        }
    }
}

/// The PostgreSQL database of `--db`: the schemas a run creates (the
/// facade's fresh ledgers), dropped when the last handle goes away.
#[derive(Debug, Clone)]
pub(crate) struct Postgres {
    inner: Arc<PostgresRun>,
}

#[derive(Debug)]
struct PostgresRun {
    url: String,
    created: std::sync::Mutex<Vec<FreshLedger>>,
    /// A schema shared with another process (the crash worker): never dropped here.
    shared: Option<String>,
}

impl Postgres {
    /// The database at `url`. With `shared`, every ledger is that one schema
    /// (the crash worker opens its parent's).
    pub(crate) fn new(url: &str, shared: Option<String>) -> Self {
        Postgres {
            inner: Arc::new(PostgresRun {
                url: url.to_owned(),
                created: std::sync::Mutex::new(Vec::new()),
                shared,
            }),
        }
    }

    /// The database URL.
    pub(crate) fn url(&self) -> &str {
        &self.inner.url
    }

    /// A new schema, dropped at the end of the run, and its name.
    pub(crate) fn create(&self) -> Result<(Arc<dyn EffectLedger>, String), LedgerError> {
        let base = LedgerUrl::Postgres(self.inner.url.clone());
        let fresh = open_fresh(&base, "agent_effect", OpenOptions::default())?;
        let ledger = fresh.ledger().clone().into_dyn();
        let schema = fresh.schema().unwrap_or_default().to_owned();
        self.inner
            .created
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(fresh);
        Ok((ledger, schema))
    }

    /// Opens `schema`, which another handle created.
    pub(crate) fn open(&self, schema: &str) -> Result<Arc<dyn EffectLedger>, LedgerError> {
        Ok(open(&self.inner.url, OpenOptions::default().schema(schema))?.into_dyn())
    }

    fn open_fresh(&self) -> Result<Arc<dyn EffectLedger>, LedgerError> {
        match &self.inner.shared {
            Some(schema) => self.open(schema),
            None => Ok(self.create()?.0),
        }
    }
}

impl Drop for PostgresRun {
    fn drop(&mut self) {
        let created = std::mem::take(
            self.created
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        for fresh in created {
            let schema = fresh.schema().unwrap_or_default().to_owned();
            // A schema left behind is named after this process.
            if let Err(err) = fresh.remove() {
                eprintln!("agent-effect: could not drop schema {schema}: {err:#}");
            }
        }
    }
}

/// Opens the SQLite ledger at `path` on the system clock.
pub(crate) fn open_sqlite(path: &Path) -> Result<Arc<dyn EffectLedger>, LedgerError> {
    open_sqlite_with(path, Arc::new(effect_core::SystemClock))
}

fn open_sqlite_with(
    path: &Path,
    clock: Arc<dyn Clock>,
) -> Result<Arc<dyn EffectLedger>, LedgerError> {
    let options = OpenOptions::default().sqlite(sqlite_options()).clock(clock);
    Ok(open_url(&LedgerUrl::Sqlite(path.to_owned()), options)?.into_dyn())
}

/// Scenario ledgers: the crash scenario's worker holds a lease of a few
/// hundred milliseconds, which a renewal waiting SQLite's default 5 s busy
/// timeout could outlive, so the executor would refuse it. One process
/// writes a scenario's file at a time: a short wait is enough.
fn sqlite_options() -> SqliteOptions {
    SqliteOptions::default().busy_timeout(std::time::Duration::from_millis(50))
}
