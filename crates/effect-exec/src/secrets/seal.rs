//! At-rest sealing of stored values with XChaCha20-Poly1305 (RustCrypto's
//! `chacha20poly1305`), under a [`Keyring`] that rotates.
//!
//! A sealed value is a self-describing JSON envelope, storable in any JSON or
//! TEXT column:
//!
//! ```text
//! {"$sealed": {"v": 1, "alg": "xchacha20poly1305", "key_id": "k1",
//!              "nonce": "<base64, 24 bytes>", "ciphertext": "<base64>"}}
//! ```
//!
//! The plaintext is the value's canonical JSON. Each seal draws a fresh
//! 24-byte nonce from the operating system, which is large enough that random
//! nonces never repeat in practice under one key. The additional data a
//! caller gives (the operation id) is authenticated with the key id and the
//! format version, so an envelope copied to another record, or edited to name
//! another key, does not open.
//!
//! ```
//! use effect_exec::secrets::{sealed_info, Keyring, SealingKey};
//! use serde_json::json;
//!
//! let old = Keyring::new("k1", SealingKey::from_bytes([1; 32]))?;
//! let sealed = old.seal(&json!({"card_token": "tok_4242"}), "invoice:INV-1:capture")?;
//! assert!(!sealed.to_string().contains("tok_4242"));
//! assert_eq!(sealed_info(&sealed).map(|info| info.to_string()).as_deref(), Some("sealed (key k1)"));
//!
//! // Rotation: new values are sealed with k2; what k1 sealed still opens.
//! let keyring = Keyring::new("k2", SealingKey::from_bytes([2; 32]))?
//!     .with_retired("k1", SealingKey::from_bytes([1; 32]))?;
//! assert_eq!(keyring.open(&sealed, "invoice:INV-1:capture")?, json!({"card_token": "tok_4242"}));
//! assert!(keyring.open(&sealed, "invoice:INV-2:capture").is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{Key, XChaCha20Poly1305, XNonce};
use serde_json::{Map, Value, json};
use zeroize::Zeroizing;

use effect_core::canonical::{canonical_json, check_depth};
use effect_core::{BoxError, CanonicalError};

use super::key::{KeyError, SealingKey};

/// The member name of a sealed envelope.
pub const SEALED: &str = "$sealed";

/// The algorithm name envelopes carry.
pub const ALGORITHM: &str = "xchacha20poly1305";

/// The envelope format version this build writes and opens.
pub const FORMAT_VERSION: u64 = 1;

/// Domain separation of the additional authenticated data.
const AAD_DOMAIN: &[u8] = b"production-agent-systems sealed value\0";

/// The keys that seal and open stored values: the current key seals, it and
/// every retired key open what they sealed. `Debug` prints key ids only.
///
/// ```
/// use effect_exec::secrets::{Keyring, SealingKey};
///
/// let keyring = Keyring::new("2026-12", SealingKey::from_bytes([9; 32]))?
///     .with_retired("2026-06", SealingKey::from_bytes([8; 32]))?;
/// assert_eq!(keyring.current_key_id(), "2026-12");
/// assert_eq!(keyring.key_ids().collect::<Vec<_>>(), ["2026-12", "2026-06"]);
/// assert_eq!(format!("{keyring:?}"), r#"Keyring { current: "2026-12", retired: ["2026-06"] }"#);
/// # Ok::<(), effect_exec::secrets::KeyError>(())
/// ```
#[derive(Clone)]
pub struct Keyring {
    current: (String, SealingKey),
    retired: Vec<(String, SealingKey)>,
}

/// What a sealed envelope says about itself, without opening it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SealedInfo {
    /// The id of the key that sealed it.
    pub key_id: String,
    /// The algorithm (`xchacha20poly1305`).
    pub alg: String,
    /// The envelope format version.
    pub version: u64,
}

/// A value that cannot be sealed or opened by a [`Keyring`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealError {
    /// The value to seal is outside the canonical-JSON limits, so it could
    /// never be stored or opened again.
    #[error("value cannot be sealed")]
    Canonical {
        /// What limit it breaks.
        #[source]
        source: CanonicalError,
    },
    /// The operating system's random number generator gave no nonce.
    #[error("no nonce: the operating system's random number generator failed")]
    Random {
        /// The generator's error.
        #[source]
        source: BoxError,
    },
    /// The cipher refused to encrypt (the value is longer than it can seal).
    #[error("encryption failed")]
    Encrypt,
    /// The value is not a sealed envelope (`{"$sealed": {...}}`).
    #[error("value is not a sealed envelope")]
    NotSealed,
    /// The value looks like a sealed envelope but a field is missing or invalid.
    #[error("sealed envelope is malformed: {reason}")]
    Malformed {
        /// Which field is wrong.
        reason: String,
    },
    /// The envelope was written by a newer format version.
    #[error("sealed envelope has format version {version}; this build opens version 1")]
    UnsupportedVersion {
        /// The envelope's version.
        version: u64,
    },
    /// The envelope names an algorithm this build does not implement.
    #[error("sealed envelope uses algorithm {alg:?}; this build opens xchacha20poly1305")]
    UnsupportedAlgorithm {
        /// The envelope's algorithm.
        alg: String,
    },
    /// The envelope names a key the keyring does not hold: add it with
    /// [`Keyring::with_retired`].
    #[error("value was sealed with key {key_id:?}, which is not in the keyring")]
    UnknownKey {
        /// The key id the envelope names.
        key_id: String,
    },
    /// Authentication failed: the ciphertext or its header was altered, the
    /// additional data differs (the value was sealed for another record), or
    /// the key under this id is not the one that sealed it.
    #[error(
        "sealed value does not open with key {key_id:?}: it was altered, sealed for another record, or sealed under another key with this id"
    )]
    Authentication {
        /// The key id the envelope names.
        key_id: String,
    },
    /// The envelope opened but does not hold a storable JSON value.
    #[error("sealed value opened but holds no storable JSON")]
    Plaintext {
        /// The decoding or limit error.
        #[source]
        source: BoxError,
    },
}

impl Keyring {
    /// A keyring that seals with `key`, under `key_id`.
    ///
    /// # Errors
    ///
    /// [`KeyError::BlankId`] for an empty or whitespace key id.
    pub fn new(key_id: impl Into<String>, key: SealingKey) -> Result<Self, KeyError> {
        let key_id = checked_id(key_id.into())?;
        Ok(Keyring {
            current: (key_id, key),
            retired: Vec::new(),
        })
    }

    /// The same keyring, also opening what `key` sealed under `key_id`.
    ///
    /// # Errors
    ///
    /// [`KeyError::BlankId`], or [`KeyError::DuplicateId`] for an id the
    /// keyring already holds.
    pub fn with_retired(
        mut self,
        key_id: impl Into<String>,
        key: SealingKey,
    ) -> Result<Self, KeyError> {
        let key_id = checked_id(key_id.into())?;
        if self.key_ids().any(|id| id == key_id) {
            return Err(KeyError::DuplicateId { key_id });
        }
        self.retired.push((key_id, key));
        Ok(self)
    }

    /// The id of the key new values are sealed with.
    pub fn current_key_id(&self) -> &str {
        &self.current.0
    }

    /// Every key id, the current one first.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.current.0.as_str())
            .chain(self.retired.iter().map(|(id, _)| id.as_str()))
    }

    /// Seals `value` with the current key, bound to `aad` (the id of the
    /// record it belongs to: it must be given again to open it).
    ///
    /// # Errors
    ///
    /// [`SealError::Canonical`] for a value nested deeper than
    /// [`MAX_DEPTH`](effect_core::canonical::MAX_DEPTH), [`SealError::Random`] when
    /// the operating system gives no randomness, [`SealError::Encrypt`] for a
    /// value too long for the cipher.
    pub fn seal(&self, value: &Value, aad: &str) -> Result<Value, SealError> {
        check_depth(value).map_err(|source| SealError::Canonical { source })?;
        let (key_id, key) = &self.current;
        let plaintext = Zeroizing::new(canonical_json(value));
        let nonce = XNonce::try_generate().map_err(|source| SealError::Random {
            source: Box::new(source),
        })?;
        let aad_bytes = additional_data(FORMAT_VERSION, key_id, aad);
        let ciphertext = cipher(key)
            .encrypt(
                &nonce,
                Payload {
                    msg: plaintext.as_bytes(),
                    aad: &aad_bytes,
                },
            )
            .map_err(|_| SealError::Encrypt)?;
        Ok(json!({
            SEALED: {
                "v": FORMAT_VERSION,
                "alg": ALGORITHM,
                "key_id": key_id,
                "nonce": BASE64.encode(nonce.as_slice()),
                "ciphertext": BASE64.encode(&ciphertext),
            }
        }))
    }

    /// Opens an envelope with whichever key it names, checking `aad`.
    ///
    /// # Errors
    ///
    /// [`SealError::NotSealed`] for a value that is no envelope,
    /// [`SealError::Malformed`], [`SealError::UnsupportedVersion`] or
    /// [`SealError::UnsupportedAlgorithm`] for one this build cannot read,
    /// [`SealError::UnknownKey`] naming a key id the keyring lacks,
    /// [`SealError::Authentication`] for an altered envelope, another
    /// record's `aad` or another key under the same id, and
    /// [`SealError::Plaintext`] when what opened is not storable JSON.
    pub fn open(&self, sealed: &Value, aad: &str) -> Result<Value, SealError> {
        let envelope = envelope(sealed).ok_or(SealError::NotSealed)?;
        let version = envelope
            .get("v")
            .and_then(Value::as_u64)
            .ok_or_else(|| malformed("\"v\" is not a version number"))?;
        if version != FORMAT_VERSION {
            return Err(SealError::UnsupportedVersion { version });
        }
        let alg = text_field(envelope, "alg")?;
        if alg != ALGORITHM {
            return Err(SealError::UnsupportedAlgorithm {
                alg: alg.to_owned(),
            });
        }
        let key_id = text_field(envelope, "key_id")?;
        let nonce = BASE64
            .decode(text_field(envelope, "nonce")?)
            .map_err(|_| malformed("\"nonce\" is not base64"))?;
        let nonce = XNonce::try_from(nonce.as_slice())
            .map_err(|_| malformed("\"nonce\" is not 24 bytes"))?;
        let ciphertext = BASE64
            .decode(text_field(envelope, "ciphertext")?)
            .map_err(|_| malformed("\"ciphertext\" is not base64"))?;
        let key = self.key(key_id).ok_or_else(|| SealError::UnknownKey {
            key_id: key_id.to_owned(),
        })?;
        let aad_bytes = additional_data(version, key_id, aad);
        let plaintext = Zeroizing::new(
            cipher(key)
                .decrypt(
                    &nonce,
                    Payload {
                        msg: &ciphertext,
                        aad: &aad_bytes,
                    },
                )
                .map_err(|_| SealError::Authentication {
                    key_id: key_id.to_owned(),
                })?,
        );
        let value: Value =
            serde_json::from_slice(&plaintext).map_err(|source| SealError::Plaintext {
                source: Box::new(source),
            })?;
        check_depth(&value).map_err(|source| SealError::Plaintext {
            source: Box::new(source),
        })?;
        Ok(value)
    }

    /// Re-seals an envelope under the current key (after a rotation), keeping
    /// `aad`; an envelope already sealed with the current key is returned as
    /// it is.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open) and [`seal`](Self::seal).
    pub fn reseal(&self, sealed: &Value, aad: &str) -> Result<Value, SealError> {
        let value = self.open(sealed, aad)?;
        if sealed_info(sealed).is_some_and(|info| info.key_id == self.current.0) {
            return Ok(sealed.clone());
        }
        self.seal(&value, aad)
    }

    fn key(&self, key_id: &str) -> Option<&SealingKey> {
        std::iter::once(&self.current)
            .chain(&self.retired)
            .find(|(id, _)| id == key_id)
            .map(|(_, key)| key)
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let retired: Vec<&str> = self.retired.iter().map(|(id, _)| id.as_str()).collect();
        f.debug_struct("Keyring")
            .field("current", &self.current.0)
            .field("retired", &retired)
            .finish()
    }
}

impl fmt::Display for SealedInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sealed (key {})", self.key_id)
    }
}

/// What an envelope says about itself, or `None` for any other value (an
/// operator's view shows `sealed (key k1)` for it, rather than ciphertext).
///
/// ```
/// # use effect_exec::secrets::sealed_info;
/// assert!(sealed_info(&serde_json::json!({"card_token": "[redacted]"})).is_none());
/// ```
pub fn sealed_info(value: &Value) -> Option<SealedInfo> {
    let envelope = envelope(value)?;
    Some(SealedInfo {
        key_id: envelope.get("key_id")?.as_str()?.to_owned(),
        alg: envelope.get("alg")?.as_str()?.to_owned(),
        version: envelope.get("v")?.as_u64()?,
    })
}

/// The inner object of `{"$sealed": {...}}` (and nothing else beside it).
fn envelope(value: &Value) -> Option<&Map<String, Value>> {
    let outer = value.as_object()?;
    if outer.len() != 1 {
        return None;
    }
    outer.get(SEALED)?.as_object()
}

fn text_field<'a>(envelope: &'a Map<String, Value>, name: &str) -> Result<&'a str, SealError> {
    envelope
        .get(name)
        .and_then(Value::as_str)
        .ok_or_else(|| malformed(&format!("{name:?} is missing or not a string")))
}

fn malformed(reason: &str) -> SealError {
    SealError::Malformed {
        reason: reason.to_owned(),
    }
}

fn cipher(key: &SealingKey) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&Key::from(*key.bytes()))
}

/// The authenticated data: a domain, the version, the key id (length first,
/// so no id and record id run together) and the caller's record id.
fn additional_data(version: u64, key_id: &str, aad: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(AAD_DOMAIN.len() + 16 + key_id.len() + aad.len());
    out.extend_from_slice(AAD_DOMAIN);
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&(key_id.len() as u64).to_be_bytes());
    out.extend_from_slice(key_id.as_bytes());
    out.extend_from_slice(aad.as_bytes());
    out
}

fn checked_id(key_id: String) -> Result<String, KeyError> {
    if key_id.trim().is_empty() {
        return Err(KeyError::BlankId);
    }
    Ok(key_id)
}

#[cfg(test)]
mod tests;
