//! Tool parameter schemas derived from the argument type.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The JSON Schema (2020-12) of `A`, for [`Tool::parameters`](rig_core::tool::Tool::parameters).
///
/// Subschemas are inlined, so each nested object is described where it is
/// used, and every object schema that does not say otherwise is closed with
/// `"additionalProperties": false`: a model's misspelt or invented field is
/// refused rather than dropped. Declare `#[serde(deny_unknown_fields)]` on the
/// type too, so that deserialization agrees.
///
/// ```
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Capture { invoice_id: String, amount_cents: u64 }
///
/// let schema = effect_rig::parameters::<Capture>();
/// assert_eq!(schema["type"], "object");
/// assert_eq!(schema["additionalProperties"], false);
/// assert_eq!(schema["required"], serde_json::json!(["invoice_id", "amount_cents"]));
/// ```
pub fn parameters<A: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| settings.inline_subschemas = true)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<A>().to_value();
    close_objects(&mut schema);
    schema
}

/// Adds `"additionalProperties": false` to every object schema that declares
/// neither it nor `unevaluatedProperties`, outside of combinators whose
/// siblings may declare more properties.
fn close_objects(schema: &mut Value) {
    let Value::Object(object) = schema else {
        return;
    };
    let composed = ["allOf", "anyOf", "oneOf", "$ref"]
        .iter()
        .any(|k| object.contains_key(*k));
    let is_object =
        object.get("type").is_some_and(|t| t == "object") || object.contains_key("properties");
    if is_object
        && !composed
        && !object.contains_key("additionalProperties")
        && !object.contains_key("unevaluatedProperties")
    {
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    for key in ["properties", "patternProperties", "$defs", "definitions"] {
        if let Some(Value::Object(map)) = object.get_mut(key) {
            map.values_mut().for_each(close_objects);
        }
    }
    for key in ["items", "additionalProperties", "contains"] {
        if let Some(sub) = object.get_mut(key) {
            close_objects(sub);
        }
    }
    // Alternatives each describe the whole instance, unless sibling
    // properties are declared beside them.
    let alternatives_alone = !object.contains_key("properties");
    for key in ["prefixItems", "anyOf", "oneOf"] {
        if key != "prefixItems" && !alternatives_alone {
            continue;
        }
        if let Some(Value::Array(items)) = object.get_mut(key) {
            items.iter_mut().for_each(close_objects);
        }
    }
}
