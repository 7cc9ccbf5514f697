use serde_json::json;

use super::*;
use sha2::Digest;

use crate::fingerprint::{FingerprintForm, RequestFingerprint, hex};

#[test]
fn python_test_vector_matches_sha256() {
    let canonical = canonical_json(&json!({"invoice_id": "INV-1"}));
    assert_eq!(canonical, r#"{"invoice_id":"INV-1"}"#);
    let fp = RequestFingerprint::of_canonical(&canonical);
    assert_eq!(
        fp,
        RequestFingerprint::of_value(&json!({"invoice_id": "INV-1"}))
    );
    assert_eq!(
        fp.sha256_hex(),
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

#[test]
fn the_python_form_stores_the_bare_sha256_and_both_forms_match() {
    let value = json!({"invoice_id": "INV-1", "rate": 1e-5});
    let blake3 = RequestFingerprint::of_value(&value);
    let sha256 = blake3.clone().with_form(FingerprintForm::Sha256);
    assert_eq!(blake3.form(), FingerprintForm::Blake3);
    assert_eq!(sha256.stored(), sha256.sha256_hex());
    assert_eq!(sha256.stored().len(), 64);
    for stored in [blake3.stored(), sha256.stored()] {
        assert!(
            blake3.matches(&stored) && sha256.matches(&stored),
            "{stored}"
        );
    }
    // The two forms hash different texts where the number styles differ.
    assert_eq!(
        canonical_json(&value),
        r#"{"invoice_id":"INV-1","rate":0.00001}"#
    );
    assert_eq!(
        python_json(&value),
        r#"{"invoice_id":"INV-1","rate":1e-05}"#
    );
}

/// One vector of `fixtures/python/canonical-vectors.json`, written by
/// `fixtures/python/generate_canonical_vectors.py` with the Python package.
#[derive(serde::Deserialize)]
struct Vector {
    kind: String,
    input: String,
    canonical: String,
    sha256: String,
}

fn python_vectors() -> Vec<Vector> {
    #[derive(serde::Deserialize)]
    struct File {
        vectors: Vec<Vector>,
    }
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/python/canonical-vectors.json");
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str::<File>(&text).unwrap().vectors
}

/// Whether a vector holds an integer outside 64 bits, which serde_json can
/// only hold as a double.
fn beyond_64_bits(vector: &Vector) -> bool {
    let parsed: Value = serde_json::from_str(&vector.input).unwrap();
    vector.kind == "int" && parsed["value"].is_f64()
}

#[test]
fn python_vectors_match_byte_for_byte() {
    let vectors = python_vectors();
    assert!(vectors.len() > 1500, "{} vectors", vectors.len());
    let mut checked = 0;
    for vector in vectors.iter().filter(|v| !beyond_64_bits(v)) {
        let value: Value = serde_json::from_str(&vector.input).unwrap();
        assert_eq!(python_json(&value), vector.canonical, "{}", vector.input);
        let fp = RequestFingerprint::of_value(&value);
        assert_eq!(fp.sha256_hex(), vector.sha256, "{}", vector.input);
        assert!(fp.matches(&vector.sha256));
        // Python's own text parses back to the same value, bit for bit.
        let reparsed: Value = serde_json::from_str(&vector.canonical).unwrap();
        assert_eq!(python_json(&reparsed), vector.canonical);
        checked += 1;
    }
    assert!(checked > 1500, "{checked} vectors checked");
}

#[test]
fn integers_beyond_64_bits_are_held_as_doubles() {
    // FIXME: Python keeps 2**64 exact and fingerprints `18446744073709551616`;
    // serde_json (without its arbitrary_precision feature, which would change
    // how every serde_json::Value serializes for every crate in a build) reads
    // it as the double 1.8446744073709552e19, so the SHA-256 form differs.
    let beyond: Vec<Vector> = python_vectors()
        .into_iter()
        .filter(beyond_64_bits)
        .collect();
    assert!(beyond.len() >= 5, "{} vectors", beyond.len());
    for vector in beyond {
        let value: Value = serde_json::from_str(&vector.input).unwrap();
        assert_ne!(python_json(&value), vector.canonical, "{}", vector.input);
    }
    let u128_max = to_json_value(&u128::MAX);
    assert!(matches!(u128_max, Err(CanonicalError::Serialize { .. })));
}

#[test]
fn python_float_formatting_of_edge_cases() {
    for (value, python) in [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (0.1, "0.1"),
        (1e-5, "1e-05"),
        (0.0001, "0.0001"),
        (1e15, "1000000000000000.0"),
        (1e16, "1e+16"),
        (1.5e300, "1.5e+300"),
        (5e-324, "5e-324"),
        (123.456, "123.456"),
        (-3.2864603387675697e-9, "-3.2864603387675697e-09"),
        (f64::MAX, "1.7976931348623157e+308"),
    ] {
        let mut out = String::new();
        super::text::python_float(value, &mut out);
        assert_eq!(out, python, "{value:?}");
    }
}

#[test]
fn strings_escape_as_serde_json_does() {
    // Python's ensure_ascii=False escaping equals serde_json's: the blake3 form
    // (serde_json's text until now) is unchanged by the shared writer.
    let every_ascii: String = (0u8..=0x7f).map(char::from).collect();
    for text in [every_ascii.as_str(), "ü😀\u{2028}\u{feff}\u{10ffff}", ""] {
        let value = json!({ text: text });
        assert_eq!(canonical_json(&value), value.to_string());
    }
}

#[test]
fn random_doubles_round_trip_through_stored_text() {
    // xorshift64*: a seeded source of every bit pattern a double can have.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut checked = 0;
    while checked < 20_000 {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let value = f64::from_bits(state.wrapping_mul(0x2545_f491_4f6c_dd1d));
        if !value.is_finite() {
            continue;
        }
        // The blake3 form is serde_json's own text, as it always was.
        assert_eq!(canonical_json(&json!(value)), json!(value).to_string());
        for text in [canonical_json(&json!(value)), python_json(&json!(value))] {
            let back: f64 = serde_json::from_str(&text).unwrap();
            assert_eq!(
                back.to_bits(),
                value.to_bits(),
                "{value:e} written as {text}"
            );
        }
        checked += 1;
    }
}

/// `[[[ ... ]]]`, `depth` levels, serialized recursively as a caller's type would be.
struct Nested(usize);

impl serde::Serialize for Nested {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(None)?;
        if self.0 > 1 {
            seq.serialize_element(&Nested(self.0 - 1))?;
        }
        seq.end()
    }
}

/// A self-referential newtype: invisible in JSON, recursive in Rust.
struct Wrapped(usize);

impl serde::Serialize for Wrapped {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            0 => serializer.serialize_none(),
            n => serializer.serialize_some(&Wrapped(n - 1)),
        }
    }
}

/// Builds `[[[...]]]` without recursion.
fn deep_value(depth: usize) -> Value {
    let mut value = json!([]);
    for _ in 1..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// Takes a deep value apart without recursion (its Drop would recurse).
fn dismantle(value: Value) {
    let mut stack = vec![value];
    while let Some(mut value) = stack.pop() {
        match &mut value {
            Value::Array(items) => stack.append(items),
            Value::Object(map) => stack.extend(std::mem::take(map).into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[test]
fn depth_is_limited_and_nothing_recurses_over_deep_input() {
    // A thread with the default (2 MiB) stack, like any caller's worker thread.
    std::thread::spawn(|| {
        assert!(to_json_value(&Nested(MAX_DEPTH)).is_ok());
        let err = to_json_value(&Nested(MAX_DEPTH + 1)).unwrap_err();
        assert!(
            matches!(&err, CanonicalError::TooDeep { limit, .. } if *limit == MAX_DEPTH),
            "{err}"
        );
        assert!(to_json_value(&Nested(100_000)).is_err());
        assert!(to_json_value(&Wrapped(100_000)).is_err());
        assert_eq!(to_json_value(&Wrapped(10)).unwrap(), Value::Null);

        let deep = deep_value(100_000);
        assert!(matches!(
            check_depth(&deep),
            Err(CanonicalError::TooDeep { .. })
        ));
        assert!(matches!(
            to_json_value(&deep),
            Err(CanonicalError::TooDeep { .. })
        ));
        let text = canonical_json(&deep);
        assert_eq!(text.len(), 200_000);
        assert_eq!(python_json(&deep), text);
        let _ = RequestFingerprint::of_value(&deep);
        dismantle(deep);

        let at_limit = deep_value(MAX_DEPTH);
        assert!(check_depth(&at_limit).is_ok());
        // serde_json reads back what the limit lets through.
        let stored = canonical_json(&json!({"evidence": {"output": at_limit}}));
        assert!(serde_json::from_str::<Value>(&stored).is_ok());
    })
    .join()
    .unwrap();
}

#[test]
fn the_depth_error_names_the_path() {
    let mut value = json!({"leaf": 1});
    for i in 0..MAX_DEPTH {
        value = if i % 2 == 0 {
            json!([value])
        } else {
            json!({"k": value})
        };
    }
    let err = check_depth(&value).unwrap_err();
    let CanonicalError::TooDeep { path, .. } = &err else {
        panic!("{err}")
    };
    assert!(path.starts_with("/k/0/k/0"), "{path}");
    assert_eq!(path.matches('/').count(), MAX_DEPTH);
    assert!(err.to_string().contains("deeper than 64 levels"), "{err}");
}

#[test]
fn a_serialize_error_of_the_value_is_reported_without_serializing_further() {
    struct Fails;
    impl serde::Serialize for Fails {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(serde::ser::Error::custom("the value refused"))
        }
    }
    std::thread::spawn(|| {
        // The failing element comes first; a deep one follows it.
        let err = to_json_value(&(Fails, Nested(100_000))).unwrap_err();
        assert!(matches!(&err, CanonicalError::Serialize { .. }), "{err}");
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert_eq!(source, "the value refused");
        // A deep map key is bounded too.
        struct DeepKey;
        impl serde::Serialize for DeepKey {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = serializer.serialize_map(Some(1))?;
                map.serialize_entry(&Nested(100_000), &1)?;
                map.end()
            }
        }
        assert!(matches!(
            to_json_value(&DeepKey),
            Err(CanonicalError::TooDeep { .. })
        ));
    })
    .join()
    .unwrap();
}

/// The canonical writer as it was before it was tuned for speed (sorting
/// every object, escaping by character, numbers through `Display`): the
/// reference the current writer must match byte for byte.
mod reference {
    use std::fmt::Write as _;

    use serde_json::{Number, Value};

    use super::super::text::{NumberStyle, python_float};

    enum Frame<'a> {
        Array(std::slice::Iter<'a, Value>, bool),
        Object(std::vec::IntoIter<(&'a String, &'a Value)>, bool),
    }

    pub(super) fn write(value: &Value, style: NumberStyle) -> String {
        let mut out = String::with_capacity(64);
        let mut stack: Vec<Frame<'_>> = Vec::new();
        let mut next = Some(value);
        loop {
            if let Some(value) = next.take() {
                match value {
                    Value::Array(items) => {
                        out.push('[');
                        stack.push(Frame::Array(items.iter(), false));
                    }
                    Value::Object(map) => {
                        let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                        out.push('{');
                        stack.push(Frame::Object(entries.into_iter(), false));
                    }
                    Value::String(text) => write_string(text, &mut out),
                    Value::Number(number) => write_number(number, style, &mut out),
                    Value::Bool(true) => out.push_str("true"),
                    Value::Bool(false) => out.push_str("false"),
                    Value::Null => out.push_str("null"),
                }
            }
            let Some(frame) = stack.last_mut() else {
                return out;
            };
            match frame {
                Frame::Array(items, started) => match items.next() {
                    Some(item) => {
                        if std::mem::replace(started, true) {
                            out.push(',');
                        }
                        next = Some(item);
                    }
                    None => {
                        out.push(']');
                        stack.pop();
                    }
                },
                Frame::Object(entries, started) => match entries.next() {
                    Some((key, item)) => {
                        if std::mem::replace(started, true) {
                            out.push(',');
                        }
                        write_string(key, &mut out);
                        out.push(':');
                        next = Some(item);
                    }
                    None => {
                        out.push('}');
                        stack.pop();
                    }
                },
            }
        }
    }

    fn write_string(text: &str, out: &mut String) {
        out.push('"');
        let mut rest = text;
        while let Some(at) = rest.find(|c: char| c == '"' || c == '\\' || c < '\u{20}') {
            out.push_str(&rest[..at]);
            let c = rest[at..].chars().next().unwrap_or_default();
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                control => {
                    let _ = write!(out, "\\u{:04x}", u32::from(control));
                }
            }
            rest = &rest[at + c.len_utf8()..];
        }
        out.push_str(rest);
        out.push('"');
    }

    fn write_number(number: &Number, style: NumberStyle, out: &mut String) {
        match (style, number.as_f64()) {
            (NumberStyle::Python, Some(float)) if number.is_f64() => python_float(float, out),
            _ => {
                let _ = write!(out, "{number}");
            }
        }
    }
}

/// Text that exercises escaping: quotes, backslashes, every C0 control,
/// DEL, multi-byte characters.
fn tricky_text() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let piece = prop_oneof![
        (0u8..0x80).prop_map(char::from),
        Just('"'),
        Just('\\'),
        Just('ü'),
        Just('\u{2028}'),
        Just('😀'),
        any::<char>(),
    ];
    // Past several eight-byte words: the scan tests a word at a time.
    proptest::collection::vec(piece, 0..40).prop_map(|chars| chars.into_iter().collect())
}

fn json_value() -> impl proptest::strategy::Strategy<Value = Value> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        Just(json!(-0.0)),
        tricky_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 96, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::btree_map(tricky_text(), inner, 0..6)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2048))]

    /// Both number styles, and both fingerprints, are what the reference
    /// writer gives.
    #[test]
    fn the_writer_matches_its_reference(value in json_value()) {
        use super::text::NumberStyle;
        let canonical = reference::write(&value, NumberStyle::Serde);
        let python = reference::write(&value, NumberStyle::Python);
        proptest::prop_assert_eq!(&canonical_json(&value), &canonical);
        if let Value::Object(map) = &value {
            proptest::prop_assert_eq!(&canonical_json_object(map), &canonical);
        }
        proptest::prop_assert_eq!(&python_json(&value), &python);
        let fp = RequestFingerprint::of_value(&value);
        let blake3 = blake3::hash(canonical.as_bytes()).to_hex();
        proptest::prop_assert_eq!(fp.blake3_hex(), blake3.as_str());
        proptest::prop_assert_eq!(fp.sha256_hex(), hex(&sha2::Sha256::digest(python.as_bytes())));
        proptest::prop_assert_eq!(fp.stored(), format!("blake3:{}", fp.blake3_hex()));
        proptest::prop_assert!(fp.matches(&fp.clone().with_form(FingerprintForm::Sha256).stored()));
    }
}

#[test]
fn every_byte_to_escape_is_found_at_every_place_of_a_word() {
    // Each escaped byte, and the bytes either side of the range, at each
    // offset of a text longer than two words.
    for special in (0u8..=0x20).chain([b'"', b'\\', b'!', b'[', b']', 0x7f]) {
        for at in 0..24 {
            let mut text = vec![b'a'; 24];
            text[at] = special;
            let text = String::from_utf8(text).unwrap();
            let value = Value::String(text);
            assert_eq!(
                canonical_json(&value),
                reference::write(&value, super::text::NumberStyle::Serde),
                "{special:#x} at {at}"
            );
        }
    }
}

#[test]
fn values_past_the_recursion_limit_are_written_as_the_reference_writes_them() {
    use super::text::NumberStyle;
    // Objects and arrays alternating, with siblings at every level, from
    // shallow to well past the levels the writer recurses through.
    for levels in 0..40 {
        let mut value = json!({"leaf": [1.5, "x\n", -3]});
        for level in 0..levels {
            value = if level % 2 == 0 {
                json!([level, value, {"z": 1e-7, "a": null}])
            } else {
                json!({"b": value, "a": [true], "c": level})
            };
        }
        for style in [NumberStyle::Serde, NumberStyle::Python] {
            let mut out = String::new();
            super::text::write(&value, style, &mut out);
            assert_eq!(out, reference::write(&value, style), "{levels} levels");
        }
    }
}

#[test]
fn integers_at_the_edges_of_64_bits_are_written_as_their_digits() {
    for value in [
        json!(0),
        json!(-1),
        json!(9),
        json!(10),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(-0.0),
        json!(1.0),
    ] {
        assert_eq!(canonical_json(&value), value.to_string());
    }
}
