//! `cargo xtask docs`: the Markdown says what the crates are.
//!
//! - A `cargo add` line or a `[dependencies]` table in a ```toml block that
//!   names a crate with a version requirement names a version that exists:
//!   for a crate of this workspace, one CHANGELOG.md lists as released
//!   (`## [X.Y.Z] - YYYY-MM-DD`); without `--git`/`--path` it takes the crate
//!   from crates.io, so that needs a release too. For any other crate, the
//!   requirement matches a version in Cargo.lock.
//! - Every feature it enables is one the crate has (`cargo metadata`).
//! - In README.md's crate table, each feature a row names belongs to its
//!   crate, and the facade's row names every feature of the facade.
//! - A Markdown table is not cut in two by a blank line between its rows.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};
use semver::{Version, VersionReq};

/// What is known about one crate name: its versions in the lock file (or the
/// workspace) and the features of each.
#[derive(Debug, Default, Clone)]
pub struct Known {
    /// True for a crate of this workspace.
    pub workspace: bool,
    /// Each version, with its features.
    pub versions: Vec<(Version, BTreeSet<String>)>,
}

impl Known {
    fn features(&self) -> BTreeSet<&str> {
        self.versions
            .iter()
            .flat_map(|(_, f)| f.iter().map(String::as_str))
            .collect()
    }
}

/// The crates `cargo metadata` knows, by name.
pub fn known_crates(root: &Path) -> Result<BTreeMap<String, Known>> {
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
    let mut known: BTreeMap<String, Known> = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(version)) = (package["name"].as_str(), package["version"].as_str())
        else {
            continue;
        };
        let version = Version::parse(version).with_context(|| format!("{name} {version}"))?;
        let features = package["features"]
            .as_object()
            .map(|f| f.keys().cloned().collect())
            .unwrap_or_default();
        let entry = known.entry(name.to_owned()).or_default();
        entry.workspace |= package["source"].is_null();
        entry.versions.push((version, features));
    }
    Ok(known)
}

/// The versions CHANGELOG.md lists as released, with a date.
pub fn released(changelog: &str) -> Vec<Version> {
    changelog
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("## [")?;
            let (version, date) = rest.split_once("] - ")?;
            let date = date.trim();
            let dated = date.len() == 10
                && date.chars().enumerate().all(|(i, c)| {
                    if i == 4 || i == 7 {
                        c == '-'
                    } else {
                        c.is_ascii_digit()
                    }
                });
            if !dated {
                return None;
            }
            Version::parse(version).ok()
        })
        .collect()
}

/// One crate a document depends on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependency {
    pub name: String,
    pub requirement: Option<String>,
    /// From git or a path, not crates.io.
    pub local: bool,
    pub features: Vec<String>,
}

/// Every problem in the Markdown files under `root`.
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let known = known_crates(root)?;
    let changelog = std::fs::read_to_string(root.join("CHANGELOG.md")).unwrap_or_default();
    let released = released(&changelog);
    let mut problems = Vec::new();
    for path in crate::links::text_files(root)? {
        if path.extension().is_none_or(|e| e != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let shown = path
            .strip_prefix(root)
            .unwrap_or(&path)
            .display()
            .to_string();
        for (line, dependency) in dependencies(&text) {
            for problem in check(&dependency, &known, &released) {
                problems.push(format!("{shown}:{line}: {problem}"));
            }
        }
        for line in split_tables(&text) {
            problems.push(format!(
                "{shown}:{line}: a blank line cuts this table in two; remove it"
            ));
        }
        if shown == "README.md" {
            for (line, problem) in crate_table_problems(&text, &known) {
                problems.push(format!("{shown}:{line}: {problem}"));
            }
        }
    }
    Ok(problems)
}

/// What is wrong with one dependency a document names.
pub fn check(
    dependency: &Dependency,
    known: &BTreeMap<String, Known>,
    released: &[Version],
) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(krate) = known.get(&dependency.name) else {
        return problems;
    };
    let name = &dependency.name;
    if krate.workspace {
        if !dependency.local || dependency.requirement.is_some() {
            let requirement = dependency.requirement.as_deref().unwrap_or("*");
            match VersionReq::parse(requirement) {
                Err(err) => problems.push(format!("{name} = {requirement:?}: {err}")),
                Ok(req) if !released.iter().any(|v| req.matches(v)) => problems.push(format!(
                    "{name} {requirement} is not a released version (CHANGELOG.md lists none as released with a date); \
                     depend on it with --git or --path until it is published"
                )),
                Ok(_) => {}
            }
        }
    } else if let Some(requirement) = &dependency.requirement {
        match VersionReq::parse(requirement) {
            Err(err) => problems.push(format!("{name} = {requirement:?}: {err}")),
            Ok(req) if !krate.versions.iter().any(|(v, _)| req.matches(v)) => {
                let locked: Vec<String> =
                    krate.versions.iter().map(|(v, _)| v.to_string()).collect();
                problems.push(format!(
                    "{name} {requirement} matches no version this workspace builds with ({})",
                    locked.join(", ")
                ));
            }
            Ok(_) => {}
        }
    }
    let features = krate.features();
    for feature in &dependency.features {
        if !features.contains(feature.as_str()) {
            problems.push(format!("{name} has no feature `{feature}`"));
        }
    }
    problems
}

/// The dependencies named by `cargo add` lines and by ```toml dependency
/// tables, with their 1-based line numbers.
pub fn dependencies(text: &str) -> Vec<(usize, Dependency)> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    let mut table = String::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = line.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            fence = match fence {
                Some(_) => None,
                None => Some(info.trim().to_owned()),
            };
            table.clear();
            continue;
        }
        // `cargo add` in a code block or a code span.
        for command in cargo_add_commands(line) {
            out.extend(parse_cargo_add(&command).into_iter().map(|d| (number, d)));
        }
        if fence.as_deref() == Some("toml") {
            if trimmed.starts_with('[') {
                table = trimmed.trim_matches(['[', ']']).to_owned();
            } else if table.ends_with("dependencies")
                && let Some(dependency) = parse_toml_dependency(trimmed)
            {
                out.push((number, dependency));
            }
        }
    }
    out
}

/// The `cargo add ...` commands in a line, up to a comment or a code span's end.
fn cargo_add_commands(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("cargo add ") {
        let command = &rest[at..];
        let end = command.find(['`', '#']).unwrap_or(command.len());
        out.push(command[..end].trim().to_owned());
        rest = &command[end..];
    }
    out
}

/// The crates of one `cargo add` command.
pub fn parse_cargo_add(command: &str) -> Vec<Dependency> {
    let words: Vec<&str> = command.split_whitespace().skip(2).collect();
    let mut names = Vec::new();
    let mut features = Vec::new();
    let mut local = false;
    let mut i = 0;
    while i < words.len() {
        let word = words[i];
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) if flag.starts_with('-') => (flag, Some(value)),
            _ => (word, None),
        };
        let mut value = || {
            inline.map(str::to_owned).or_else(|| {
                i += 1;
                words.get(i).map(|w| (*w).to_owned())
            })
        };
        match flag {
            "--features" | "-F" => {
                if let Some(list) = value() {
                    features.extend(
                        list.split([',', ' '])
                            .filter(|f| !f.is_empty() && !f.contains('/'))
                            .map(str::to_owned),
                    );
                }
            }
            "--git" | "--path" => {
                local = true;
                value();
            }
            "--branch" | "--tag" | "--rev" | "--rename" | "--registry" | "--package" | "-p"
            | "--manifest-path" | "--target" => {
                value();
            }
            _ if flag.starts_with('-') => {}
            _ => names.push(word.to_owned()),
        }
        i += 1;
    }
    names
        .into_iter()
        .map(|spec| {
            let (name, requirement) = match spec.split_once('@') {
                Some((name, req)) => (name.to_owned(), Some(req.to_owned())),
                None => (spec, None),
            };
            Dependency {
                name,
                requirement,
                local,
                features: features.clone(),
            }
        })
        .collect()
}

/// `name = "req"` or `name = { version = "req", features = [..], ... }`.
pub fn parse_toml_dependency(line: &str) -> Option<Dependency> {
    let (name, value) = line.split_once('=')?;
    let name = name.trim();
    if name.is_empty() || name.contains(['.', ' ', '"']) {
        return None;
    }
    let value = value.trim();
    if let Some(req) = value.strip_prefix('"') {
        return Some(Dependency {
            name: name.to_owned(),
            requirement: Some(req.trim_end_matches('"').to_owned()),
            local: false,
            features: Vec::new(),
        });
    }
    let inner = value.strip_prefix('{')?.trim_end().strip_suffix('}')?;
    let quoted = |key: &str| -> Option<String> {
        let at = inner.find(&format!("{key} ="))?;
        let rest = &inner[at..];
        let start = rest.find('"')? + 1;
        let end = rest[start..].find('"')? + start;
        Some(rest[start..end].to_owned())
    };
    let features = inner
        .find("features =")
        .and_then(|at| {
            let rest = &inner[at..];
            let start = rest.find('[')? + 1;
            let end = rest.find(']')?;
            Some(
                rest[start..end]
                    .split(',')
                    .map(|f| f.trim().trim_matches('"').to_owned())
                    .filter(|f| !f.is_empty())
                    .collect(),
            )
        })
        .unwrap_or_default();
    Some(Dependency {
        name: name.to_owned(),
        requirement: quoted("version"),
        local: inner.contains("git =") || inner.contains("path ="),
        features,
    })
}

/// The 1-based line numbers of table rows that follow a blank line that
/// follows a table row.
pub fn split_tables(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    (2..lines.len())
        .filter(|&i| {
            lines[i].trim_start().starts_with('|')
                && lines[i - 1].trim().is_empty()
                && lines[i - 2].trim_start().starts_with('|')
        })
        .map(|i| i + 1)
        .collect()
}

/// The facade, whose README row lists every feature.
const FACADE: &str = "production-agent-systems";

/// README.md's crate table: `| `crate` | ... (feature `x` ...) |` rows.
pub fn crate_table_problems(text: &str, known: &BTreeMap<String, Known>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((name, description)) = rest.split_once("` |") else {
            continue;
        };
        let Some(krate) = known.get(name).filter(|k| k.workspace) else {
            continue;
        };
        let features = krate.features();
        let named = named_features(description);
        for feature in &named {
            if !features.contains(feature.as_str()) {
                out.push((index + 1, format!("{name} has no feature `{feature}`")));
            }
        }
        if name == FACADE {
            for feature in &features {
                if *feature != "default" && !named.iter().any(|n| n == feature) {
                    out.push((
                        index + 1,
                        format!("the {name} row does not name its feature `{feature}`"),
                    ));
                }
            }
        }
    }
    out
}

/// The code spans of every parenthesis that starts with `feature`, or that
/// follows the word `features`.
fn named_features(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('(') {
        let before = rest[..open].trim_end();
        let Some(close) = rest[open..].find(')').map(|c| c + open) else {
            break;
        };
        let group = &rest[open + 1..close];
        if group.starts_with("feature") || before.ends_with("features") {
            out.extend(group.split('`').skip(1).step_by(2).map(str::to_owned));
        }
        rest = &rest[close + 1..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> BTreeMap<String, Known> {
        let features = |list: &[&str]| list.iter().map(|f| (*f).to_owned()).collect();
        BTreeMap::from([
            (
                "effect-testkit".to_owned(),
                Known {
                    workspace: true,
                    versions: vec![(Version::new(0, 1, 0), features(&["http"]))],
                },
            ),
            (
                "production-agent-systems".to_owned(),
                Known {
                    workspace: true,
                    versions: vec![(
                        Version::new(0, 1, 0),
                        features(&["default", "sqlite", "metrics"]),
                    )],
                },
            ),
            (
                "insta".to_owned(),
                Known {
                    workspace: false,
                    versions: vec![(Version::new(1, 43, 1), features(&["json", "redactions"]))],
                },
            ),
        ])
    }

    fn problems_of(text: &str, released: &[Version]) -> Vec<String> {
        dependencies(text)
            .into_iter()
            .flat_map(|(line, d)| {
                check(&d, &known(), released)
                    .into_iter()
                    .map(move |p| format!("{line}: {p}"))
            })
            .collect()
    }

    #[test]
    fn an_unreleased_version_of_a_workspace_crate_is_reported() {
        let text = "```toml\n[dev-dependencies]\neffect-testkit = \"0.1\"\ninsta = { version = \"1.43\", features = [\"json\"] }\n```\n";
        let problems = problems_of(text, &[]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].starts_with("3: effect-testkit 0.1 is not a released version"),
            "{problems:?}"
        );
        // Released with a date, it resolves.
        assert!(problems_of(text, &[Version::new(0, 1, 0)]).is_empty());
    }

    #[test]
    fn a_feature_the_crate_lacks_and_a_version_that_does_not_exist_are_reported() {
        let text = "```sh\ncargo add production-agent-systems --git https://example.invalid/x --features tokio\ncargo add insta@2 --features yaml\ncargo add production-agent-systems --features metrics\n```\n";
        let problems = problems_of(text, &[]);
        assert_eq!(
            problems,
            [
                "2: production-agent-systems has no feature `tokio`",
                "3: insta 2 matches no version this workspace builds with (1.43.1)",
                "3: insta has no feature `yaml`",
                "4: production-agent-systems * is not a released version (CHANGELOG.md lists none as released with a date); depend on it with --git or --path until it is published",
            ]
        );
    }

    #[test]
    fn git_and_path_dependencies_need_no_release() {
        let text = "`cargo add --git https://example.invalid/x effect-testkit`.\n```toml\n[dependencies]\neffect-testkit = { git = \"https://example.invalid/x\", features = [\"http\"] }\n```\n";
        assert!(
            problems_of(text, &[]).is_empty(),
            "{:?}",
            problems_of(text, &[])
        );
        assert_eq!(dependencies(text).len(), 2);
    }

    #[test]
    fn only_dated_changelog_sections_are_releases() {
        let changelog =
            "## [Unreleased]\n## [0.2.0] - not yet published\n## [0.1.0] - 2026-12-01\n";
        assert_eq!(released(changelog), [Version::new(0, 1, 0)]);
    }

    #[test]
    fn a_blank_line_inside_a_table_is_reported() {
        let text = "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n| 3 | 4 |\n\nprose\n";
        assert_eq!(split_tables(text), [5]);
        assert!(split_tables("| a |\n| --- |\n\nprose\n").is_empty());
    }

    #[test]
    fn the_facade_row_names_every_feature() {
        let text = "| `production-agent-systems` | the facade (features (`sqlite` default)) |\n| `effect-testkit` | fakes (feature `tokio` for async) |\n";
        let problems = crate_table_problems(text, &known());
        assert_eq!(
            problems,
            [
                (
                    1,
                    "the production-agent-systems row does not name its feature `metrics`"
                        .to_owned()
                ),
                (2, "effect-testkit has no feature `tokio`".to_owned()),
            ]
        );
    }

    #[test]
    fn the_repository_documents_only_what_exists() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let problems = problems(&root).expect("the repository is readable");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }
}
