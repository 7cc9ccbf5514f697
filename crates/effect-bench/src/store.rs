//! Where a workload's ledger lives: a fresh SQLite file in a temporary
//! directory, or a fresh schema in a PostgreSQL database.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use effect_core::EffectLedger;
use effect_ledger_sqlite::{Durability, SqliteOptions};
use production_agent_systems::open::{LedgerUrl, OpenOptions, open_url};
use tempfile::TempDir;

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

    fn options(self, durability: Durability) -> SqliteOptions {
        let options = SqliteOptions::default()
            .durability(durability)
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
    Sqlite(Tuning),
    #[cfg(feature = "postgres")]
    Postgres {
        url: String,
    },
}

impl Store {
    pub(crate) fn parse(text: &str, tuning: Tuning) -> anyhow::Result<Store> {
        if text == "sqlite" {
            return Ok(Store::Sqlite(tuning));
        }
        match LedgerUrl::parse(text) {
            #[cfg(feature = "postgres")]
            Ok(LedgerUrl::Postgres(url)) => Ok(Store::Postgres { url }),
            #[cfg(not(feature = "postgres"))]
            Ok(LedgerUrl::Postgres(_)) => {
                bail!("this build has no postgres support: rebuild with --features postgres")
            }
            _ => bail!(
                "unknown store {text:?}: expected sqlite (a fresh file per workload) or a postgres:// URL"
            ),
        }
    }

    /// `sqlite`, `postgres`, or `sqlite` with the optimizations switched off.
    pub(crate) fn name(&self) -> String {
        match self {
            Store::Sqlite(tuning) if *tuning != Tuning::DEFAULT => {
                let off: Vec<String> = tuning
                    .to_args()
                    .iter()
                    .map(|flag| flag.trim_start_matches("--").to_owned())
                    .collect();
                format!("sqlite:{}", off.join(","))
            }
            Store::Sqlite(_) => "sqlite".to_owned(),
            #[cfg(feature = "postgres")]
            Store::Postgres { .. } => "postgres".to_owned(),
        }
    }

    pub(crate) fn is_postgres(&self) -> bool {
        !matches!(self, Store::Sqlite(_))
    }

    /// A new, empty ledger. `durability` applies to SQLite only (a PostgreSQL
    /// commit is as durable as the server is configured to make it).
    pub(crate) fn fresh(&self, durability: Durability) -> anyhow::Result<Fresh> {
        match self {
            Store::Sqlite(tuning) => {
                let dir = tempfile::Builder::new()
                    .prefix("effect-bench-")
                    .tempdir()
                    .context("creating a temporary directory")?;
                let location = Location::Sqlite {
                    path: dir.path().join("ledger.sqlite3"),
                    durability,
                    tuning: *tuning,
                };
                Ok(Fresh {
                    ledger: location.open()?,
                    location,
                    _cleanup: Cleanup::Dir(dir),
                })
            }
            #[cfg(feature = "postgres")]
            Store::Postgres { url } => {
                use std::sync::atomic::{AtomicU64, Ordering};
                static SCHEMAS: AtomicU64 = AtomicU64::new(0);
                let schema = format!(
                    "effect_bench_{}_{}",
                    std::process::id(),
                    SCHEMAS.fetch_add(1, Ordering::Relaxed)
                );
                let location = Location::Postgres {
                    url: url.clone(),
                    schema: schema.clone(),
                };
                let cleanup = Cleanup::Schema {
                    url: url.clone(),
                    schema,
                };
                Ok(Fresh {
                    ledger: location.open()?,
                    location,
                    _cleanup: cleanup,
                })
            }
        }
    }
}

/// A workload's ledger; its file or schema is removed when dropped.
#[derive(Debug)]
pub(crate) struct Fresh {
    // Declared first: the ledger's connections close before the cleanup runs.
    pub(crate) ledger: Arc<dyn EffectLedger>,
    pub(crate) location: Location,
    _cleanup: Cleanup,
}

/// How another process opens the same ledger.
#[derive(Debug, Clone)]
pub(crate) enum Location {
    Sqlite {
        path: PathBuf,
        durability: Durability,
        tuning: Tuning,
    },
    #[cfg(feature = "postgres")]
    Postgres { url: String, schema: String },
}

impl Location {
    pub(crate) fn open(&self) -> anyhow::Result<Arc<dyn EffectLedger>> {
        match self {
            Location::Sqlite {
                path,
                durability,
                tuning,
            } => {
                let options = OpenOptions::default().sqlite(tuning.options(*durability));
                let ledger = open_url(&LedgerUrl::Sqlite(path.clone()), options)
                    .with_context(|| format!("opening the ledger {}", path.display()))?;
                Ok(ledger.into_dyn())
            }
            #[cfg(feature = "postgres")]
            Location::Postgres { url, schema } => {
                use effect_ledger_postgres::PostgresOptions;
                // One connection per thread of W4 and W5, so none waits for the pool.
                let options = OpenOptions::default()
                    .postgres(PostgresOptions::default().schema(schema).pool_size(16));
                let ledger = open_url(&LedgerUrl::Postgres(url.clone()), options)
                    .with_context(|| format!("connecting to postgres schema {schema}"))?;
                Ok(ledger.into_dyn())
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
                        Durability::Normal => "normal".into(),
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

#[derive(Debug)]
enum Cleanup {
    Dir(#[allow(dead_code, reason = "held for its Drop")] TempDir),
    #[cfg(feature = "postgres")]
    Schema {
        url: String,
        schema: String,
    },
}

#[cfg(feature = "postgres")]
impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Cleanup::Schema { url, schema } = self {
            let dropped = effect_ledger_postgres::connect_client(url, &Default::default())
                .map_err(|err| err.to_string())
                .and_then(|mut client| {
                    client
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .map_err(|err| err.to_string())
                });
            if let Err(err) = dropped {
                eprintln!("effect-bench: could not drop the schema {schema}: {err}");
            }
        }
    }
}
