//! [`FakePaymentProvider`]: a deterministic, thread-safe fake of a payment API.
//!
//! It captures invoices, honours idempotency keys (unless told not to), answers
//! lookups by key or by invoice, and lists what it committed. Payment ids are
//! sequence numbers (`pay_000001`, ...), so runs are reproducible.
//!
//! Opened with [`FakePaymentProvider::open`], it is file-backed: every commit is
//! appended to a JSON-lines file and synced to disk before `capture` returns,
//! and every call reads the file first. Commits therefore survive the death of
//! the process that made them, and a provider opened by another process sees
//! them: this is how the crash-after-commit scenario counts effects across an
//! aborted worker.
//!
//! ```
//! use effect_testkit::provider::FakePaymentProvider;
//!
//! let provider = FakePaymentProvider::new();
//! let first = provider.capture("INV-1", 1250, Some("capture:INV-1"))?;
//! let again = provider.capture("INV-1", 1250, Some("capture:INV-1"))?;
//! assert_eq!(first, again, "same key, same payment");
//! assert_eq!(provider.committed_count()?, 1);
//!
//! let careless = FakePaymentProvider::new().honour_idempotency_keys(false);
//! careless.capture("INV-1", 1250, Some("capture:INV-1"))?;
//! careless.capture("INV-1", 1250, Some("capture:INV-1"))?;
//! assert_eq!(careless.committed_count()?, 2, "a provider that ignores keys charges twice");
//! # Ok::<(), effect_testkit::provider::ProviderError>(())
//! ```

use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::scenario::provider::{Lookup, ScenarioProvider};

/// One committed capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Capture {
    /// The provider's id, `pay_` and a six-digit sequence number.
    pub payment_id: String,
    /// The invoice captured.
    pub invoice_id: String,
    /// The amount, in cents.
    pub amount_cents: u64,
    /// The key the capture was sent with (recorded even when not honoured).
    pub idempotency_key: Option<String>,
}

/// Why the provider could not read or write its file.
#[derive(Debug)]
pub struct ProviderError {
    message: String,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl ProviderError {
    fn io(action: &str, path: &Path, source: std::io::Error) -> Self {
        ProviderError {
            message: format!("could not {action} provider file {}", path.display()),
            source: Some(Box::new(source)),
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ProviderError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|source| source as &(dyn std::error::Error + 'static))
    }
}

/// A provider that could not be reached or could not record the capture is a
/// failed dispatch whose outcome is uncertain, so `?` works in a handler.
impl From<ProviderError> for effect_exec::HandlerError {
    fn from(error: ProviderError) -> Self {
        effect_exec::HandlerError::from_error(error)
    }
}

/// A fake payment provider; see the [module docs](self).
#[derive(Debug)]
pub struct FakePaymentProvider {
    captures: Mutex<Vec<Capture>>,
    file: Option<PathBuf>,
    honour_keys: bool,
}

impl Default for FakePaymentProvider {
    fn default() -> Self {
        FakePaymentProvider::new()
    }
}

impl FakePaymentProvider {
    /// An in-memory provider that honours idempotency keys.
    pub fn new() -> Self {
        FakePaymentProvider {
            captures: Mutex::new(Vec::new()),
            file: None,
            honour_keys: true,
        }
    }

    /// A file-backed provider: reads the commits already in `path` (creating
    /// the file when missing) and appends new ones to it.
    ///
    /// # Errors
    ///
    /// The file cannot be created or read, or holds a line that is not a capture.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ProviderError> {
        let path = path.as_ref().to_path_buf();
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| ProviderError::io("create", &path, source))?;
        let provider = FakePaymentProvider {
            captures: Mutex::new(Vec::new()),
            file: Some(path),
            honour_keys: true,
        };
        drop(provider.state()?);
        Ok(provider)
    }

    /// Whether a repeated idempotency key returns the first capture (default
    /// true). `false` models a provider that ignores the key.
    #[must_use]
    pub fn honour_idempotency_keys(mut self, honour: bool) -> Self {
        self.honour_keys = honour;
        self
    }

    /// Whether repeated idempotency keys are deduplicated.
    pub fn honours_idempotency_keys(&self) -> bool {
        self.honour_keys
    }

    /// The backing file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// Captures `amount_cents` for `invoice_id`. With a key the provider has
    /// seen (and honours), returns the earlier capture without committing again.
    ///
    /// # Errors
    ///
    /// A file-backed provider could not read or append to its file; nothing
    /// was committed then.
    pub fn capture(
        &self,
        invoice_id: &str,
        amount_cents: u64,
        idempotency_key: Option<&str>,
    ) -> Result<Capture, ProviderError> {
        let mut captures = self.state()?;
        if self.honour_keys
            && let Some(key) = idempotency_key
            && let Some(earlier) = captures
                .iter()
                .find(|c| c.idempotency_key.as_deref() == Some(key))
        {
            return Ok(earlier.clone());
        }
        let capture = Capture {
            payment_id: format!("pay_{:06}", captures.len() + 1),
            invoice_id: invoice_id.to_owned(),
            amount_cents,
            idempotency_key: idempotency_key.map(str::to_owned),
        };
        if let Some(path) = &self.file {
            append_synced(path, &capture)?;
        }
        captures.push(capture.clone());
        Ok(capture)
    }

    /// The capture made with `idempotency_key`, if any (the first one).
    ///
    /// # Errors
    ///
    /// A file-backed provider could not read its file.
    pub fn lookup_by_key(&self, idempotency_key: &str) -> Result<Option<Capture>, ProviderError> {
        Ok(self
            .state()?
            .iter()
            .find(|c| c.idempotency_key.as_deref() == Some(idempotency_key))
            .cloned())
    }

    /// Every capture of `invoice_id`, oldest first.
    ///
    /// # Errors
    ///
    /// A file-backed provider could not read its file.
    pub fn lookup_by_invoice(&self, invoice_id: &str) -> Result<Vec<Capture>, ProviderError> {
        Ok(self
            .state()?
            .iter()
            .filter(|c| c.invoice_id == invoice_id)
            .cloned()
            .collect())
    }

    /// Every committed capture, oldest first.
    ///
    /// # Errors
    ///
    /// A file-backed provider could not read its file.
    pub fn captures(&self) -> Result<Vec<Capture>, ProviderError> {
        Ok(self.state()?.clone())
    }

    /// How many captures were committed.
    ///
    /// # Errors
    ///
    /// A file-backed provider could not read its file.
    pub fn committed_count(&self) -> Result<usize, ProviderError> {
        Ok(self.state()?.len())
    }

    /// The captures, re-read from the file when file-backed.
    fn state(&self) -> Result<MutexGuard<'_, Vec<Capture>>, ProviderError> {
        // A panic elsewhere cannot leave a half-written list: pushes are single steps.
        let mut captures = self
            .captures
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(path) = &self.file {
            *captures = read_captures(path)?;
        }
        Ok(captures)
    }
}

/// Arguments `{"invoice_id": ..., "amount_cents": ...}`; output the capture.
impl ScenarioProvider for FakePaymentProvider {
    fn perform(
        &self,
        arguments: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Value, effect_core::BoxError> {
        let invoice = arguments["invoice_id"]
            .as_str()
            .ok_or("capture needs a string invoice_id")?;
        let amount = arguments["amount_cents"]
            .as_u64()
            .ok_or("capture needs an integer amount_cents")?;
        let capture = self.capture(invoice, amount, idempotency_key)?;
        Ok(serde_json::to_value(capture)?)
    }

    /// By key first, then by invoice: a provider that ignores keys can still be
    /// asked about the business object.
    fn look_up(
        &self,
        arguments: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Lookup, effect_core::BoxError> {
        let by_key = match idempotency_key {
            Some(key) => self.lookup_by_key(key)?,
            None => None,
        };
        let found = match by_key {
            Some(capture) => Some(capture),
            None => {
                let invoice = arguments["invoice_id"]
                    .as_str()
                    .ok_or("lookup needs a string invoice_id")?;
                self.lookup_by_invoice(invoice)?.into_iter().next()
            }
        };
        Ok(match found {
            Some(capture) => Lookup::Committed {
                provider_operation_id: Some(capture.payment_id.clone()),
                output: serde_json::to_value(capture)?,
            },
            None => Lookup::NotCommitted,
        })
    }

    fn committed_effects(&self) -> Result<usize, effect_core::BoxError> {
        Ok(self.committed_count()?)
    }
}

fn read_captures(path: &Path) -> Result<Vec<Capture>, ProviderError> {
    let file = File::open(path).map_err(|source| ProviderError::io("open", path, source))?;
    let mut captures = Vec::new();
    for (index, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|source| ProviderError::io("read", path, source))?;
        if line.trim().is_empty() {
            continue;
        }
        let capture = serde_json::from_str(&line).map_err(|source| ProviderError {
            message: format!(
                "line {} of provider file {} is not a capture",
                index + 1,
                path.display()
            ),
            source: Some(Box::new(source)),
        })?;
        captures.push(capture);
    }
    Ok(captures)
}

fn append_synced(path: &Path, capture: &Capture) -> Result<(), ProviderError> {
    let mut line = serde_json::to_string(capture).map_err(|source| ProviderError {
        message: "could not encode a capture".to_owned(),
        source: Some(Box::new(source)),
    })?;
    line.push('\n');
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|source| ProviderError::io("open", path, source))?;
    // One write of the whole line, then fsync: the commit is durable before
    // `capture` returns, so a process that aborts right after keeps it.
    file.write_all(line.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| ProviderError::io("append to", path, source))
}
