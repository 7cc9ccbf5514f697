//! The fake payment provider every worker host calls: one append-only
//! JSON-lines file on the shared filesystem, each call taken under an
//! exclusive lock on it, so processes on every host see one provider.
//!
//! Every delivery is a line: `committed` (a new capture), `duplicate` (the
//! key had committed before: the provider honours its idempotency key and
//! answers with the first capture, and the line shows that the library
//! dispatched the operation again), or `refused` (a seeded fault before the
//! commit). A seeded fault after the commit writes the capture and then
//! fails the call, so the caller cannot know it happened. The file is not
//! synced: the harness kills processes, not the machine, and the page cache
//! survives a kill -9.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// One call the provider received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Delivery {
    pub(crate) key: String,
    pub(crate) invoice: String,
    pub(crate) worker: String,
    pub(crate) outcome: Outcome,
    /// The capture's id (`committed`, and the first one for `duplicate`).
    pub(crate) payment_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Committed,
    Duplicate,
    Refused,
}

/// A seeded fault of one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// Fails before committing anything.
    BeforeCommit,
    /// Commits, then fails the call.
    AfterCommit,
}

/// Why a call failed: the caller cannot tell these apart.
#[derive(Debug, thiserror::Error)]
#[error("the provider did not answer ({0})")]
pub(crate) struct NoAnswer(&'static str);

/// A handle on the provider file.
#[derive(Debug)]
pub(crate) struct Provider {
    path: PathBuf,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// How far the file was read.
    offset: u64,
    /// The committed capture's payment id, by key.
    committed: HashMap<String, String>,
    lines: u64,
}

impl Provider {
    pub(crate) fn open(path: &Path) -> anyhow::Result<Provider> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        Ok(Provider {
            path: path.to_path_buf(),
            state: Mutex::new(State::default()),
        })
    }

    /// Captures `invoice` under `key` (see the module docs for `fault`).
    pub(crate) fn capture(
        &self,
        invoice: &str,
        key: &str,
        worker: &str,
        fault: Fault,
    ) -> anyhow::Result<Result<Value, NoAnswer>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut file = self.locked()?;
        state.catch_up(&mut file)?;
        let mut delivery = Delivery {
            key: key.to_owned(),
            invoice: invoice.to_owned(),
            worker: worker.to_owned(),
            outcome: Outcome::Refused,
            payment_id: None,
        };
        let answer = if fault == Fault::BeforeCommit {
            Err(NoAnswer("failed before committing"))
        } else if let Some(earlier) = state.committed.get(key) {
            delivery.outcome = Outcome::Duplicate;
            delivery.payment_id = Some(earlier.clone());
            Ok(output(earlier, invoice))
        } else {
            let payment_id = format!("pay_{:07}", state.committed.len() + 1);
            delivery.outcome = Outcome::Committed;
            delivery.payment_id = Some(payment_id.clone());
            Ok(output(&payment_id, invoice))
        };
        let mut line = serde_json::to_string(&delivery)?;
        line.push('\n');
        file.write_all(line.as_bytes())
            .with_context(|| format!("appending to {}", self.path.display()))?;
        state.catch_up(&mut file)?;
        Ok(match (answer, fault) {
            (Ok(_), Fault::AfterCommit) => Err(NoAnswer("failed after committing")),
            (answer, _) => answer,
        })
    }

    /// The committed capture of `key`, as `capture` answered it.
    pub(crate) fn lookup(&self, key: &str, invoice: &str) -> anyhow::Result<Option<Value>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut file = self.locked()?;
        state.catch_up(&mut file)?;
        Ok(state.committed.get(key).map(|id| output(id, invoice)))
    }

    /// The file, open and locked (the lock goes with it).
    fn locked(&self) -> anyhow::Result<File> {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&self.path)
            .with_context(|| format!("opening {}", self.path.display()))?;
        file.lock()
            .with_context(|| format!("locking {}", self.path.display()))?;
        Ok(file)
    }
}

impl State {
    /// Reads the lines appended since the last call.
    fn catch_up(&mut self, file: &mut File) -> anyhow::Result<()> {
        file.seek(SeekFrom::Start(self.offset))?;
        let mut text = String::new();
        file.read_to_string(&mut text)?;
        // Only whole lines: a writer appends one line in one write under the lock.
        let whole = text.rfind('\n').map_or(0, |at| at + 1);
        for line in text[..whole].lines() {
            let delivery: Delivery = serde_json::from_str(line)
                .with_context(|| format!("provider line {} is not a delivery", self.lines + 1))?;
            self.lines += 1;
            if delivery.outcome == Outcome::Committed
                && let Some(id) = delivery.payment_id
            {
                self.committed.entry(delivery.key).or_insert(id);
            }
        }
        self.offset += whole as u64;
        Ok(())
    }
}

/// What a capture answers.
pub(crate) fn output(payment_id: &str, invoice: &str) -> Value {
    json!({"payment_id": payment_id, "invoice_id": invoice})
}

/// Every delivery in the file, in order.
pub(crate) fn read_all(path: &Path) -> anyhow::Result<Vec<Delivery>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).context("a provider line is not a delivery"))
        .collect()
}
