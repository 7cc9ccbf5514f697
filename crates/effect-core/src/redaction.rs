//! Field-path [`Redaction`]: which parts of a call's arguments are replaced
//! by [`REDACTED`] before they are stored.
//!
//! A call has two copies of its arguments: the *revealed* one (serialized
//! inside [`reveal`](crate::secret::reveal), what the handler gets) and the
//! *redacted* one ([`Secret`](crate::secret::Secret) fields and the
//! contract's [`Redaction`] paths replaced by [`REDACTED`], what may be
//! stored). The executor derives the rest from the pair (effect-exec's
//! `secrets` module: the scrubbing `Redactor`, the `fingerprint_view`).
//!
//! ```
//! use effect_core::Redaction;
//! use effect_core::secret::REDACTED;
//! use serde_json::json;
//!
//! let revealed = json!({"invoice_id": "INV-1", "card": {"token": "tok_4242"}});
//! let redacted = Redaction::new(["/card/token"])?.apply(&revealed);
//! assert_eq!(redacted, json!({"invoice_id": "INV-1", "card": {"token": REDACTED}}));
//! # Ok::<(), effect_core::RedactionError>(())
//! ```

use serde_json::Value;

use crate::canonical::MAX_DEPTH;
use crate::error::RedactionError;
use crate::secret::REDACTED;

/// Field paths whose values are replaced by [`REDACTED`] before arguments are
/// stored: JSON Pointers (RFC 6901), where a `*` segment matches every element
/// of an array and every member of an object.
///
/// `""` is the whole value; `/card/number` a member; `/items/0/sku` an array
/// element; `/items/*/sku` the `sku` of every item. A path that matches
/// nothing in a value redacts nothing there. A `*` segment is always a
/// wildcard: a member literally named `*` is matched by it as well.
///
/// ```
/// use effect_core::Redaction;
/// use serde_json::json;
///
/// let redaction = Redaction::new(["/cards/*/number", "/headers/authorization"])?;
/// let args = json!({
///     "cards": [{"number": "4111", "brand": "visa"}, {"number": "5500", "brand": "mc"}],
///     "headers": {"authorization": "Bearer s3cr3t", "accept": "json"},
/// });
/// assert_eq!(redaction.apply(&args), json!({
///     "cards": [{"number": "[redacted]", "brand": "visa"}, {"number": "[redacted]", "brand": "mc"}],
///     "headers": {"authorization": "[redacted]", "accept": "json"},
/// }));
/// assert!(Redaction::new(["card/number"]).is_err()); // no leading '/'
/// # Ok::<(), effect_core::RedactionError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redaction {
    paths: Vec<Path>,
}

/// One parsed path.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Path {
    text: String,
    segments: Vec<Segment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// `*`: every array element and object member.
    Any,
    /// A member name, or an array index when it reads as one.
    Token(String),
}

impl Redaction {
    /// A redaction of these JSON Pointer paths.
    ///
    /// # Errors
    ///
    /// [`RedactionError::InvalidPath`] for a path that is not empty and does
    /// not start with `/`, has a `~` not followed by `0` or `1`, or has more
    /// than [`MAX_DEPTH`] segments (no storable value is that deep).
    pub fn new<I, S>(paths: I) -> Result<Self, RedactionError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let paths = paths
            .into_iter()
            .map(|path| parse_path(path.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Redaction { paths })
    }

    /// Whether there are no paths.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    /// The paths, as given.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.paths.iter().map(|path| path.text.as_str())
    }

    /// A copy of `value` with every matched value replaced by [`REDACTED`].
    #[must_use]
    pub fn apply(&self, value: &Value) -> Value {
        let mut value = value.clone();
        self.apply_in_place(&mut value);
        value
    }

    /// Replaces every matched value in `value` by [`REDACTED`].
    pub fn apply_in_place(&self, value: &mut Value) {
        for path in &self.paths {
            // An explicit stack: a wildcard path fans out over a value's width.
            let mut stack: Vec<(&mut Value, usize)> = vec![(&mut *value, 0)];
            while let Some((node, depth)) = stack.pop() {
                let Some(segment) = path.segments.get(depth) else {
                    *node = Value::String(REDACTED.to_owned());
                    continue;
                };
                match (segment, node) {
                    (Segment::Any, Value::Array(items)) => {
                        stack.extend(items.iter_mut().map(|item| (item, depth + 1)));
                    }
                    (Segment::Any, Value::Object(map)) => {
                        stack.extend(map.values_mut().map(|item| (item, depth + 1)));
                    }
                    (Segment::Token(name), Value::Object(map)) => {
                        if let Some(item) = map.get_mut(name) {
                            stack.push((item, depth + 1));
                        }
                    }
                    (Segment::Token(index), Value::Array(items)) => {
                        if let Some(item) = array_index(index).and_then(|i| items.get_mut(i)) {
                            stack.push((item, depth + 1));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
}

fn parse_path(text: &str) -> Result<Path, RedactionError> {
    let invalid = |reason| RedactionError::InvalidPath {
        path: text.to_owned(),
        reason,
    };
    let mut segments = Vec::new();
    if !text.is_empty() {
        let rest = text
            .strip_prefix('/')
            .ok_or_else(|| invalid("a JSON pointer is empty or starts with '/'"))?;
        for raw in rest.split('/') {
            if raw == "*" {
                segments.push(Segment::Any);
                continue;
            }
            segments.push(Segment::Token(
                unescape_token(raw).ok_or_else(|| invalid("'~' must be followed by '0' or '1'"))?,
            ));
        }
    }
    if segments.len() > MAX_DEPTH {
        return Err(invalid("deeper than any value the ledger stores"));
    }
    Ok(Path {
        text: text.to_owned(),
        segments,
    })
}

/// RFC 6901: `~1` is `/`, `~0` is `~`; any other `~` is an error.
fn unescape_token(raw: &str) -> Option<String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// An array index as RFC 6901 spells it: `0`, or digits without a leading zero.
fn array_index(token: &str) -> Option<usize> {
    let digits = !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit());
    if !digits || (token.len() > 1 && token.starts_with('0')) {
        return None;
    }
    token.parse().ok()
}

#[cfg(test)]
mod tests;
