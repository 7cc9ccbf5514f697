//! Tool parameter schemas derived from the argument type.

use schemars::JsonSchema;
use serde_json::Value;

/// The JSON Schema (2020-12) of `A`, for [`Tool::parameters`](rig_core::tool::Tool::parameters).
///
/// It is [`effect_schema::schema_for`], the schema effect-mcp serves and
/// agent-runtime enforces for the same type. Subschemas are inlined, so each
/// nested object is described where it is used, and every object schema that
/// does not say otherwise is closed with `"additionalProperties": false`: a
/// model's misspelt or invented field is refused rather than dropped. Declare
/// `#[serde(deny_unknown_fields)]` on the type too, so that deserialization
/// agrees.
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
    effect_schema::schema_for::<A>()
}
