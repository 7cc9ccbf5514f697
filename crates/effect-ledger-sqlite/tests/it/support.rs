//! Shared builders for the tests.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use effect_core::{Claim, Confirmation, Evidence, NewOperation, RequestFingerprint};
use serde_json::{Value, json};
use tempfile::TempDir;

pub type TestResult = Result<(), Box<dyn std::error::Error>>;

/// The identity of an operation of contract `capture_payment` v1 on `args`.
pub fn op(args: Value) -> NewOperation {
    NewOperation::new("capture_payment", "1", RequestFingerprint::of_value(&args))
}

/// A 60 s claim for `token`.
pub fn claim(token: &str) -> Claim {
    Claim::new(token, Duration::from_secs(60))
}

/// A confirmation with `output` and no evidence.
pub fn confirmation(output: Value) -> Confirmation {
    Confirmation {
        output,
        provider_operation_id: Some("provider-1".into()),
        evidence: evidence(json!({"source": "handler_return"})),
    }
}

/// Evidence from a JSON object literal.
pub fn evidence(value: Value) -> Evidence {
    match value {
        Value::Object(map) => map,
        other => panic!("evidence must be an object, got {other}"),
    }
}

/// The shared fixtures directory (docs/spec.md §8): `EFFECT_FIXTURES_DIR`, or
/// the copy vendored in the repository (`fixtures/python`).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("EFFECT_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/python"),
    }
}

/// Copies a fixture into a fresh temporary directory (opening migrates it, and
/// the shared copy is read-only).
pub fn copy_fixture(name: &str) -> Result<(TempDir, PathBuf), Box<dyn std::error::Error>> {
    let source = fixtures_dir().join(name);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join(name);
    std::fs::copy(&source, &path)
        .map_err(|e| format!("copying fixture {}: {e}", source.display()))?;
    // The shared copy has no write bits; the copy must be writable.
    let mut permissions = std::fs::metadata(&path)?.permissions();
    #[allow(clippy::permissions_set_readonly_false)] // Unix: makes the copy writable by its owner.
    permissions.set_readonly(false);
    std::fs::set_permissions(&path, permissions)?;
    Ok((dir, path))
}

/// A raw connection to a ledger file, for planting rows the API would never write.
pub fn raw(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(5))?;
    Ok(conn)
}

/// The file whose creation starts the child processes of a race on `db`.
pub fn barrier(db: &Path) -> PathBuf {
    db.with_extension("start")
}

/// The file a child process in `role` creates once it is ready to start.
pub fn ready(db: &Path, role: &str) -> PathBuf {
    db.with_extension(format!("ready-{role}"))
}

/// Waits for `path` to exist, polling without sleeping so that the children
/// start as close together as the scheduler allows.
pub fn wait_for(path: &Path) -> TestResult {
    let deadline = Instant::now() + Duration::from_secs(120);
    while !path.exists() {
        if Instant::now() > deadline {
            return Err(format!("timed out waiting for {}", path.display()).into());
        }
        std::thread::yield_now();
    }
    Ok(())
}

/// The environment of a child that runs one killable test again: the test's
/// name, and the variables that carry its role and its ledger file.
pub struct KillableChild {
    pub test: &'static str,
    pub role_var: &'static str,
    pub db_var: &'static str,
}

impl KillableChild {
    /// Runs the test again as a child in `role` on `db`; true when it was
    /// killed (aborted) rather than finished, an error naming `what` when it
    /// failed.
    pub fn run(
        &self,
        what: &str,
        role: &str,
        db: &Path,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let output = std::process::Command::new(std::env::current_exe()?)
            .args([self.test, "--exact", "--nocapture", "--test-threads=1"])
            .env(self.role_var, role)
            .env(self.db_var, db)
            .output()?;
        if output.status.success() {
            return Ok(false);
        }
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt as _;
            if output.status.signal() == Some(6) {
                return Ok(true);
            }
        }
        Err(format!(
            "the {what} child ({role}) failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )
        .into())
    }
}
