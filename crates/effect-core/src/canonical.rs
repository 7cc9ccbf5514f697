//! Canonical JSON and request fingerprints (docs/spec.md §1, §8).
//!
//! Canonical JSON sorts object keys, has no insignificant whitespace and keeps
//! non-ASCII text as UTF-8. It comes in two number styles, one per fingerprint:
//!
//! - [`canonical_json`] writes numbers as serde_json does (`0.00001`, `1e16`);
//!   the blake3 fingerprint (`blake3:<hex>`) hashes it.
//! - [`python_json`] is byte-identical to the Python package's
//!   `json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`
//!   (`1e-05`, `1e+16`, `-0.0`); the SHA-256 fingerprint hashes it, so a
//!   fingerprint the Python package wrote matches the same arguments here, and
//!   one written here in [`FingerprintForm::Sha256`] matches in Python.
//!
//! Both writers, and the depth check, use an explicit stack rather than
//! unbounded recursion (they recurse through a bounded number of levels
//! first): no JSON a caller or a file supplies can overflow the stack.
//! Values nested deeper than [`MAX_DEPTH`] are refused before anything holding
//! them is written (serde_json, and so every store, reads at most 128 levels
//! back, and a stored value sits up to three levels deeper inside an event).
//!
//! Numbers: integers are exact within 64 bits (`i64`/`u64`); beyond that
//! serde_json holds a number as a double, so such an integer (which the Python
//! package keeps exact) is not fingerprinted as Python does. Doubles parse to
//! the nearest double (serde_json's `float_roundtrip`) and are written in their
//! shortest round-trip form, so a stored output replays bit-exactly.

use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use serde_json::{Map, Value};
use sha2::Digest;

use crate::error::CanonicalError;

mod finite;
mod text;

/// The deepest nesting of arrays and objects accepted in arguments, outputs
/// and evidence: 64 levels (`[]` is one level, `[[1]]` two). Comfortably below
/// serde_json's read limit of 128, which a stored value must stay under even
/// inside the evidence and event objects that wrap it.
pub const MAX_DEPTH: usize = 64;

/// Converts any serializable value to a JSON value, rejecting NaN and infinities
/// (serde_json would silently turn them into `null`) and values nested deeper
/// than [`MAX_DEPTH`]. The input is inspected before any [`Value`] is built,
/// and no deeper than the limit, so an input nested far deeper cannot exhaust
/// the stack.
///
/// # Errors
///
/// [`CanonicalError::NonFinite`] for a non-finite float anywhere in the value,
/// [`CanonicalError::TooDeep`] past the depth limit,
/// [`CanonicalError::Serialize`] when serde_json cannot represent it.
///
/// ```
/// # use effect_core::canonical::to_json_value;
/// assert!(to_json_value(&vec![1.5, f64::NAN]).is_err());
/// assert_eq!(to_json_value(&(1, "a"))?, serde_json::json!([1, "a"]));
/// # Ok::<(), effect_core::CanonicalError>(())
/// ```
pub fn to_json_value<T: Serialize + ?Sized>(value: &T) -> Result<Value, CanonicalError> {
    finite::check(value)?;
    let value =
        serde_json::to_value(value).map_err(|source| CanonicalError::Serialize { source })?;
    // A value serialized from pre-parsed JSON text (serde_json's RawValue) is
    // only parsed by `to_value`; check what came out too.
    check_depth(&value)?;
    Ok(value)
}

/// Checks that a JSON value nests no deeper than [`MAX_DEPTH`], without recursion.
///
/// # Errors
///
/// [`CanonicalError::TooDeep`], with the path of the first array or object past the limit.
///
/// ```
/// # use effect_core::canonical::{check_depth, MAX_DEPTH};
/// let mut deep = serde_json::json!(1);
/// for _ in 0..MAX_DEPTH {
///     deep = serde_json::json!([deep]);
/// }
/// assert!(check_depth(&deep).is_ok());
/// assert!(check_depth(&serde_json::json!([deep])).is_err());
/// ```
pub fn check_depth(value: &Value) -> Result<(), CanonicalError> {
    text::check_depth(value)
}

/// The canonical JSON text with numbers as serde_json writes them: what the
/// blake3 fingerprint hashes.
///
/// ```
/// # use effect_core::canonical::canonical_json;
/// let value = serde_json::json!({"b": 1e-5, "a": {"d": "ü", "c": [true, null]}});
/// assert_eq!(canonical_json(&value), r#"{"a":{"c":[true,null],"d":"ü"},"b":0.00001}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    text::write(value, text::NumberStyle::Serde, &mut out);
    out
}

/// [`canonical_json`] of `Value::Object(map)`, without building that value:
/// how a store writes a record's evidence.
///
/// ```
/// # use effect_core::canonical::{canonical_json, canonical_json_object};
/// let value = serde_json::json!({"source": "handler_return", "attempt": 2});
/// let map = value.as_object().expect("an object");
/// assert_eq!(canonical_json_object(map), canonical_json(&value));
/// assert_eq!(canonical_json_object(map), r#"{"attempt":2,"source":"handler_return"}"#);
/// ```
pub fn canonical_json_object(map: &Map<String, Value>) -> String {
    let mut out = String::with_capacity(64);
    text::write_object(map, text::NumberStyle::Serde, &mut out, 0);
    out
}

/// The canonical JSON text exactly as the Python package writes it
/// (`json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`):
/// what the SHA-256 fingerprint hashes.
///
/// ```
/// # use effect_core::canonical::python_json;
/// let value = serde_json::json!({"b": 1e-5, "c": 1e16, "a": [-0.0, 2.5, 7, "😀"]});
/// assert_eq!(python_json(&value), r#"{"a":[-0.0,2.5,7,"😀"],"b":1e-05,"c":1e+16}"#);
/// ```
pub fn python_json(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    text::write(value, text::NumberStyle::Python, &mut out);
    out
}

/// Which fingerprint new records carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FingerprintForm {
    /// `blake3:<hex>` of [`canonical_json`] (the default). The Python package
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

    /// The fingerprint of a JSON value: blake3 of [`canonical_json`], SHA-256
    /// of [`python_json`].
    ///
    /// ```
    /// # use effect_core::{RequestFingerprint, canonical::FingerprintForm};
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

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests;
