//! `cargo xtask <task>`: the one entry point for what CI runs.
//!
//! `cargo xtask` alone, `--help` or `help` lists the tasks; `cargo xtask ci`
//! provisions what the steps need (`xtask/ci/provision.sh`) and runs every
//! step of [`CI_STEPS`] in order; `.ci/run` is that command.

mod docs;
mod install;
mod links;
mod msrv;
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
        "hack",
        "cargo hack check --each-feature --no-dev-deps on every published crate",
    ),
    (
        "msrv",
        "the pinned toolchain is the declared rust-version, which every crate inherits and no dependency exceeds",
    ),
    (
        "test",
        "cargo test --workspace --all-features --no-fail-fast, with the kill-9 soak tests (EFFECT_SLOW_TESTS=1)",
    ),
    (
        "snapshots",
        "fail on pending insta snapshots (.snap.new, .pending-snap)",
    ),
    (
        "doc",
        "cargo doc --all-features as docs.rs builds it (--cfg docsrs), -D warnings",
    ),
    ("deps", "check the dependency direction of ARCHITECTURE.md"),
    (
        "links",
        "every link and citation in Markdown, Rust and TOML files resolves inside the repository",
    ),
    (
        "docs",
        "the Markdown names only released versions of our crates, locked versions of others, and features that exist",
    ),
    (
        "package",
        "every published crate's metadata, license and readme; cargo publish --workspace --dry-run",
    ),
    (
        "install",
        "the README's quick start and cargo install of both CLIs, built from the packaged crates only",
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
    "hack",
    "msrv",
    "test",
    "snapshots",
    "doc",
    "deps",
    "links",
    "docs",
    "package",
    "install",
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
        "  {:<14}every task below, in order (what CI runs), inside `provision`\n",
        "ci"
    ));
    out.push_str(&format!(
        "  {:<14}run -- COMMAND with what the tests need: installs cargo-deny, cargo-hack, PostgreSQL\n{:<16}(TLS, PgBouncer), the Python peer, libfiu, chromium, promtool, iproute2 and\n{:<16}iptables when missing (xtask/ci/provision.sh)\n",
        "provision", "", ""
    ));
    for (name, what) in TASKS.iter().chain(MANUAL_TASKS) {
        out.push_str(&format!("  {name:<14}{what}\n"));
    }
    out
}

fn run(task: &str) -> Result<()> {
    match task {
        "ci" => {
            // Provisioned once: the script runs this binary again inside the
            // environment it made (servers, tools, EFFECT_REQUIRE_*).
            if std::env::var_os(PROVISIONED).is_none() && std::env::var_os(NO_PROVISION).is_none() {
                let exe = std::env::current_exe().context("locating the xtask binary")?;
                // A clean clone gains nothing from incremental state, and it
                // is gigabytes on a machine whose disk is shared.
                let incremental =
                    std::env::var_os("CARGO_INCREMENTAL").unwrap_or_else(|| "0".into());
                return provision_with(
                    &[exe.as_os_str(), "ci".as_ref()],
                    &[("CARGO_INCREMENTAL", &incremental)],
                );
            }
            for step in CI_STEPS {
                eprintln!("== xtask {step}");
                run(step)?;
            }
            Ok(())
        }
        "provision" => {
            let command: Vec<std::ffi::OsString> = std::env::args_os()
                .skip(2)
                .skip_while(|a| a == "--")
                .collect();
            if command.is_empty() {
                bail!("usage: cargo xtask provision -- COMMAND [ARGS...]");
            }
            let command: Vec<&std::ffi::OsStr> = command.iter().map(|a| a.as_os_str()).collect();
            provision(&command)
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
                .args(["test", "--workspace", "--all-features", "--no-fail-fast"])
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
            // As docs.rs builds them: every feature, `--cfg docsrs` (the
            // crates' `doc(cfg)` labels need nightly's `doc_cfg`, which
            // RUSTC_BOOTSTRAP allows on the pinned stable toolchain).
            let status = Command::new("cargo")
                .args(["doc", "--workspace", "--no-deps", "--all-features"])
                .env("RUSTDOCFLAGS", "--cfg docsrs -D warnings")
                .env("RUSTC_BOOTSTRAP", "1")
                .status()
                .context("running cargo doc")?;
            check(status, "cargo doc (docs.rs flags)")
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
        "msrv" => {
            let problems = msrv::problems(std::path::Path::new("."))?;
            if problems.is_empty() {
                Ok(())
            } else {
                bail!("{}", problems.join("\n"))
            }
        }
        "docs" => {
            let problems = docs::problems(std::path::Path::new("."))?;
            if problems.is_empty() {
                Ok(())
            } else {
                bail!("{} problems:\n{}", problems.len(), problems.join("\n"))
            }
        }
        "package" => package::check(std::path::Path::new(".")),
        "install" => install::check(std::path::Path::new(".")),
        "hack" => {
            let installed = Command::new("cargo")
                .args(["hack", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !installed {
                bail!(
                    "cargo-hack is not installed; install it with `cargo install cargo-hack --locked` (`cargo xtask ci` does)"
                );
            }
            let crates = package::published_crates(std::path::Path::new("."))?;
            let mut args = vec![
                "hack",
                "check",
                "--each-feature",
                // `lint` and `features` already build with all features and without defaults.
                "--exclude-all-features",
                "--no-dev-deps",
                "--lib",
                "--bins",
            ];
            for krate in &crates {
                args.push("--package");
                args.push(&krate.name);
            }
            cargo(&args)
        }
        "deny" => {
            // Not skipped when missing: a check that silently does not run
            // lets a disallowed license or a known advisory land.
            let installed = Command::new("cargo")
                .args(["deny", "--version"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !installed {
                bail!(
                    "cargo-deny is not installed; install it with `cargo install cargo-deny --locked` (`cargo xtask ci` does)"
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
            "effect-conformance",
            "effect-testkit",
            "agent-runtime",
            // Sealing and its key handling are the executor's
            // (effect_exec::secrets): a store keeps sealed values opaquely.
            "chacha20poly1305",
            "base64",
            "zeroize",
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

/// Crates whose normal dependencies are exactly the listed ones, so a user
/// of the crate compiles nothing else of the workspace: the conformance
/// suite a store's author runs depends on the contract the store implements
/// (effect-core) and the JSON it writes, never on the executor or a store.
const ONLY: &[(&str, &[&str])] = &[("effect-conformance", &["effect-core", "serde_json"])];

/// The direct normal dependencies `cargo tree --depth 1 --prefix none`
/// printed for a package (its first line is the package itself).
fn direct_dependencies(tree: &str) -> Vec<&str> {
    tree.lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// The dependencies in `direct` that `allowed` does not list.
fn unlisted<'a>(direct: &[&'a str], allowed: &[&str]) -> Vec<&'a str> {
    direct
        .iter()
        .copied()
        .filter(|dep| !allowed.contains(dep))
        .collect()
}

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
    for (package, allowed) in ONLY {
        let output = Command::new("cargo")
            .args([
                "tree",
                "--edges",
                "normal",
                "--depth",
                "1",
                "--prefix",
                "none",
                "--package",
                package,
            ])
            .output()
            .with_context(|| format!("running cargo tree for {package}"))?;
        check(output.status, "cargo tree")?;
        let tree = String::from_utf8_lossy(&output.stdout);
        let extra = unlisted(&direct_dependencies(&tree), allowed);
        if !extra.is_empty() {
            bail!(
                "{package} depends on {} beyond {}, which ARCHITECTURE.md#dependency-direction forbids",
                extra.join(", "),
                allowed.join(", ")
            );
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

/// Set in the environment `xtask/ci/provision.sh` runs its command in.
const PROVISIONED: &str = "EFFECT_CI_PROVISIONED";
/// Set to run `cargo xtask ci` in the environment as it is, provisioning nothing.
const NO_PROVISION: &str = "EFFECT_CI_NO_PROVISION";

/// Runs `command` inside `xtask/ci/provision.sh`: the tools and servers the
/// steps need, installed or started when missing, stopped when it ends.
fn provision(command: &[&std::ffi::OsStr]) -> Result<()> {
    provision_with(command, &[])
}

fn provision_with(command: &[&std::ffi::OsStr], envs: &[(&str, &std::ffi::OsStr)]) -> Result<()> {
    let script = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/ci/provision.sh"));
    let status = Command::new("bash")
        .arg(script)
        .args(command)
        .env(PROVISIONED, "1")
        .envs(envs.iter().copied())
        .status()
        .with_context(|| format!("running bash {}", script.display()))?;
    check(status, &format!("{}", script.display()))
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
    fn only_the_listed_direct_dependencies_pass() {
        let tree = "effect-conformance v0.1.0 (/x/crates/effect-conformance)\n\
                    effect-core v0.1.0 (/x/crates/effect-core)\n\
                    effect-exec v0.1.0 (/x/crates/effect-exec)\n\
                    serde_json v1.0.154\n";
        let direct = direct_dependencies(tree);
        assert_eq!(direct, ["effect-core", "effect-exec", "serde_json"]);
        assert_eq!(
            unlisted(&direct, &["effect-core", "serde_json"]),
            ["effect-exec"]
        );
        assert!(unlisted(&direct[..1], &["effect-core", "serde_json"]).is_empty());
    }

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
