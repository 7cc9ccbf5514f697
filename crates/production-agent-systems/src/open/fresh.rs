//! Throwaway ledgers: new and empty, removed when dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use effect_core::LedgerError;

use super::{Ledger, LedgerUrl, OpenError, OpenOptions, open_url};

/// A new, empty ledger that is removed when this value drops (or by
/// [`remove`](FreshLedger::remove), which says whether that worked): a SQLite
/// file in a new temporary directory, a new schema of a PostgreSQL database
/// (`DROP SCHEMA … CASCADE`), or a memory ledger.
///
/// ```
/// use production_agent_systems::open::{LedgerUrl, OpenOptions, open_fresh};
///
/// let dir = tempfile::tempdir()?;
/// let fresh = open_fresh(&LedgerUrl::Sqlite(dir.path().into()), "trial", OpenOptions::default())?;
/// let file = fresh.location().clone();
/// assert!(fresh.ledger().as_dyn().get("invoice:INV-1:capture")?.is_none());
/// fresh.remove()?;
/// assert!(!file.to_string().is_empty() && std::fs::read_dir(dir.path())?.next().is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct FreshLedger {
    // Declared first: the ledger's handle closes before the cleanup runs.
    ledger: Option<Ledger>,
    location: LedgerUrl,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    Nothing,
    Dir(Option<tempfile::TempDir>),
    #[cfg(feature = "postgres")]
    Schema {
        url: String,
        schema: String,
        done: bool,
    },
}

/// Opens a new, empty ledger where `base` says, named after `prefix`, this
/// process and a counter: `memory:` is a memory ledger; a SQLite path is the
/// directory to make a temporary directory in, holding `{prefix}.sqlite3`; a
/// PostgreSQL URL is the database to create the schema
/// `{prefix}_{pid}_{n}` in (`options`' schema is replaced).
///
/// # Errors
///
/// As [`open_url`]; [`OpenError::Fresh`] when the temporary directory cannot
/// be made.
pub fn open_fresh(
    base: &LedgerUrl,
    prefix: &str,
    options: OpenOptions,
) -> Result<FreshLedger, OpenError> {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    match base {
        LedgerUrl::Memory => Ok(FreshLedger {
            ledger: Some(open_url(base, options)?),
            location: LedgerUrl::Memory,
            cleanup: Cleanup::Nothing,
        }),
        LedgerUrl::Sqlite(parent) => {
            let dir = tempfile::Builder::new()
                .prefix(&format!("{prefix}-"))
                .tempdir_in(parent)
                .map_err(|source| OpenError::Fresh {
                    doing: format!("making a temporary directory in {}", parent.display()),
                    source,
                })?;
            let location = LedgerUrl::Sqlite(dir.path().join(format!("{prefix}.sqlite3")));
            Ok(FreshLedger {
                ledger: Some(open_url(&location, options)?),
                location,
                cleanup: Cleanup::Dir(Some(dir)),
            })
        }
        LedgerUrl::Postgres(url) => {
            let schema = format!("{prefix}_{}_{n}", std::process::id());
            #[cfg(feature = "postgres")]
            let cleanup = Cleanup::Schema {
                url: url.clone(),
                schema: schema.clone(),
                done: false,
            };
            #[cfg(not(feature = "postgres"))]
            let cleanup = Cleanup::Nothing;
            // Made before the schema, so a failed open still drops it.
            let mut fresh = FreshLedger {
                ledger: None,
                location: LedgerUrl::Postgres(url.clone()),
                cleanup,
            };
            fresh.ledger = Some(open_url(&fresh.location, options.schema(schema))?);
            Ok(fresh)
        }
    }
}

impl FreshLedger {
    /// The ledger.
    pub fn ledger(&self) -> &Ledger {
        self.ledger
            .as_ref()
            .expect("a fresh ledger is opened before it is handed out")
    }

    /// Where another process opens it: the SQLite file, or the database
    /// URL (with [`schema`](FreshLedger::schema)); `memory:` is this
    /// process's only.
    pub fn location(&self) -> &LedgerUrl {
        &self.location
    }

    /// The PostgreSQL schema, for a ledger in one.
    pub fn schema(&self) -> Option<&str> {
        match &self.cleanup {
            #[cfg(feature = "postgres")]
            Cleanup::Schema { schema, .. } => Some(schema),
            _ => None,
        }
    }

    /// Closes the ledger and removes its file or schema now.
    ///
    /// # Errors
    ///
    /// [`LedgerError`] when the file or schema could not be removed.
    pub fn remove(mut self) -> Result<(), LedgerError> {
        self.clean()
    }

    fn clean(&mut self) -> Result<(), LedgerError> {
        drop(self.ledger.take());
        match &mut self.cleanup {
            Cleanup::Nothing => Ok(()),
            Cleanup::Dir(dir) => match dir.take() {
                Some(dir) => {
                    let path = dir.path().to_owned();
                    dir.close().map_err(|err| removing(path, err))
                }
                None => Ok(()),
            },
            #[cfg(feature = "postgres")]
            Cleanup::Schema { url, schema, done } => {
                if *done {
                    return Ok(());
                }
                *done = true;
                let mut client = effect_ledger_postgres::connect_client(url, &Default::default())?;
                client
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                    .map_err(|err| {
                        LedgerError::unavailable(format!("dropping the schema {schema}"), {
                            let boxed: effect_core::BoxError = Box::new(err);
                            Some(boxed)
                        })
                    })
            }
        }
    }
}

fn removing(path: PathBuf, err: std::io::Error) -> LedgerError {
    LedgerError::unavailable(
        format!("removing the fresh ledger's directory {}", path.display()),
        Some(Box::new(err) as effect_core::BoxError),
    )
}

/// Best effort: a file or schema left behind is named after its prefix and
/// process; call [`FreshLedger::remove`] to learn whether it went.
impl Drop for FreshLedger {
    fn drop(&mut self) {
        let _ = self.clean();
    }
}
