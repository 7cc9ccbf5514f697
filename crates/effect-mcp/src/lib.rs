//! MCP tools backed by the recovery executor of production-agent-systems,
//! on the official Rust SDK, [rmcp](https://docs.rs/rmcp).
//!
//! - Server side, [`EffectServer`] exposes effect-backed tools: each call is
//!   recorded durably before its handler runs, under the operation id its
//!   [`TypedContract`](effect_exec::TypedContract) derives. A confirmed or
//!   replayed call returns the output (as `structuredContent` and as JSON
//!   text); an uncertain or quarantined one returns an
//!   [`UncertainOutcome`](effect_exec::UncertainOutcome) notice, not an error:
//!   the outcome is not known, do not retry, and the operation id being
//!   reconciled. Tool annotations say what the executor makes true:
//!   `idempotentHint: true` (a repeated call replays), `readOnlyHint: false`,
//!   and `destructiveHint` as declared ([`ServedTool::destructive`], `true` by
//!   default as in MCP). [`ServedTool::output_schema`] declares the tool's
//!   `outputSchema`.
//! - With [`EffectServer::with_tasks`], a client that declares MCP's tasks
//!   extension gets a task for each call, whose id is the operation id, and
//!   `tasks/get` reads the operation's record: a server restarted on the same
//!   ledger answers with the real status (see [`task`]).
//! - Client side, [`RemoteTool`] calls a tool of any MCP server through the
//!   executor, with the operation id and the provider idempotency key sent in
//!   the request's `_meta` (see [`meta`]), and an argument check against the
//!   server's input schema (2020-12 or draft-07) before anything is recorded.
//!   With a connector ([`RemoteTool::connect`]) a dispatch that finds the
//!   connection lost (the server's process died) opens a new [`Connection`]
//!   first, so the resend a guaranteed key or a negative probe allows is sent.
//!
//! Every result this crate's server returns carries its effect status in
//! `_meta` under [`meta::EFFECT`], so a [`RemoteTool`] calling it can tell a
//! refusal from an uncertain outcome. From other servers, an error result or
//! a failed request is an uncertain outcome, except the JSON-RPC errors that
//! mean the tool never ran (`invalid params`, `method not found`) and the
//! error results a predicate recognizes as refusals
//! ([`RemoteTool::refusal_when`], [`refusal::python_sdk`]).
//!
//! It depends on `effect-core`, `effect-exec` (with `tokio`), `effect-schema`
//! (the schemas, the same as effect-rig's and agent-runtime's) and `rmcp`
//! with the `server` and `client` features only (no HTTP, no TLS). It names
//! no store and no agent runtime.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use effect_core::MemoryLedger;
//! use effect_exec::{EffectExecutor, TypedContract};
//! use effect_mcp::{EffectServer, RemoteTool, ServedTool};
//! use rmcp::ServiceExt;
//! use serde::{Deserialize, Serialize};
//!
//! #[derive(Serialize, Deserialize, schemars::JsonSchema)]
//! struct SendEmail { to: String }
//! #[derive(Debug, PartialEq, Serialize, Deserialize)]
//! struct Sent { message_id: String }
//!
//! let contract = TypedContract::<SendEmail, Sent>::builder("send_email", |args| {
//!     Ok(format!("email:{}:welcome", args.to))
//! })
//! .build()?;
//! let server_side = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! let server = EffectServer::new(server_side).tool(ServedTool::new(
//!     "send_email",
//!     "Send a welcome email",
//!     contract.clone(),
//!     |args: SendEmail, _call| async move { Ok(Sent { message_id: format!("msg-{}", args.to) }) },
//! ))?;
//!
//! // An in-process transport: the two ends of a duplex pipe.
//! let (client_io, server_io) = tokio::io::duplex(64 * 1024);
//! tokio::spawn(async move {
//!     if let Ok(running) = server.serve(server_io).await {
//!         let _ = running.waiting().await;
//!     }
//! });
//! let client = ().serve(client_io).await?;
//!
//! let client_side = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! let remote = RemoteTool::discover(client.peer().clone(), "send_email", contract, client_side).await?;
//! let sent = remote.call(&SendEmail { to: "ada".into() }).await?;
//! assert_eq!(sent.output, Some(Sent { message_id: "msg-ada".into() }));
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod client;
mod error;
pub mod meta;
pub mod refusal;
mod server;
pub mod task;

pub use client::{ConnectError, Connection, RemoteTool, output_of, text_of};
pub use error::EffectMcpError;
pub use server::{EffectCall, EffectServer, ServedTool};
pub use task::TaskOptions;
