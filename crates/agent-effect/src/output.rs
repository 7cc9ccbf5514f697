//! What every mode answers: how a run ended ([`Outcome`]) or why it could
//! not complete ([`CliError`]), and where its report goes ([`emit_to`]).
//! Shared by the scenario commands and `certify`, so neither imports the other.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;

/// How a successful run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The scenario passed, the matrix kept its guarantee, or a listing.
    Passed,
    /// The scenario did not pass, or the matrix found a broken guarantee.
    Failed,
}

impl Outcome {
    /// Exit code 0 or 1.
    pub fn exit_code(self) -> ExitCode {
        match self {
            Outcome::Passed => ExitCode::SUCCESS,
            Outcome::Failed => ExitCode::FAILURE,
        }
    }
}

/// A run that could not complete, with its exit code (2 usage, 3 failure).
#[derive(Debug)]
pub struct CliError {
    /// The process exit code.
    pub exit_code: u8,
    /// What went wrong; print with `{:#}`.
    pub error: anyhow::Error,
}

impl CliError {
    pub(crate) fn usage(error: anyhow::Error) -> Self {
        CliError {
            exit_code: 2,
            error,
        }
    }

    pub(crate) fn failed(error: anyhow::Error) -> Self {
        CliError {
            exit_code: 3,
            error,
        }
    }
}

/// Prints `text` and, with `output`, writes it to that file (creating its directory).
pub(crate) fn emit_to(
    output: Option<&Path>,
    text: &str,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    if let Some(path) = output {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("could not create directory {}", parent.display()))?;
        }
        std::fs::write(path, text)
            .with_context(|| format!("could not write the report to {}", path.display()))?;
    }
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("could not write to stdout")
}
