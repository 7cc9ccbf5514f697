//! Cheap checks of the tree. They also run as tests, so plain `cargo test`
//! catches them without `cargo xtask`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// `.snap.new` and `.pending-snap` files left by insta: reviewed, never committed.
pub fn pending_snapshots(root: &Path) -> Result<Vec<String>> {
    let mut pending = Vec::new();
    for path in files(&root.join("crates"))? {
        let name = path.to_string_lossy();
        if name.ends_with(".snap.new") || name.ends_with(".pending-snap") {
            pending.push(name.into_owned());
        }
    }
    Ok(pending)
}

/// Every Rust file under `dir`, skipping build output.
fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.exists() {
        return Ok(out);
    }
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            out.extend(files(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
    }

    fn rust_files(under: &str) -> Vec<PathBuf> {
        files(&workspace().join(under))
            .expect("the workspace is readable")
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "rs"))
            .collect()
    }

    #[test]
    fn every_crate_root_has_crate_docs() {
        for path in rust_files("crates") {
            let is_root = path.ends_with("src/lib.rs") || path.ends_with("src/main.rs");
            if !is_root {
                continue;
            }
            let text = fs::read_to_string(&path).expect("readable source");
            assert!(
                text.trim_start().starts_with("//!"),
                "{} must open with //! crate docs",
                path.display()
            );
        }
    }

    #[test]
    fn no_debug_macros_or_stubs_in_non_test_code() {
        // Spelled in pieces so this file does not match itself.
        let banned = [
            concat!("dbg", "!("),
            concat!("todo", "!("),
            concat!("unimplemented", "!("),
        ];
        for path in rust_files("crates")
            .into_iter()
            .chain(rust_files("xtask/src"))
        {
            if path.components().any(|c| c.as_os_str() == "tests") {
                continue;
            }
            let text = fs::read_to_string(&path).expect("readable source");
            for macro_call in banned {
                assert!(
                    !text.contains(macro_call),
                    "{} contains {macro_call}",
                    path.display()
                );
            }
        }
    }
}
