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
//!   one written here in [`FingerprintForm::Sha256`](crate::FingerprintForm::Sha256) matches in Python.
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

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::CanonicalError;

mod finite;
pub(crate) mod text;

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

#[cfg(test)]
mod tests;
