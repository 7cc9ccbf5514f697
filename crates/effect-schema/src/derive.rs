//! [`schema_for`]: the schema of an argument type, derived once for every
//! adapter, and [`InputSchema::for_type`], which enforces it.

use serde_json::Value;

use crate::error::SchemaError;
use crate::input::{INSTANCE_SCHEMA, INSTANCE_SCHEMA_MAPS, InputSchema, declares_object_type};

/// The JSON Schema (2020-12) of `A` to advertise to a model or an MCP client.
///
/// Subschemas are inlined, the integer `format`s schemars adds are dropped,
/// and every object schema without composition that does not say otherwise
/// gets `"additionalProperties": false`, the form model providers' strict
/// modes understand. [`InputSchema::for_type`](crate::InputSchema::for_type)
/// enforces the same schema.
///
/// ```
/// #[derive(schemars::JsonSchema)]
/// #[allow(dead_code)]
/// struct Capture { invoice_id: String, amount_cents: u64 }
///
/// let schema = effect_schema::schema_for::<Capture>();
/// assert_eq!(schema["additionalProperties"], false);
/// assert_eq!(schema["properties"]["amount_cents"].get("format"), None);
/// ```
pub fn schema_for<A: schemars::JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<A>().to_value();
    drop_integer_formats(&mut schema);
    close_plain_objects(&mut schema);
    schema
}

impl InputSchema {
    /// The schema of `A`, derived with `schemars` and checked like any other.
    ///
    /// Subschemas are inlined, so every nested object is closed to unknown
    /// fields too, and the integer `format`s schemars adds (`uint64`, ...),
    /// which are not JSON Schema formats, are dropped (their `minimum` stays).
    ///
    /// ```
    /// use effect_schema::InputSchema;
    /// use serde_json::json;
    ///
    /// #[derive(schemars::JsonSchema)]
    /// #[allow(dead_code)]
    /// struct Capture { invoice_id: String, amount_cents: u64 }
    ///
    /// let schema = InputSchema::for_type::<Capture>()?;
    /// assert!(schema.validate(&json!({"invoice_id": "INV-1", "amount_cents": 5})).is_ok());
    /// assert!(schema.validate(&json!({"invoice_id": "INV-1", "amount_cents": -5})).is_err());
    /// assert!(schema.validate(&json!({"invoice_id": "INV-1", "amount_cents": 5, "x": 1})).is_err());
    /// # Ok::<(), effect_schema::SchemaError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new), for a type whose schema is not an object schema.
    pub fn for_type<A: schemars::JsonSchema>() -> Result<Self, SchemaError> {
        InputSchema::new(schema_for::<A>())
    }
}

/// Adds `"additionalProperties": false` to object schemas that compose
/// nothing (where it means the same as `unevaluatedProperties`).
fn close_plain_objects(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    let composed = ["allOf", "anyOf", "oneOf", "$ref", "if", "dependentSchemas"]
        .iter()
        .any(|k| object.contains_key(*k));
    let is_object = declares_object_type(object) || object.contains_key("properties");
    if is_object
        && !composed
        && !object.contains_key("additionalProperties")
        && !object.contains_key("unevaluatedProperties")
    {
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    let alternatives_alone =
        !object.contains_key("properties") && !object.contains_key("patternProperties");
    for (keyword, value) in object.iter_mut() {
        let keyword = keyword.as_str();
        if INSTANCE_SCHEMA.contains(&keyword) {
            close_plain_objects(value);
        } else if keyword == "prefixItems"
            || (alternatives_alone && ["anyOf", "oneOf"].contains(&keyword))
        {
            // Alternatives each describe the whole instance (an `Option` of a
            // struct, an enum) unless properties are declared beside them.
            if let Value::Array(items) = value {
                items.iter_mut().for_each(close_plain_objects);
            }
        } else if INSTANCE_SCHEMA_MAPS.contains(&keyword)
            && let Value::Object(map) = value
        {
            map.values_mut().for_each(close_plain_objects);
        }
    }
}

/// Removes the `format`s schemars puts on integers and floats: they are
/// not JSON Schema formats, and the validator refuses unknown formats.
fn drop_integer_formats(schema: &mut Value) {
    const NUMERIC: &[&str] = &[
        "int8", "int16", "int32", "int64", "int128", "uint8", "uint16", "uint32", "uint64",
        "uint128", "int", "uint", "float", "double",
    ];
    match schema {
        Value::Object(object) => {
            if let Some(Value::String(format)) = object.get("format")
                && NUMERIC.contains(&format.as_str())
            {
                object.remove("format");
            }
            object.values_mut().for_each(drop_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_integer_formats),
        _ => {}
    }
}
