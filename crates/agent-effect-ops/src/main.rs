//! The `agent-effect-ops` binary: parses the command line, runs the command
//! against stdout, and maps failures to the documented exit codes.

use std::io::Write as _;
use std::process::ExitCode;
use std::sync::Arc;

use agent_effect_ops::{Cli, Exit, is_broken_pipe, run};
use clap::Parser as _;
use effect_core::SystemClock;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // Usage errors go to stderr with exit code 2; --help and --version to stdout with 0.
            let _ = err.print();
            return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(Exit::Usage.code()));
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let result = run(&cli, Arc::new(SystemClock), &mut out).and_then(|()| {
        out.flush()
            .map_err(|err| anyhow::Error::new(err).context("cannot write the output"))
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            let exit = Exit::of(&err);
            // One line: the error chain, joined by ": ".
            eprintln!("error: {}", format!("{err:#}").replace('\n', " "));
            exit.into()
        }
    }
}
