use super::*;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The problems found in a tree of `files` (path, text).
fn check(files: &[(&str, &str)]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (path, text) in files {
        let path = dir.path().join(path);
        fs::create_dir_all(path.parent().expect("a file has a directory")).expect("mkdir");
        fs::write(path, text).expect("write");
    }
    problems(dir.path()).expect("the tree is readable")
}

#[test]
fn the_repository_references_only_itself() {
    let found = problems(&workspace()).expect("the workspace is readable");
    assert!(found.is_empty(), "broken references:\n{}", found.join("\n"));
}

#[test]
fn anchors_are_githubs() {
    assert_eq!(anchor("4. Ledger transitions"), "4-ledger-transitions");
    assert_eq!(
        anchor("9. Operator CLI (`agent-effect-ops --db PATH <command>`)"),
        "9-operator-cli-agent-effect-ops---db-path-command"
    );
    assert_eq!(
        anchor("6. Reconcile (an operation in `outcome_unknown` or `quarantined`)"),
        "6-reconcile-an-operation-in-outcome_unknown-or-quarantined"
    );
    assert_eq!(anchor("See [the spec](spec.md)"), "see-the-spec");
}

#[test]
fn repeated_headings_get_numbered_anchors() {
    let found = headings("# A\n\n```\n# not a heading\n```\n## A\n### B ###\n");
    let anchors: Vec<&str> = found.iter().map(|(a, _)| a.as_str()).collect();
    assert_eq!(anchors, ["a", "a-1", "b"]);
}

#[test]
fn a_sound_tree_has_no_problems() {
    let found = check(&[
        ("docs/spec.md", "# Spec\n\n## 4. Ledger transitions\n"),
        (
            "docs/guide.md",
            "See [spec §4](spec.md#4-ledger-transitions), [top](#guide), \
             [web](https://example.com/x.md#y) and `docs/spec.md`.\n\n# Guide\n\
             [ref]: ../README.md\n",
        ),
        (
            "README.md",
            "[guide](docs/guide.md) `crates/a/src/lib.rs:3`\n",
        ),
        (
            "crates/a/src/lib.rs",
            "//! The ledger (docs/spec.md §4, docs/spec.md#4-ledger-transitions).\n\
             const R: &str = include_str!(\"../../../README.md\");\n",
        ),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

#[test]
fn broken_links_and_citations_are_reported() {
    let found = check(&[
        ("docs/spec.md", "# Spec\n\n## 4. Ledger transitions\n"),
        (
            "docs/guide.md",
            "[a](missing.md) [b](spec.md#5-execute) [c](docs/spec.md) `crates/none.rs`\n",
        ),
        (
            "src/lib.rs",
            "//! docs/spec.md §7, docs/spec.md#nope, docs/gone.md\n",
        ),
    ]);
    let expected = [
        "docs/guide.md:1: link to missing.md: no such file in the repository",
        "docs/guide.md:1: link to spec.md#5-execute: no heading with that anchor",
        "docs/guide.md:1: link to docs/spec.md: no such file in the repository",
        "docs/guide.md:1: `crates/none.rs`: no such path in the repository",
        "src/lib.rs:1: cites docs/spec.md §7: no section 7 there",
        "src/lib.rs:1: cites docs/spec.md#nope: no heading with that anchor",
        "src/lib.rs:1: cites docs/gone.md: no such file in the repository",
    ];
    assert_eq!(found, expected);
}

#[test]
fn outside_references_are_reported() {
    let spec = concat!("SPEC", " §4");
    let shared = concat!("../", "shared/fixtures");
    let issue = concat!("issue", " 7");
    let text = format!("{spec}\n{shared}\nthe targets of {issue}\na non-issue 7 is fine\n");
    let found = check(&[("notes.md", &text)]);
    assert_eq!(found.len(), 4, "{found:?}"); // `../shared` and `shared/` on line 2
    assert!(found[0].starts_with("notes.md:1:"), "{found:?}");
    assert!(found[3].starts_with("notes.md:3: `issue 7`"), "{found:?}");
}

#[test]
fn code_fences_hide_links_but_not_outside_references() {
    let spec = concat!("SPEC", " §1");
    let text = format!("```text\n[x](nowhere.md)\n{spec}\n```\n");
    let found = check(&[("a.md", &text)]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("a.md:3:"), "{found:?}");
}
