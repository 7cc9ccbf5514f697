//! Canonical JSON and request fingerprints (docs/spec.md §1, §8).
//!
//! Canonical JSON sorts object keys, has no insignificant whitespace, keeps
//! non-ASCII text as UTF-8 and writes numbers as serde_json does. It is what the
//! Python package hashes, so fingerprints agree across both implementations.

use serde::Serialize;
use serde_json::Value;
use sha2::Digest;

use crate::error::CanonicalError;

mod finite;

/// Converts any serializable value to a JSON value, rejecting NaN and infinities
/// (serde_json would silently turn them into `null`).
///
/// # Errors
///
/// [`CanonicalError::NonFinite`] for a non-finite float anywhere in the value,
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
    serde_json::to_value(value).map_err(|source| CanonicalError::Serialize { source })
}

/// The canonical JSON text of a value.
///
/// ```
/// # use effect_core::canonical::canonical_json;
/// let value = serde_json::json!({"b": 1, "a": {"d": "ü", "c": [true, null]}});
/// assert_eq!(canonical_json(&value), r#"{"a":{"c":[true,null],"d":"ü"},"b":1}"#);
/// ```
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::with_capacity(64);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            // Sort explicitly: serde_json's map keeps insertion order when another
            // crate in the build enables its `preserve_order` feature.
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::String(text) => write_string(text, out),
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_string(text: &str, out: &mut String) {
    // serde_json escapes only what JSON requires and leaves non-ASCII as UTF-8.
    out.push_str(&Value::String(text.to_owned()).to_string());
}

/// The request fingerprint of one set of arguments, in both algorithms a stored
/// record may carry: blake3 (ours, stored as `blake3:<hex>`) and SHA-256 (bare
/// 64-digit hex, written by the Python package).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFingerprint {
    blake3_hex: String,
    sha256_hex: String,
}

impl RequestFingerprint {
    /// The fingerprint of canonical JSON text.
    ///
    /// ```
    /// # use effect_core::RequestFingerprint;
    /// let fp = RequestFingerprint::of_canonical(r#"{"invoice_id":"INV-1"}"#);
    /// assert!(fp.stored().starts_with("blake3:"));
    /// // A fingerprint written by the Python package matches the same arguments.
    /// assert!(fp.matches("afd3ae6377d737975ba2f111db265e0b714646564f9cfd1e9820cd92f36703b7"));
    /// ```
    pub fn of_canonical(canonical: &str) -> Self {
        RequestFingerprint {
            blake3_hex: blake3::hash(canonical.as_bytes()).to_hex().to_string(),
            sha256_hex: hex(&sha2::Sha256::digest(canonical.as_bytes())),
        }
    }

    /// The fingerprint of a JSON value (canonicalized first).
    pub fn of_value(value: &Value) -> Self {
        RequestFingerprint::of_canonical(&canonical_json(value))
    }

    /// The string stored for new operations: `blake3:<hex>`.
    pub fn stored(&self) -> String {
        format!("blake3:{}", self.blake3_hex)
    }

    /// The blake3 hex digest.
    pub fn blake3_hex(&self) -> &str {
        &self.blake3_hex
    }

    /// Whether a stored fingerprint describes the same arguments. A bare
    /// 64-digit hex string is read as SHA-256; anything else unrecognised never
    /// matches (the arguments cannot be proven equal).
    pub fn matches(&self, stored: &str) -> bool {
        if let Some(hex) = stored.strip_prefix("blake3:") {
            return hex.eq_ignore_ascii_case(&self.blake3_hex);
        }
        if let Some(hex) = stored.strip_prefix("sha256:") {
            return hex.eq_ignore_ascii_case(&self.sha256_hex);
        }
        stored.len() == 64
            && stored.bytes().all(|b| b.is_ascii_hexdigit())
            && stored.eq_ignore_ascii_case(&self.sha256_hex)
    }
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
