//! The store: SQLite files in the run's directory, or memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use effect_core::{Clock, EffectLedger, LedgerError, MemoryLedger};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use tempfile::TempDir;

use crate::cli::LedgerArg;

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

/// A factory of fresh ledgers on the scenario's clock: a new SQLite file per
/// call (`ledger.sqlite3`, then `ledger-2.sqlite3`, ...), or a memory ledger.
pub(crate) fn ledger_factory(
    kind: LedgerArg,
    dir: &Path,
) -> impl Fn(Arc<dyn Clock>) -> Result<Arc<dyn EffectLedger>, LedgerError> + Send + Sync + 'static {
    let dir = dir.to_path_buf();
    let count = AtomicUsize::new(0);
    move |clock| match kind {
        LedgerArg::Memory => Ok(Arc::new(MemoryLedger::with_clock(clock)) as Arc<dyn EffectLedger>),
        LedgerArg::Sqlite => {
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            let name = if n == 1 {
                "ledger.sqlite3".to_owned()
            } else {
                format!("ledger-{n}.sqlite3")
            };
            let ledger = SqliteLedger::open(dir.join(name), SqliteOptions::default().clock(clock))?;
            Ok(Arc::new(ledger) as Arc<dyn EffectLedger>)
        }
    }
}

/// Opens the SQLite ledger at `path` on the system clock.
pub(crate) fn open_sqlite(path: &Path) -> Result<Arc<dyn EffectLedger>, LedgerError> {
    Ok(Arc::new(SqliteLedger::open(
        path,
        SqliteOptions::default(),
    )?))
}
