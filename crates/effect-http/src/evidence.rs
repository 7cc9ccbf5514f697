//! The evidence keys effect-http records on an operation's outcome.
//!
//! They sit beside the executor's own (`effect_core::evidence`), which take
//! precedence, and are read by people, not by the safety rules.

/// The HTTP status the provider answered (a number).
pub const HTTP_STATUS: &str = "http_status";
/// `true` when the provider said it replayed a stored answer for the key
/// (`Idempotent-Replayed: true`): this attempt did not apply the effect again.
pub const HTTP_IDEMPOTENT_REPLAYED: &str = "http_idempotent_replayed";
/// The delay a `429` or `503` asked for, in milliseconds.
pub const HTTP_RETRY_AFTER_MS: &str = "http_retry_after_ms";
/// The header the provider key was sent in.
pub const HTTP_KEY_HEADER: &str = "http_key_header";
/// How the failure was classified (`not_sent`, `unknown`, `rejected`).
pub const HTTP_CLASS: &str = "http_class";
