use serde_json::json;

use super::*;
use crate::secrets::FingerprintKey;
use effect_core::canonical::MAX_DEPTH;

const OP: &str = "invoice:INV-1:capture";

fn keyring() -> Keyring {
    Keyring::new("k1", SealingKey::from_bytes([1; 32])).expect("valid id")
}

fn args() -> Value {
    json!({"invoice_id": "INV-1", "card_token": "tok_4242", "amount": 12.5, "lines": [1, 2]})
}

/// The inner envelope, to tamper with.
fn inner(sealed: &mut Value) -> &mut Map<String, Value> {
    sealed[SEALED].as_object_mut().expect("an envelope")
}

#[test]
fn a_sealed_value_opens_to_the_same_value() -> Result<(), SealError> {
    let keyring = keyring();
    let sealed = keyring.seal(&args(), OP)?;
    assert_eq!(keyring.open(&sealed, OP)?, args());
    let text = sealed.to_string();
    assert!(
        !text.contains("tok_4242") && !text.contains("INV-1"),
        "{text}"
    );
    let envelope = &sealed[SEALED];
    assert_eq!(envelope["v"], 1);
    assert_eq!(envelope["alg"], ALGORITHM);
    assert_eq!(envelope["key_id"], "k1");
    assert_eq!(
        BASE64
            .decode(envelope["nonce"].as_str().unwrap_or_default())
            .map(|n| n.len())
            .ok(),
        Some(24)
    );
    // Fresh nonce each time: the same value never seals to the same text.
    assert_ne!(keyring.seal(&args(), OP)?, sealed);
    Ok(())
}

#[test]
fn a_tampered_ciphertext_is_refused() -> Result<(), SealError> {
    let keyring = keyring();
    let mut sealed = keyring.seal(&args(), OP)?;
    let ciphertext = inner(&mut sealed)["ciphertext"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut bytes = BASE64.decode(ciphertext).map_err(|_| SealError::Encrypt)?;
    bytes[0] ^= 1;
    inner(&mut sealed).insert("ciphertext".into(), json!(BASE64.encode(&bytes)));
    let err = keyring.open(&sealed, OP).unwrap_err();
    assert!(
        matches!(&err, SealError::Authentication { key_id } if key_id == "k1"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_wrong_aad_is_refused() -> Result<(), SealError> {
    let keyring = keyring();
    let sealed = keyring.seal(&args(), OP)?;
    let err = keyring.open(&sealed, "invoice:INV-2:capture").unwrap_err();
    assert!(matches!(err, SealError::Authentication { .. }), "{err}");
    Ok(())
}

#[test]
fn an_unknown_key_id_is_refused_by_name() -> Result<(), SealError> {
    let sealed = keyring().seal(&args(), OP)?;
    let other = Keyring::new("k2", SealingKey::from_bytes([2; 32])).expect("valid id");
    let err = other.open(&sealed, OP).unwrap_err();
    assert!(
        matches!(&err, SealError::UnknownKey { key_id } if key_id == "k1"),
        "{err}"
    );
    assert!(err.to_string().contains("\"k1\""), "{err}");
    Ok(())
}

#[test]
fn a_header_edited_to_name_another_key_is_refused() -> Result<(), SealError> {
    let both = Keyring::new("k2", SealingKey::from_bytes([2; 32]))
        .and_then(|k| k.with_retired("k1", SealingKey::from_bytes([1; 32])))
        .expect("valid ids");
    let mut sealed = both.seal(&args(), OP)?;
    inner(&mut sealed).insert("key_id".into(), json!("k1"));
    assert!(matches!(
        both.open(&sealed, OP),
        Err(SealError::Authentication { .. })
    ));
    // Another key under the sealing key's id does not open it either.
    let impostor = Keyring::new("k2", SealingKey::from_bytes([9; 32])).expect("valid id");
    let sealed = both.seal(&args(), OP)?;
    assert!(matches!(
        impostor.open(&sealed, OP),
        Err(SealError::Authentication { .. })
    ));
    Ok(())
}

#[test]
fn rotation_keeps_old_values_open_and_seals_with_the_new_key()
-> Result<(), Box<dyn std::error::Error>> {
    let old = keyring();
    let sealed_by_k1 = old.seal(&args(), OP)?;
    let rotated = Keyring::new("k2", SealingKey::from_bytes([2; 32]))?
        .with_retired("k1", SealingKey::from_bytes([1; 32]))?;
    assert_eq!(rotated.open(&sealed_by_k1, OP)?, args());
    let sealed_by_k2 = rotated.seal(&args(), OP)?;
    assert_eq!(
        sealed_info(&sealed_by_k2).map(|i| i.key_id),
        Some("k2".to_owned())
    );
    assert!(matches!(
        old.open(&sealed_by_k2, OP),
        Err(SealError::UnknownKey { .. })
    ));

    // Re-sealing moves a value to the current key; once k1 is gone it still opens.
    let resealed = rotated.reseal(&sealed_by_k1, OP)?;
    assert_eq!(
        sealed_info(&resealed).map(|i| i.key_id),
        Some("k2".to_owned())
    );
    let k2_only = Keyring::new("k2", SealingKey::from_bytes([2; 32]))?;
    assert_eq!(k2_only.open(&resealed, OP)?, args());
    assert_eq!(rotated.reseal(&sealed_by_k2, OP)?, sealed_by_k2);
    Ok(())
}

#[test]
fn key_ids_are_checked() {
    let key = || SealingKey::from_bytes([1; 32]);
    assert_eq!(Keyring::new(" ", key()).unwrap_err(), KeyError::BlankId);
    let err = keyring().with_retired("k1", key()).unwrap_err();
    assert_eq!(
        err,
        KeyError::DuplicateId {
            key_id: "k1".into()
        }
    );
    assert_eq!(
        keyring().with_retired("", key()).unwrap_err(),
        KeyError::BlankId
    );
}

#[test]
fn keys_parse_from_hex_and_base64_and_never_print() {
    let hex = "000102030405060708090a0b0c0d0e0f101112131415161718191A1B1C1D1E1F";
    let b64 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let bytes: [u8; 32] = std::array::from_fn(|i| u8::try_from(i).unwrap_or(0));
    let from_hex = SealingKey::parse(hex).expect("hex key");
    let from_b64 = SealingKey::parse(&format!("{b64}\n")).expect("base64 key");
    assert_eq!(from_hex.bytes(), &bytes);
    assert_eq!(from_b64.bytes(), &bytes);
    assert_eq!(
        SealingKey::from_slice(&bytes).map(|k| *k.bytes()),
        Ok(bytes)
    );
    assert_eq!(
        SealingKey::from_slice(&[0; 16]).unwrap_err(),
        KeyError::WrongLength { len: 16 }
    );
    assert_eq!(
        SealingKey::parse("AAEC").unwrap_err(),
        KeyError::WrongLength { len: 3 }
    );
    assert_eq!(
        SealingKey::parse("not a key!").unwrap_err(),
        KeyError::Unparseable
    );
    assert_eq!(
        SealingKey::parse(&format!("{}-", "g".repeat(63))).unwrap_err(),
        KeyError::Unparseable
    );
    // 64 characters that are not all hex digits are read as base64.
    assert_eq!(
        SealingKey::parse(&"g".repeat(64)).unwrap_err(),
        KeyError::WrongLength { len: 48 }
    );
    let debug = format!("{from_hex:?} {:?}", keyring());
    assert!(!debug.contains("01") && !debug.contains("[1, 1"), "{debug}");
    assert!(FingerprintKey::parse(hex).is_ok());
    assert_eq!(
        format!("{:?}", FingerprintKey::from_bytes(bytes)),
        "FingerprintKey([redacted])"
    );
}

#[test]
fn malformed_envelopes_are_typed_errors() -> Result<(), SealError> {
    let keyring = keyring();
    assert!(matches!(
        keyring.open(&json!({"card": "x"}), OP),
        Err(SealError::NotSealed)
    ));
    assert!(matches!(
        keyring.open(&json!("text"), OP),
        Err(SealError::NotSealed)
    ));
    let sealed = keyring.seal(&args(), OP)?;
    // Something beside the envelope makes it ordinary data, not an envelope.
    let mut beside = sealed.clone();
    beside
        .as_object_mut()
        .map(|m| m.insert("x".into(), json!(1)));
    assert!(matches!(
        keyring.open(&beside, OP),
        Err(SealError::NotSealed)
    ));
    assert!(sealed_info(&beside).is_none());

    let edit = |name: &str, value: Value| {
        let mut copy = sealed.clone();
        inner(&mut copy).insert(name.into(), value);
        keyring.open(&copy, OP).unwrap_err()
    };
    assert!(matches!(
        edit("v", json!(2)),
        SealError::UnsupportedVersion { version: 2 }
    ));
    assert!(matches!(edit("v", json!("1")), SealError::Malformed { .. }));
    assert!(
        matches!(edit("alg", json!("aes")), SealError::UnsupportedAlgorithm { alg } if alg == "aes")
    );
    assert!(matches!(
        edit("nonce", json!("!!")),
        SealError::Malformed { .. }
    ));
    assert!(matches!(
        edit("nonce", json!("AAEC")),
        SealError::Malformed { .. }
    ));
    assert!(matches!(
        edit("ciphertext", json!(7)),
        SealError::Malformed { .. }
    ));
    assert!(matches!(
        edit("key_id", json!(null)),
        SealError::Malformed { .. }
    ));
    Ok(())
}

#[test]
fn values_past_the_canonical_depth_limit_are_not_sealed() -> Result<(), SealError> {
    let keyring = keyring();
    let mut deep = json!(1);
    for _ in 0..MAX_DEPTH {
        deep = json!([deep]);
    }
    let sealed = keyring.seal(&deep, OP)?;
    assert_eq!(keyring.open(&sealed, OP)?, deep);
    let err = keyring.seal(&json!([deep]), OP).unwrap_err();
    assert!(
        matches!(
            err,
            SealError::Canonical {
                source: effect_core::CanonicalError::TooDeep { .. }
            }
        ),
        "{err}"
    );
    Ok(())
}

#[test]
fn sealed_info_names_the_key() -> Result<(), SealError> {
    let sealed = keyring().seal(&json!("tok_4242"), OP)?;
    let info = sealed_info(&sealed).expect("an envelope");
    assert_eq!(
        info,
        SealedInfo {
            key_id: "k1".into(),
            alg: ALGORITHM.into(),
            version: 1
        }
    );
    assert_eq!(info.to_string(), "sealed (key k1)");
    Ok(())
}
