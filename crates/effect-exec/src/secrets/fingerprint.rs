//! The value a request fingerprint hashes when arguments hold secrets.

use serde_json::{Map, Value};

use effect_core::canonical::canonical_json;
use effect_core::secret::is_redacted;

use super::key::FingerprintKey;

/// The member name of the object that stands for a secret in a
/// [`fingerprint_view`]: `{"$secret_digest": "<hex>"}`.
pub const SECRET_DIGEST: &str = "$secret_digest";

/// The blake3 derivation context of the digest computed without a key.
const UNKEYED_CONTEXT: &str = "production-agent-systems 2026-12 unkeyed secret argument digest";

/// What the request fingerprint of a call with secrets hashes: the redacted
/// arguments with each [`REDACTED`](effect_core::secret::REDACTED) replaced by
/// `{"$secret_digest": "<hex>"}`, a digest of the canonical JSON of the
/// secret value at that place.
///
/// A changed secret changes the view, so a second call with another card
/// number under the same operation id is still a conflict; the view holds no
/// secret in clear. With a [`FingerprintKey`] the digest is a keyed blake3
/// hash, which nobody without the key can test guesses against. Without one
/// it is an unkeyed (domain-separated) blake3 hash: a secret from a small
/// space, such as a card number, can be found from it by trying every
/// candidate, so configure a key wherever fingerprints are readable by
/// someone who must not learn the secret. Arguments without secrets give
/// back the revealed value unchanged, so their fingerprint is the one every
/// earlier version computed (and that the Python package computes).
///
/// `redacted` must be derived from `revealed` (by serialization outside
/// [`reveal`](effect_core::secret::reveal) and a [`Redaction`](effect_core::Redaction)).
///
/// ```
/// use effect_exec::secrets::{fingerprint_view, FingerprintKey};
/// use effect_core::RequestFingerprint;
/// use serde_json::json;
///
/// let key = FingerprintKey::from_bytes([7; 32]);
/// let redacted = json!({"invoice_id": "INV-1", "card_token": "[redacted]"});
/// let first = fingerprint_view(&json!({"invoice_id": "INV-1", "card_token": "tok_1"}), &redacted, Some(&key));
/// let second = fingerprint_view(&json!({"invoice_id": "INV-1", "card_token": "tok_2"}), &redacted, Some(&key));
/// assert!(first["card_token"]["$secret_digest"].is_string());
/// assert_ne!(RequestFingerprint::of_value(&first), RequestFingerprint::of_value(&second));
/// ```
pub fn fingerprint_view(revealed: &Value, redacted: &Value, key: Option<&FingerprintKey>) -> Value {
    let mut view = redacted.clone();
    // An explicit stack, as everywhere a caller's value is walked.
    let mut stack: Vec<(&Value, &mut Value)> = vec![(revealed, &mut view)];
    while let Some((clear, stored)) = stack.pop() {
        if is_redacted(stored) {
            if !is_redacted(clear) {
                *stored = digest_object(clear, key);
            }
            continue;
        }
        match (clear, stored) {
            (Value::Object(clear), Value::Object(stored)) => {
                for (name, stored) in stored.iter_mut() {
                    if let Some(clear) = clear.get(name) {
                        stack.push((clear, stored));
                    }
                }
            }
            (Value::Array(clear), Value::Array(stored)) => {
                stack.extend(clear.iter().zip(stored.iter_mut()));
            }
            _ => {}
        }
    }
    view
}

fn digest_object(secret: &Value, key: Option<&FingerprintKey>) -> Value {
    let canonical = zeroize::Zeroizing::new(canonical_json(secret));
    let hex = match key {
        Some(key) => key.digest_hex(canonical.as_bytes()),
        None => blake3::Hasher::new_derive_key(UNKEYED_CONTEXT)
            .update(canonical.as_bytes())
            .finalize()
            .to_hex()
            .to_string(),
    };
    let mut map = Map::new();
    map.insert(SECRET_DIGEST.to_owned(), Value::String(hex));
    Value::Object(map)
}
