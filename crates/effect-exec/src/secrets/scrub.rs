//! The [`Redactor`] of one call: scrubs its secrets out of everything written
//! after the arguments.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use effect_core::secret::{REDACTED, is_redacted};

/// The shortest secret text, in characters, that [`Redactor::scrub_str`]
/// replaces inside longer text. A shorter secret (a 3-digit CVV) would match
/// in unrelated text; it is still replaced where a whole leaf equals it.
pub const MIN_SCRUB_CHARS: usize = 4;

/// The secrets of one call, to scrub from outputs, evidence, error text and
/// event data before they are written.
///
/// Built from the revealed and the redacted arguments: wherever the redacted
/// copy holds [`REDACTED`] and the revealed copy holds something else, each
/// string and number leaf of the revealed value there is a secret (a whole
/// redacted object contributes all of its leaves; booleans and nulls carry
/// nothing worth hiding). `Debug` prints only how many secrets it holds.
///
/// Scrubbing finds a secret's exact text only: an encoded, truncated or
/// reformatted copy of it (URL-encoded, base64, `**** 4242`) is not found.
///
/// ```
/// use effect_exec::secrets::Redactor;
/// use serde_json::json;
///
/// let revealed = json!({"card": {"number": "4111111111111111", "cvv": 737}, "amount": 5});
/// let redacted = json!({"card": "[redacted]", "amount": 5});
/// let redactor = Redactor::new(&revealed, &redacted);
/// assert_eq!(redactor.len(), 2);
///
/// let evidence = json!({"error": "card 4111111111111111 refused", "cvv": 737, "amount": 5});
/// assert_eq!(
///     redactor.scrub_value(&evidence),
///     json!({"error": "card [redacted] refused", "cvv": "[redacted]", "amount": 5}),
/// );
/// ```
#[derive(Clone, Default)]
pub struct Redactor {
    /// Every secret's text (a number's as serde_json writes it).
    exact: BTreeSet<String>,
    /// The texts of at least [`MIN_SCRUB_CHARS`] characters, longest first,
    /// so that a secret containing another is replaced whole.
    searched: Vec<String>,
}

impl Redactor {
    /// The secrets of a call whose arguments are `revealed` in clear and
    /// `redacted` as stored.
    pub fn new(revealed: &Value, redacted: &Value) -> Self {
        let mut exact = BTreeSet::new();
        let mut stack = vec![(revealed, redacted)];
        while let Some((clear, stored)) = stack.pop() {
            if is_redacted(stored) {
                if !is_redacted(clear) {
                    collect_leaves(clear, &mut exact);
                }
                continue;
            }
            match (clear, stored) {
                (Value::Object(clear), Value::Object(stored)) => {
                    for (name, clear) in clear {
                        if let Some(stored) = stored.get(name) {
                            stack.push((clear, stored));
                        }
                    }
                }
                (Value::Array(clear), Value::Array(stored)) => {
                    stack.extend(clear.iter().zip(stored));
                }
                _ => {}
            }
        }
        let mut searched: Vec<String> = exact
            .iter()
            .filter(|text| text.chars().count() >= MIN_SCRUB_CHARS)
            .cloned()
            .collect();
        searched.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        Redactor { exact, searched }
    }

    /// How many distinct secrets it holds.
    pub fn len(&self) -> usize {
        self.exact.len()
    }

    /// Whether it holds no secret (scrubbing then changes nothing).
    pub fn is_empty(&self) -> bool {
        self.exact.is_empty()
    }

    /// `text` with every occurrence of a secret of at least
    /// [`MIN_SCRUB_CHARS`] characters replaced by [`REDACTED`], and with
    /// [`REDACTED`] if the whole text is a shorter secret.
    pub fn scrub_str(&self, text: &str) -> String {
        if self.exact.contains(text) {
            return REDACTED.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        // Replace the earliest match first (the longest one where several
        // start at the same place), in one pass over the text, so that a
        // replacement is never searched again.
        loop {
            let earliest = self
                .searched
                .iter()
                .filter_map(|secret| rest.find(secret.as_str()).map(|at| (at, secret.len())))
                .min_by(|a, b| a.0.cmp(&b.0).then_with(|| b.1.cmp(&a.1)));
            let Some((at, len)) = earliest else {
                out.push_str(rest);
                return out;
            };
            out.push_str(&rest[..at]);
            out.push_str(REDACTED);
            rest = &rest[at + len..];
        }
    }

    /// A copy of `value` with its secrets scrubbed ([`Self::scrub_value_in_place`]).
    #[must_use]
    pub fn scrub_value(&self, value: &Value) -> Value {
        let mut value = value.clone();
        self.scrub_value_in_place(&mut value);
        value
    }

    /// Scrubs every string leaf and object key with [`Self::scrub_str`], and
    /// replaces every number leaf whose text is a secret by [`REDACTED`].
    /// Two keys that scrub to the same text keep only the later one's value.
    pub fn scrub_value_in_place(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        // An explicit stack: the value may come from a handler, nested
        // arbitrarily deep.
        let mut stack: Vec<&mut Value> = vec![value];
        while let Some(node) = stack.pop() {
            match node {
                Value::String(text) => {
                    let scrubbed = self.scrub_str(text);
                    *text = scrubbed;
                }
                Value::Number(number) => {
                    if self.exact.contains(&number.to_string()) {
                        *node = Value::String(REDACTED.to_owned());
                    }
                }
                Value::Array(items) => stack.extend(items.iter_mut()),
                Value::Object(map) => {
                    if map.keys().any(|key| self.scrub_str(key) != *key) {
                        let entries = std::mem::take(map);
                        for (key, item) in entries {
                            map.insert(self.scrub_str(&key), item);
                        }
                    }
                    stack.extend(map.values_mut());
                }
                Value::Bool(_) | Value::Null => {}
            }
        }
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.exact.len())
            .finish()
    }
}

/// Adds the text of every string and number leaf under `value`.
fn collect_leaves(value: &Value, into: &mut BTreeSet<String>) {
    let mut stack = vec![value];
    while let Some(node) = stack.pop() {
        match node {
            Value::String(text) if !text.is_empty() => {
                into.insert(text.clone());
            }
            Value::Number(number) => {
                into.insert(number.to_string());
            }
            Value::Array(items) => stack.extend(items),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
}
