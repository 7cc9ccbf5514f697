//! `cargo xtask <task>`: the one entry point for what CI runs.
//!
//! - `ci`: fmt, lint, features, test, snapshots, doc, deps (and deny when
//!   cargo-deny is installed).
//! - `fmt`, `lint`, `features`, `test`, `snapshots`, `doc`, `deps`, `deny`: one step each.

mod tidy;

use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

fn main() -> ExitCode {
    let task = std::env::args().nth(1).unwrap_or_else(|| "ci".to_owned());
    match run(&task) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask {task}: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(task: &str) -> Result<()> {
    match task {
        "ci" => {
            for step in [
                "fmt",
                "lint",
                "features",
                "test",
                "snapshots",
                "doc",
                "deps",
                "deny",
            ] {
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
        "test" => cargo(&["test", "--workspace", "--all-features"]),
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
        "deny" => {
            let installed = Command::new("cargo")
                .args(["deny", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
            if installed {
                cargo(&["deny", "check"])
            } else {
                eprintln!("cargo-deny is not installed; skipping the license and advisory check");
                Ok(())
            }
        }
        other => bail!(
            "unknown task {other:?}; expected ci, fmt, lint, features, test, snapshots, doc, deps or deny"
        ),
    }
}

/// The dependency direction of STYLE.md §1, as forbidden edges.
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
            "rusqlite",
        ],
    ),
];

fn deps() -> Result<()> {
    for (package, forbidden) in FORBIDDEN {
        if !std::path::Path::new("crates").join(package).exists() {
            continue;
        }
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
        for dep in *forbidden {
            if tree
                .lines()
                .any(|line| line.split_whitespace().next() == Some(dep))
            {
                bail!("{package} depends on {dep}, which STYLE.md §1 forbids");
            }
        }
    }
    Ok(())
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
