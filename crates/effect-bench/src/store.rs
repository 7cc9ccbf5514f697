//! Where a workload's ledger lives: a fresh SQLite file in a temporary
//! directory, or a fresh schema in a PostgreSQL database.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use effect_core::EffectLedger;
use effect_ledger_sqlite::{SqliteOptions, Synchronous};
use production_agent_systems::open::{
    FreshLedger, Ledger, LedgerUrl, OpenOptions, open_fresh, open_url,
};

/// Switches of the SQLite store's optimizations, to measure what each is worth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tuning {
    pub(crate) group_commit: bool,
    pub(crate) confirmed_cache: bool,
}

impl Tuning {
    /// The ledger's defaults.
    pub(crate) const DEFAULT: Tuning = Tuning {
        group_commit: true,
        confirmed_cache: true,
    };

    fn options(self, durability: Synchronous) -> SqliteOptions {
        let options = SqliteOptions::default()
            .synchronous(durability)
            .group_commit(self.group_commit);
        if self.confirmed_cache {
            options
        } else {
            options.confirmed_cache(0)
        }
    }

    /// The command-line flags that select this tuning.
    pub(crate) fn to_args(self) -> Vec<String> {
        let mut args = Vec::new();
        if !self.group_commit {
            args.push("--no-group-commit".to_owned());
        }
        if !self.confirmed_cache {
            args.push("--no-confirmed-cache".to_owned());
        }
        args
    }
}

/// The store named by `--db`.
#[derive(Debug, Clone)]
pub(crate) enum Store {
    /// Fresh SQLite files, in temporary directories made in the directory
    /// given (the system's temporary directory without one).
    Sqlite(Tuning, Option<PathBuf>),
    #[cfg(feature = "postgres")]
    Postgres { url: String },
}

impl Store {
    /// `--db` as every binary reads it: a path (the directory to make the
    /// fresh SQLite files in) or a postgres:// URL; `sqlite` is the system's
    /// temporary directory.
    pub(crate) fn parse(text: &str, tuning: Tuning) -> anyhow::Result<Store> {
        if text == "sqlite" {
            return Ok(Store::Sqlite(tuning, None));
        }
        match LedgerUrl::parse(text)? {
            LedgerUrl::Sqlite(dir) => Ok(Store::Sqlite(tuning, Some(dir))),
            #[cfg(feature = "postgres")]
            LedgerUrl::Postgres(url) => Ok(Store::Postgres { url }),
            #[cfg(not(feature = "postgres"))]
            LedgerUrl::Postgres(_) => {
                bail!("this build has no postgres support: rebuild with --features postgres")
            }
            _ => bail!(
                "{text} is not a store to measure: expected a directory, sqlite or a postgres:// URL"
            ),
        }
    }

    /// `sqlite`, `postgres`, or `sqlite` with the optimizations switched off.
    pub(crate) fn name(&self) -> String {
        match self {
            Store::Sqlite(tuning, _) if *tuning != Tuning::DEFAULT => {
                let off: Vec<String> = tuning
                    .to_args()
                    .iter()
                    .map(|flag| flag.trim_start_matches("--").to_owned())
                    .collect();
                format!("sqlite:{}", off.join(","))
            }
            Store::Sqlite(..) => "sqlite".to_owned(),
            #[cfg(feature = "postgres")]
            Store::Postgres { .. } => "postgres".to_owned(),
        }
    }

    pub(crate) fn is_postgres(&self) -> bool {
        !matches!(self, Store::Sqlite(..))
    }

    /// A new, empty ledger. On PostgreSQL, `Synchronous::Normal` (W2) makes
    /// every commit asynchronous (`PostgresOptions::durable_commits(false)`:
    /// it survives a crash of this process, not of the server's machine, as
    /// SQLite's `NORMAL` survives a crash of the process, not a power loss);
    /// any other durability waits for every WAL flush.
    pub(crate) fn fresh(&self, durability: Synchronous) -> anyhow::Result<Fresh> {
        match self {
            Store::Sqlite(tuning, dir) => {
                let parent = dir.clone().unwrap_or_else(std::env::temp_dir);
                let options = OpenOptions::default().sqlite(tuning.options(durability));
                let fresh = open_fresh(&LedgerUrl::Sqlite(parent), "effect-bench", options)
                    .context("creating a fresh SQLite ledger")?;
                let LedgerUrl::Sqlite(path) = fresh.location().clone() else {
                    bail!("a fresh SQLite ledger is a file");
                };
                let location = Location::Sqlite {
                    path,
                    durability,
                    tuning: *tuning,
                };
                Ok(Fresh {
                    ledger: fresh.ledger().clone().into_dyn(),
                    location,
                    _fresh: fresh,
                })
            }
            #[cfg(feature = "postgres")]
            Store::Postgres { url } => {
                use effect_ledger_postgres::PostgresOptions;
                // One connection per thread of W4 and W5, so none waits for the pool.
                let options = OpenOptions::default().postgres(
                    PostgresOptions::default()
                        .pool_size(16)
                        .durable_commits(durability != Synchronous::Normal),
                );
                let fresh = open_fresh(&LedgerUrl::Postgres(url.clone()), "effect_bench", options)
                    .context("creating a fresh PostgreSQL schema")?;
                let location = Location::Postgres {
                    url: url.clone(),
                    schema: fresh.schema().unwrap_or_default().to_owned(),
                };
                Ok(Fresh {
                    ledger: fresh.ledger().clone().into_dyn(),
                    location,
                    _fresh: fresh,
                })
            }
        }
    }
}

/// A workload's ledger; its file or schema is removed when dropped.
#[derive(Debug)]
pub(crate) struct Fresh {
    // Declared first: this handle closes before the fresh ledger is removed.
    pub(crate) ledger: Arc<dyn EffectLedger>,
    pub(crate) location: Location,
    _fresh: FreshLedger,
}

/// How another process opens the same ledger.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    Sqlite {
        path: PathBuf,
        durability: Synchronous,
        tuning: Tuning,
    },
    #[cfg(feature = "postgres")]
    Postgres { url: String, schema: String },
}

impl Location {
    pub(crate) fn open(&self) -> anyhow::Result<Arc<dyn EffectLedger>> {
        Ok(self.open_ledger()?.into_dyn())
    }

    /// Another handle of the ledger, as the facade opens it (it prunes too).
    pub(crate) fn open_ledger(&self) -> anyhow::Result<Ledger> {
        match self {
            Location::Sqlite {
                path,
                durability,
                tuning,
            } => {
                let options = OpenOptions::default().sqlite(tuning.options(*durability));
                open_url(&LedgerUrl::Sqlite(path.clone()), options)
                    .with_context(|| format!("opening the ledger {}", path.display()))
            }
            #[cfg(feature = "postgres")]
            Location::Postgres { url, schema } => {
                use effect_ledger_postgres::PostgresOptions;
                // One connection per thread of W4 and W5, so none waits for the pool.
                let options = OpenOptions::default()
                    .postgres(PostgresOptions::default().schema(schema).pool_size(16));
                open_url(&LedgerUrl::Postgres(url.clone()), options)
                    .with_context(|| format!("connecting to postgres schema {schema}"))
            }
        }
    }

    /// The worker arguments that name this ledger.
    pub(crate) fn to_args(&self) -> Vec<String> {
        match self {
            Location::Sqlite {
                path,
                durability,
                tuning,
            } => {
                let mut args = vec![
                    "--sqlite".into(),
                    path.display().to_string(),
                    "--durability".into(),
                    match durability {
                        Synchronous::Normal => "normal".into(),
                        _ => "full".into(),
                    },
                ];
                args.extend(tuning.to_args());
                args
            }
            #[cfg(feature = "postgres")]
            Location::Postgres { url, schema } => vec![
                "--postgres".into(),
                url.clone(),
                "--schema".into(),
                schema.clone(),
            ],
        }
    }
}
