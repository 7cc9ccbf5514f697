//! [`HttpProbe`]: an outcome probe that looks the operation up at the
//! provider, by its key or by an id the arguments carry.

use std::fmt;
use std::sync::Arc;

use effect_core::{BoxFuture, CallbackError, OutcomeProbeResult};
use serde_json::Value;

use crate::effect::HttpEffect;
use crate::evidence::HTTP_STATUS;
use crate::request::{HttpRequest, HttpResponse};

type BuildLookup =
    Arc<dyn Fn(&Value, Option<&str>) -> Result<HttpRequest, CallbackError> + Send + Sync>;
type ProviderId = Arc<dyn Fn(&Value) -> Option<String> + Send + Sync>;

/// Looks an operation up at the provider, for a contract's
/// [`outcome_probe`](effect_core::EffectContractBuilder::outcome_probe) or
/// [`outcome_probe_async`](effect_core::EffectContractBuilder::outcome_probe_async).
///
/// The lookup request is built from the arguments and the stored provider
/// key. Its answer means:
///
/// | answer | probe result |
/// | --- | --- |
/// | 2xx | `committed`, the body (JSON) as the output, the provider's id when [`provider_id`](Self::provider_id) finds one |
/// | 404, lookup [`authoritative`](Self::authoritative) | `not_committed`: the executor may retry |
/// | 404, not authoritative (the default) | `unknown`: a miss proves nothing |
/// | anything else, or no answer | a probe error: nothing is concluded |
///
/// Only declare the lookup authoritative when the provider documents that
/// it finds every committed request at once (no replication lag, no
/// expiry before the contract's `provider_key_ttl`); give the contract a
/// `settle` time when a fresh commit can be missed for a while.
#[derive(Clone)]
pub struct HttpProbe {
    http: HttpEffect,
    build: BuildLookup,
    authoritative: bool,
    provider_id: Option<ProviderId>,
}

impl fmt::Debug for HttpProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProbe")
            .field("http", &self.http)
            .field("authoritative", &self.authoritative)
            .field("provider_id", &self.provider_id.is_some())
            .finish_non_exhaustive()
    }
}

impl HttpEffect {
    /// A probe whose lookup request `build` makes from the arguments and
    /// the stored provider key; not authoritative until told.
    pub fn probe<B>(&self, build: B) -> HttpProbe
    where
        B: Fn(&Value, Option<&str>) -> Result<HttpRequest, CallbackError> + Send + Sync + 'static,
    {
        HttpProbe {
            http: self.clone(),
            build: Arc::new(build),
            authoritative: false,
            provider_id: None,
        }
    }
}

impl HttpProbe {
    /// Whether a `404` proves the operation was not committed (default false).
    #[must_use]
    pub fn authoritative(mut self, authoritative: bool) -> Self {
        self.authoritative = authoritative;
        self
    }

    /// Where the provider's id is in a found body (for example
    /// `|body| body["id"].as_str().map(str::to_owned)`).
    #[must_use]
    pub fn provider_id<F>(mut self, find: F) -> Self
    where
        F: Fn(&Value) -> Option<String> + Send + Sync + 'static,
    {
        self.provider_id = Some(Arc::new(find));
        self
    }

    /// Looks the operation up on the blocking client.
    ///
    /// # Errors
    ///
    /// When the lookup cannot be built or sent, or answers neither 2xx nor 404.
    pub fn lookup(
        &self,
        arguments: &Value,
        key: Option<&str>,
    ) -> Result<OutcomeProbeResult, CallbackError> {
        let request = (self.build)(arguments, key)?;
        let client = self
            .http
            .blocking_client()
            .map_err(|err| CallbackError::new(err.to_string()))?;
        let headers = request
            .header_map(self.http.key_header(), None)
            .map_err(CallbackError::new)?;
        let mut builder = client
            .request(request.method().clone(), request.url())
            .headers(headers);
        if let Some(body) = request.body_to_send().map_err(CallbackError::new)? {
            builder = builder.body(body);
        }
        let answer = builder
            .send()
            .and_then(|response| {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                Ok(HttpResponse::new(
                    status,
                    headers,
                    response.bytes()?.to_vec(),
                ))
            })
            .map_err(|err| {
                CallbackError::new(format!(
                    "the lookup failed: {}",
                    effect_core::error_chain(&err)
                ))
            })?;
        self.conclude(&answer)
    }

    /// Looks the operation up on the async client.
    ///
    /// # Errors
    ///
    /// As [`lookup`](Self::lookup).
    pub async fn lookup_async(
        &self,
        arguments: &Value,
        key: Option<&str>,
    ) -> Result<OutcomeProbeResult, CallbackError> {
        let request = (self.build)(arguments, key)?;
        let headers = request
            .header_map(self.http.key_header(), None)
            .map_err(CallbackError::new)?;
        let mut builder = self
            .http
            .client()
            .request(request.method().clone(), request.url())
            .headers(headers);
        if let Some(body) = request.body_to_send().map_err(CallbackError::new)? {
            builder = builder.body(body);
        }
        let answer = async {
            let response = builder.send().await?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok::<_, reqwest::Error>(HttpResponse::new(status, headers, body.to_vec()))
        }
        .await
        .map_err(|err| {
            CallbackError::new(format!(
                "the lookup failed: {}",
                effect_core::error_chain(&err)
            ))
        })?;
        self.conclude(&answer)
    }

    /// The sync probe function a contract takes.
    pub fn into_probe(
        self,
    ) -> impl Fn(&Value, Option<&str>) -> Result<OutcomeProbeResult, CallbackError> + Send + Sync + 'static
    {
        move |arguments, key| self.lookup(arguments, key)
    }

    /// The async probe function a contract takes.
    pub fn into_async_probe(
        self,
    ) -> impl Fn(Value, Option<String>) -> BoxFuture<Result<OutcomeProbeResult, CallbackError>>
    + Send
    + Sync
    + 'static {
        move |arguments, key| {
            let probe = self.clone();
            Box::pin(async move { probe.lookup_async(&arguments, key.as_deref()).await })
        }
    }

    fn conclude(&self, answer: &HttpResponse) -> Result<OutcomeProbeResult, CallbackError> {
        let status = answer.status();
        match status {
            200..=299 => {
                let body = answer.json();
                let id = self.provider_id.as_ref().and_then(|find| find(&body));
                let mut found = OutcomeProbeResult::committed(body).evidence(HTTP_STATUS, status);
                if let Some(id) = id {
                    found = found.provider_operation_id(id);
                }
                Ok(found)
            }
            404 if self.authoritative => {
                Ok(OutcomeProbeResult::not_committed().evidence(HTTP_STATUS, status))
            }
            404 => Ok(OutcomeProbeResult::unknown().evidence(HTTP_STATUS, status)),
            _ => Err(CallbackError::new(format!(
                "the lookup answered {status}, which decides nothing"
            ))),
        }
    }
}
