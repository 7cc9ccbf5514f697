use serde_json::json;

use super::*;

#[test]
fn python_test_vector_matches_sha256() {
    let canonical = canonical_json(&json!({"invoice_id": "INV-1"}));
    assert_eq!(canonical, r#"{"invoice_id":"INV-1"}"#);
    let fp = RequestFingerprint::of_canonical(&canonical);
    assert_eq!(
        fp.sha256_hex,
        "afd3ae6377d737975ba2f111db265e0b714646564f9cfd1e9820cd92f36703b7"
    );
    assert!(fp.matches("AFD3AE6377D737975BA2F111DB265E0B714646564F9CFD1E9820CD92F36703B7"));
    assert!(fp.matches(&fp.stored()));
    assert!(!fp.matches("old-fingerprint"));
    assert!(!RequestFingerprint::of_value(&json!({"invoice_id": "INV-2"})).matches(&fp.stored()));
}

#[test]
fn python_fixture_fingerprint_with_non_ascii_text() {
    // The Python package wrote this operation with ensure_ascii=False.
    let fp = RequestFingerprint::of_value(&json!({"name": "zürich-1"}));
    let other = RequestFingerprint::of_value(&json!({"name": "zurich-1"}));
    assert_ne!(fp, other);
    assert_eq!(
        canonical_json(&json!({"name": "zürich-1", "a": "\n\"\\"})),
        "{\"a\":\"\\n\\\"\\\\\",\"name\":\"zürich-1\"}"
    );
}

#[test]
fn canonical_form_ignores_key_order_and_whitespace() {
    let a: Value =
        serde_json::from_str(r#"{ "b": [1, 2.5, {"y": 1, "x": 2}], "a": null }"#).unwrap();
    let b: Value = serde_json::from_str(r#"{"a":null,"b":[1,2.5,{"x":2,"y":1}]}"#).unwrap();
    assert_eq!(canonical_json(&a), canonical_json(&b));
    assert_eq!(
        canonical_json(&a),
        r#"{"a":null,"b":[1,2.5,{"x":2,"y":1}]}"#
    );
}

#[test]
fn non_finite_numbers_are_rejected_with_their_path() {
    #[derive(serde::Serialize)]
    struct Args {
        amounts: Vec<f64>,
    }
    let err = to_json_value(&Args {
        amounts: vec![1.0, f64::INFINITY],
    })
    .unwrap_err();
    assert!(
        matches!(&err, CanonicalError::NonFinite { path } if path == "/amounts/1"),
        "{err}"
    );
    assert!(to_json_value(&std::collections::HashMap::from([("x", f32::NAN)])).is_err());
    assert_eq!(to_json_value(&Some(2.5f32)).unwrap(), json!(2.5));
}

#[test]
fn maps_with_non_string_keys_are_a_serialize_error_not_a_panic() {
    let map = std::collections::BTreeMap::from([(vec![1u8], 1)]);
    assert!(matches!(
        to_json_value(&map),
        Err(CanonicalError::Serialize { .. })
    ));
}
