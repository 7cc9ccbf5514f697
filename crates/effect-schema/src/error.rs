//! The error of a schema that cannot be used.

/// A tool's input schema that cannot be used (rejected at registration).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The root schema is not a JSON object describing an object.
    #[error("input schema must be an object schema with \"type\": \"object\"")]
    NotAnObjectSchema,
    /// `$schema` names a draft other than 2020-12 or draft-07.
    #[error(
        "unsupported schema dialect {uri:?}: only JSON Schema 2020-12 and draft-07 are supported"
    )]
    UnsupportedDialect {
        /// The `$schema` value.
        uri: String,
    },
    /// A keyword the validator would silently ignore.
    #[error("unsupported keyword {keyword:?} at {path}")]
    UnsupportedKeyword {
        /// The keyword.
        keyword: String,
        /// A JSON pointer to the schema object holding it.
        path: String,
    },
    /// The schema is not valid against its meta-schema, or a reference cannot be resolved.
    #[error("invalid schema: {reason}")]
    Invalid {
        /// What the validator reported.
        reason: String,
    },
}
