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
            // --help and --version go to stdout with exit code 0; a usage
            // error is one line on stderr (clap's first line, without its
            // blank line and "For more information" hint) with exit code 2.
            if err.use_stderr() {
                let rendered = err.render().to_string();
                eprintln!("{}", usage_line(&rendered));
            } else {
                let _ = err.print();
            }
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

/// A clap usage error in one line: its first paragraph (the error and the
/// arguments it names), without the usage block and the "--help" hint.
fn usage_line(rendered: &str) -> String {
    let first = rendered.split("\n\n").next().unwrap_or_default();
    let line = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        "error: invalid usage (see --help)".to_owned()
    } else {
        line
    }
}
