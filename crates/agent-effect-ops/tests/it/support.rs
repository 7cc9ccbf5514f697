//! Running the CLI in-process (against an injected clock and writer) and as the
//! real binary, plus fixture copies.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use agent_effect_ops::{Cli, Exit, run};
use clap::Parser as _;
use effect_core::ManualClock;
use tempfile::TempDir;

/// 2026-11-30T03:24:01.872832Z: one hour after the Python fixture's oldest
/// unresolved operation was last updated.
pub const NOW_MICROS: u64 = 1_796_009_041_872_832;

/// The clock in-process runs read.
pub fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(
        UNIX_EPOCH + Duration::from_micros(NOW_MICROS),
    ))
}

/// What one in-process run produced.
#[derive(Debug)]
pub struct Ran {
    pub exit: Exit,
    pub stdout: String,
    /// The one-line error the binary would print, without `error: `.
    pub error: Option<String>,
}

impl Ran {
    /// The stdout of a successful run, parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        assert_eq!(self.exit, Exit::Success, "run failed: {:?}", self.error);
        serde_json::from_str(&self.stdout).unwrap()
    }
}

/// Runs `agent-effect-ops --db DB ARGS...` in-process on the fixed [`clock`].
pub fn ops(db: &Path, args: &[&str]) -> Ran {
    let db = db.to_str().unwrap();
    let argv = ["agent-effect-ops", "--db", db]
        .into_iter()
        .chain(args.iter().copied());
    let cli = Cli::try_parse_from(argv).unwrap();
    let mut stdout = Vec::new();
    let result = run(&cli, clock(), &mut stdout);
    let (exit, error) = match result {
        Ok(()) => (Exit::Success, None),
        Err(err) => (Exit::of(&err), Some(format!("{err:#}"))),
    };
    Ran {
        exit,
        stdout: String::from_utf8(stdout).unwrap(),
        error,
    }
}

/// Runs the real binary with `args`.
pub fn bin(args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent-effect-ops"))
        .args(args)
        .output()
        .unwrap()
}

/// Runs the real binary on `db`: `agent-effect-ops --db DB ARGS...`.
pub fn bin_on(db: &Path, args: &[&str]) -> Output {
    let db = db.to_str().unwrap();
    let argv: Vec<&str> = ["--db", db]
        .into_iter()
        .chain(args.iter().copied())
        .collect();
    bin(&argv)
}

/// The exit code and stderr of a binary run that must fail with one line.
pub fn failure(output: &Output) -> (i32, String) {
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    assert!(
        output.stdout.is_empty(),
        "a failure printed to stdout: {output:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr:?}");
    assert!(stderr.starts_with("error: "), "{stderr:?}");
    (output.status.code().unwrap(), stderr.trim_end().to_owned())
}

/// The stdout of a binary run that must succeed.
pub fn success(output: &Output) -> String {
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.stderr.is_empty(), "{output:?}");
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// The shared fixtures directory (docs/spec.md §8): `EFFECT_FIXTURES_DIR`, or
/// the copy vendored in the repository (`fixtures/python`).
pub fn fixtures_dir() -> PathBuf {
    match std::env::var_os("EFFECT_FIXTURES_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/python"),
    }
}

/// A writable copy of a fixture in a fresh temporary directory (opening a
/// ledger may migrate it; the shared copy is read-only).
pub fn fixture(name: &str) -> (TempDir, PathBuf) {
    let source = fixtures_dir().join(name);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::copy(&source, &path)
        .unwrap_or_else(|e| panic!("copying fixture {}: {e}", source.display()));
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)] // Unix: makes the copy writable by its owner.
    permissions.set_readonly(false);
    std::fs::set_permissions(&path, permissions).unwrap();
    (dir, path)
}

/// The Python package's ledger with every status (docs/spec.md §8).
pub fn python_ledger() -> (TempDir, PathBuf) {
    fixture("python-ledger-v1.sqlite3")
}

/// The files in `dir` and their contents, to show that a command wrote nothing.
pub fn snapshot_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}
