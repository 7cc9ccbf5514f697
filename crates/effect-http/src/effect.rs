//! [`HttpEffect`]: sends a request under the operation's provider key and
//! tells the executor what its answer means.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, SystemTime};

use effect_core::{BoxFuture, Clock, Sleeper, SystemClock, ThreadSleeper};
use effect_exec::{HandlerContext, HandlerError};
use reqwest::dns::Resolve;
use reqwest::header::{HeaderMap, HeaderName};
use serde_json::Value;

use crate::classify::{Classifier, HttpClass, classify_error, retry_after};
use crate::error::HttpError;
use crate::evidence::{
    HTTP_CLASS, HTTP_IDEMPOTENT_REPLAYED, HTTP_KEY_HEADER, HTTP_RETRY_AFTER_MS, HTTP_STATUS,
};
use crate::request::{HttpRequest, HttpResponse};

/// The header the provider key is sent in by default.
pub const DEFAULT_KEY_HEADER: &str = "Idempotency-Key";
/// The header that says the provider replayed a stored answer, by default.
pub const DEFAULT_REPLAY_HEADER: &str = "Idempotent-Replayed";

/// How much of an error body an error message quotes.
const QUOTED_BODY: usize = 200;

/// An HTTP provider as a source of effects: one client (async, and
/// blocking for sync handlers, built on first use), the header the
/// provider key goes in, how answers are classified, and how long a
/// `Retry-After` may delay a retry.
///
/// Every attempt of an operation sends the contract's provider key,
/// [`HandlerContext::provider_key`], the same on every attempt and in
/// every process, in the key header: the key is never generated here. An
/// operation whose contract derives no key is sent without one.
///
/// A `429` or `503` with `Retry-After` is `Unknown` (it authorizes
/// nothing); when the executor retries the operation anyway (a guaranteed
/// key, a probe's `not_committed`), the next attempt first waits out the
/// delay, on the injected sleeper, up to [`max_retry_after`](HttpEffectBuilder::max_retry_after).
/// The delay is remembered in this process only.
///
/// Cloning is cheap: clones share the client and the delays.
#[derive(Clone)]
pub struct HttpEffect {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    blocking: OnceLock<Result<reqwest::blocking::Client, String>>,
    settings: Settings,
    key_header: HeaderName,
    replay_header: Option<HeaderName>,
    classifier: Classifier,
    max_retry_after: Duration,
    clock: Arc<dyn Clock>,
    sleeper: Option<Arc<dyn Sleeper>>,
    /// Operation id → the earliest time its next attempt may be sent.
    not_before: Mutex<HashMap<String, SystemTime>>,
}

#[derive(Clone)]
struct Settings {
    timeout: Duration,
    connect_timeout: Duration,
    resolver: Option<Arc<dyn Resolve>>,
    tls: rustls::ClientConfig,
}

impl fmt::Debug for HttpEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEffect")
            .field("key_header", &self.inner.key_header)
            .field("replay_header", &self.inner.replay_header)
            .field("classifier", &self.inner.classifier)
            .field("timeout", &self.inner.settings.timeout)
            .field("connect_timeout", &self.inner.settings.connect_timeout)
            .field("max_retry_after", &self.inner.max_retry_after)
            .finish_non_exhaustive()
    }
}

/// Builds an [`HttpEffect`].
pub struct HttpEffectBuilder {
    timeout: Duration,
    connect_timeout: Duration,
    key_header: String,
    replay_header: Option<String>,
    classifier: Classifier,
    max_retry_after: Duration,
    clock: Arc<dyn Clock>,
    sleeper: Option<Arc<dyn Sleeper>>,
    resolver: Option<Arc<dyn Resolve>>,
    tls: Option<rustls::ClientConfig>,
}

impl fmt::Debug for HttpEffectBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpEffectBuilder")
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("key_header", &self.key_header)
            .field("replay_header", &self.replay_header)
            .field("classifier", &self.classifier)
            .field("max_retry_after", &self.max_retry_after)
            .finish_non_exhaustive()
    }
}

impl HttpEffect {
    /// An effect with the defaults: `Idempotency-Key`, `Idempotent-Replayed`,
    /// the default [`Classifier`], a 30 s request timeout and a 10 s connect
    /// timeout, `Retry-After` honoured up to 60 s.
    ///
    /// # Errors
    ///
    /// As [`HttpEffectBuilder::build`].
    pub fn new() -> Result<Self, HttpError> {
        HttpEffect::builder().build()
    }

    /// A builder with the defaults of [`new`](Self::new).
    pub fn builder() -> HttpEffectBuilder {
        HttpEffectBuilder {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            replay_header: Some(DEFAULT_REPLAY_HEADER.to_owned()),
            classifier: Classifier::new(),
            max_retry_after: Duration::from_secs(60),
            clock: Arc::new(SystemClock),
            sleeper: None,
            resolver: None,
            tls: None,
        }
    }

    /// A sync handler for [`EffectExecutor::execute`](effect_exec::EffectExecutor::execute):
    /// `build` makes the request from the arguments, the answer's body (as
    /// JSON) is the output. For another output, call [`send`](Self::send)
    /// from a handler of your own.
    ///
    /// It sends through the blocking client: call it from a thread that is
    /// not running async tasks (as `execute` is).
    pub fn handler<B>(
        &self,
        build: B,
    ) -> impl Fn(Value, HandlerContext) -> Result<Value, HandlerError> + Send + Sync + 'static
    where
        B: Fn(&Value, &HandlerContext) -> Result<HttpRequest, HandlerError> + Send + Sync + 'static,
    {
        let http = self.clone();
        move |arguments, context| {
            let request = build(&arguments, &context)?;
            Ok(http.send(&request, &context)?.json())
        }
    }

    /// The async handler for
    /// [`EffectExecutor::execute_async`](effect_exec::EffectExecutor::execute_async),
    /// as [`handler`](Self::handler).
    pub fn async_handler<B>(
        &self,
        build: B,
    ) -> impl Fn(Value, HandlerContext) -> BoxFuture<Result<Value, HandlerError>> + Send + Sync + 'static
    where
        B: Fn(&Value, &HandlerContext) -> Result<HttpRequest, HandlerError> + Send + Sync + 'static,
    {
        let http = self.clone();
        move |arguments, context| {
            let http = http.clone();
            let request = build(&arguments, &context);
            Box::pin(async move {
                let request = request?;
                Ok(http.send_async(&request, &context).await?.json())
            })
        }
    }

    /// Sends `request` as the attempt `context` describes, on the blocking
    /// client: the provider key in the key header, the evidence recorded on
    /// `context`, the answer classified.
    ///
    /// # Errors
    ///
    /// A [`HandlerError`] saying what the failure means: `NotSent` before
    /// the request was written, `Rejected` for a refusal, `Unknown` otherwise.
    pub fn send(
        &self,
        request: &HttpRequest,
        context: &HandlerContext,
    ) -> Result<HttpResponse, HandlerError> {
        if let Some(wait) = self.pending_delay(context)? {
            self.sleeper().sleep(wait);
        }
        let (headers, body) = self.prepare(request, context)?;
        let client = self.blocking_client()?;
        let mut builder = client
            .request(request.method().clone(), request.url())
            .headers(headers);
        if let Some(body) = body {
            builder = builder.body(body);
        }
        let answer = builder.send().and_then(|response| {
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.bytes()?;
            Ok(HttpResponse::new(status, headers, body.to_vec()))
        });
        self.conclude(answer, context)
    }

    /// [`send`](Self::send) on the async client.
    ///
    /// # Errors
    ///
    /// As [`send`](Self::send).
    pub async fn send_async(
        &self,
        request: &HttpRequest,
        context: &HandlerContext,
    ) -> Result<HttpResponse, HandlerError> {
        if let Some(wait) = self.pending_delay(context)? {
            match &self.inner.sleeper {
                Some(sleeper) => {
                    let sleeper = Arc::clone(sleeper);
                    tokio::task::spawn_blocking(move || sleeper.sleep(wait))
                        .await
                        .map_err(|err| {
                            HandlerError::not_sent(format!(
                                "the retry delay was interrupted: {err}"
                            ))
                        })?;
                }
                None => tokio::time::sleep(wait).await,
            }
        }
        let (headers, body) = self.prepare(request, context)?;
        let mut builder = self
            .inner
            .client
            .request(request.method().clone(), request.url())
            .headers(headers);
        if let Some(body) = body {
            builder = builder.body(body);
        }
        let answer = async {
            let response = builder.send().await?;
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.bytes().await?;
            Ok(HttpResponse::new(status, headers, body.to_vec()))
        }
        .await;
        self.conclude(answer, context)
    }

    /// The header the provider key is sent in.
    pub fn key_header(&self) -> &HeaderName {
        &self.inner.key_header
    }

    /// The classifier.
    pub fn classifier(&self) -> &Classifier {
        &self.inner.classifier
    }

    /// The async client.
    pub(crate) fn client(&self) -> &reqwest::Client {
        &self.inner.client
    }

    /// The blocking client, built on first use.
    pub(crate) fn blocking_client(&self) -> Result<&reqwest::blocking::Client, HandlerError> {
        self.inner
            .blocking
            .get_or_init(|| {
                blocking_client(&self.inner.settings).map_err(|err| effect_core::error_chain(&err))
            })
            .as_ref()
            .map_err(|err| {
                HandlerError::not_sent(format!("the HTTP client cannot be built: {err}"))
            })
    }

    fn sleeper(&self) -> Arc<dyn Sleeper> {
        self.inner
            .sleeper
            .clone()
            .unwrap_or_else(|| Arc::new(ThreadSleeper))
    }

    /// The headers and body to send, or why nothing can be sent.
    fn prepare(
        &self,
        request: &HttpRequest,
        context: &HandlerContext,
    ) -> Result<(HeaderMap, Option<Vec<u8>>), HandlerError> {
        let headers = request
            .header_map(&self.inner.key_header, context.provider_key())
            .map_err(HandlerError::not_sent)?;
        let body = request.body_to_send().map_err(HandlerError::not_sent)?;
        if context.provider_key().is_some() {
            context.record_evidence(HTTP_KEY_HEADER, self.inner.key_header.as_str());
        }
        Ok((headers, body))
    }

    /// How long this attempt must wait for a `Retry-After` of an earlier
    /// one; `NotSent` when that is longer than the client waits.
    fn pending_delay(&self, context: &HandlerContext) -> Result<Option<Duration>, HandlerError> {
        let mut delays = self.delays();
        let Some(at) = delays.get(context.operation_id()).copied() else {
            return Ok(None);
        };
        let wait = at
            .duration_since(self.inner.clock.now())
            .unwrap_or(Duration::ZERO);
        if wait > self.inner.max_retry_after {
            return Err(HandlerError::not_sent(format!(
                "the provider asked to wait {wait:?} before another attempt, longer than this client waits ({:?})",
                self.inner.max_retry_after
            )));
        }
        delays.remove(context.operation_id());
        Ok((!wait.is_zero()).then_some(wait))
    }

    fn delays(&self) -> std::sync::MutexGuard<'_, HashMap<String, SystemTime>> {
        // A map of plain values: a panicking holder leaves it whole.
        self.inner
            .not_before
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Records what the answer says and classifies it.
    fn conclude(
        &self,
        answer: Result<HttpResponse, reqwest::Error>,
        context: &HandlerContext,
    ) -> Result<HttpResponse, HandlerError> {
        let response = match answer {
            Ok(response) => response,
            Err(err) => {
                let (class, message) = classify_error(&err);
                context.record_evidence(HTTP_CLASS, class.as_str());
                tracing::info!(
                    operation_id = context.operation_id(),
                    class = class.as_str(),
                    "HTTP request failed"
                );
                return Err(match class {
                    HttpClass::NotSent => HandlerError::not_sent(message),
                    _ => HandlerError::unknown(message),
                });
            }
        };
        let status = response.status();
        context.record_evidence(HTTP_STATUS, status);
        if let Some(replayed) = &self.inner.replay_header
            && response
                .headers()
                .get(replayed)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        {
            context.record_evidence(HTTP_IDEMPOTENT_REPLAYED, true);
        }
        let now = self.inner.clock.now();
        if let Some(delay) = retry_after(&response, now) {
            context.record_evidence(
                HTTP_RETRY_AFTER_MS,
                u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            );
            let mut delays = self.delays();
            delays.retain(|_, at| *at > now);
            delays.insert(context.operation_id().to_owned(), now + delay);
        }
        let class = self.inner.classifier.classify(&response);
        if class == HttpClass::Success {
            return Ok(response);
        }
        context.record_evidence(HTTP_CLASS, class.as_str());
        let message = format!("the provider answered {status}: {}", quote(response.body()));
        Err(match class {
            HttpClass::NotSent => HandlerError::not_sent(message),
            HttpClass::Rejected => HandlerError::rejected(message),
            _ => HandlerError::unknown(message),
        })
    }
}

impl HttpEffectBuilder {
    /// The timeout of a whole request (default 30 s). A request that times
    /// out after it was written is `Unknown`.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The connect timeout (default 10 s). A request that cannot connect
    /// in time was never written: `NotSent`.
    #[must_use]
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The header the provider key is sent in (default `Idempotency-Key`).
    #[must_use]
    pub fn key_header(mut self, name: impl Into<String>) -> Self {
        self.key_header = name.into();
        self
    }

    /// The header that says the provider replayed a stored answer (default
    /// `Idempotent-Replayed`), or `None` for a provider that says nothing.
    #[must_use]
    pub fn replay_header(mut self, name: Option<String>) -> Self {
        self.replay_header = name;
        self
    }

    /// How answers are classified.
    #[must_use]
    pub fn classifier(mut self, classifier: Classifier) -> Self {
        self.classifier = classifier;
        self
    }

    /// The longest `Retry-After` an attempt waits for (default 60 s); an
    /// attempt asked to wait longer is not sent.
    #[must_use]
    pub fn max_retry_after(mut self, max: Duration) -> Self {
        self.max_retry_after = max;
        self
    }

    /// The clock `Retry-After` is measured on (default the system's).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// What waits out a `Retry-After` (default: the thread sleeps, an async
    /// attempt awaits a tokio timer). A
    /// [`ManualClock`](effect_core::ManualClock) as clock and sleeper makes
    /// the wait pass at once, for tests.
    #[must_use]
    pub fn sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = Some(sleeper);
        self
    }

    /// Resolves host names with `resolver` instead of the system's.
    #[must_use]
    pub fn dns_resolver(mut self, resolver: Arc<dyn Resolve>) -> Self {
        self.resolver = Some(resolver);
        self
    }

    /// The rustls configuration (default: the ring provider and the
    /// platform's trust roots), for a provider behind a private CA.
    #[must_use]
    pub fn tls_config(mut self, config: rustls::ClientConfig) -> Self {
        self.tls = Some(config);
        self
    }

    /// Builds the effect and its async client; the blocking client is built
    /// on the first sync request.
    ///
    /// # Errors
    ///
    /// [`HttpError::HeaderName`] for an invalid header name,
    /// [`HttpError::Tls`] or [`HttpError::Client`] when the client cannot
    /// be built.
    pub fn build(self) -> Result<HttpEffect, HttpError> {
        let header = |name: &str| {
            HeaderName::from_bytes(name.as_bytes()).map_err(|_| HttpError::HeaderName {
                name: name.to_owned(),
            })
        };
        let key_header = header(&self.key_header)?;
        let replay_header = self.replay_header.as_deref().map(header).transpose()?;
        let tls = match self.tls {
            Some(tls) => tls,
            None => crate::tls::client_config()?,
        };
        let settings = Settings {
            timeout: self.timeout,
            connect_timeout: self.connect_timeout,
            resolver: self.resolver,
            tls,
        };
        let mut client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.connect_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .tls_backend_preconfigured(settings.tls.clone());
        if let Some(resolver) = &settings.resolver {
            client = client.dns_resolver(Arc::new(Shared(Arc::clone(resolver))));
        }
        let client = client
            .build()
            .map_err(|source| HttpError::Client { source })?;
        Ok(HttpEffect {
            inner: Arc::new(Inner {
                client,
                blocking: OnceLock::new(),
                settings,
                key_header,
                replay_header,
                classifier: self.classifier,
                max_retry_after: self.max_retry_after,
                clock: self.clock,
                sleeper: self.sleeper,
                not_before: Mutex::new(HashMap::new()),
            }),
        })
    }
}

fn blocking_client(settings: &Settings) -> Result<reqwest::blocking::Client, reqwest::Error> {
    let mut builder = reqwest::blocking::Client::builder()
        .timeout(settings.timeout)
        .connect_timeout(settings.connect_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .tls_backend_preconfigured(settings.tls.clone());
    if let Some(resolver) = &settings.resolver {
        builder = builder.dns_resolver(Arc::new(Shared(Arc::clone(resolver))));
    }
    builder.build()
}

/// A shared resolver, as the sized type reqwest's builders take.
struct Shared(Arc<dyn Resolve>);

impl Resolve for Shared {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        self.0.resolve(name)
    }
}

/// The start of a body, for an error message.
fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    match text.char_indices().nth(QUOTED_BODY) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.into_owned(),
    }
}
