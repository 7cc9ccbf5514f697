//! [rig](https://docs.rs/rig-core) tools whose every call goes through the
//! recovery executor of production-agent-systems.
//!
//! [`EffectTool`] wraps any [`rig_core::tool::Tool`] together with a
//! [`TypedContract`](effect_exec::TypedContract) over its `Args` and `Output`.
//! rig dispatches it like any tool (a `ToolSet`, an agent's tool loop); each
//! call is recorded durably before the inner tool runs, under the operation
//! id the contract derives from the arguments, so that:
//!
//! - a confirmed call (first time, or replayed from the ledger, or found by the
//!   contract's outcome probe after a lost response) returns the tool's output;
//! - an uncertain or quarantined call returns to the model an
//!   [`UncertainOutcome`](effect_exec::UncertainOutcome): the outcome is not
//!   known, do not retry, and the operation id being reconciled. It is a
//!   successful tool result, never "failed", so neither the model nor a retry
//!   policy repeats the effect;
//! - a provider refusal (the inner tool's error mapped to
//!   `ToolExecutionError::refused`) is recorded as `rejected` and returned as a
//!   non-retryable error.
//!
//! The inner tool reads the provider idempotency key and the operation id from
//! its [`ToolContext`](rig_core::tool::ToolContext) as an [`EffectCall`].
//!
//! It depends on `effect-core`, `effect-exec` (with `tokio`) and `rig-core`
//! without default features (no provider clients, no TLS); it names no store.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use effect_core::MemoryLedger;
//! use effect_exec::{EffectExecutor, TypedContract};
//! use effect_rig::{EffectCall, EffectTool};
//! use rig_core::tool::{Tool, ToolContext};
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, schemars::JsonSchema)]
//! struct SendEmail { to: String }
//! #[derive(Serialize, Deserialize)]
//! struct Sent { message_id: String }
//!
//! struct Mailer;
//! impl Tool for Mailer {
//!     const NAME: &'static str = "send_email";
//!     type Args = SendEmail;
//!     type Output = Sent;
//!     type Error = std::io::Error;
//!     fn description(&self) -> String { "Send a welcome email".into() }
//!     fn parameters(&self) -> serde_json::Value { effect_rig::parameters::<SendEmail>() }
//!     async fn call(&self, context: &mut ToolContext, args: SendEmail) -> Result<Sent, std::io::Error> {
//!         let call = context.require::<EffectCall>().map_err(std::io::Error::other)?;
//!         Ok(Sent { message_id: format!("msg-{}-{}", args.to, call.operation_id) })
//!     }
//! }
//!
//! let contract = TypedContract::<SendEmail, Sent>::builder("send_email", |args| {
//!     Ok(format!("email:{}:welcome", args.to))
//! })
//! .build()?;
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! let tool = EffectTool::new(Mailer, contract, executor);
//!
//! let mut context = ToolContext::new();
//! let output = tool.call(&mut context, SendEmail { to: "ada".into() }).await?;
//! assert_eq!(output.as_json().map(|o| o["message_id"].clone()), Some("msg-ada-email:ada:welcome".into()));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod error;
mod schema;
mod tool;

pub use error::EffectToolError;
pub use schema::parameters;
pub use tool::{EffectCall, EffectReport, EffectTool};
