//! The ledger file's identity, checked before each commit: a file deleted or
//! replaced while the ledger is open must not keep taking writes.
//!
//! SQLite keeps writing to the file it opened, even after it was unlinked or
//! renamed away; a new file at the same path is another, empty ledger, where
//! every operation would be dispatched again. So before each commit the store
//! compares the path's device and inode with those it opened, and refuses the
//! commit when they differ.

use std::path::{Path, PathBuf};

use effect_core::LedgerError;

/// The file a ledger was opened on.
#[derive(Debug, Clone)]
pub(crate) struct LedgerFile {
    path: PathBuf,
    /// Device and inode at open time; `None` where the platform has neither.
    identity: Option<(u64, u64)>,
}

impl LedgerFile {
    /// The file at `path` as it is now.
    pub(crate) fn at(path: &Path) -> LedgerFile {
        LedgerFile {
            path: path.to_owned(),
            identity: identity(path).ok().flatten(),
        }
    }

    /// Fails unless `path` still names the file that was opened.
    pub(crate) fn check(&self) -> Result<(), FileChange> {
        let Some(opened) = self.identity else {
            return Ok(());
        };
        match identity(&self.path) {
            Ok(Some(now)) if now == opened => Ok(()),
            Ok(_) => Err(FileChange::Replaced),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Err(FileChange::Deleted),
            Err(err) => Err(FileChange::Unreadable(err.kind())),
        }
    }

    /// The error each caller of a refused commit gets.
    pub(crate) fn refusal(&self, change: FileChange) -> LedgerError {
        let path = self.path.display();
        let what = match change {
            FileChange::Deleted => "was deleted".to_owned(),
            FileChange::Replaced => "was replaced by another file".to_owned(),
            FileChange::Unreadable(kind) => format!("cannot be checked ({kind})"),
        };
        LedgerError::unavailable(
            format!(
                "the sqlite ledger file {path} {what} while open; nothing was committed: \
                 restore the file and open the ledger again"
            ),
            None,
        )
    }
}

/// How the file at the ledger's path differs from the one opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileChange {
    /// Nothing is at the path any more.
    Deleted,
    /// Another file is at the path.
    Replaced,
    /// The path cannot be examined.
    Unreadable(std::io::ErrorKind),
}

#[cfg(unix)]
fn identity(path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path)?;
    Ok(Some((meta.dev(), meta.ino())))
}

#[cfg(not(unix))]
fn identity(path: &Path) -> std::io::Result<Option<(u64, u64)>> {
    std::fs::metadata(path).map(|_| None)
}
