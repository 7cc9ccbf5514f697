//! The command-line definition itself.

use agent_effect_ops::Cli;
use clap::{CommandFactory, Parser as _};

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

/// Splits a shell command line: whitespace-separated words, with '…' and "…"
/// quoting (enough for the commands in docs/operations.md).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quote = None;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(quote.is_none(), "unbalanced quote in {line:?}");
    if in_word {
        words.push(word);
    }
    words
}

/// The `agent-effect-ops` commands in the shell blocks of the runbook and of
/// the approval guide, and in the runbook walk-through's sessions (without
/// their `$ ` prompt), with line continuations joined.
fn documented_commands() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let text = ["docs/operations.md", "docs/approval.md"]
        .map(|page| std::fs::read_to_string(root.join(page)).unwrap())
        .join("\n");
    let mut commands = Vec::new();
    let mut in_block = false;
    let mut session = false;
    let mut pending = String::new();
    for line in text.lines() {
        let mut trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_block = trimmed == "```sh" || trimmed == "```console";
            session = trimmed == "```console";
            continue;
        }
        if !in_block {
            continue;
        }
        if session && pending.is_empty() {
            match trimmed.strip_prefix("$ ") {
                Some(command) => trimmed = command,
                None => continue,
            }
        }
        if pending.is_empty() && !trimmed.starts_with("agent-effect-ops ") {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                commands.push(std::mem::take(&mut pending));
            }
        }
    }
    commands
}

#[test]
fn docs_commands_parse() {
    let commands = documented_commands();
    assert!(commands.len() >= 12, "found only {commands:?}");
    for command in &commands {
        let words = shell_words(command);
        if let Err(err) = Cli::try_parse_from(&words) {
            panic!("docs/operations.md or docs/approval.md: {command:?} does not parse: {err}");
        }
    }
}

#[test]
fn usage_errors_are_one_line_with_exit_2() {
    for args in [
        &["--bogus"][..],
        &["list"],
        &["--db", "x.sqlite3", "confirm", "op"],
    ] {
        let output = crate::support::bin(args);
        let (code, line) = crate::support::failure(&output);
        assert_eq!(code, 2, "{args:?}");
        assert!(!line.contains("--help"), "{args:?}: {line:?}");
    }
    let missing = crate::support::failure(&crate::support::bin(&["list"])).1;
    assert!(
        missing.contains("--db"),
        "names the missing argument: {missing:?}"
    );
}
