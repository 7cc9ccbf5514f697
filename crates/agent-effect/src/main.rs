//! `agent-effect`: run a fault scenario or the whole fault matrix (docs/spec.md §10).
//! See the library docs of this crate for the options and exit codes.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = agent_effect::Cli::parse();
    let stdout = std::io::stdout();
    match agent_effect::run(&cli, &mut stdout.lock()) {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            eprintln!("error: {:#}", err.error);
            ExitCode::from(err.exit_code)
        }
    }
}
