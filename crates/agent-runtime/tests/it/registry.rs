//! Registration refuses what could fail later: duplicates and unusable schemas.

use agent_runtime::error::SchemaError;
use agent_runtime::{EffectKind, RegistryError, ToolDefinition, ToolRegistry};
use serde_json::{Value, json};

use crate::invoice_schema;

fn tool(name: &str, schema: Value) -> ToolDefinition {
    ToolDefinition::new(name, "a tool", schema, EffectKind::Read, |input| {
        Ok(input.arguments)
    })
}

#[test]
fn duplicate_names_are_rejected() {
    let mut registry = ToolRegistry::new();
    registry.register(tool("lookup", invoice_schema())).unwrap();
    let err = registry
        .register(tool("lookup", invoice_schema()).version("2"))
        .unwrap_err();
    assert_eq!(
        err,
        RegistryError::DuplicateTool {
            name: "lookup".into()
        }
    );
    assert_eq!(registry.len(), 1);
    assert_eq!(
        registry.register(tool("  ", invoice_schema())).unwrap_err(),
        RegistryError::BlankName
    );
}

#[test]
fn unusable_schemas_are_rejected_at_registration_not_at_first_call() {
    let cases = [
        (json!({"type": "array"}), "object schema"),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}),
            "invalid schema",
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "maximun": 3}}}),
            "unsupported keyword \"maximun\"",
        ),
        (
            json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}),
            "unsupported schema dialect",
        ),
    ];
    let mut registry = ToolRegistry::new();
    for (i, (schema, expected)) in cases.into_iter().enumerate() {
        let err = registry
            .register(tool(&format!("t{i}"), schema))
            .unwrap_err();
        let RegistryError::InvalidSchema { source, .. } = &err else {
            panic!("unexpected {err:?}");
        };
        assert!(source.to_string().contains(expected), "{source}");
        assert!(!matches!(source, SchemaError::NotAnObjectSchema) || i == 0);
    }
    assert!(registry.is_empty());
}
