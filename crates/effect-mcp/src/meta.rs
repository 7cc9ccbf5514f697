//! The `_meta` keys this crate reads and writes.
//!
//! On a `tools/call` request, [`RemoteTool`](crate::RemoteTool) sends:
//!
//! - [`OPERATION_ID`]: the operation id the client's contract derived;
//! - [`IDEMPOTENCY_KEY`]: the provider idempotency key, when the contract
//!   derives one. A server that honours it must apply at most one effect per
//!   key, like a payment API's `Idempotency-Key` header; only then may the
//!   client's contract say `provider_idempotency_guaranteed(true)`.
//!
//! [`EffectServer`](crate::EffectServer) hands both to its handlers as
//! [`EffectCall::client_operation_id`](crate::EffectCall::client_operation_id)
//! and [`EffectCall::client_idempotency_key`](crate::EffectCall::client_idempotency_key),
//! and puts [`EFFECT`] on every result: `{"operation_id": ..., "status": ...}`,
//! where `status` is an effect status (`confirmed`, `outcome_unknown`, ...) or
//! `invalid_arguments` when the call was refused before it was recorded.

/// The client's operation id, on a request.
pub const OPERATION_ID: &str = "io.github.production-agent-systems/operation-id";
/// The provider idempotency key, on a request.
pub const IDEMPOTENCY_KEY: &str = "io.github.production-agent-systems/idempotency-key";
/// The server's effect status, on a result.
pub const EFFECT: &str = "io.github.production-agent-systems/effect";
/// The `status` of a call refused before it was recorded.
pub const INVALID_ARGUMENTS: &str = "invalid_arguments";
