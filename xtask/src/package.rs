//! `cargo xtask package`: every crate that will be published is ready for
//! crates.io and docs.rs.
//!
//! - Its manifest has a `description`, a `readme` and a
//!   `[package.metadata.docs.rs]` table.
//! - `cargo package --list` holds its `LICENSE` (identical to the
//!   repository's) and its readme.
//! - A crate that depends on no other crate of the workspace (a leaf: only it
//!   can resolve its dependencies on crates.io before the others are
//!   published) passes `cargo publish --dry-run`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

/// Runs every check on the workspace at `root`.
pub fn check(root: &Path) -> Result<()> {
    let crates = published_crates(root)?;
    let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    let mut problems = Vec::new();
    for krate in &crates {
        problems.extend(manifest_problems(root, krate)?);
        let listed = package_list(&krate.name)?;
        problems.extend(list_problems(krate, &listed));
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    for krate in crates.iter().filter(|c| c.is_leaf(&names)) {
        eprintln!("== cargo publish --dry-run -p {}", krate.name);
        let status = Command::new("cargo")
            .args(["publish", "--dry-run", "--allow-dirty", "-p", &krate.name])
            .status()
            .context("running cargo publish --dry-run")?;
        if !status.success() {
            bail!(
                "cargo publish --dry-run -p {} failed ({status})",
                krate.name
            );
        }
    }
    Ok(())
}

/// A crate under `crates/` that is not `publish = false`.
#[derive(Debug)]
pub struct Crate {
    pub name: String,
    pub manifest: String,
}

impl Crate {
    /// True when its `[dependencies]` name no crate of the workspace.
    pub fn is_leaf(&self, workspace: &[&str]) -> bool {
        let dependencies = section(&self.manifest, "dependencies");
        !dependencies.lines().any(|line| {
            let key = line.split(['=', '.']).next().unwrap_or("").trim();
            workspace.contains(&key)
        })
    }

    /// The `readme` field's value.
    fn readme(&self) -> Option<String> {
        section(&self.manifest, "package").lines().find_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "readme").then(|| value.trim().trim_matches('"').to_owned())
        })
    }
}

/// The crates under `root/crates` that will be published, by name.
pub fn published_crates(root: &Path) -> Result<Vec<Crate>> {
    let mut out = Vec::new();
    let dir = root.join("crates");
    let mut dirs: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    dirs.sort();
    for path in dirs {
        let manifest_path = path.join("Cargo.toml");
        if !manifest_path.is_file() {
            continue;
        }
        let manifest = fs::read_to_string(&manifest_path)
            .with_context(|| format!("reading {}", manifest_path.display()))?;
        let unpublished = section(&manifest, "package")
            .lines()
            .any(|l| l.replace(' ', "") == "publish=false");
        if unpublished {
            continue;
        }
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .context("a crate directory has a name")?;
        out.push(Crate { name, manifest });
    }
    Ok(out)
}

/// What the manifest lacks, and whether the crate's LICENSE is the root's.
fn manifest_problems(root: &Path, krate: &Crate) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let package = section(&krate.manifest, "package");
    for key in ["description", "readme", "license", "repository"] {
        let present = package
            .lines()
            .any(|l| l.split(['=', '.']).next().is_some_and(|k| k.trim() == key));
        if !present {
            problems.push(format!("{}: Cargo.toml has no `{key}`", krate.name));
        }
    }
    if !krate.manifest.contains("[package.metadata.docs.rs]") {
        problems.push(format!(
            "{}: Cargo.toml has no [package.metadata.docs.rs]",
            krate.name
        ));
    }
    let license = root.join("LICENSE");
    let own = root.join("crates").join(&krate.name).join("LICENSE");
    let expected = fs::read(&license).with_context(|| format!("reading {}", license.display()))?;
    match fs::read(&own) {
        Ok(text) if text == expected => {}
        Ok(_) => problems.push(format!(
            "{}: LICENSE differs from the repository's LICENSE",
            krate.name
        )),
        Err(_) => problems.push(format!(
            "{}: no LICENSE (copy the repository's)",
            krate.name
        )),
    }
    Ok(problems)
}

/// What `cargo package --list` lacks.
fn list_problems(krate: &Crate, listed: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    let has = |name: &str| listed.iter().any(|l| l == name);
    if !has("LICENSE") {
        problems.push(format!("{}: its package has no LICENSE", krate.name));
    }
    // Cargo packages the readme at the package root under its own file name.
    if let Some(readme) = krate.readme() {
        let file = Path::new(&readme)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or(readme);
        if !has(&file) {
            problems.push(format!("{}: its package has no {file}", krate.name));
        }
    }
    problems
}

fn package_list(name: &str) -> Result<Vec<String>> {
    let output = Command::new("cargo")
        .args(["package", "--list", "--allow-dirty", "-p", name])
        .output()
        .context("running cargo package --list")?;
    if !output.status.success() {
        bail!(
            "cargo package --list -p {name} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// The lines of the `[name]` table of a manifest, up to the next table.
fn section<'a>(manifest: &'a str, name: &str) -> &'a str {
    let header = format!("[{name}]");
    let Some(start) = manifest
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.trim() == header)
        .map(|(at, line)| at + line.len() + 1)
    else {
        return "";
    };
    let rest = manifest.get(start..).unwrap_or("");
    let end = rest
        .lines()
        .scan(0, |offset, line| {
            let at = *offset;
            *offset += line.len() + 1;
            Some((at, line))
        })
        .find(|(_, line)| line.trim_start().starts_with('['))
        .map_or(rest.len(), |(at, _)| at);
    &rest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    #[test]
    fn every_published_crate_has_its_metadata_and_license() {
        let root = workspace();
        let crates = published_crates(&root).expect("the workspace is readable");
        assert!(crates.len() >= 8, "{crates:?}");
        let problems: Vec<String> = crates
            .iter()
            .flat_map(|c| manifest_problems(&root, c).expect("readable"))
            .collect();
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    #[test]
    fn effect_core_and_effect_schema_are_the_leaves() {
        let crates = published_crates(&workspace()).expect("the workspace is readable");
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        let leaves: Vec<&str> = crates
            .iter()
            .filter(|c| c.is_leaf(&names))
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(leaves, ["effect-core", "effect-schema"]);
    }

    #[test]
    fn sections_end_at_the_next_table() {
        let manifest = "[package]\nname = \"a\"\nreadme = \"about.txt\"\n\n[dependencies]\nb.workspace = true\n[dev-dependencies]\nc = \"1\"\n";
        assert_eq!(section(manifest, "dependencies"), "b.workspace = true\n");
        let krate = Crate {
            name: "a".to_owned(),
            manifest: manifest.to_owned(),
        };
        assert_eq!(krate.readme().as_deref(), Some("about.txt"));
        assert!(!krate.is_leaf(&["b"]));
        assert!(krate.is_leaf(&["c"]));
    }

    #[test]
    fn a_package_without_license_or_readme_is_reported() {
        let krate = Crate {
            name: "a".to_owned(),
            manifest: "[package]\nreadme = \"../../README.md\"\n".to_owned(),
        };
        let listed = ["Cargo.toml".to_owned(), "src/lib.rs".to_owned()];
        assert_eq!(
            list_problems(&krate, &listed),
            [
                "a: its package has no LICENSE",
                "a: its package has no README.md"
            ]
        );
        let listed = ["LICENSE".to_owned(), "README.md".to_owned()];
        assert!(list_problems(&krate, &listed).is_empty());
    }
}
