//! Where a stored value holds what an operator's view must not show in
//! clear: [`REDACTED`](effect_core::secret::REDACTED) fields and sealed envelopes.

use serde_json::Value;

use effect_core::secret::is_redacted;

use super::seal::{SealedInfo, sealed_info};

/// Where a value holds something that is not shown in clear: found by
/// [`protected_fields`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProtectedField {
    /// The JSON Pointer of the field (`""` for the whole value).
    pub pointer: String,
    /// How it is protected.
    pub protection: Protection,
}

/// How a field is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protection {
    /// The field holds [`REDACTED`](effect_core::secret::REDACTED): the value was never stored.
    Redacted,
    /// The field is a sealed envelope ([`Keyring::seal`](super::Keyring::seal)).
    Sealed(SealedInfo),
}

/// Every field of `value` that is [`REDACTED`](effect_core::secret::REDACTED) or a sealed envelope, in
/// the order of their pointers' text: what an operator's view shows as "redacted" or
/// "sealed (key k1)" instead of the text stored.
///
/// ```
/// use effect_exec::secrets::{protected_fields, Protection};
/// use serde_json::json;
///
/// let stored = json!({"invoice_id": "INV-1", "card": {"token": "[redacted]"}});
/// let fields = protected_fields(&stored);
/// assert_eq!(fields.len(), 1);
/// assert_eq!(fields[0].pointer, "/card/token");
/// assert_eq!(fields[0].protection, Protection::Redacted);
/// ```
pub fn protected_fields(value: &Value) -> Vec<ProtectedField> {
    let mut found = Vec::new();
    let mut stack: Vec<(String, &Value)> = vec![(String::new(), value)];
    while let Some((pointer, node)) = stack.pop() {
        if is_redacted(node) {
            found.push(ProtectedField {
                pointer,
                protection: Protection::Redacted,
            });
            continue;
        }
        if let Some(info) = sealed_info(node) {
            found.push(ProtectedField {
                pointer,
                protection: Protection::Sealed(info),
            });
            continue;
        }
        match node {
            Value::Array(items) => {
                for (index, item) in items.iter().enumerate() {
                    stack.push((format!("{pointer}/{index}"), item));
                }
            }
            Value::Object(map) => {
                for (name, item) in map {
                    stack.push((format!("{pointer}/{}", escape_token(name)), item));
                }
            }
            _ => {}
        }
    }
    found.sort_by(|a, b| a.pointer.cmp(&b.pointer));
    found
}

fn escape_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}
