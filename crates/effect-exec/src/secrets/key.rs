//! 32-byte deployment keys: a [`SealingKey`] encrypts stored values, a
//! [`FingerprintKey`] keys the digests of secret arguments.
//!
//! Both are read from raw bytes, 64 hex digits or base64 (standard alphabet,
//! padded), are wiped from memory when dropped and never print their bytes.
//! Generate one with `openssl rand -hex 32`.

use std::fmt;

use base64::Engine as _;
use zeroize::{Zeroize, Zeroizing};

/// The length of every key, in bytes.
pub const KEY_LEN: usize = 32;

/// The blake3 derivation context of the key a [`FingerprintKey`] hashes
/// with: the same deployment key used elsewhere gives unrelated digests.
const FINGERPRINT_CONTEXT: &str = "production-agent-systems 2026-12 secret argument digest key";

/// A key that seals stored values (XChaCha20-Poly1305), held in a
/// [`Keyring`](super::Keyring) under a key id.
///
/// ```
/// use effect_exec::secrets::SealingKey;
///
/// let key = SealingKey::parse("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")?;
/// assert_eq!(format!("{key:?}"), "SealingKey([redacted])");
/// assert!(SealingKey::parse("too short").is_err());
/// # Ok::<(), effect_exec::secrets::KeyError>(())
/// ```
#[derive(Clone)]
pub struct SealingKey {
    bytes: Zeroizing<[u8; KEY_LEN]>,
}

/// The key of the digests that stand for secret arguments in the request
/// fingerprint ([`fingerprint_view`](super::fingerprint_view)).
///
/// Keep it stable for the life of the ledger: a new key changes every
/// fingerprint of an operation with a secret, so a retry of an older
/// operation would be a conflict. It is separate from the sealing keys, which
/// rotate.
///
/// ```
/// use effect_exec::secrets::FingerprintKey;
///
/// let key = FingerprintKey::parse("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")?;
/// assert_eq!(format!("{key:?}"), "FingerprintKey([redacted])");
/// # Ok::<(), effect_exec::secrets::KeyError>(())
/// ```
#[derive(Clone)]
pub struct FingerprintKey {
    /// The key derived from the deployment key, not the key itself.
    derived: Zeroizing<[u8; KEY_LEN]>,
}

impl SealingKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        SealingKey {
            bytes: Zeroizing::new(bytes),
        }
    }

    /// A key from a slice that must be 32 bytes long.
    ///
    /// # Errors
    ///
    /// [`KeyError::WrongLength`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        key_bytes(bytes).map(Self::from_bytes)
    }

    /// A key from 64 hex digits or the base64 of 32 bytes (surrounding
    /// whitespace is ignored, so a key file's newline does no harm).
    ///
    /// # Errors
    ///
    /// [`KeyError::Unparseable`] or [`KeyError::WrongLength`].
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        parse_key(text).map(Self::from_bytes)
    }

    pub(crate) fn bytes(&self) -> &[u8; KEY_LEN] {
        &self.bytes
    }
}

impl FingerprintKey {
    /// A key from its 32 bytes.
    pub fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        let mut bytes = bytes;
        let derived = blake3::derive_key(FINGERPRINT_CONTEXT, &bytes);
        bytes.zeroize();
        FingerprintKey {
            derived: Zeroizing::new(derived),
        }
    }

    /// A key from a slice that must be 32 bytes long.
    ///
    /// # Errors
    ///
    /// [`KeyError::WrongLength`].
    pub fn from_slice(bytes: &[u8]) -> Result<Self, KeyError> {
        key_bytes(bytes).map(Self::from_bytes)
    }

    /// A key from 64 hex digits or the base64 of 32 bytes (surrounding
    /// whitespace is ignored).
    ///
    /// # Errors
    ///
    /// [`KeyError::Unparseable`] or [`KeyError::WrongLength`].
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        parse_key(text).map(Self::from_bytes)
    }

    /// The keyed digest of `data`, as lowercase hex.
    pub(crate) fn digest_hex(&self, data: &[u8]) -> String {
        blake3::keyed_hash(&self.derived, data).to_hex().to_string()
    }
}

impl fmt::Debug for SealingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SealingKey([redacted])")
    }
}

impl fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintKey([redacted])")
    }
}

/// Key material or a key id that cannot be used for sealing or fingerprinting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key is not 32 bytes long.
    #[error("a key must be 32 bytes, got {len}")]
    WrongLength {
        /// The number of bytes given.
        len: usize,
    },
    /// The text is neither 64 hex digits nor base64 of 32 bytes.
    #[error("a key must be 64 hex digits or the base64 of 32 bytes")]
    Unparseable,
    /// The key id is empty or only whitespace.
    #[error("a key id must not be blank")]
    BlankId,
    /// The keyring already holds a key under this id.
    #[error("key id {key_id:?} is already in the keyring")]
    DuplicateId {
        /// The key id.
        key_id: String,
    },
}

fn key_bytes(bytes: &[u8]) -> Result<[u8; KEY_LEN], KeyError> {
    <[u8; KEY_LEN]>::try_from(bytes).map_err(|_| KeyError::WrongLength { len: bytes.len() })
}

fn parse_key(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let text = text.trim();
    if text.len() == 2 * KEY_LEN && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let mut bytes = [0u8; KEY_LEN];
        for (byte, pair) in bytes.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            *byte = (hex_digit(pair[0]) << 4) | hex_digit(pair[1]);
        }
        return Ok(bytes);
    }
    let decoded = Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|_| KeyError::Unparseable)?,
    );
    key_bytes(&decoded)
}

/// The value of one ASCII hex digit (already checked to be one).
fn hex_digit(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit
            .to_ascii_lowercase()
            .wrapping_sub(b'a')
            .wrapping_add(10),
    }
}
