//! HTTP requests as effects for production-agent-systems.
//!
//! Most effects an agent makes are HTTP calls to a provider that documents
//! an idempotency key (payments, ticketing, messaging). [`HttpEffect`] is
//! the glue between such a provider and
//! [`EffectExecutor`](effect_exec::EffectExecutor):
//!
//! - the contract's provider key ([`HandlerContext::provider_key`](effect_exec::HandlerContext::provider_key))
//!   goes in the `Idempotency-Key` header (configurable) on every attempt,
//!   never generated here, so a retry in another process sends the same key;
//! - a failure says what it means ([`HttpClass`], [`Classifier`]): a
//!   refused connection or a DNS failure before the request was written is
//!   *not sent* (a retry is safe); a timeout or a reset after it was
//!   written, a 5xx, a `409` key-in-progress are *unknown* (reconciled,
//!   never retried blindly); another 4xx is *rejected*;
//! - `429` and `503` with `Retry-After` delay a retry the contract already
//!   allows, and never authorize one;
//! - what the provider said is recorded as evidence ([`evidence`]): its
//!   status, and `Idempotent-Replayed: true` when it replayed a stored answer;
//! - [`HttpProbe`] looks the operation up, mapping a `404` to
//!   `not_committed` only when the lookup is declared authoritative.
//!
//! Handlers come sync ([`HttpEffect::handler`], on reqwest's blocking client)
//! and async ([`HttpEffect::async_handler`], for `execute_async`). TLS is
//! rustls on ring with the platform's roots: no OpenSSL. It depends on
//! effect-core and effect-exec, and names no store. `docs/http.md` walks a
//! payment provider from `cargo add` to a tested contract.
//!
//! ```
//! use std::sync::Arc;
//! use effect_core::{EffectContract, MemoryLedger};
//! use effect_exec::EffectExecutor;
//! use effect_http::{HttpEffect, HttpRequest};
//! use effect_testkit::http_provider::{FakeHttpProvider, HttpFault};
//! use serde_json::json;
//!
//! // A provider that commits the charge, then answers 502.
//! let provider = FakeHttpProvider::start()?;
//! provider.push_fault(HttpFault::ErrorAfterCommit { status: 502 });
//! let url = provider.url("/v1/charges");
//!
//! let contract = EffectContract::builder("capture", |args| {
//!     Ok(format!("capture:{}", args["invoice"].as_str().ok_or("missing invoice")?))
//! })
//! .provider_idempotency_key(|args| Ok(args["invoice"].as_str().map(|i| format!("capture:{i}"))))
//! // The provider replays a stored answer for a key it has seen: a retry
//! // under the same key cannot charge twice.
//! .provider_idempotency_guaranteed(true)
//! .build()?;
//!
//! let http = HttpEffect::new()?;
//! let executor = EffectExecutor::new(Arc::new(MemoryLedger::new()));
//! let result = executor.execute(
//!     &contract,
//!     &json!({"invoice": "INV-1", "amount": 1250}),
//!     http.handler(move |args, _ctx| Ok(HttpRequest::post(url.clone()).json(args))),
//! )?;
//!
//! // The 502 was unknown; the guaranteed key allowed a retry, which the
//! // provider answered from its store.
//! assert!(result.is_confirmed());
//! assert_eq!(result.attempts, 2);
//! assert_eq!(result.evidence["http_idempotent_replayed"], json!(true));
//! assert_eq!(provider.committed_count(), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod classify;
mod effect;
mod error;
pub mod evidence;
mod probe;
mod request;
mod tls;

pub use classify::{Classifier, HttpClass, default_class};
pub use effect::{DEFAULT_KEY_HEADER, DEFAULT_REPLAY_HEADER, HttpEffect, HttpEffectBuilder};
pub use error::HttpError;
pub use probe::HttpProbe;
pub use request::{HttpRequest, HttpResponse};
/// The HTTP client crate, for its types in this API (headers, methods, the DNS resolver).
pub use reqwest;
