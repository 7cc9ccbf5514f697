//! [`ArchiveFile`]: a prune archive on disk, synced per batch and resumable.

use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{ArchivedKey, PruneArchive};
use crate::error::LedgerError;
use crate::status::EffectStatus;

/// How much of the file a backward read takes at once.
const CHUNK: u64 = 64 * 1024;

/// A prune archive file: JSON Lines of
/// [`ArchivedOperation`](super::ArchivedOperation), each batch appended and
/// synced (`fsync`) before the store deletes it.
///
/// [`create`](Self::create) makes a new file (readable by its owner only: it
/// holds outputs and evidence); [`resume`](Self::resume) goes on with the
/// archive of a prune that was stopped, after dropping a last line cut short
/// by a crash, and names the operations of its last lines to the store
/// ([`PruneArchive::previous`]).
///
/// ```
/// use effect_core::{ArchiveFile, PruneArchive};
/// let dir = std::env::temp_dir().join(format!("archive-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("a.jsonl");
/// let mut archive = ArchiveFile::create(&path)?;
/// assert!(archive.previous()?.is_none());
/// drop(archive);
/// assert!(ArchiveFile::create(&path).is_err(), "an archive is never overwritten");
/// let mut resumed = ArchiveFile::resume(&path)?;
/// assert!(resumed.previous()?.is_none(), "an empty archive names nothing");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ArchiveFile {
    file: File,
    path: PathBuf,
    /// Lines appended by this prune.
    lines: u64,
    /// The end of the part of the file [`PruneArchive::previous`] has not
    /// read yet (the start of the line it returned last); 0 when done.
    unread_end: u64,
}

impl ArchiveFile {
    /// Creates the archive at `path`, which must not exist.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Backend`] when the file exists or cannot be created.
    pub fn create(path: &Path) -> Result<Self, LedgerError> {
        let mut options = OpenOptions::new();
        options.read(true).append(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o600);
        }
        let file = options
            .open(path)
            .map_err(|e| io_error("create", path, e))?;
        Ok(ArchiveFile {
            file,
            path: path.to_owned(),
            lines: 0,
            unread_end: 0,
        })
    }

    /// Opens the existing archive at `path` to go on with the prune that
    /// wrote it: a last line without its newline (a crash while it was
    /// written, before its batch was synced and so before anything of it
    /// was deleted) is cut off, and [`PruneArchive::previous`] walks back
    /// from the end.
    ///
    /// # Errors
    ///
    /// [`LedgerError::Backend`] when the file is missing or cannot be read,
    /// cut or synced.
    pub fn resume(path: &Path) -> Result<Self, LedgerError> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(path)
            .map_err(|e| io_error("open", path, e))?;
        let mut archive = ArchiveFile {
            file,
            path: path.to_owned(),
            lines: 0,
            unread_end: 0,
        };
        let len = archive
            .file
            .metadata()
            .map_err(|e| io_error("read", path, e))?
            .len();
        let complete = archive.end_of_last_line(len)?;
        if complete != len {
            archive
                .file
                .set_len(complete)
                .and_then(|()| archive.file.sync_all())
                .map_err(|e| io_error("cut the unfinished last line of", path, e))?;
        }
        archive.unread_end = complete;
        Ok(archive)
    }

    /// Lines this prune appended.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The offset just past the last newline at or before `len` (0 if none).
    fn end_of_last_line(&mut self, len: u64) -> Result<u64, LedgerError> {
        let mut end = len;
        while end > 0 {
            let start = end.saturating_sub(CHUNK);
            let chunk = self.read_at(start, end)?;
            if let Some(i) = chunk.iter().rposition(|b| *b == b'\n') {
                return Ok(start + i as u64 + 1);
            }
            end = start;
        }
        Ok(0)
    }

    fn read_at(&mut self, start: u64, end: u64) -> Result<Vec<u8>, LedgerError> {
        let len = usize::try_from(end - start).unwrap_or(usize::MAX);
        let mut buf = vec![0; len];
        self.file
            .seek(SeekFrom::Start(start))
            .and_then(|_| self.file.read_exact(&mut buf))
            .map_err(|e| io_error("read", &self.path, e))?;
        Ok(buf)
    }
}

impl PruneArchive for ArchiveFile {
    fn append(&mut self, lines: &[u8]) -> Result<(), LedgerError> {
        self.file
            .write_all(lines)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| io_error("write", &self.path, e))?;
        self.lines += lines.iter().filter(|b| **b == b'\n').count() as u64;
        Ok(())
    }

    fn previous(&mut self) -> Result<Option<ArchivedKey>, LedgerError> {
        // Skip blank lines; the unread part always ends with a newline.
        while self.unread_end > 0 {
            let line_end = self.unread_end - 1;
            let start = self.end_of_last_line(line_end)?;
            let line = self.read_at(start, line_end)?;
            self.unread_end = start;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let parsed: KeyLine = serde_json::from_slice(&line).map_err(|e| {
                LedgerError::corrupt(
                    format!(
                        "the prune archive {} has a line at byte {start} that is not an archived operation",
                        self.path.display()
                    ),
                    Some(e.into()),
                )
            })?;
            return Ok(Some(ArchivedKey {
                operation_id: parsed.operation.operation_id,
                status: parsed.operation.status,
                updated_at: parsed.operation.updated_at,
            }));
        }
        Ok(None)
    }
}

/// The part of an archive line that names its operation's version.
#[derive(Deserialize)]
struct KeyLine {
    operation: KeyRecord,
}

#[derive(Deserialize)]
struct KeyRecord {
    operation_id: String,
    status: EffectStatus,
    updated_at: String,
}

fn io_error(doing: &str, path: &Path, e: std::io::Error) -> LedgerError {
    LedgerError::backend(
        format!("cannot {doing} the prune archive {}", path.display()),
        Some(e.into()),
    )
}

#[cfg(test)]
mod tests;
