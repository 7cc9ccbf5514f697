//! `cargo xtask package`: every crate that will be published is ready for
//! crates.io and docs.rs.
//!
//! - Its manifest has a `description`, `readme`, `license`, `repository`,
//!   `documentation`, `keywords`, `categories`, `rust-version` and a
//!   `[package.metadata.docs.rs]` table.
//! - `cargo package --list` holds its `LICENSE` (identical to the
//!   repository's) and its readme.
//! - CHANGELOG.md's list of public crates is exactly the published ones.
//! - `cargo publish --workspace --dry-run` packages every published crate in
//!   dependency order and builds each from its package, the workspace's
//!   other crates coming from their packages too.

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
    let changelog =
        fs::read_to_string(root.join("CHANGELOG.md")).context("reading CHANGELOG.md")?;
    problems.extend(changelog_problems(&changelog, &names));
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    // Every published crate, in dependency order, each built from its
    // package against the others' packages (cargo's local overlay).
    forget_overlay_extractions(&crates)?;
    forget_overlay_builds(&crate::install::target_dir(root)?, &crates)?;
    eprintln!("== cargo publish --workspace --dry-run");
    let status = Command::new("cargo")
        .args(["publish", "--workspace", "--dry-run", "--allow-dirty"])
        .status()
        .context("running cargo publish --dry-run")?;
    if !status.success() {
        bail!("cargo publish --workspace --dry-run failed ({status})");
    }
    Ok(())
}

/// Removes what an earlier dry run extracted of `crates` from cargo's local
/// overlay registry (`$CARGO_HOME/registry/src/-HASH/NAME-VERSION`): cargo
/// reuses an extracted package of the same name and version instead of the
/// one it just packaged, so a second run on the same machine would build the
/// first run's sources.
fn forget_overlay_extractions(crates: &[Crate]) -> Result<()> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    let Some(sources) = home.map(|home| home.join("registry").join("src")) else {
        return Ok(());
    };
    let Ok(registries) = fs::read_dir(&sources) else {
        return Ok(());
    };
    for registry in registries {
        let registry = registry?.path();
        // Named registries are `NAME-HASH` (`index.crates.io-...`); the
        // overlay has no name.
        let overlay = registry
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with('-'));
        if !overlay {
            continue;
        }
        for extracted in fs::read_dir(&registry)? {
            let extracted = extracted?.path();
            let Some(name) = extracted
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
            else {
                continue;
            };
            if crates
                .iter()
                .any(|krate| is_extraction_of(&name, &krate.name))
            {
                fs::remove_dir_all(&extracted)
                    .with_context(|| format!("removing {}", extracted.display()))?;
            }
        }
    }
    Ok(())
}

/// Removes the fingerprints of what an earlier dry run compiled from cargo's
/// overlay (a dependency's sources under `registry/src/-HASH/`): cargo takes
/// a registry package of the same name and version for unchanged and would
/// link the first run's build of it, not the sources it just packaged.
fn forget_overlay_builds(target: &Path, crates: &[Crate]) -> Result<()> {
    let profile = target.join("debug");
    let Ok(deps) = fs::read_dir(profile.join("deps")) else {
        return Ok(());
    };
    for entry in deps {
        let path = entry?.path();
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let Some((krate, hash)) = crates
            .iter()
            .find_map(|krate| Some((krate, unit_of(&name, &krate.name)?)))
        else {
            continue;
        };
        // The dep-info file lists the sources the unit was compiled from.
        let sources = fs::read_to_string(&path).unwrap_or_default();
        if !sources.contains("/registry/src/-") {
            continue;
        }
        let fingerprint = profile
            .join(".fingerprint")
            .join(format!("{}-{hash}", krate.name));
        if fingerprint.is_dir() {
            fs::remove_dir_all(&fingerprint)
                .with_context(|| format!("removing {}", fingerprint.display()))?;
        }
    }
    Ok(())
}

/// The hash of a compiled unit's dep-info file (`LIB_NAME-HASH.d`, the
/// crate's name with `_` for `-`) when it is one of `krate`.
fn unit_of<'a>(file: &'a str, krate: &str) -> Option<&'a str> {
    let lib = krate.replace('-', "_");
    let hash = file
        .strip_prefix(lib.as_str())?
        .strip_prefix('-')?
        .strip_suffix(".d")?;
    (!hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit())).then_some(hash)
}

/// Whether `dir` (`NAME-VERSION`) is an extracted package of `krate`.
fn is_extraction_of(dir: &str, krate: &str) -> bool {
    dir.strip_prefix(krate)
        .and_then(|rest| rest.strip_prefix('-'))
        .is_some_and(|version| version.starts_with(|c: char| c.is_ascii_digit()))
}

/// A crate under `crates/` that is not `publish = false`.
#[derive(Debug)]
pub struct Crate {
    pub name: String,
    pub manifest: String,
}

impl Crate {
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
    for key in [
        "description",
        "readme",
        "license",
        "repository",
        "documentation",
        "keywords",
        "categories",
        "rust-version",
    ] {
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

/// The crates CHANGELOG.md's "Public crates" list names, against `published`.
fn changelog_problems(changelog: &str, published: &[&str]) -> Vec<String> {
    let Some(list) = changelog.split("**Public crates**").nth(1) else {
        return vec!["CHANGELOG.md has no **Public crates** list".to_owned()];
    };
    let listed: Vec<&str> = list
        .lines()
        .skip_while(|l| !l.starts_with("- `"))
        .take_while(|l| l.starts_with("- `"))
        .filter_map(|l| l.strip_prefix("- `")?.split('`').next())
        .collect();
    let mut problems = Vec::new();
    for name in published {
        if !listed.contains(name) {
            problems.push(format!("CHANGELOG.md's public crates do not list {name}"));
        }
    }
    for name in &listed {
        if !published.contains(name) {
            problems.push(format!(
                "CHANGELOG.md lists {name} as public, but it is not published"
            ));
        }
    }
    problems
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
    fn only_an_extracted_package_of_the_crate_is_forgotten() {
        assert!(is_extraction_of("effect-core-0.1.0", "effect-core"));
        assert!(is_extraction_of("agent-effect-0.2.0", "agent-effect"));
        // Another crate whose name starts with this one's.
        assert!(!is_extraction_of("agent-effect-ops-0.1.0", "agent-effect"));
        assert!(!is_extraction_of("effect-core", "effect-core"));
        assert!(!is_extraction_of("effect-corex-0.1.0", "effect-core"));
    }

    #[test]
    fn only_a_compiled_unit_of_the_crate_is_forgotten() {
        assert_eq!(
            unit_of("effect_core-c5b386226b92d462.d", "effect-core"),
            Some("c5b386226b92d462")
        );
        assert_eq!(unit_of("agent_effect_ops-0a1b.d", "agent-effect"), None);
        assert_eq!(
            unit_of("effect_core-c5b386226b92d462.rlib", "effect-core"),
            None
        );
        assert_eq!(unit_of("effect_core-.d", "effect-core"), None);
        assert_eq!(unit_of("effect_corex-0a1b.d", "effect-core"), None);
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
    fn the_changelog_lists_exactly_the_published_crates() {
        let root = workspace();
        let crates = published_crates(&root).expect("the workspace is readable");
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        let changelog = fs::read_to_string(root.join("CHANGELOG.md")).expect("a changelog");
        assert_eq!(changelog_problems(&changelog, &names), Vec::<String>::new());
        let text = "**Public crates**:\n\n- `a`: the first\n- `c`: not ours\n\nmore\n";
        assert_eq!(
            changelog_problems(text, &["a", "b"]),
            [
                "CHANGELOG.md's public crates do not list b",
                "CHANGELOG.md lists c as public, but it is not published"
            ]
        );
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
