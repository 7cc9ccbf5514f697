//! The reference check: every link and citation in the repository's Markdown,
//! Rust and TOML files points at a file (and a heading) inside the repository.
//!
//! - A relative Markdown link (`[text](path#anchor)`, `[label]: path`) names
//!   an existing file or directory, resolved from the linking file as GitHub
//!   resolves it; its `#anchor`, when the target is Markdown, is the GitHub
//!   anchor of one of the target's headings.
//! - A citation in any text (`docs/spec.md §4`, `ARCHITECTURE.md#invariants`,
//!   `include_str!("../../README.md")`) names an existing Markdown file, from
//!   the repository root or from the citing file's directory or one of its
//!   ancestors; `§N` names a heading that starts with `N.`, `#anchor` a heading
//!   with that anchor.
//! - A path in a Markdown code span that starts with a top-level directory of
//!   the repository (`` `crates/effect-bench/src/check.rs` ``) exists.
//! - Nothing cites a file outside the repository or an issue number.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Component, Path, PathBuf};

use anyhow::{Context, Result};

/// Text that points outside the repository. Spelled in pieces so that this
/// file does not match itself.
const BANNED: &[(&str, &str)] = &[
    (
        concat!("SPEC", " §"),
        "cite docs/spec.md §N (the repository's own spec)",
    ),
    (concat!("../", "shared"), "a path outside the repository"),
    (concat!("shared", "/"), "a path outside the repository"),
    (
        concat!("WORKLOADS", ".md"),
        "cite docs/benchmarks.md instead",
    ),
    (
        concat!("STYLE", ".md"),
        "the style guide is not in the repository; cite ARCHITECTURE.md",
    ),
    (
        concat!("STYLE", " §"),
        "the style guide is not in the repository; cite ARCHITECTURE.md",
    ),
    (concat!("/work", "/"), "an absolute path of one machine"),
];

/// Top-level directories whose paths in Markdown code spans are checked.
const TREE_ROOTS: &[&str] = &["crates/", "docs/", "fixtures/", "examples/", "xtask/"];

/// Every reference problem in the repository at `root`, one line each
/// (`path:line: what`).
pub fn problems(root: &Path) -> Result<Vec<String>> {
    let root = &root
        .canonicalize()
        .with_context(|| format!("resolving {}", root.display()))?;
    let mut checker = Checker {
        root: root.to_path_buf(),
        headings: BTreeMap::new(),
        problems: Vec::new(),
    };
    for path in text_files(root)? {
        // This check and its tests quote what they look for.
        let relative = path.strip_prefix(root).unwrap_or(&path);
        if relative.starts_with("xtask/src/links") || relative == Path::new("xtask/src/links.rs") {
            continue;
        }
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let shown = relative.display().to_string();
        checker.check_file(&path, &shown, &text)?;
    }
    Ok(checker.problems)
}

/// The GitHub anchor of a heading's text: lowercase, spaces to `-`, every
/// character that is not alphanumeric, `-` or `_` dropped.
pub fn anchor(heading: &str) -> String {
    let text = strip_link_targets(heading);
    let mut out = String::new();
    for c in text.trim().chars() {
        if c.is_alphanumeric() || c == '-' || c == '_' {
            out.extend(c.to_lowercase());
        } else if c == ' ' {
            out.push('-');
        }
    }
    out
}

struct Checker {
    root: PathBuf,
    /// The anchors and texts of each Markdown file's headings, read once.
    headings: BTreeMap<PathBuf, Vec<(String, String)>>,
    problems: Vec<String>,
}

impl Checker {
    fn check_file(&mut self, path: &Path, shown: &str, text: &str) -> Result<()> {
        let is_markdown = path.extension().is_some_and(|e| e == "md");
        let dir = path.parent().unwrap_or(&self.root).to_path_buf();
        let mut in_fence = false;
        for (index, line) in text.lines().enumerate() {
            let at = format!("{shown}:{}", index + 1);
            for (pattern, why) in BANNED {
                if line.contains(pattern) {
                    self.problems.push(format!("{at}: `{pattern}`: {why}"));
                }
            }
            if let Some(number) = issue_reference(line) {
                self.problems.push(format!(
                    "{at}: `{number}`: cite the repository's docs, not an issue number"
                ));
            }
            for citation in citations(line) {
                self.check_citation(&at, &dir, &citation)?;
            }
            if !is_markdown {
                continue;
            }
            let trimmed = line.trim_start();
            if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
                in_fence = !in_fence;
                continue;
            }
            if in_fence {
                continue;
            }
            let (prose, spans) = split_code_spans(line);
            for target in link_targets(&prose) {
                self.check_link(&at, path, &dir, &target)?;
            }
            for span in spans {
                self.check_tree_path(&at, &span);
            }
        }
        Ok(())
    }

    fn check_link(&mut self, at: &str, file: &Path, dir: &Path, target: &str) -> Result<()> {
        let target = target.trim().trim_start_matches('<').trim_end_matches('>');
        // A link title: `(path "title")`.
        let target = target.split_whitespace().next().unwrap_or("");
        if target.is_empty() || target.contains("://") || target.starts_with("mailto:") {
            return Ok(());
        }
        let (path_part, anchor_part) = match target.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (target, None),
        };
        let resolved = if path_part.is_empty() {
            file.to_path_buf()
        } else {
            normalize(&dir.join(path_part))
        };
        if !resolved.starts_with(&self.root) || !resolved.exists() {
            self.problems.push(format!(
                "{at}: link to {target}: no such file in the repository"
            ));
            return Ok(());
        }
        if let Some(anchor_part) = anchor_part
            && resolved.extension().is_some_and(|e| e == "md")
            && !self.has_anchor(&resolved, anchor_part)?
        {
            self.problems.push(format!(
                "{at}: link to {target}: no heading with that anchor"
            ));
        }
        Ok(())
    }

    fn check_citation(&mut self, at: &str, dir: &Path, citation: &Citation) -> Result<()> {
        let Some(file) = self.resolve_citation(dir, &citation.path) else {
            self.problems.push(format!(
                "{at}: cites {}: no such file in the repository",
                citation.path
            ));
            return Ok(());
        };
        match &citation.section {
            Some(Section::Anchor(anchor)) if !self.has_anchor(&file, anchor)? => {
                self.problems.push(format!(
                    "{at}: cites {}#{anchor}: no heading with that anchor",
                    citation.path
                ));
            }
            Some(Section::Numbered(number)) => {
                let prefix = format!("{number}.");
                let found = self
                    .headings_of(&file)?
                    .iter()
                    .any(|(_, text)| text.starts_with(&prefix));
                if !found {
                    self.problems.push(format!(
                        "{at}: cites {} §{number}: no section {number} there",
                        citation.path
                    ));
                }
            }
            Some(Section::Anchor(_)) | None => {}
        }
        Ok(())
    }

    fn check_tree_path(&mut self, at: &str, span: &str) {
        let span = span.trim();
        let checked = TREE_ROOTS.iter().any(|r| span.starts_with(r))
            && !span.contains(|c: char| c.is_whitespace() || "<>*{}…$".contains(c));
        if !checked {
            return;
        }
        // `path:line` and `path#anchor` name the path.
        let path = span
            .split(['#', ':'])
            .next()
            .unwrap_or(span)
            .trim_end_matches('/');
        if !self.root.join(path).exists() {
            self.problems
                .push(format!("{at}: `{span}`: no such path in the repository"));
        }
    }

    /// A cited path, from the repository root, the citing file's directory
    /// or one of its ancestors (a test's `CARGO_MANIFEST_DIR`), whichever
    /// exists.
    fn resolve_citation(&self, dir: &Path, cited: &str) -> Option<PathBuf> {
        let mut bases = vec![self.root.clone()];
        let mut base = Some(dir);
        while let Some(b) = base {
            if !b.starts_with(&self.root) {
                break;
            }
            bases.push(b.to_path_buf());
            base = b.parent();
        }
        bases
            .into_iter()
            .map(|b| normalize(&b.join(cited)))
            .find(|p| p.starts_with(&self.root) && p.is_file())
    }

    fn has_anchor(&mut self, file: &Path, anchor: &str) -> Result<bool> {
        Ok(self.headings_of(file)?.iter().any(|(a, _)| a == anchor))
    }

    fn headings_of(&mut self, file: &Path) -> Result<&[(String, String)]> {
        if !self.headings.contains_key(file) {
            let text =
                fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
            self.headings.insert(file.to_path_buf(), headings(&text));
        }
        Ok(self.headings.get(file).map_or(&[], Vec::as_slice))
    }
}

/// The headings of a Markdown text outside code fences, as (anchor, text),
/// with GitHub's `-1`, `-2` suffixes on repeated anchors.
fn headings(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut in_fence = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let heading = line[hashes..].trim().trim_end_matches('#').trim();
        let base = anchor(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        let unique = if *count == 0 {
            base
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        out.push((unique, heading.replace('`', "")));
    }
    out
}

#[derive(Debug, PartialEq)]
struct Citation {
    path: String,
    section: Option<Section>,
}

#[derive(Debug, PartialEq)]
enum Section {
    Anchor(String),
    Numbered(String),
}

/// Every `….md` path in a line, with the `#anchor` or ` §N` that follows it.
fn citations(line: &str) -> Vec<Citation> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = Vec::new();
    let mut search = 0;
    while let Some(found) = line[search..].find(".md") {
        let end = search + found + ".md".len();
        search = end;
        // `.md` must end the file name (not `.mdx`, not `.md5`).
        if line[end..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        {
            continue;
        }
        let start = line[..end]
            .char_indices()
            .rev()
            .take_while(|&(_, c)| is_path_char(c))
            .last()
            .map_or(end, |(i, _)| i);
        let path = &line[start..end];
        // `.md` alone, `./x.md`, and the path of a URL (`https://host/x.md`).
        let url = path.starts_with("//");
        if url || path == ".md" || path.starts_with('.') && !path.starts_with("..") {
            continue;
        }
        // A link target is checked as a link, relative to its file only.
        if line[..start].ends_with("](") {
            continue;
        }
        let rest = &line[end..];
        let section = if let Some(anchor) = rest.strip_prefix('#') {
            let anchor: String = anchor
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
                .collect();
            Some(Section::Anchor(anchor))
        } else if let Some(number) = rest.strip_prefix(" §") {
            let number: String = number
                .chars()
                .take_while(char::is_ascii_alphanumeric)
                .collect();
            Some(Section::Numbered(number))
        } else {
            None
        };
        out.push(Citation {
            path: path.to_owned(),
            section,
        });
    }
    out
}

/// `issue 7`, `issues #12`, `Issue 3` in a line.
fn issue_reference(line: &str) -> Option<String> {
    let lower = line.to_lowercase();
    let mut search = 0;
    while let Some(found) = lower[search..].find("issue") {
        let start = search + found;
        search = start + "issue".len();
        let preceded_by_word = lower[..start]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '-');
        if preceded_by_word {
            continue;
        }
        let rest = lower[search..]
            .strip_prefix('s')
            .unwrap_or(&lower[search..]);
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let rest = rest.strip_prefix('#').unwrap_or(rest);
        if rest.starts_with(|c: char| c.is_ascii_digit()) {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            return Some(format!("issue {digits}"));
        }
    }
    None
}

/// A line without its code spans, and the code spans' contents.
fn split_code_spans(line: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut parts = line.split('`');
    if let Some(first) = parts.next() {
        prose.push_str(first);
    }
    let rest: Vec<&str> = parts.collect();
    // An unpaired backtick leaves its text as prose.
    let paired = rest.len() - rest.len() % 2;
    for (i, part) in rest.iter().enumerate() {
        if i < paired && i % 2 == 0 {
            spans.push((*part).to_owned());
        } else {
            prose.push_str(part);
        }
    }
    (prose, spans)
}

/// The targets of the inline links (`](target)`) and link reference
/// definitions (`[label]: target`) in a line of prose.
fn link_targets(prose: &str) -> Vec<String> {
    let mut out = Vec::new();
    let trimmed = prose.trim_start();
    if trimmed.starts_with('[')
        && let Some(close) = trimmed.find("]:")
    {
        out.push(trimmed[close + 2..].trim().to_owned());
    }
    let mut search = 0;
    while let Some(found) = prose[search..].find("](") {
        let start = search + found + 2;
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in prose[start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(start + i);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        out.push(prose[start..end].to_owned());
        search = end;
    }
    out
}

/// `[text](target)` → `text`, for a heading's anchor.
fn strip_link_targets(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(found) = rest.find("](") {
        out.push_str(&rest[..found]);
        match rest[found..].find(')') {
            Some(close) => rest = &rest[found + close + 1..],
            None => {
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// `a/b/../c` → `a/c`, without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The Markdown, Rust and TOML files of the repository, skipping build
/// output, hidden directories and recorded snapshots.
pub(crate) fn text_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
            let path = entry?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    stack.push(path);
                }
            } else if [".md", ".rs", ".toml"].iter().any(|e| name.ends_with(e)) {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests;
