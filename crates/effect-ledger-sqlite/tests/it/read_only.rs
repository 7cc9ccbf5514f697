//! A ledger file this process cannot write is refused at open, not at the
//! first write; opening it read-only still reads it.
//!
//! The file is made read-only the way the operating system enforces for this
//! process: mode bits for an ordinary user, and for root (whom mode bits do
//! not stop) the immutable attribute (`chattr +i`) or a read-only tmpfs
//! mount. Where none of these is available the test says so and skips.

use std::path::{Path, PathBuf};
use std::process::Command;

use effect_core::{EffectLedger, EffectLedgerExt as _, LedgerErrorKind};
use effect_ledger_sqlite::{SqliteError, SqliteLedger, SqliteOptions};
use serde_json::json;

use crate::support::{TestResult, claim, op};

/// How a file was made read-only; undoes it when dropped.
enum Lock {
    Mode(PathBuf),
    Immutable(PathBuf),
    Mount(PathBuf),
}

impl Lock {
    /// Makes `path` read-only for this process, or says why it cannot.
    fn file(path: &Path) -> Result<Lock, String> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o444))
            .map_err(|e| e.to_string())?;
        if std::fs::OpenOptions::new().write(true).open(path).is_err() {
            return Ok(Lock::Mode(path.to_owned()));
        }
        // Root: mode bits do not stop it.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .map_err(|e| e.to_string())?;
        run("chattr", &["+i".as_ref(), path.as_os_str()])?;
        let lock = Lock::Immutable(path.to_owned());
        if std::fs::OpenOptions::new().write(true).open(path).is_ok() {
            return Err("chattr +i did not stop writes".into());
        }
        Ok(lock)
    }

    /// Mounts a tmpfs at `dir`, lets `fill` put files in it, and remounts
    /// it read-only.
    fn mount(dir: &Path, fill: impl FnOnce(&Path) -> TestResult) -> Result<Lock, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        run(
            "mount",
            &[
                "-t".as_ref(),
                "tmpfs".as_ref(),
                "tmpfs".as_ref(),
                dir.as_os_str(),
            ],
        )?;
        let lock = Lock::Mount(dir.to_owned());
        fill(dir).map_err(|e| e.to_string())?;
        run(
            "mount",
            &["-o".as_ref(), "remount,ro".as_ref(), dir.as_os_str()],
        )?;
        if std::fs::write(dir.join("probe"), b"").is_ok() {
            return Err("the read-only mount took a write".into());
        }
        Ok(lock)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        // Best effort: the temporary directory must be removable afterwards.
        match self {
            Lock::Mode(path) => {
                let _ = std::fs::set_permissions(&*path, std::fs::Permissions::from_mode(0o644));
            }
            Lock::Immutable(path) => {
                let _ = run("chattr", &["-i".as_ref(), path.as_os_str()]);
            }
            Lock::Mount(dir) => {
                let _ = run("umount", &[dir.as_os_str()]);
            }
        }
    }
}

fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A closed ledger file at `path` holding one prepared operation.
fn ledger_file(path: &Path) -> TestResult {
    let ledger = SqliteLedger::open(path, SqliteOptions::default())?;
    ledger.prepare("op", &op(json!({"n": 1})))?;
    Ok(())
}

/// The checks every read-only location passes: a read-write open is
/// refused with `ReadOnly`, which says what to do; a read-only open reads.
fn check_refused(path: &Path) -> TestResult {
    let error = SqliteLedger::open(path, SqliteOptions::default())
        .expect_err("a read-write open of a read-only file must fail");
    assert!(matches!(error, SqliteError::ReadOnly { .. }), "{error:?}");
    assert_eq!(error.kind(), LedgerErrorKind::Backend);
    let message = error.to_string();
    assert!(
        message.contains("read-only") && message.contains("SqliteOptions::read_only"),
        "{message}"
    );
    assert!(std::error::Error::source(&error).is_some());

    let reader = SqliteLedger::open(path, SqliteOptions::default().read_only(true))?;
    assert_eq!(reader.get("op")?.map(|r| r.attempts), Some(0));
    let refused = reader
        .claim_dispatch("op", &claim("w"))
        .expect_err("a read-only ledger cannot claim");
    assert_eq!(refused.kind(), LedgerErrorKind::Backend, "{refused:?}");
    Ok(())
}

#[test]
fn a_read_only_file_is_refused_at_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ledger.sqlite3");
    ledger_file(&path)?;
    let lock = match Lock::file(&path) {
        Ok(lock) => lock,
        Err(why) => {
            println!("skipped: cannot make a file read-only for this process ({why})");
            return Ok(());
        }
    };
    check_refused(&path)?;
    drop(lock);

    // Writable again: the ledger opens and nothing was written meanwhile.
    let ledger = SqliteLedger::open(&path, SqliteOptions::default())?;
    assert_eq!(ledger.get("op")?.map(|r| r.attempts), Some(0));
    assert!(ledger.claim_dispatch("op", &claim("w"))?);
    assert_eq!(ledger.events("op")?.len(), 2);
    Ok(())
}

#[test]
fn a_ledger_on_a_read_only_mount_is_refused_at_open() -> TestResult {
    let dir = tempfile::tempdir()?;
    let mount = dir.path().join("mnt");
    let path = mount.join("ledger.sqlite3");
    let lock = match Lock::mount(&mount, |_| ledger_file(&path)) {
        Ok(lock) => lock,
        Err(why) => {
            println!("skipped: cannot mount a read-only tmpfs here ({why})");
            return Ok(());
        }
    };
    check_refused(&path)?;
    // Without -wal and -shm files to share, the reader is a snapshot.
    let reader = SqliteLedger::open(&path, SqliteOptions::default().read_only(true))?;
    assert!(reader.is_immutable_snapshot());
    drop(reader);
    drop(lock);
    Ok(())
}
