//! `agent-effect`: run a fault scenario or the whole fault matrix (docs/spec.md §10).
//! See the library docs of this crate for the options and exit codes.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match agent_effect::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if err.use_stderr() => {
            // One line, as the help promises: clap's first line only.
            let rendered = err.render().to_string();
            eprintln!("{}", usage_line(&rendered));
            return ExitCode::from(2);
        }
        Err(err) => {
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
    };
    let stdout = std::io::stdout();
    match agent_effect::run(&cli, &mut stdout.lock()) {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            eprintln!("error: {:#}", err.error);
            ExitCode::from(err.exit_code)
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
