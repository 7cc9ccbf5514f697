//! What the executor does with a call's secrets (docs/security-boundaries.md):
//! seal stored values at rest, fingerprint secret arguments without storing
//! them, and scrub them out of everything written after the arguments.
//!
//! effect-core says which arguments are secret ([`Secret`], [`Redaction`])
//! and stores only what the executor gives it; a store never opens a sealed
//! envelope. This module holds the rest:
//!
//! - the [`Keyring`] of [`SealingKey`]s that seals values with
//!   XChaCha20-Poly1305 into a self-describing envelope, and
//!   [`sealed_info`], which reads an envelope's key id without opening it;
//! - [`fingerprint_view`], the value a call's request fingerprint hashes when
//!   its arguments hold secrets (keyed with a [`FingerprintKey`]);
//! - the [`Redactor`] of one call, which scrubs its secrets from outputs,
//!   evidence, error text and event data;
//! - [`protected_fields`], what an operator's view shows as redacted or
//!   sealed.
//!
//! ```
//! use effect_core::Redaction;
//! use effect_exec::secrets::{fingerprint_view, Redactor};
//! use serde_json::json;
//!
//! let revealed = json!({"invoice_id": "INV-1", "card": {"token": "tok_4242"}});
//! let redacted = Redaction::new(["/card/token"])?.apply(&revealed);
//!
//! let redactor = Redactor::new(&revealed, &redacted);
//! assert_eq!(redactor.scrub_str("card tok_4242 declined"), "card [redacted] declined");
//!
//! let view = fingerprint_view(&revealed, &redacted, None);
//! assert!(!view.to_string().contains("tok_4242"));
//! assert_ne!(view, fingerprint_view(&json!({"invoice_id": "INV-1", "card": {"token": "tok_1881"}}), &redacted, None));
//! # Ok::<(), effect_core::RedactionError>(())
//! ```
//!
//! [`Secret`]: effect_core::secret::Secret
//! [`Redaction`]: effect_core::Redaction

mod fingerprint;
mod key;
mod protected;
mod scrub;
mod seal;

pub use fingerprint::{SECRET_DIGEST, fingerprint_view};
pub use key::{FingerprintKey, KEY_LEN, KeyError, SealingKey};
pub use protected::{ProtectedField, Protection, protected_fields};
pub use scrub::{MIN_SCRUB_CHARS, Redactor};
pub use seal::{ALGORITHM, FORMAT_VERSION, Keyring, SEALED, SealError, SealedInfo, sealed_info};

#[cfg(test)]
mod tests;
