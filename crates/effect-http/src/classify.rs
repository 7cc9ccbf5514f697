//! What a response or a transport failure tells the executor: [`HttpClass`]
//! and the per-provider [`Classifier`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::request::HttpResponse;

/// What one attempt's answer means for the effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HttpClass {
    /// The provider applied the effect (or replayed the answer of the
    /// attempt that did): the output is confirmed.
    Success,
    /// The request never reached the provider: a retry is safe
    /// ([`HandlerError::NotSent`](effect_exec::HandlerError::NotSent)).
    NotSent,
    /// The provider may have applied it: reconciled through the probe or a
    /// guaranteed key, never retried blindly
    /// ([`HandlerError::Unknown`](effect_exec::HandlerError::Unknown)).
    Unknown,
    /// The provider refused without applying it: terminal
    /// ([`HandlerError::Rejected`](effect_exec::HandlerError::Rejected)).
    Rejected,
}

impl HttpClass {
    /// The evidence string: `success`, `not_sent`, `unknown`, `rejected`.
    pub fn as_str(self) -> &'static str {
        match self {
            HttpClass::Success => "success",
            HttpClass::NotSent => "not_sent",
            HttpClass::Unknown => "unknown",
            HttpClass::Rejected => "rejected",
        }
    }
}

/// The class of a status by the default rules:
///
/// | status | class | why |
/// | --- | --- | --- |
/// | 2xx | `Success` | |
/// | 408, 409, 429 | `Unknown` | a request timeout, a key still in progress (Stripe, the IETF draft), a rate limit: the provider may not have decided, and none of them proves it did nothing |
/// | other 4xx | `Rejected` | the provider refused this request |
/// | 1xx, 3xx, 5xx | `Unknown` | a redirect is not followed; a 5xx may follow a commit |
///
/// ```
/// use effect_http::{HttpClass, default_class};
///
/// assert_eq!(default_class(201), HttpClass::Success);
/// assert_eq!(default_class(402), HttpClass::Rejected);
/// assert_eq!(default_class(409), HttpClass::Unknown);
/// assert_eq!(default_class(503), HttpClass::Unknown);
/// ```
pub fn default_class(status: u16) -> HttpClass {
    match status {
        200..=299 => HttpClass::Success,
        408 | 409 | 429 => HttpClass::Unknown,
        400..=499 => HttpClass::Rejected,
        _ => HttpClass::Unknown,
    }
}

type Custom = Arc<dyn Fn(&HttpResponse) -> Option<HttpClass> + Send + Sync>;

/// How one provider's answers are classified: the default rules
/// ([`default_class`]), per-status overrides, and an optional function that
/// reads the response (a provider that answers `200` with an error body).
///
/// A `429` or a `503` is never [`HttpClass::NotSent`], whatever the
/// overrides say: a `Retry-After` delays a retry the contract allows and
/// never authorizes one on its own (it is taken as `Unknown`).
///
/// ```
/// use effect_http::{Classifier, HttpClass, HttpResponse};
/// use reqwest::header::HeaderMap;
///
/// // This provider answers 409 for "already exists": the effect is there.
/// let classifier = Classifier::new().status(409, HttpClass::Success);
/// let answer = HttpResponse::new(409, HeaderMap::new(), "{}");
/// assert_eq!(classifier.classify(&answer), HttpClass::Success);
///
/// let overruled = Classifier::new().status(429, HttpClass::NotSent);
/// let limited = HttpResponse::new(429, HeaderMap::new(), "");
/// assert_eq!(overruled.classify(&limited), HttpClass::Unknown);
/// ```
#[derive(Clone, Default)]
pub struct Classifier {
    statuses: BTreeMap<u16, HttpClass>,
    custom: Option<Custom>,
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("statuses", &self.statuses)
            .field("custom", &self.custom.is_some())
            .finish()
    }
}

impl Classifier {
    /// The default rules.
    pub fn new() -> Self {
        Classifier::default()
    }

    /// Classifies `status` as `class`.
    #[must_use]
    pub fn status(mut self, status: u16, class: HttpClass) -> Self {
        self.statuses.insert(status, class);
        self
    }

    /// Asks `classify` first; where it answers `None`, the overrides and
    /// the default rules decide.
    #[must_use]
    pub fn with<F>(mut self, classify: F) -> Self
    where
        F: Fn(&HttpResponse) -> Option<HttpClass> + Send + Sync + 'static,
    {
        self.custom = Some(Arc::new(classify));
        self
    }

    /// The class of `response`.
    pub fn classify(&self, response: &HttpResponse) -> HttpClass {
        let status = response.status();
        let class = self
            .custom
            .as_ref()
            .and_then(|custom| custom(response))
            .or_else(|| self.statuses.get(&status).copied())
            .unwrap_or_else(|| default_class(status));
        if class == HttpClass::NotSent && matches!(status, 429 | 503) {
            HttpClass::Unknown
        } else {
            class
        }
    }
}

/// The class of a request that got no response, and what to say about it.
///
/// A failure to connect (a refused connection, a DNS failure, a TLS
/// handshake or a connect timeout) happens before a byte of the request is
/// written, and so does a request reqwest could not build: not sent. Any
/// other failure (a timeout, a reset or a closed connection after the
/// request was written, a body that broke off) may follow a commit: unknown.
pub(crate) fn classify_error(err: &reqwest::Error) -> (HttpClass, String) {
    let message = effect_core::error_chain(err);
    if err.is_builder() {
        (
            HttpClass::NotSent,
            format!("the request cannot be built: {message}"),
        )
    } else if err.is_connect() {
        (HttpClass::NotSent, format!("could not connect: {message}"))
    } else if err.is_timeout() {
        (
            HttpClass::Unknown,
            format!("timed out after the request was sent: {message}"),
        )
    } else {
        (
            HttpClass::Unknown,
            format!("the request failed after it was sent: {message}"),
        )
    }
}

/// The delay a `429` or `503` asks for in `Retry-After` (seconds, or an
/// HTTP date after `now`), if any.
pub(crate) fn retry_after(response: &HttpResponse, now: SystemTime) -> Option<Duration> {
    if !matches!(response.status(), 429 | 503) {
        return None;
    }
    let value = response.header("retry-after")?.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = jiff::fmt::rfc2822::parse(value).ok()?.timestamp();
    let at = SystemTime::from(at);
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests;
