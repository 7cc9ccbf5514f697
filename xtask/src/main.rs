//! `cargo xtask <task>`: the one entry point for what CI runs.
//!
//! `cargo xtask` alone, `--help` or `help` lists the tasks; `cargo xtask ci`
//! runs every step of [`CI_STEPS`] in order, as `.ci/run` does.

mod links;
mod package;
mod tidy;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

/// The tasks, with what each does, in the order `ci` runs them.
const TASKS: &[(&str, &str)] = &[
    ("fmt", "cargo fmt --check"),
    (
        "lint",
        "cargo clippy on every target and feature, -D warnings",
    ),
    ("features", "cargo check with --no-default-features"),
    (
        "test",
        "cargo test --workspace --all-features, with the kill-9 soak tests (EFFECT_SLOW_TESTS=1)",
    ),
    (
        "snapshots",
        "fail on pending insta snapshots (.snap.new, .pending-snap)",
    ),
    (
        "doc",
        "cargo doc --all-features with RUSTDOCFLAGS=-D warnings",
    ),
    ("deps", "check the dependency direction of ARCHITECTURE.md"),
    (
        "links",
        "every link and citation in Markdown, Rust and TOML files resolves inside the repository",
    ),
    (
        "package",
        "every published crate's package holds its license and readme; cargo publish --dry-run for the leaf crates",
    ),
    (
        "deny",
        "cargo deny check: licenses, bans, advisories, sources (fails when cargo-deny is not installed)",
    ),
    (
        "multihost-ci",
        "the short seeded multi-host run: both replication modes, every fault kind (root; skipped without it unless EFFECT_REQUIRE_MULTIHOST=1)",
    ),
];

/// Tasks that `ci` does not run.
const MANUAL_TASKS: &[(&str, &str)] = &[(
    "multihost",
    "the multi-host run with its own arguments: --duration 30m --seed N (root; see docs/production.md)",
)];

/// The seed and length of the CI's multi-host run, and the calls each of its
/// two phases must at least run (a phase runs thousands on a loaded 2-core
/// machine; far fewer means it exercised nothing).
const MULTIHOST_CI: &[&str] = &["--duration", "60s", "--seed", "43", "--min-calls", "500"];

/// What `cargo xtask ci` runs: every task above.
const CI_STEPS: &[&str] = &[
    "fmt",
    "lint",
    "features",
    "test",
    "snapshots",
    "doc",
    "deps",
    "links",
    "package",
    "deny",
    "multihost-ci",
];

fn main() -> ExitCode {
    let Some(task) = std::env::args().nth(1) else {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    };
    if matches!(task.as_str(), "help" | "--help" | "-h") {
        print!("{}", usage());
        return ExitCode::SUCCESS;
    }
    match run(&task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask {task}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The task list `cargo xtask` prints.
fn usage() -> String {
    let mut out = String::from("usage: cargo xtask <task>\n\ntasks:\n");
    out.push_str(&format!(
        "  {:<14}every task below, in order (what CI runs)\n",
        "ci"
    ));
    for (name, what) in TASKS.iter().chain(MANUAL_TASKS) {
        out.push_str(&format!("  {name:<14}{what}\n"));
    }
    out
}

fn run(task: &str) -> Result<()> {
    match task {
        "ci" => {
            for step in CI_STEPS {
                eprintln!("== xtask {step}");
                run(step)?;
            }
            Ok(())
        }
        "fmt" => cargo(&["fmt", "--all", "--", "--check"]),
        "lint" => cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]),
        "features" => cargo(&[
            "check",
            "--workspace",
            "--all-targets",
            "--no-default-features",
        ]),
        // The kill-9 soak tests run here (and so in CI), not in a quick
        // `cargo test` (crates/effect-test-support/src/slow.rs).
        "test" => {
            let status = Command::new("cargo")
                .args(["test", "--workspace", "--all-features"])
                .env("EFFECT_SLOW_TESTS", "1")
                .status()
                .context("running cargo test")?;
            check(status, "cargo test")
        }
        "snapshots" => {
            let pending = tidy::pending_snapshots(std::path::Path::new("."))?;
            if pending.is_empty() {
                Ok(())
            } else {
                bail!(
                    "pending insta snapshots (review with cargo insta review, never commit them): {}",
                    pending.join(", ")
                )
            }
        }
        "doc" => {
            let status = Command::new("cargo")
                .args(["doc", "--workspace", "--no-deps", "--all-features"])
                .env("RUSTDOCFLAGS", "-D warnings")
                .status()
                .context("running cargo doc")?;
            check(status, "cargo doc")
        }
        "deps" => deps(),
        "links" => {
            let problems = links::problems(std::path::Path::new("."))?;
            if problems.is_empty() {
                Ok(())
            } else {
                bail!(
                    "{} broken references:\n{}",
                    problems.len(),
                    problems.join("\n")
                )
            }
        }
        "package" => package::check(std::path::Path::new(".")),
        "deny" => {
            // Not skipped when missing: a check that silently does not run
            // lets a disallowed license or a known advisory land.
            let installed = Command::new("cargo")
                .args(["deny", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !installed {
                bail!(
                    "cargo-deny is not installed; install it with `cargo install cargo-deny --locked` (.ci/run does)"
                );
            }
            cargo(&["deny", "check", "bans", "licenses", "sources"])?;
            // The advisory database is a git repository on GitHub. Where it
            // cannot be fetched (a machine without access to GitHub), a copy
            // fetched earlier is used; with neither, say so loudly rather than
            // fail every landing on a network the checks do not need.
            let fetched = Command::new("cargo")
                .args(["deny", "fetch", "db"])
                .status()
                .is_ok_and(|s| s.success());
            if fetched {
                return cargo(&["deny", "check", "advisories"]);
            }
            let cached = Command::new("cargo")
                .args(["deny", "--offline", "check", "advisories"])
                .status()
                .context("running cargo deny")?;
            if cached.success() {
                eprintln!(
                    "xtask deny: the advisory database could not be fetched; checked against the copy already on this machine"
                );
                return Ok(());
            }
            eprintln!(
                "xtask deny: ADVISORIES NOT CHECKED: the advisory database (github.com/RustSec/advisory-db) \
                 cannot be fetched from this machine and no copy is cached; bans, licenses and sources passed"
            );
            Ok(())
        }
        "multihost-ci" => {
            if !is_root()? {
                if std::env::var("EFFECT_REQUIRE_MULTIHOST").as_deref() == Ok("1") {
                    bail!(
                        "EFFECT_REQUIRE_MULTIHOST=1 but not running as root: the multi-host run needs network namespaces and iptables"
                    );
                }
                eprintln!(
                    "xtask multihost-ci: SKIPPED: needs root (network namespaces, iptables); EFFECT_REQUIRE_MULTIHOST=1 makes this a failure"
                );
                return Ok(());
            }
            multihost(MULTIHOST_CI)
        }
        "multihost" => {
            let args: Vec<String> = std::env::args().skip(2).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            multihost(&args)
        }
        other => bail!("unknown task {other:?}\n{}", usage()),
    }
}

/// The dependency direction of ARCHITECTURE.md#dependency-direction, as forbidden edges.
const FORBIDDEN: &[(&str, &[&str])] = &[
    (
        "effect-core",
        &[
            "effect-ledger-sqlite",
            "effect-ledger-postgres",
            "effect-exec",
            "effect-testkit",
            "agent-runtime",
        ],
    ),
    (
        "effect-exec",
        &["effect-ledger-sqlite", "effect-ledger-postgres"],
    ),
    (
        "effect-testkit",
        &["effect-ledger-sqlite", "effect-ledger-postgres"],
    ),
    (
        "agent-runtime",
        &["effect-ledger-sqlite", "effect-ledger-postgres"],
    ),
    (
        "effect-ledger-sqlite",
        &["effect-exec", "effect-ledger-postgres", "agent-runtime"],
    ),
    (
        "effect-ledger-postgres",
        &["effect-exec", "effect-ledger-sqlite", "agent-runtime"],
    ),
    // The binaries choose a store through the facade's `open`; neither CLI
    // depends on the other, and the facade on no binary.
    ("agent-effect", &["agent-effect-ops", "effect-bench"]),
    ("agent-effect-ops", &["agent-effect", "effect-bench"]),
    (
        "production-agent-systems",
        &["agent-effect", "agent-effect-ops", "effect-bench"],
    ),
    // The framework adapters build on core and exec; a user picks the store.
    (
        "effect-rig",
        &[
            "effect-ledger-sqlite",
            "effect-ledger-postgres",
            "effect-testkit",
            "agent-runtime",
        ],
    ),
    (
        "effect-mcp",
        &[
            "effect-ledger-sqlite",
            "effect-ledger-postgres",
            "effect-testkit",
            "agent-runtime",
            "rusqlite",
        ],
    ),
    // HTTP effects build on core and exec; the fake server is a dev-dependency.
    (
        "effect-http",
        &[
            "effect-ledger-sqlite",
            "effect-ledger-postgres",
            "effect-testkit",
            "agent-runtime",
            "openssl-sys",
            "aws-lc-sys",
        ],
    ),
    // The multi-host harness tests the PostgreSQL ledger through the library
    // alone; nothing depends on it.
    (
        "effect-multihost",
        &["effect-ledger-sqlite", "effect-testkit", "agent-runtime"],
    ),
    ("production-agent-systems", &["effect-multihost"]),
    // OpenTelemetry implements exec's observer seam; the application picks the store.
    (
        "effect-otel",
        &[
            "effect-ledger-sqlite",
            "effect-ledger-postgres",
            "effect-testkit",
            "agent-runtime",
            "openssl-sys",
            "aws-lc-sys",
        ],
    ),
    // The schemas are shared by the runtime and both adapters, and know none of them.
    (
        "effect-schema",
        &[
            "effect-core",
            "effect-exec",
            "agent-runtime",
            "effect-rig",
            "effect-mcp",
        ],
    ),
];

/// What only tests may use: no crate but effect-test-support itself depends
/// on these normally, so a user's build never compiles them.
const TEST_ONLY: &[&str] = &["effect-test-support", "insta"];

fn deps() -> Result<()> {
    let mut crates: Vec<String> = std::fs::read_dir("crates")
        .context("reading crates/")?
        .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect::<Result<_, _>>()
        .context("reading crates/")?;
    crates.sort();
    for package in &crates {
        if package == "effect-test-support" {
            continue;
        }
        let forbidden = FORBIDDEN
            .iter()
            .find(|(name, _)| name == package)
            .map_or(&[][..], |(_, forbidden)| *forbidden);
        let output = Command::new("cargo")
            .args([
                "tree",
                "--edges",
                "normal",
                "--prefix",
                "none",
                "--package",
                package,
            ])
            .output()
            .with_context(|| format!("running cargo tree for {package}"))?;
        check(output.status, "cargo tree")?;
        let tree = String::from_utf8_lossy(&output.stdout);
        for dep in TEST_ONLY {
            if tree
                .lines()
                .any(|line| line.split_whitespace().next() == Some(dep))
            {
                bail!(
                    "{package} depends on {dep} outside its tests, which ARCHITECTURE.md#dependency-direction forbids"
                );
            }
        }
        for dep in forbidden {
            if tree
                .lines()
                .any(|line| line.split_whitespace().next() == Some(dep))
            {
                bail!(
                    "{package} depends on {dep}, which ARCHITECTURE.md#dependency-direction forbids"
                );
            }
        }
    }
    Ok(())
}

/// `effect-multihost run` with `args` (crates/effect-multihost).
fn multihost(args: &[&str]) -> Result<()> {
    let mut all = vec!["run", "--quiet", "-p", "effect-multihost", "--", "run"];
    all.extend_from_slice(args);
    cargo(&all)
}

fn is_root() -> Result<bool> {
    let output = Command::new("id")
        .arg("-u")
        .output()
        .context("running id -u")?;
    Ok(String::from_utf8_lossy(&output.stdout).trim() == "0")
}

fn cargo(args: &[&str]) -> Result<()> {
    let status = Command::new("cargo")
        .args(args)
        .status()
        .with_context(|| format!("running cargo {}", args.join(" ")))?;
    check(status, &format!("cargo {}", args.join(" ")))
}

fn check(status: std::process::ExitStatus, what: &str) -> Result<()> {
    if status.success() {
        Ok(())
    } else {
        bail!("{what} failed ({status})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ci_runs_every_task_in_the_listed_order() {
        let listed: Vec<&str> = TASKS.iter().map(|(name, _)| *name).collect();
        assert_eq!(listed, CI_STEPS);
    }

    #[test]
    fn the_usage_names_every_task() {
        let usage = usage();
        assert!(usage.starts_with("usage: cargo xtask <task>"), "{usage}");
        for name in std::iter::once("ci").chain(CI_STEPS.iter().copied()) {
            assert!(
                usage.lines().any(|l| l.trim_start().starts_with(name)),
                "{name} missing from:\n{usage}"
            );
        }
    }
}
