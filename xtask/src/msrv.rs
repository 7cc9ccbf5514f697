//! `cargo xtask msrv`: the workspace builds on its declared `rust-version`.
//!
//! The pinned toolchain (`rust-toolchain.toml`) is the one every other step
//! builds with, so it must be the declared minimum: then `lint`, `test` and
//! `doc` are the build on the MSRV. This step checks that they agree, that
//! every published crate inherits the workspace's `rust-version`, and that
//! no dependency in Cargo.lock declares a newer one (a user on the minimum
//! would fail to build it).

use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use semver::Version;

/// `major.minor` of a version text (`1.95`, `1.95.0`).
pub fn minor(text: &str) -> Option<(u64, u64)> {
    let mut parts = text.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// The value of `key = "..."` in `text`'s first table holding it.
fn value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let (k, v) = line.split_once('=')?;
        (k.trim() == key).then(|| v.trim().trim_matches('"'))
    })
}

/// Every problem of the workspace at `root`.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let toolchain = std::fs::read_to_string(root.join("rust-toolchain.toml"))
        .context("reading rust-toolchain.toml")?;
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).context("reading Cargo.toml")?;
    let channel = value(&toolchain, "channel").unwrap_or_default();
    let declared = value(&manifest, "rust-version").unwrap_or_default();
    let declared_minor = minor(declared);
    if declared_minor.is_none() || minor(channel) != declared_minor {
        problems.push(format!(
            "rust-toolchain.toml pins {channel:?} but Cargo.toml declares rust-version {declared:?}; \
             they must name the same release, so every step builds on the declared minimum"
        ));
    }
    for krate in crate::package::published_crates(root)? {
        if !krate.manifest.contains("rust-version.workspace = true") {
            problems.push(format!(
                "{}: Cargo.toml does not inherit rust-version (rust-version.workspace = true)",
                krate.name
            ));
        }
    }
    let Some((major, minor_version)) = declared_minor else {
        return Ok(problems);
    };
    let declared = Version::new(major, minor_version, u64::MAX);
    let output = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--all-features"])
        .current_dir(root)
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("reading cargo metadata's JSON")?;
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(needed) = package["rust_version"].as_str() else {
            continue;
        };
        let Some((a, b)) = minor(needed) else {
            continue;
        };
        if Version::new(a, b, 0) > declared {
            problems.push(format!(
                "{} {} needs Rust {needed}, newer than the declared rust-version {major}.{minor_version}",
                package["name"].as_str().unwrap_or("?"),
                package["version"].as_str().unwrap_or("?"),
            ));
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_compare_by_release() {
        assert_eq!(minor("1.95"), Some((1, 95)));
        assert_eq!(minor("1.95.0"), Some((1, 95)));
        assert_eq!(minor("stable"), None);
    }

    #[test]
    fn the_workspace_builds_on_its_declared_rust_version() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let problems = problems(&root).expect("the workspace is readable");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
