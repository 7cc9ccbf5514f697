//! [`InputSchema`]: a tool's JSON Schema, checked when the tool is registered
//! and applied fail-closed to every call.
//!
//! Validation is done by the maintained `jsonschema` crate; this module only
//! decides what it is given:
//!
//! - JSON Schema 2020-12, or draft-07 (what many MCP servers send). A draft-07
//!   schema is translated to 2020-12 before anything else: `items` as an array
//!   becomes `prefixItems` (and `additionalItems` becomes `items`),
//!   `dependencies` splits into `dependentRequired` and `dependentSchemas`, and
//!   a plain-name `$id` becomes an `$anchor`. Siblings of `$ref`, which draft-07
//!   ignores, are applied: stricter, never looser. A `$schema` naming any other
//!   dialect is refused, since the same keywords mean different things across
//!   drafts.
//! - The root must be an object schema (`"type": "object"`): tool arguments are
//!   a JSON object.
//! - A keyword the validator does not know is refused at registration, because
//!   it would otherwise be silently ignored (a misspelt `"requried"` would
//!   accept anything).
//! - An object schema that declares neither `additionalProperties` nor
//!   `unevaluatedProperties` gets `"unevaluatedProperties": false`: unknown
//!   fields are rejected unless the schema allows them. `unevaluatedProperties`
//!   rather than `additionalProperties` so that properties declared in `allOf`
//!   branches or behind `$ref` still count as known.
//! - No external references are fetched; formats are asserted, and an unknown
//!   `format` is refused at registration.
//!
//! JSON types are strict: `true` is not an integer and `"1"` is not a number.

use std::fmt;

use jsonschema::{Draft, Validator};
use serde_json::{Map, Value};

use crate::error::SchemaError;

/// A compiled, fail-closed input schema.
///
/// ```
/// use effect_schema::InputSchema;
/// use serde_json::json;
///
/// let schema = InputSchema::new(json!({
///     "type": "object",
///     "properties": {"count": {"type": "integer"}},
///     "required": ["count"]
/// }))?;
/// assert!(schema.validate(&json!({"count": 2})).is_ok());
/// assert!(schema.validate(&json!({"count": true})).is_err()); // a boolean is not an integer
/// assert!(schema.validate(&json!({"count": 2, "extra": 1})).is_err()); // unknown field
/// # Ok::<(), effect_schema::SchemaError>(())
/// ```
#[derive(Clone)]
pub struct InputSchema {
    declared: Value,
    effective: Value,
    validator: std::sync::Arc<Validator>,
}

impl fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputSchema")
            .field("effective", &self.effective)
            .finish_non_exhaustive()
    }
}

/// The 2020-12 dialect URI.
const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";
/// The draft-07 dialect URI (also accepted over https).
const DRAFT_07: &str = "http://json-schema.org/draft-07/schema";

impl InputSchema {
    /// Checks and compiles `schema`.
    ///
    /// # Errors
    ///
    /// [`SchemaError`] for a schema that is not an object schema, names another
    /// dialect, uses an unknown keyword, fails its meta-schema, or refers to a
    /// resource that is not inside it.
    pub fn new(schema: Value) -> Result<Self, SchemaError> {
        let root = schema.as_object().ok_or(SchemaError::NotAnObjectSchema)?;
        if !declares_object_type(root) {
            return Err(SchemaError::NotAnObjectSchema);
        }
        let mut effective = schema.clone();
        if let Some(uri) = root.get("$schema") {
            let uri_text = uri.as_str().unwrap_or_default();
            let uri = uri_text.trim_end_matches('#');
            if uri == DRAFT_07 || uri.strip_prefix("https") == DRAFT_07.strip_prefix("http") {
                from_draft_07(&mut effective);
                effective["$schema"] = Value::String(DIALECT.to_owned());
            } else if uri != DIALECT {
                return Err(SchemaError::UnsupportedDialect {
                    uri: uri_text.to_owned(),
                });
            }
        }
        close_objects(&mut effective, "", true)?;
        let validator = jsonschema::options()
            .with_draft(Draft::Draft202012)
            .should_validate_formats(true)
            .should_ignore_unknown_formats(false)
            .offline()
            .build(&effective)
            .map_err(|err| SchemaError::Invalid {
                reason: err.to_string(),
            })?;
        Ok(InputSchema {
            declared: schema,
            effective,
            validator: std::sync::Arc::new(validator),
        })
    }

    /// The schema as declared by the tool.
    pub fn declared(&self) -> &Value {
        &self.declared
    }

    /// The schema actually enforced (with unknown fields closed off).
    pub fn effective(&self) -> &Value {
        &self.effective
    }

    /// Checks arguments against the schema.
    ///
    /// # Errors
    ///
    /// One message per violation, each prefixed with the JSON pointer of the
    /// offending value. Values themselves are masked, so secrets in arguments
    /// do not end up in traces.
    pub fn validate(&self, arguments: &Value) -> Result<(), Vec<String>> {
        let errors: Vec<String> = self
            .validator
            .iter_errors(arguments)
            .map(|err| {
                let path = err.instance_path().to_string();
                let path = if path.is_empty() {
                    "/".to_owned()
                } else {
                    path
                };
                format!("{path}: {}", err.masked())
            })
            .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// Every keyword of JSON Schema 2020-12 (core, applicator, unevaluated,
/// validation, meta-data, format-annotation and content vocabularies), plus
/// `definitions`, still common as a `$ref` target.
const KNOWN_KEYWORDS: &[&str] = &[
    "$schema",
    "$id",
    "$ref",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "$defs",
    "$comment",
    "$vocabulary",
    "definitions",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "dependentSchemas",
    "prefixItems",
    "items",
    "contains",
    "properties",
    "patternProperties",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "examples",
    "format",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// Keywords whose value is one subschema describing a whole instance (an
/// object property, an array item, ...), where closing objects is right.
pub(crate) const INSTANCE_SCHEMA: &[&str] = &[
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "contains",
    "unevaluatedItems",
    "propertyNames",
];

/// Keywords whose value is a map of subschemas describing whole instances.
pub(crate) const INSTANCE_SCHEMA_MAPS: &[&str] = &["properties", "patternProperties"];

/// Keywords whose subschemas are combined with a sibling schema on the same
/// instance. Closing them would reject properties declared by the sibling,
/// and inside `not` it would invert the meaning, so they are only checked.
const COMBINED_SCHEMA: &[&str] = &["not", "if", "then", "else", "contentSchema"];
const COMBINED_SCHEMA_ARRAYS: &[&str] = &["allOf", "anyOf", "oneOf"];
const COMBINED_SCHEMA_MAPS: &[&str] = &["$defs", "definitions", "dependentSchemas"];

/// Refuses unknown keywords and, where `instance` says the schema describes a
/// whole instance, closes object schemas to unknown fields.
fn close_objects(schema: &mut Value, path: &str, instance: bool) -> Result<(), SchemaError> {
    let Value::Object(object) = schema else {
        // Boolean subschemas are fine; anything else is left to the meta-schema check.
        return Ok(());
    };
    if let Some(keyword) = object
        .keys()
        .find(|k| !KNOWN_KEYWORDS.contains(&k.as_str()))
    {
        return Err(SchemaError::UnsupportedKeyword {
            keyword: keyword.clone(),
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
        });
    }
    for (keyword, value) in object.iter_mut() {
        let here = format!("{path}/{}", escape(keyword));
        let keyword = keyword.as_str();
        let as_instance = INSTANCE_SCHEMA.contains(&keyword);
        if as_instance || COMBINED_SCHEMA.contains(&keyword) {
            close_objects(value, &here, as_instance)?;
        } else if keyword == "prefixItems" || COMBINED_SCHEMA_ARRAYS.contains(&keyword) {
            if let Value::Array(items) = value {
                for (i, item) in items.iter_mut().enumerate() {
                    close_objects(item, &format!("{here}/{i}"), keyword == "prefixItems")?;
                }
            }
        } else if INSTANCE_SCHEMA_MAPS.contains(&keyword) || COMBINED_SCHEMA_MAPS.contains(&keyword)
        {
            let as_instance = INSTANCE_SCHEMA_MAPS.contains(&keyword);
            if let Value::Object(map) = value {
                for (name, sub) in map.iter_mut() {
                    close_objects(sub, &format!("{here}/{}", escape(name)), as_instance)?;
                }
            }
        }
    }
    let is_object_schema = declares_object_type(object)
        || object.contains_key("properties")
        || object.contains_key("patternProperties");
    if instance
        && is_object_schema
        && !object.contains_key("additionalProperties")
        && !object.contains_key("unevaluatedProperties")
    {
        object.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
    Ok(())
}

/// Rewrites the draft-07 keywords whose meaning changed in 2020-12, in
/// every subschema.
fn from_draft_07(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    if let Some(Value::Array(_)) = object.get("items")
        && let Some(items) = object.remove("items")
    {
        object.insert("prefixItems".into(), items);
        if let Some(rest) = object.remove("additionalItems") {
            object.insert("items".into(), rest);
        }
    } else {
        // Without tuple `items`, draft-07 ignores `additionalItems`.
        object.remove("additionalItems");
    }
    if let Some(Value::Object(dependencies)) = object.remove("dependencies") {
        let (mut required, mut schemas) = (Map::new(), Map::new());
        for (name, dependency) in dependencies {
            match dependency {
                Value::Array(_) => required.insert(name, dependency),
                other => schemas.insert(name, other),
            };
        }
        if !required.is_empty() {
            object.insert("dependentRequired".into(), Value::Object(required));
        }
        if !schemas.is_empty() {
            object.insert("dependentSchemas".into(), Value::Object(schemas));
        }
    }
    if let Some(Value::String(id)) = object.get("$id")
        && let Some(anchor) = id.strip_prefix('#')
    {
        let anchor = Value::String(anchor.to_owned());
        object.remove("$id");
        object.insert("$anchor".into(), anchor);
    }
    for (keyword, value) in object.iter_mut() {
        let keyword = keyword.as_str();
        if INSTANCE_SCHEMA.contains(&keyword) || COMBINED_SCHEMA.contains(&keyword) {
            from_draft_07(value);
        } else if keyword == "prefixItems" || COMBINED_SCHEMA_ARRAYS.contains(&keyword) {
            if let Value::Array(items) = value {
                items.iter_mut().for_each(from_draft_07);
            }
        } else if (INSTANCE_SCHEMA_MAPS.contains(&keyword)
            || COMBINED_SCHEMA_MAPS.contains(&keyword))
            && let Value::Object(map) = value
        {
            map.values_mut().for_each(from_draft_07);
        }
    }
}

pub(crate) fn declares_object_type(object: &Map<String, Value>) -> bool {
    match object.get("type") {
        Some(Value::String(t)) => t == "object",
        Some(Value::Array(types)) => types.iter().any(|t| t == "object"),
        _ => false,
    }
}

/// JSON-pointer escaping of one reference token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests;
