//! A fake payment provider whose commits live in a file, so they survive the
//! death of the process that made them.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use production_agent_systems::HandlerContext;
use production_agent_systems::{EffectContract, HandlerError, OutcomeProbeResult};
use serde_json::{Value, json};

#[derive(Debug, Clone)]
pub struct FileProvider {
    path: PathBuf,
}

impl FileProvider {
    pub fn new(path: &Path) -> Self {
        FileProvider {
            path: path.to_owned(),
        }
    }

    /// Commits the capture durably: one line per committed effect.
    pub fn capture(&self, key: &str) -> Value {
        append_line(&self.path, key);
        json!({"payment_id": format!("pay-{key}"), "status": "captured"})
    }

    /// Commits the capture unless one with the same key is committed
    /// already: a provider that honours its idempotency keys.
    pub fn capture_once(&self, key: &str) -> Value {
        if self.commits().iter().any(|k| k == key) {
            return json!({"payment_id": format!("pay-{key}"), "status": "captured"});
        }
        self.capture(key)
    }

    /// Receives a capture request from `by` and commits it unless the key
    /// is committed already. One line per request, written at once (a
    /// process killed here either made the request or did not): the key,
    /// `by`, the process id, and `duplicate` when it committed nothing.
    pub fn receive(&self, key: &str, by: &str) -> Value {
        let duplicate = if self.commits().iter().any(|k| k == key) {
            "\tduplicate"
        } else {
            ""
        };
        append_line(
            &self.path,
            &format!("{key}\t{by}\t{}{duplicate}", std::process::id()),
        );
        json!({"payment_id": format!("pay-{key}"), "status": "captured"})
    }

    /// Every request [`receive`](Self::receive) logged: key, `by`, process id.
    pub fn requests(&self) -> Vec<(String, String, u32)> {
        self.lines()
            .filter_map(|line| {
                let mut fields = line.split('\t');
                let (key, by, pid) = (fields.next()?, fields.next()?, fields.next()?);
                Some((key.to_owned(), by.to_owned(), pid.parse().unwrap()))
            })
            .collect()
    }

    fn lines(&self) -> impl Iterator<Item = String> {
        std::fs::read_to_string(&self.path)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect::<Vec<_>>()
            .into_iter()
    }

    /// The key of every committed effect, in the order they committed.
    pub fn commits(&self) -> Vec<String> {
        self.lines()
            .filter(|line| !line.ends_with("\tduplicate"))
            .map(|line| line.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    }

    pub fn lookup(&self, key: &str) -> OutcomeProbeResult {
        if self.commits().iter().any(|k| k == key) {
            OutcomeProbeResult::committed(
                json!({"payment_id": format!("pay-{key}"), "status": "captured"}),
            )
            .provider_operation_id(format!("pay-{key}"))
            .evidence("source", "provider_file")
        } else {
            OutcomeProbeResult::not_committed()
        }
    }
}

/// Appends `line` durably. One write of the whole line: appends from several
/// processes at once never interleave (O_APPEND writes of a small buffer are
/// atomic).
pub fn append_line(path: &Path, line: &str) {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
    file.sync_all().unwrap();
}

pub fn capture_contract(provider: &FileProvider) -> EffectContract {
    let provider = provider.clone();
    effect_test_support::contracts::capture_payment()
        .outcome_probe(move |_args, key| Ok(provider.lookup(key.ok_or("missing key")?)))
        .build()
        .unwrap()
}

/// A handler that must never run (the operation is past dispatch).
pub fn forbidden_handler(_: Value, _: HandlerContext) -> Result<Value, HandlerError> {
    panic!("the handler ran again")
}
