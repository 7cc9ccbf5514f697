//! docs/testkit.md: every command it shows parses, every scenario is in its table.

use clap::Parser;

use crate::{agent_effect, stdout};

const GUIDE: &str = include_str!("../../../../docs/testkit.md");

#[test]
fn every_command_in_the_guide_parses() {
    let commands: Vec<&str> = GUIDE
        .split("```sh\n")
        .skip(1)
        .flat_map(|rest| rest.split("```").next().unwrap().lines())
        .filter(|line| line.starts_with("agent-effect "))
        .collect();
    assert!(commands.len() >= 7, "{commands:?}");
    for command in commands {
        // Split as the shell would: a quoted --mcp-command is one word.
        let args = shlex::split(command).unwrap();
        if let Err(err) = agent_effect::Cli::try_parse_from(&args) {
            panic!("{command}: {err}");
        }
    }
}

#[test]
fn every_listed_scenario_is_in_the_guide() {
    let listing = agent_effect(&["--list"]);
    for line in stdout(&listing).lines() {
        let name = line.split_whitespace().next().unwrap();
        assert!(
            GUIDE.contains(&format!("| `{name}` |")),
            "docs/testkit.md does not describe {name}"
        );
    }
}
