//! Secret arguments: a [`Secret<T>`] field serializes as the fixed marker
//! [`REDACTED`] everywhere except inside [`reveal`].
//!
//! Every serialization of a contract's arguments that may reach a ledger, a
//! log or an error message happens outside [`reveal`] and so writes the
//! marker. The executor serializes the real arguments only inside
//! [`reveal`]: for the request fingerprint (through effect-exec's
//! `secrets::fingerprint_view`, which keeps no secret in clear), for the
//! handler, and for sealing (effect-exec's `secrets::Keyring`).
//!
//! The scope is per thread: a serialization on another thread (a pool the
//! closure hands work to) is outside it and redacts. A scope cannot span an
//! `.await`, because [`reveal`] takes a synchronous closure.
//!
//! ```
//! use effect_core::secret::{reveal, Secret, REDACTED};
//! use serde::{Deserialize, Serialize};
//! use serde_json::json;
//!
//! #[derive(Serialize, Deserialize)]
//! struct Capture {
//!     invoice_id: String,
//!     card_token: Secret<String>,
//! }
//!
//! let args = Capture { invoice_id: "INV-1".into(), card_token: Secret::new("tok_4242".into()) };
//! assert_eq!(serde_json::to_value(&args)?, json!({"invoice_id": "INV-1", "card_token": REDACTED}));
//! let revealed = reveal(|| serde_json::to_value(&args))?;
//! assert_eq!(revealed["card_token"], "tok_4242");
//!
//! // What was stored redacted can never be dispatched.
//! let stored = json!({"invoice_id": "INV-1", "card_token": REDACTED});
//! assert!(serde_json::from_value::<Capture>(stored).is_err());
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::cell::Cell;
use std::fmt;

use serde::de::{DeserializeOwned, Error as _};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The fixed text every redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The message a [`Secret`] gives when asked to deserialize [`REDACTED`].
pub const REDACTED_SECRET_REFUSED: &str =
    "this secret was redacted before it was stored; it cannot be used to dispatch";

thread_local! {
    /// How many [`reveal`] scopes are open on this thread.
    static REVEAL_DEPTH: Cell<usize> = const { Cell::new(0) };
    /// How many [`Secret`] values this thread has serialized in clear.
    static REVEALED: Cell<u64> = const { Cell::new(0) };
}

/// A secret argument field: its value is only ever serialized inside
/// [`reveal`]; elsewhere it serializes as [`REDACTED`], and `Debug` and
/// `Display` print [`REDACTED`] too.
///
/// Deserializing reads a `T`, except that the marker itself is refused with
/// [`REDACTED_SECRET_REFUSED`], so a handler never runs on a value that was
/// redacted before it was stored. The value is read through a
/// [`serde_json::Value`], so the format must be self-describing (JSON is).
///
/// ```
/// use effect_core::secret::Secret;
///
/// let token = Secret::new(String::from("tok_4242"));
/// assert_eq!(format!("{token:?} {token}"), "[redacted] [redacted]");
/// assert_eq!(token.expose(), "tok_4242");
/// assert_eq!(token.into_inner(), "tok_4242");
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a secret value.
    pub const fn new(value: T) -> Self {
        Secret(value)
    }

    /// The secret value. Everything derived from it is the caller's to keep
    /// out of logs and errors.
    pub fn expose(&self) -> &T {
        &self.0
    }

    /// The secret value, unwrapped.
    pub fn into_inner(self) -> T {
        self.0
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Secret(value)
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<T> fmt::Display for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<T: Serialize> Serialize for Secret<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if is_revealing() {
            let _ = REVEALED.try_with(|count| count.set(count.get().wrapping_add(1)));
            self.0.serialize(serializer)
        } else {
            serializer.serialize_str(REDACTED)
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Secret<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Buffer first: whatever `T` is (a number, a struct), the marker is
        // recognised and refused with one clear message, not a type error.
        let value = Value::deserialize(deserializer)?;
        if is_redacted(&value) {
            return Err(D::Error::custom(REDACTED_SECRET_REFUSED));
        }
        T::deserialize(value).map(Secret).map_err(D::Error::custom)
    }
}

/// Runs `f` with [`Secret`] values serializing as themselves on this thread.
///
/// Scopes nest; the previous state is restored when `f` returns or unwinds.
///
/// ```
/// use effect_core::secret::{is_revealing, reveal, Secret};
///
/// let token = Secret::new("tok_4242");
/// assert!(!is_revealing());
/// let json = reveal(|| serde_json::to_string(&token))?;
/// assert_eq!(json, r#""tok_4242""#);
/// assert_eq!(serde_json::to_string(&token)?, r#""[redacted]""#);
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn reveal<R>(f: impl FnOnce() -> R) -> R {
    /// Closes the scope on return and on unwind alike.
    struct Scope;
    impl Drop for Scope {
        fn drop(&mut self) {
            // `try_with`: during thread teardown there is nothing to restore.
            let _ = REVEAL_DEPTH.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
        }
    }
    REVEAL_DEPTH.with(|depth| depth.set(depth.get().saturating_add(1)));
    let _scope = Scope;
    f()
}

/// [`reveal`], also saying whether any [`Secret`] was serialized in clear
/// inside it: when none was, the value holds no secret, and its redacted
/// form need not be computed.
///
/// ```
/// use effect_core::secret::{reveal_counted, Secret};
///
/// let (_, revealed) = reveal_counted(|| serde_json::to_value(&Secret::new("tok")));
/// assert!(revealed);
/// let (_, revealed) = reveal_counted(|| serde_json::to_value("plain"));
/// assert!(!revealed);
/// ```
pub fn reveal_counted<R>(f: impl FnOnce() -> R) -> (R, bool) {
    let before = REVEALED.try_with(Cell::get).unwrap_or(0);
    let result = reveal(f);
    let after = REVEALED.try_with(Cell::get).unwrap_or(0);
    (result, after != before)
}

/// Whether this thread is inside a [`reveal`] scope.
pub fn is_revealing() -> bool {
    REVEAL_DEPTH
        .try_with(|depth| depth.get() > 0)
        .unwrap_or(false)
}

/// Whether a stored value is the [`REDACTED`] marker.
///
/// ```
/// # use effect_core::secret::{is_redacted, REDACTED};
/// assert!(is_redacted(&serde_json::json!(REDACTED)));
/// assert!(!is_redacted(&serde_json::json!("tok_4242")));
/// ```
pub fn is_redacted(value: &Value) -> bool {
    value.as_str() == Some(REDACTED)
}

#[cfg(test)]
mod tests;
