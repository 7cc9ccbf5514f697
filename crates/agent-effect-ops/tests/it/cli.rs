//! The command-line definition itself.

use agent_effect_ops::Cli;
use clap::CommandFactory;

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}
