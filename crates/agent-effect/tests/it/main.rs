//! Integration tests of the `agent-effect` binary: the real executable, its
//! exit codes, and snapshots of what it prints.
#![allow(clippy::unwrap_used)] // Tests unwrap: a panic is a failing test with its message.

mod certify;
mod cli;
mod crash;
mod docs;
mod matrix;
mod postgres;

use std::path::Path;
use std::process::{Command, Output};

/// Runs the binary with `args` (in `cwd` when given).
pub fn agent_effect(args: &[&str]) -> Output {
    agent_effect_in(None, args)
}

pub fn agent_effect_in(cwd: Option<&Path>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent-effect"));
    command.args(args);
    if let Some(cwd) = cwd {
        command.current_dir(cwd);
    }
    command.output().unwrap()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}
