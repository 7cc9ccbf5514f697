//! [`SqliteCheckpointStore`]: run checkpoints in a SQLite file, so a run
//! survives a process restart. It stores checkpoints only; effect outcomes
//! live in the effect ledger, which is a different store.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, params};

use crate::checkpoint::Checkpoint;
use crate::error::StoreError;
use crate::store::CheckpointStore;

/// Durable checkpoints in one SQLite table, `agent_run_checkpoints`, one row
/// per run, replaced in a transaction on every save.
///
/// ```
/// use agent_runtime::checkpoint::Checkpoint;
/// use agent_runtime::{CheckpointStore, SqliteCheckpointStore, Task};
/// use serde_json::json;
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("runs.sqlite3");
/// let store = SqliteCheckpointStore::open(&path)?;
/// store.save(&Checkpoint::new(Task::new("run-1", json!("hello"))))?;
/// drop(store);
/// let reopened = SqliteCheckpointStore::open(&path)?;
/// assert_eq!(reopened.load("run-1")?.map(|c| c.task.input), Some(json!("hello")));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct SqliteCheckpointStore {
    path: PathBuf,
    connection: Mutex<Connection>,
}

impl SqliteCheckpointStore {
    /// Opens (creating if needed) the store at `path`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when the file cannot be opened or initialized.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let connection = Connection::open(&path)
            .map_err(|e| StoreError::backend(format!("open {}", path.display()), e))?;
        connection
            .execute_batch(
                "PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = FULL;
                 PRAGMA busy_timeout = 5000;
                 CREATE TABLE IF NOT EXISTS agent_run_checkpoints (
                     run_id TEXT PRIMARY KEY NOT NULL,
                     revision INTEGER NOT NULL,
                     status TEXT NOT NULL,
                     checkpoint TEXT NOT NULL
                 );",
            )
            .map_err(|e| StoreError::backend("initialize the checkpoint table", e))?;
        Ok(SqliteCheckpointStore {
            path,
            connection: Mutex::new(connection),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn connection(&self) -> MutexGuard<'_, Connection> {
        // A panic mid-statement leaves SQLite to roll the transaction back.
        self.connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CheckpointStore for SqliteCheckpointStore {
    fn save(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let json = serde_json::to_string(checkpoint).map_err(|e| {
            StoreError::backend(format!("encode checkpoint of {:?}", checkpoint.run_id), e)
        })?;
        let revision = i64::try_from(checkpoint.revision).unwrap_or(i64::MAX);
        self.connection()
            .execute(
                "INSERT INTO agent_run_checkpoints (run_id, revision, status, checkpoint)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (run_id) DO UPDATE SET
                     revision = excluded.revision,
                     status = excluded.status,
                     checkpoint = excluded.checkpoint",
                params![
                    checkpoint.run_id,
                    revision,
                    checkpoint.status.as_str(),
                    json
                ],
            )
            .map_err(|e| {
                StoreError::backend(format!("save checkpoint of {:?}", checkpoint.run_id), e)
            })?;
        Ok(())
    }

    fn load(&self, run_id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let json: Option<String> = self
            .connection()
            .query_row(
                "SELECT checkpoint FROM agent_run_checkpoints WHERE run_id = ?1",
                params![run_id],
                |row| row.get(0),
            )
            .optional()
            .map_err(|e| StoreError::backend(format!("load checkpoint of {run_id:?}"), e))?;
        json.map(|json| {
            serde_json::from_str(&json).map_err(|source| StoreError::Corrupt {
                run_id: run_id.to_owned(),
                source,
            })
        })
        .transpose()
    }
}
