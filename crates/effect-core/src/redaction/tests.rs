use serde_json::{Value, json};

use super::*;

/// Redacts `value` with `paths` and compares with `expected`.
fn check(paths: &[&str], value: Value, expected: Value) {
    let redaction = Redaction::new(paths).expect("valid paths");
    assert_eq!(redaction.apply(&value), expected, "paths {paths:?}");
}

#[test]
fn paths_redact_members_elements_and_the_whole_value() {
    let args = json!({"card": {"number": "4111", "brand": "visa"}, "items": ["a", "b"], "n": 1});
    check(
        &["/card/number"],
        args.clone(),
        json!({"card": {"number": REDACTED, "brand": "visa"}, "items": ["a", "b"], "n": 1}),
    );
    check(
        &["/items/1", "/n"],
        args.clone(),
        json!({"card": {"number": "4111", "brand": "visa"}, "items": ["a", REDACTED], "n": REDACTED}),
    );
    check(
        &["/card"],
        args.clone(),
        json!({"card": REDACTED, "items": ["a", "b"], "n": 1}),
    );
    check(&[""], args.clone(), json!(REDACTED));
    // Paths that match nothing change nothing.
    check(
        &["/missing", "/items/7", "/items/01", "/n/deeper"],
        args.clone(),
        args,
    );
}

#[test]
fn wildcards_match_every_element_and_member() {
    let args = json!({
        "cards": [{"number": "4111", "cvv": 1}, {"number": "5500"}, "not-an-object"],
        "headers": {"a": {"token": "x"}, "b": {"token": "y", "keep": true}},
    });
    check(
        &["/cards/*/number", "/headers/*/token"],
        args.clone(),
        json!({
            "cards": [{"number": REDACTED, "cvv": 1}, {"number": REDACTED}, "not-an-object"],
            "headers": {"a": {"token": REDACTED}, "b": {"token": REDACTED, "keep": true}},
        }),
    );
    check(
        &["/*"],
        json!({"a": 1, "b": [2]}),
        json!({"a": REDACTED, "b": REDACTED}),
    );
    check(
        &["/*/*"],
        json!([[1, 2], 3]),
        json!([[REDACTED, REDACTED], 3]),
    );
}

#[test]
fn escaped_tokens_follow_rfc_6901() {
    check(
        &["/a~1b", "/m~0n"],
        json!({"a/b": 1, "m~n": 2, "a": {"b": 3}}),
        json!({"a/b": REDACTED, "m~n": REDACTED, "a": {"b": 3}}),
    );
    check(
        &["/"],
        json!({"": 1, "x": 2}),
        json!({"": REDACTED, "x": 2}),
    );
}

#[test]
fn invalid_paths_are_refused_when_built() {
    for path in ["card", "/a~2", "/a~", "~0"] {
        let err = Redaction::new([path]).unwrap_err();
        assert!(
            matches!(&err, RedactionError::InvalidPath { path: p, .. } if p == path),
            "{path}: {err}"
        );
    }
    let too_deep = "/x".repeat(MAX_DEPTH + 1);
    assert!(Redaction::new([too_deep.as_str()]).is_err());
    assert!(Redaction::new(["/x".repeat(MAX_DEPTH).as_str()]).is_ok());
    let redaction = Redaction::new(["/a", "/b/*"]).expect("valid paths");
    assert_eq!(redaction.paths().collect::<Vec<_>>(), ["/a", "/b/*"]);
    assert!(!redaction.is_empty());
    assert!(Redaction::default().is_empty());
}
