//! `cargo xtask install`: a user's build from the packaged crates alone.
//!
//! `cargo package --workspace` makes every published crate's `.crate` file
//! (`cargo xtask package` has verified that each builds from it). They are
//! unpacked into a temporary directory, away from the workspace, and then:
//!
//! - a new project holding the README's quick start, verbatim, depends on
//!   `production-agent-systems` by version, with `[patch.crates-io]` naming
//!   the unpacked packages (the crates are not on crates.io yet); it runs
//!   twice and prints `confirmed`, then `confirmed (replayed)`;
//! - `cargo install` builds both CLIs from their unpacked packages, with the
//!   same patch, and each runs.
//!
//! No manifest involved has a path into the workspace: the packaged
//! manifests name their dependencies by version, and the check fails if one
//! names a path. The workspace's Cargo.lock pins the other crates' versions,
//! and the target directory is shared, so dependencies are not rebuilt.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};

use crate::package::published_crates;

/// The two CLIs the README installs.
const CLIS: &[(&str, &[&str])] = &[
    (
        "agent-effect",
        &["--scenario", "after-commit-before-ack", "--db", "memory:"],
    ),
    ("agent-effect-ops", &["--version"]),
];

/// Runs the install test for the workspace at `root`.
pub fn check(root: &Path) -> Result<()> {
    let root = fs::canonicalize(root).context("resolving the workspace root")?;
    let version = workspace_version(&root)?;
    let crates = published_crates(&root)?;
    let target = target_dir(&root)?;

    eprintln!("== cargo package --workspace (verified by xtask package)");
    run(Command::new("cargo")
        .args(["package", "--workspace", "--no-verify", "--allow-dirty"])
        .current_dir(&root))?;

    let scratch = tempfile::Builder::new()
        .prefix("xtask-install-")
        .tempdir()
        .context("creating a temporary directory")?;
    let unpacked = scratch.path().join("packages");
    fs::create_dir_all(&unpacked)?;
    let mut patch = String::from("[patch.crates-io]\n");
    let mut config_args = Vec::new();
    for krate in &crates {
        let file = target
            .join("package")
            .join(format!("{}-{version}.crate", krate.name));
        ensure!(file.is_file(), "{} was not packaged", file.display());
        run(Command::new("tar")
            .arg("-xzf")
            .arg(&file)
            .arg("-C")
            .arg(&unpacked))?;
        let dir = unpacked.join(format!("{}-{version}", krate.name));
        let manifest = fs::read_to_string(dir.join("Cargo.toml"))
            .with_context(|| format!("reading the packaged manifest of {}", krate.name))?;
        if let Some(line) = manifest.lines().find(|l| l.contains("path = \"..")) {
            bail!(
                "{}'s packaged manifest points back into the workspace: {line}",
                krate.name
            );
        }
        patch.push_str(&format!(
            "{} = {{ path = {:?} }}\n",
            krate.name,
            dir.display().to_string()
        ));
        config_args.push(format!(
            "patch.crates-io.{}.path={:?}",
            krate.name,
            dir.display().to_string()
        ));
    }

    eprintln!("== the README's quick start against the packages");
    let project = scratch.path().join("quick-start");
    fs::create_dir_all(project.join("src"))?;
    fs::write(
        project.join("Cargo.toml"),
        format!(
            "[package]\nname = \"quick-start\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nproduction-agent-systems = \"{version}\"\n\
             serde = {{ version = \"1\", features = [\"derive\"] }}\nserde_json = \"1\"\n\n\
             [workspace]\n\n{patch}"
        ),
    )?;
    fs::write(
        project.join("src/main.rs"),
        quick_start(&fs::read_to_string(root.join("README.md"))?)?,
    )?;
    // The workspace's versions of every other crate; cargo drops the rest.
    fs::copy(root.join("Cargo.lock"), project.join("Cargo.lock"))?;
    let mut lines = Vec::new();
    for _ in 0..2 {
        let output = Command::new("cargo")
            .args(["run", "--quiet"])
            .current_dir(&project)
            .env("CARGO_TARGET_DIR", &target)
            .output()
            .context("running cargo run in the quick-start project")?;
        ensure!(
            output.status.success(),
            "the quick start failed against the packages:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        lines.push(String::from_utf8_lossy(&output.stdout).trim().to_owned());
    }
    ensure!(
        lines
            == [
                "invoice:INV-1042:capture is confirmed",
                "invoice:INV-1042:capture is confirmed (replayed)"
            ],
        "the quick start printed {lines:?}"
    );

    for (cli, args) in CLIS {
        eprintln!("== cargo install {cli} from its package");
        let bin_root = scratch.path().join("bin");
        let mut install = Command::new("cargo");
        install.arg("install");
        for arg in &config_args {
            install.arg("--config").arg(arg);
        }
        install
            .arg("--path")
            .arg(unpacked.join(format!("{cli}-{version}")))
            .arg("--root")
            .arg(&bin_root)
            .arg("--debug")
            .arg("--quiet")
            .current_dir(scratch.path())
            .env("CARGO_TARGET_DIR", &target);
        run(&mut install)?;
        let output = Command::new(bin_root.join("bin").join(cli))
            .args(*args)
            .current_dir(scratch.path())
            .output()
            .with_context(|| format!("running the installed {cli}"))?;
        ensure!(
            output.status.success(),
            "the installed {cli} {} failed:\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The fenced block after `<!-- verbatim: .../quick_start.rs -->` in the README.
pub fn quick_start(readme: &str) -> Result<String> {
    let marker = "<!-- verbatim: crates/production-agent-systems/examples/quick_start.rs -->";
    let after = readme
        .split_once(marker)
        .context("the README quotes the quick start")?
        .1;
    let body = after
        .split_once("```rust\n")
        .context("a rust block follows the quick start's marker")?
        .1;
    Ok(body
        .split_once("```\n")
        .context("the quick start's block is closed")?
        .0
        .to_owned())
}

/// `[workspace.package] version`.
fn workspace_version(root: &Path) -> Result<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "version").then(|| value.trim().trim_matches('"').to_owned())
        })
        .context("Cargo.toml has no [workspace.package] version")
}

/// The target directory cargo uses for the workspace.
pub(crate) fn target_dir(root: &Path) -> Result<PathBuf> {
    let output = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    ensure!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    metadata["target_directory"]
        .as_str()
        .map(PathBuf::from)
        .context("cargo metadata names no target directory")
}

fn run(command: &mut Command) -> Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    ensure!(status.success(), "{command:?} failed ({status})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quick_start_is_the_readme_block() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let readme = fs::read_to_string(root.join("README.md")).expect("a README");
        let example = fs::read_to_string(
            root.join("crates/production-agent-systems/examples/quick_start.rs"),
        )
        .expect("the example");
        assert_eq!(quick_start(&readme).expect("quoted"), example);
        assert_eq!(workspace_version(&root).expect("a version"), "0.1.0");
    }
}
