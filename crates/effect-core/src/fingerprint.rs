//! The request fingerprint: what identifies an operation's arguments in the
//! ledger (docs/spec.md §8), over their canonical JSON.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde_json::Value;
use sha2::Digest;

use crate::canonical::{python_json, text};

/// Which fingerprint new records carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FingerprintForm {
    /// `blake3:<hex>` of [`canonical_json`](crate::canonical::canonical_json) (the default). The Python package
    /// cannot read it: it compares fingerprints as plain strings, so it reports
    /// a conflict on every operation recorded in this form.
    #[default]
    Blake3,
    /// The bare SHA-256 hex digest of [`python_json`], exactly what the Python
    /// package `production-agent-systems` 1.x writes. Use it for every ledger
    /// shared with Python workers.
    Sha256,
}

/// The request fingerprint of one set of arguments, in both algorithms a stored
/// record may carry: blake3 (ours, stored as `blake3:<hex>`) and SHA-256 (bare
/// 64-digit hex, written by the Python package), plus the form new records
/// store ([`FingerprintForm`]).
///
/// The SHA-256 digest is computed the first time something asks for it (a
/// record stored in that form, one the Python package wrote, the
/// [`Sha256`](FingerprintForm::Sha256) form): until then the fingerprint
/// keeps the text it hashes. Clones share both.
#[derive(Clone)]
pub struct RequestFingerprint {
    /// `blake3:<hex>`: what the default form stores.
    blake3_stored: String,
    sha256: Arc<LazySha256>,
    form: FingerprintForm,
}

/// A SHA-256 digest computed on first use.
struct LazySha256 {
    /// The text it hashes: [`python_json`] of the value.
    text: String,
    hex: OnceLock<String>,
}

impl LazySha256 {
    fn hex(&self) -> &str {
        self.hex
            .get_or_init(|| hex(&sha2::Sha256::digest(self.text.as_bytes())))
    }
}

impl PartialEq for RequestFingerprint {
    fn eq(&self, other: &Self) -> bool {
        self.form == other.form
            && self.blake3_stored == other.blake3_stored
            && self.sha256_hex() == other.sha256_hex()
    }
}

impl Eq for RequestFingerprint {}

impl fmt::Debug for RequestFingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestFingerprint")
            .field("blake3_hex", &self.blake3_hex())
            .field("sha256_hex", &self.sha256_hex())
            .field("form", &self.form)
            .finish()
    }
}

impl RequestFingerprint {
    /// The fingerprint of JSON text that is already canonical in both number
    /// styles (true of any canonical text without floats); prefer
    /// [`of_value`](Self::of_value).
    ///
    /// ```
    /// # use effect_core::RequestFingerprint;
    /// let fp = RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#);
    /// assert!(fp.stored().starts_with("blake3:"));
    /// // A fingerprint written by the Python package matches the same arguments.
    /// assert!(fp.matches("afd3ae6377d737975ba2f111db265e0b714646564f9cfd1e9820cd92f36703b7"));
    /// ```
    pub fn of_canonical(canonical: &str) -> Self {
        RequestFingerprint::of_texts(blake3_stored(canonical), canonical.to_owned())
    }

    /// The fingerprint of a JSON value: blake3 of [`canonical_json`](crate::canonical::canonical_json), SHA-256
    /// of [`python_json`].
    ///
    /// ```
    /// # use effect_core::{FingerprintForm, RequestFingerprint};
    /// let fp = RequestFingerprint::of_value(&serde_json::json!({"rate": 1e-5}))
    ///     .with_form(FingerprintForm::Sha256);
    /// // What Python 1.0.1 writes for {"rate": 1e-05}.
    /// assert_eq!(fp.stored(), "c6eb6aaffe8f1fb5e659c3061303680806b1fef331df7fa56558b2124f602f6f");
    /// assert!(fp.matches(&fp.stored()));
    /// ```
    pub fn of_value(value: &Value) -> Self {
        let mut canonical = String::with_capacity(64);
        let floats = text::write(value, text::NumberStyle::Serde, &mut canonical);
        let blake3 = blake3_stored(&canonical);
        // Only floats are written differently in the two styles: without
        // one, the canonical text is the Python text, written once.
        let python = if floats {
            python_json(value)
        } else {
            canonical
        };
        RequestFingerprint::of_texts(blake3, python)
    }

    /// A fingerprint whose SHA-256 digest is of `python`, when first asked for.
    fn of_texts(blake3_stored: String, python: String) -> Self {
        RequestFingerprint {
            blake3_stored,
            sha256: Arc::new(LazySha256 {
                text: python,
                hex: OnceLock::new(),
            }),
            form: FingerprintForm::default(),
        }
    }

    /// The same fingerprint, stored in `form` by new records.
    #[must_use]
    pub fn with_form(mut self, form: FingerprintForm) -> Self {
        self.form = form;
        self
    }

    /// The form new records store.
    pub fn form(&self) -> FingerprintForm {
        self.form
    }

    /// The string stored for new operations: `blake3:<hex>`, or the bare
    /// SHA-256 hex in [`FingerprintForm::Sha256`].
    pub fn stored(&self) -> String {
        match self.form {
            FingerprintForm::Blake3 => self.blake3_stored.clone(),
            FingerprintForm::Sha256 => self.sha256_hex().to_owned(),
        }
    }

    /// The blake3 hex digest.
    pub fn blake3_hex(&self) -> &str {
        &self.blake3_stored[BLAKE3_PREFIX.len()..]
    }

    /// The SHA-256 hex digest (of [`python_json`] for [`of_value`](Self::of_value)).
    pub fn sha256_hex(&self) -> &str {
        self.sha256.hex()
    }

    /// Whether a stored fingerprint describes the same arguments, whichever
    /// form it is in. A bare 64-digit hex string is read as SHA-256; anything
    /// else unrecognised never matches (the arguments cannot be proven equal).
    pub fn matches(&self, stored: &str) -> bool {
        if let Some(hex) = stored.strip_prefix(BLAKE3_PREFIX) {
            return hex.eq_ignore_ascii_case(self.blake3_hex());
        }
        if let Some(hex) = stored.strip_prefix("sha256:") {
            return hex.eq_ignore_ascii_case(self.sha256_hex());
        }
        stored.len() == 64
            && stored.bytes().all(|b| b.is_ascii_hexdigit())
            && stored.eq_ignore_ascii_case(self.sha256_hex())
    }
}

/// What a stored blake3 fingerprint starts with.
const BLAKE3_PREFIX: &str = "blake3:";

/// `blake3:<hex>` of `canonical`.
fn blake3_stored(canonical: &str) -> String {
    let digest = blake3::hash(canonical.as_bytes()).to_hex();
    let mut stored = String::with_capacity(BLAKE3_PREFIX.len() + digest.len());
    stored.push_str(BLAKE3_PREFIX);
    stored.push_str(digest.as_str());
    stored
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}
