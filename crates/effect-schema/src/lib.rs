//! A tool's input schema, fail-closed, written once for every adapter.
//!
//! [`InputSchema`] checks a JSON Schema (2020-12, or draft-07 translated to
//! it) when a tool is registered, closes its object schemas to unknown
//! fields and validates each call's arguments. [`schema_for`] (feature
//! `schemars`) derives the schema of an argument type, the one agent-runtime
//! enforces, effect-rig advertises to a model and effect-mcp serves: one
//! argument type has one schema whichever adapter carries it.
//!
//! It depends on `jsonschema` (no remote references), `serde_json`,
//! `thiserror` and, with `schemars`, `schemars`; on no other crate of the
//! workspace.
//!
//! ```
//! use effect_schema::InputSchema;
//! use serde_json::json;
//!
//! let schema = InputSchema::new(json!({
//!     "type": "object",
//!     "properties": {"invoice_id": {"type": "string"}},
//!     "required": ["invoice_id"]
//! }))?;
//! assert!(schema.validate(&json!({"invoice_id": "INV-1"})).is_ok());
//! assert!(schema.validate(&json!({"invoice_id": "INV-1", "amount": 5})).is_err());
//! # Ok::<(), effect_schema::SchemaError>(())
//! ```
//!
//! # Feature flags
//!
//! - `schemars`: [`schema_for`] and `InputSchema::for_type`, a schema derived
//!   from the argument type.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "schemars")]
mod derive;
mod error;
mod input;

#[cfg(feature = "schemars")]
pub use derive::schema_for;
pub use error::SchemaError;
pub use input::InputSchema;
