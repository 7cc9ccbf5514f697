use serde_json::{Value, json};

use super::*;

fn check(schema: Value, arguments: Value, valid: bool) {
    let compiled = InputSchema::new(schema).unwrap();
    assert_eq!(
        compiled.validate(&arguments).is_ok(),
        valid,
        "{arguments} against {}",
        compiled.effective()
    );
}

#[test]
fn unknown_fields_are_rejected_unless_the_schema_allows_them() {
    let closed = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    check(closed.clone(), json!({"a": "x"}), true);
    check(closed, json!({"a": "x", "b": 1}), false);
    let open = json!({"type": "object", "additionalProperties": true});
    check(open, json!({"anything": 1}), true);
    let nested = json!({"type": "object", "properties": {
        "inner": {"type": "object", "properties": {"x": {"type": "integer"}}}
    }});
    check(nested.clone(), json!({"inner": {"x": 1}}), true);
    check(nested, json!({"inner": {"x": 1, "y": 2}}), false);
}

#[test]
fn properties_from_all_of_branches_still_count_as_known() {
    let schema = json!({
        "type": "object",
        "allOf": [
            {"properties": {"a": {"type": "string"}}},
            {"properties": {"b": {"type": "string"}}}
        ]
    });
    check(schema.clone(), json!({"a": "x", "b": "y"}), true);
    check(schema, json!({"a": "x", "c": "z"}), false);
}

#[test]
fn a_boolean_is_not_an_integer() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    check(schema.clone(), json!({"n": 3}), true);
    check(schema.clone(), json!({"n": true}), false);
    check(schema, json!({"n": "3"}), false);
}

#[test]
fn unusable_schemas_are_refused_up_front() {
    let refused = |schema: Value| InputSchema::new(schema).unwrap_err();
    assert_eq!(refused(json!(true)), SchemaError::NotAnObjectSchema);
    assert_eq!(
        refused(json!({"type": "string"})),
        SchemaError::NotAnObjectSchema
    );
    assert!(matches!(
        refused(json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"})),
        SchemaError::UnsupportedDialect { .. }
    ));
    assert_eq!(
        refused(
            json!({"type": "object", "properties": {"a": {"type": "string", "requried": true}}})
        ),
        SchemaError::UnsupportedKeyword {
            keyword: "requried".into(),
            path: "/properties/a".into()
        }
    );
    assert!(matches!(
        refused(json!({"type": "object", "properties": {"a": {"type": "strin"}}})),
        SchemaError::Invalid { .. }
    ));
    assert!(matches!(
        refused(json!({"type": "object", "$ref": "https://example.com/other.json"})),
        SchemaError::Invalid { .. }
    ));
    assert!(matches!(
        refused(
            json!({"type": "object", "properties": {"a": {"type": "string", "format": "no-such-format"}}})
        ),
        SchemaError::Invalid { .. }
    ));
}

#[test]
fn errors_name_the_path_and_mask_values() {
    let schema = InputSchema::new(json!({
        "type": "object",
        "properties": {"card": {"type": "integer"}}
    }))
    .unwrap();
    let errors = schema
        .validate(&json!({"card": "4111-secret"}))
        .unwrap_err();
    assert_eq!(errors.len(), 1);
    assert!(errors[0].starts_with("/card: "), "{errors:?}");
    assert!(!errors[0].contains("4111-secret"), "{errors:?}");
}
