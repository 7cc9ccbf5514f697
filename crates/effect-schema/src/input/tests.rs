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

#[test]
fn draft_07_schemas_are_accepted_and_still_closed_to_unknown_fields() {
    for uri in [
        "http://json-schema.org/draft-07/schema#",
        "http://json-schema.org/draft-07/schema",
        "https://json-schema.org/draft-07/schema#",
    ] {
        let schema = json!({
            "$schema": uri,
            "type": "object",
            "properties": {"to": {"type": "string"}, "cc": {"type": "string"}},
            "required": ["to"]
        });
        check(schema.clone(), json!({"to": "ada"}), true);
        check(schema.clone(), json!({"to": "ada", "bcc": "eve"}), false);
        check(schema, json!({}), false);
    }
}

#[test]
fn draft_07_keywords_keep_their_draft_07_meaning() {
    let tuple = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"pair": {
            "type": "array",
            "items": [{"type": "string"}, {"type": "integer"}],
            "additionalItems": false
        }}
    });
    check(tuple.clone(), json!({"pair": ["a", 1]}), true);
    check(tuple.clone(), json!({"pair": ["a", "b"]}), false);
    check(tuple, json!({"pair": ["a", 1, 2]}), false);

    let dependencies = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "card": {"type": "string"},
            "cvc": {"type": "string"},
            "amount": {"type": "integer"}
        },
        "dependencies": {
            "card": ["cvc"],
            "amount": {"properties": {"amount": {"minimum": 1}}}
        }
    });
    check(
        dependencies.clone(),
        json!({"card": "4242", "cvc": "1"}),
        true,
    );
    check(dependencies.clone(), json!({"card": "4242"}), false);
    check(dependencies.clone(), json!({"amount": 0}), false);
    check(dependencies, json!({"amount": 1}), true);

    // A draft-07 `definitions` reference, as MCP servers commonly send.
    let definitions = json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {"to": {"$ref": "#/definitions/address"}},
        "definitions": {"address": {"type": "string", "minLength": 3}}
    });
    check(definitions.clone(), json!({"to": "ada@example.com"}), true);
    check(definitions, json!({"to": "a"}), false);
}

#[cfg(feature = "schemars")]
#[test]
fn a_derived_schema_closes_nested_objects_and_keeps_integer_bounds() {
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Line {
        sku: String,
        quantity: u32,
    }
    #[derive(schemars::JsonSchema)]
    #[allow(dead_code)]
    struct Order {
        customer: String,
        lines: Vec<Line>,
        note: Option<String>,
        gift: Option<Line>,
    }
    let schema = InputSchema::for_type::<Order>().unwrap();
    let ok = json!({"customer": "c", "lines": [{"sku": "a", "quantity": 2}]});
    assert!(schema.validate(&ok).is_ok(), "{}", schema.effective());
    for bad in [
        json!({"customer": "c", "lines": [{"sku": "a", "quantity": 2, "price": 1}]}),
        json!({"customer": "c", "lines": [{"sku": "a", "quantity": -1}]}),
        json!({"customer": "c", "lines": [], "discount": 10}),
        json!({"customer": "c", "lines": [], "gift": {"sku": "a", "quantity": 1, "wrap": true}}),
        json!({"lines": []}),
    ] {
        assert!(
            schema.validate(&bad).is_err(),
            "{bad} against {}",
            schema.effective()
        );
    }
}
