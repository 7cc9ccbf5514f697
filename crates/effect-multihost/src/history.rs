//! The history: every call a worker made, as Jepsen records it. A call is
//! `invoke`d, then completes `ok` (confirmed, with the output the caller was
//! given), `fail` (the call definitely did not take effect: rejected, or
//! refused before any dispatch) or `info` (indeterminate: the caller does not
//! know; it may or may not have happened). A call whose process was killed
//! has an `invoke` and nothing else, which is indeterminate too.
//!
//! Each worker process appends to its own file, one line per write, so a
//! kill -9 loses at most the line being written.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Mutex, PoisonError};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Event {
    /// `<worker>-<pid>-<thread>-<n>`: the call this event belongs to.
    pub(crate) call: String,
    pub(crate) op: String,
    pub(crate) kind: Kind,
    /// The confirmed output (`ok`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Value>,
    /// What the caller was told (`fail`, `info`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

/// One process's history file.
#[derive(Debug)]
pub(crate) struct Recorder {
    file: Mutex<File>,
}

impl Recorder {
    pub(crate) fn create(path: &Path) -> anyhow::Result<Recorder> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Recorder {
            file: Mutex::new(file),
        })
    }

    pub(crate) fn record(&self, event: &Event) -> anyhow::Result<()> {
        let mut line = serde_json::to_string(event)?;
        line.push('\n');
        self.file
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .write_all(line.as_bytes())
            .context("appending to the history")
    }
}

/// Every event of every history file in `dir` (files named `history-*`).
pub(crate) fn read_dir(dir: &Path) -> anyhow::Result<Vec<Event>> {
    let mut events = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let is_history = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("history-"));
        if !is_history {
            continue;
        }
        let text = std::fs::read_to_string(&path)?;
        for line in text.lines() {
            // A line cut by a kill -9 is the one event that may be missing.
            if let Ok(event) = serde_json::from_str(line) {
                events.push(event);
            }
        }
    }
    Ok(events)
}
