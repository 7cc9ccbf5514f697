//! docs/operations.md's incident walk-through, run as printed: every
//! `console` block of the runbook is a shell session on ledgers that
//! `agent-effect` scenarios make. Each `$ ` line (with its `\` continuations)
//! runs in `sh` in one fresh directory, with both binaries on `PATH`; the
//! lines below it are its output (stdout, then stderr). A line `...` in the
//! output stands for any number of lines, and `[..]` for any text within a
//! line (a time of day, an age). `$ echo $?` checks the exit code of the
//! command before it; a command without one must exit 0.

use std::path::{Path, PathBuf};
use std::process::Command;

const RUNBOOK: &str = include_str!("../../../../docs/operations.md");

/// One command of a session and what the runbook says it prints.
#[derive(Debug)]
struct Step {
    command: String,
    output: Vec<String>,
    exit: i32,
}

/// The steps of every `console` block, in order.
fn steps(text: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    let mut continued = false;
    let mut exit_code_next = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = line.trim() == "```console";
            continued = false;
            continue;
        }
        if !in_block {
            continue;
        }
        let last = steps.last_mut();
        if continued {
            let step = last.expect("a continuation follows a command");
            step.command.push('\n');
            step.command.push_str(line);
            continued = line.ends_with('\\');
        } else if line == "$ echo $?" {
            exit_code_next = true;
        } else if let Some(command) = line.strip_prefix("$ ") {
            continued = command.ends_with('\\');
            steps.push(Step {
                command: command.to_owned(),
                output: Vec::new(),
                exit: 0,
            });
        } else if std::mem::take(&mut exit_code_next) {
            let step = last.expect("`echo $?` follows a command");
            step.exit = line.parse().expect("`echo $?` prints a number");
        } else {
            let step = last.expect("output follows a command");
            step.output.push(line.to_owned());
        }
    }
    steps
}

/// Whether `actual` matches `expected`, with `...` lines and `[..]` wildcards.
fn matches(expected: &[String], actual: &[&str]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=actual.len()).any(|skip| matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, tail)| line_matches(first, line) && matches(rest, tail)),
    }
}

fn line_matches(pattern: &str, line: &str) -> bool {
    let mut parts = pattern.split("[..]");
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = line.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// The directory holding both binaries: agent-effect-ops's, where cargo
/// builds agent-effect too. The workspace's tests build every binary first; a
/// run of this crate's tests alone uses the agent-effect found there, and
/// builds it when there is none (rebuild it after changing agent-effect).
fn binaries() -> PathBuf {
    let ops = PathBuf::from(env!("CARGO_BIN_EXE_agent-effect-ops"));
    let dir = ops.parent().unwrap().to_owned();
    let scenario = dir.join(format!("agent-effect{}", std::env::consts::EXE_SUFFIX));
    if !scenario.exists() {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--package",
                "agent-effect",
                "--bin",
                "agent-effect",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .unwrap();
        assert!(status.success(), "cannot build agent-effect: {status}");
    }
    assert!(scenario.exists(), "no {}", scenario.display());
    dir
}

fn run(step: &Step, dir: &Path, path: &str) -> (i32, String) {
    let output = Command::new("sh")
        .arg("-c")
        .arg(&step.command)
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("EFFECT_LEDGER_SCHEMA")
        .output()
        .unwrap();
    let mut text = String::from_utf8(output.stdout).unwrap();
    text.push_str(&String::from_utf8(output.stderr).unwrap());
    (output.status.code().unwrap_or(-1), text)
}

#[test]
fn the_walk_through_runs_as_printed() {
    let steps = steps(RUNBOOK);
    assert!(steps.len() >= 12, "found only {steps:#?}");
    let bin = binaries();
    let path = std::env::join_paths(
        std::iter::once(bin).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let path = path.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for step in &steps {
        let (exit, output) = run(step, dir.path(), path);
        let lines: Vec<&str> = output.lines().collect();
        assert!(
            exit == step.exit && matches(&step.output, &lines),
            "docs/operations.md: `{}` exited {exit} (documented: {}) and printed\n{output}\ndocumented:\n{}",
            step.command,
            step.exit,
            step.output.join("\n"),
        );
    }
}

#[test]
fn the_matcher_takes_wildcards_and_elisions() {
    let expected: Vec<String> = ["{", "...", "  \"age\": [..] seconds", "}"]
        .map(String::from)
        .to_vec();
    assert!(matches(&expected, &["{", "  \"age\": 12 seconds", "}"]));
    assert!(matches(
        &expected,
        &["{", "a", "b", "  \"age\": 1 seconds", "}"]
    ));
    assert!(!matches(&expected, &["{", "  \"age\": 12 minutes", "}"]));
    assert!(!matches(&expected, &["{", "  \"age\": 12 seconds"]));
    assert!(line_matches("a[..]b[..]c", "a1b2c"));
    assert!(!line_matches("a[..]b", "a1b2"));
}

/// docs/operations.md's reference of `stats` names every field the command
/// prints (a field added to `Stats` without its line fails here).
#[test]
fn the_stats_reference_names_every_field() {
    let stats = agent_effect_ops::view::Stats {
        counts: agent_effect_ops::view::StatusCounts::default(),
        total: 0,
        unresolved: 0,
        oldest_unresolved_updated_at: None,
        oldest_unresolved_age_seconds: None,
        stale: 0,
        waiting_for_caller: 0,
        waiting_for_recovery_worker: 0,
        waiting_for_budget: 0,
        recovery_blocked: 0,
        oldest_waiting_since: None,
        oldest_waiting_age_seconds: None,
        oldest_deferred_since: None,
        oldest_deferred_age_seconds: None,
        budgets: vec![effect_core::BudgetUse {
            budget: "refunds".to_owned(),
            window: "daily".to_owned(),
            max_count: Some(3),
            max_amount: None,
            count: 1,
            amount: 0,
        }],
    };
    let value = serde_json::to_value(&stats).unwrap();
    let reference = RUNBOOK
        .split("**`stats`**:")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("docs/operations.md has a **`stats`** reference paragraph");
    let fields: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    assert_eq!(fields.len(), 15, "{fields:?}");
    for field in fields {
        assert!(
            reference.contains(&format!("`{field}`")),
            "docs/operations.md's stats reference lacks `{field}`:\n{reference}"
        );
    }
}
