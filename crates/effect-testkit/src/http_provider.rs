//! [`FakeHttpProvider`]: a fake HTTP payment API on loopback, in-process, with
//! Stripe-like idempotency keys and scripted faults (feature `http`).
//!
//! It serves HTTP/1.1 on `127.0.0.1` from a thread of its own (a
//! current-thread tokio runtime under hyper), so sync and async tests use it
//! alike, and stops when dropped.
//!
//! - `POST` to any path commits one effect (a *charge*), answered `200` with
//!   `{"id": "ch_000001", ...the request's fields}`.
//! - `GET /v1/charges/{id}`, `GET /v1/charges/by-key/{key}` and
//!   `GET /v1/charges/by-reference/{reference}` (the request's `reference`
//!   field, a client-chosen id) look the first matching charge up: `200`
//!   with the charge, or `404`.
//! - `GET /v1/charges?FIELD=VALUE` lists every charge whose request has
//!   that field (a string or a number) equal to the value, for counting the
//!   effects one operation left (`{"object": "list", "data": [...]}`).
//!
//! Keys follow Stripe's documented semantics and the IETF
//! `Idempotency-Key` header draft: the first request with a key commits and
//! its answer is stored; the same key with the same body answers the stored
//! answer again with `Idempotent-Replayed: true` and commits nothing; the
//! same key with another body is refused with `422`; a request whose key is
//! still being processed is refused with `409`. Rate limiting (`429`) and
//! unavailability (`503`) happen before the key is looked at and store
//! nothing under it, as at Stripe.
//!
//! Each `POST` takes the next scripted [`HttpFault`] (by arrival order, never
//! by time). What tests assert is [`FakeHttpProvider::committed_count`]: the
//! number of effects the provider applied.
//!
//! ```
//! use effect_testkit::http_provider::{FakeHttpProvider, HttpFault};
//!
//! let provider = FakeHttpProvider::start()?;
//! provider.push_fault(HttpFault::ErrorAfterCommit { status: 502 });
//! assert!(provider.url("/v1/charges").starts_with("http://127.0.0.1:"));
//! assert_eq!(provider.committed_count(), 0);
//! # Ok::<(), effect_testkit::http_provider::FakeHttpError>(())
//! ```

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use effect_core::{Clock, SystemClock};
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

/// The header a replayed answer carries.
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// The header the provider reads the idempotency key from, by default.
pub const DEFAULT_KEY_HEADER: &str = "idempotency-key";

/// How long a test waits for the server to reach a condition before it
/// fails: a bound on a broken test, never a pause in a passing one.
const CONDITION_BOUND: Duration = Duration::from_secs(60);

/// What the provider does to one `POST`, scripted in arrival order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HttpFault {
    /// Commit, then close the connection without writing a response.
    DropAfterCommit,
    /// Commit, then write no response until the provider is dropped: the
    /// client's timeout fires first.
    StallAfterCommit,
    /// Commit (storing the success under the key), then answer `status`
    /// (a 5xx of a gateway that lost the answer).
    ErrorAfterCommit {
        /// The status answered.
        status: u16,
    },
    /// Answer `429` with `Retry-After` (whole seconds), committing nothing
    /// and storing nothing under the key.
    RateLimited {
        /// The delay the provider asks for.
        retry_after: Duration,
    },
    /// Answer `503` with `Retry-After`, committing nothing.
    Unavailable {
        /// The delay the provider asks for.
        retry_after: Duration,
    },
    /// Refuse with `status` (a 4xx such as `402` card declined) without
    /// committing; the refusal is stored under the key and replayed.
    Decline {
        /// The status answered.
        status: u16,
    },
    /// Hold the request, its key marked in progress, until the gate opens;
    /// then commit. A second request with the key meanwhile gets `409`.
    HoldBeforeCommit(Gate),
}

/// A gate a held request waits at ([`HttpFault::HoldBeforeCommit`]).
#[derive(Debug, Clone, Default)]
pub struct Gate {
    open: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl Gate {
    /// A closed gate.
    pub fn new() -> Self {
        Gate::default()
    }

    /// Opens the gate: every held request goes on, and later ones do not wait.
    pub fn open(&self) {
        self.open.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.open.load(Ordering::SeqCst) {
                return;
            }
            notified.await;
        }
    }
}

/// One committed effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge {
    /// The provider's id, `ch_` and a six-digit sequence number.
    pub id: String,
    /// The key it was committed under, if any.
    pub idempotency_key: Option<String>,
    /// The request body.
    pub request: Value,
    /// When it was committed, on the provider's clock.
    pub committed_at: SystemTime,
}

/// One request the provider received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenRequest {
    /// The method.
    pub method: String,
    /// The path, with the query.
    pub path: String,
    /// The idempotency key header, if sent.
    pub idempotency_key: Option<String>,
}

/// Why the provider could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FakeHttpError {
    /// Binding the loopback socket or starting the runtime failed.
    #[error("the fake HTTP provider could not start")]
    Start {
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Options of a [`FakeHttpProvider`].
#[derive(Debug, Clone)]
pub struct FakeHttpOptions {
    key_header: String,
    honour_keys: bool,
    stale_reads: Duration,
    clock: Arc<dyn Clock>,
}

impl Default for FakeHttpOptions {
    fn default() -> Self {
        FakeHttpOptions {
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            honour_keys: true,
            stale_reads: Duration::ZERO,
            clock: Arc::new(SystemClock),
        }
    }
}

impl FakeHttpOptions {
    /// Reads the key from `header` (case-insensitive) instead of `Idempotency-Key`.
    #[must_use]
    pub fn key_header(mut self, header: &str) -> Self {
        self.key_header = header.to_ascii_lowercase();
        self
    }

    /// Whether keys are honoured (default true). A provider that ignores them
    /// commits every request it receives.
    #[must_use]
    pub fn honour_keys(mut self, honour: bool) -> Self {
        self.honour_keys = honour;
        self
    }

    /// Lookups miss a charge (`404`) until it is `stale` old on the
    /// provider's clock: an eventually consistent read path.
    #[must_use]
    pub fn stale_reads(mut self, stale: Duration) -> Self {
        self.stale_reads = stale;
        self
    }

    /// The provider's clock (default the system's), which times stale reads;
    /// a [`ManualClock`](effect_core::ManualClock) makes them end when a test says.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// A fake HTTP payment provider serving on loopback until dropped.
#[derive(Debug)]
pub struct FakeHttpProvider {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: watch::Sender<bool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeHttpProvider {
    /// Starts a provider with default options.
    ///
    /// # Errors
    ///
    /// [`FakeHttpError::Start`] when the socket or the runtime cannot be had.
    pub fn start() -> Result<Self, FakeHttpError> {
        FakeHttpProvider::start_with(FakeHttpOptions::default())
    }

    /// Starts a provider with `options`.
    ///
    /// # Errors
    ///
    /// [`FakeHttpError::Start`] when the socket or the runtime cannot be had.
    pub fn start_with(options: FakeHttpOptions) -> Result<Self, FakeHttpError> {
        let start = |source| FakeHttpError::Start { source };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(start)?;
        listener.set_nonblocking(true).map_err(start)?;
        let addr = listener.local_addr().map_err(start)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(start)?;
        let state = Arc::new(State {
            options,
            inner: Mutex::new(Inner::default()),
            changed: Condvar::new(),
        });
        let (shutdown, stop) = watch::channel(false);
        let served = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("fake-http-provider".into())
            .spawn(move || runtime.block_on(serve(listener, served, stop)))
            .map_err(start)?;
        Ok(FakeHttpProvider {
            addr,
            state,
            shutdown,
            thread: Some(thread),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Scripts the fault of the next `POST` that has none yet.
    pub fn push_fault(&self, fault: HttpFault) {
        self.state.lock().faults.push_back(fault);
    }

    /// How many effects the provider committed.
    pub fn committed_count(&self) -> usize {
        self.state.lock().charges.len()
    }

    /// The committed effects, in order.
    pub fn charges(&self) -> Vec<Charge> {
        self.state.lock().charges.clone()
    }

    /// How many answers were replayed under a key.
    pub fn replayed_count(&self) -> usize {
        self.state.lock().replays
    }

    /// Every request received, in order (lookups included).
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.state.lock().requests.clone()
    }

    /// The `POST`s received, in order.
    pub fn posts(&self) -> Vec<SeenRequest> {
        self.requests()
            .into_iter()
            .filter(|request| request.method == "POST")
            .collect()
    }

    /// Blocks until `count` requests are held at a gate
    /// ([`HttpFault::HoldBeforeCommit`]).
    ///
    /// # Panics
    ///
    /// When that does not happen within a minute: the test is broken.
    pub fn wait_until_held(&self, count: usize) {
        self.wait_for(|inner| inner.held >= count, "requests held at the gate");
    }

    /// Blocks until the provider has committed `count` effects.
    ///
    /// # Panics
    ///
    /// When that does not happen within a minute: the test is broken.
    pub fn wait_until_committed(&self, count: usize) {
        self.wait_for(|inner| inner.charges.len() >= count, "committed effects");
    }

    fn wait_for(&self, done: impl Fn(&Inner) -> bool, what: &str) {
        // The bound only ends a broken test; a passing one is woken by the
        // change it waits for.
        #[allow(clippy::disallowed_methods)]
        let until = Instant::now() + CONDITION_BOUND;
        let mut inner = self.state.lock();
        while !done(&inner) {
            #[allow(clippy::disallowed_methods)]
            let left = until.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "the fake HTTP provider never reached the expected {what}"
            );
            inner = self
                .state
                .changed
                .wait_timeout(inner, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for FakeHttpProvider {
    fn drop(&mut self) {
        // Ends stalled requests and the accept loop; the thread then returns.
        self.shutdown.send_replace(true);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Debug)]
struct State {
    options: FakeHttpOptions,
    inner: Mutex<Inner>,
    changed: Condvar,
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Plain data: a panicking holder leaves it whole.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Debug, Default)]
struct Inner {
    faults: VecDeque<HttpFault>,
    charges: Vec<Charge>,
    keys: HashMap<String, KeyEntry>,
    requests: Vec<SeenRequest>,
    replays: usize,
    held: usize,
}

#[derive(Debug, Clone)]
enum KeyEntry {
    InProgress,
    Done { body: Value, answer: Answer },
}

/// A stored answer.
#[derive(Debug, Clone)]
struct Answer {
    status: StatusCode,
    body: Value,
}

type HttpResponse = Response<Full<Bytes>>;

async fn serve(
    listener: std::net::TcpListener,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                connections.spawn(connection(stream, Arc::clone(&state), stop.clone()));
            }
            _ = stop.changed() => break,
        }
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// Serves one connection until it closes, the provider stops, or a
/// [`HttpFault::DropAfterCommit`] asks for it to be dropped.
async fn connection(
    stream: tokio::net::TcpStream,
    state: Arc<State>,
    mut stop: watch::Receiver<bool>,
) {
    let kill = Arc::new(Notify::new());
    let service = {
        let kill = Arc::clone(&kill);
        hyper::service::service_fn(move |request| {
            let state = Arc::clone(&state);
            let kill = Arc::clone(&kill);
            async move { Ok::<_, Infallible>(handle(&state, request, &kill).await) }
        })
    };
    let served = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        // Dropping the connection closes the socket with nothing written.
        () = kill.notified() => {}
        _ = stop.changed() => {}
    }
}

async fn handle(state: &State, request: Request<Incoming>, kill: &Notify) -> HttpResponse {
    let method = request.method().clone();
    let path = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_owned(),
        |p| p.as_str().to_owned(),
    );
    let key = request
        .headers()
        .get(state.options.key_header.as_str())
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => {
            return answer(
                StatusCode::BAD_REQUEST,
                &error_body("invalid_request", "unreadable body"),
            );
        }
    };
    {
        let mut inner = state.lock();
        inner.requests.push(SeenRequest {
            method: method.to_string(),
            path: path.clone(),
            idempotency_key: key.clone(),
        });
    }
    state.changed.notify_all();
    match method {
        Method::GET => lookup(state, &path),
        Method::POST => {
            let body = serde_json::from_slice(&body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
            create(state, key, body, kill).await
        }
        _ => answer(
            StatusCode::METHOD_NOT_ALLOWED,
            &error_body("invalid_request", "method not allowed"),
        ),
    }
}

async fn create(state: &State, key: Option<String>, body: Value, kill: &Notify) -> HttpResponse {
    let key = key.filter(|_| state.options.honour_keys);
    let fault = state.lock().faults.pop_front();
    match &fault {
        Some(HttpFault::RateLimited { retry_after }) => {
            return with_retry_after(
                answer(
                    StatusCode::TOO_MANY_REQUESTS,
                    &error_body("rate_limit", "too many requests"),
                ),
                *retry_after,
            );
        }
        Some(HttpFault::Unavailable { retry_after }) => {
            return with_retry_after(
                answer(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &error_body("api_error", "unavailable"),
                ),
                *retry_after,
            );
        }
        _ => {}
    }
    if let Some(key) = &key {
        let mut inner = state.lock();
        match inner.keys.get(key) {
            Some(KeyEntry::InProgress) => {
                return answer(
                    StatusCode::CONFLICT,
                    &error_body(
                        "idempotency_error",
                        "a request with this key is in progress",
                    ),
                );
            }
            Some(KeyEntry::Done {
                body: stored,
                answer: stored_answer,
            }) if *stored == body => {
                let replay = stored_answer.clone();
                inner.replays += 1;
                drop(inner);
                state.changed.notify_all();
                let mut response = answer(replay.status, &replay.body);
                response
                    .headers_mut()
                    .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
                return response;
            }
            Some(KeyEntry::Done { .. }) => {
                return answer(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    &error_body(
                        "idempotency_error",
                        "this key was used with another request",
                    ),
                );
            }
            None => {
                inner.keys.insert(key.clone(), KeyEntry::InProgress);
            }
        }
    }
    if let Some(HttpFault::Decline { status }) = &fault {
        let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::PAYMENT_REQUIRED);
        let declined = Answer {
            status,
            body: error_body("card_error", "declined"),
        };
        store(state, key.as_deref(), &body, &declined);
        return answer(declined.status, &declined.body);
    }
    if let Some(HttpFault::HoldBeforeCommit(gate)) = &fault {
        state.lock().held += 1;
        state.changed.notify_all();
        gate.wait().await;
        state.lock().held -= 1;
    }
    let committed = commit(state, key.as_deref(), &body);
    match fault {
        Some(HttpFault::DropAfterCommit) => {
            kill.notify_one();
            std::future::pending::<()>().await;
            unreachable_response()
        }
        Some(HttpFault::StallAfterCommit) => {
            // Never answered: the connection is dropped, with nothing
            // written, when the provider stops (`connection`); the client
            // gave up long before. Waking here on the stop would race that
            // drop and could write a response.
            std::future::pending::<()>().await;
            unreachable_response()
        }
        Some(HttpFault::ErrorAfterCommit { status }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            answer(status, &error_body("api_error", "the answer was lost"))
        }
        _ => answer(committed.status, &committed.body),
    }
}

/// Applies the effect and stores its answer under the key.
fn commit(state: &State, key: Option<&str>, body: &Value) -> Answer {
    let now = state.options.clock.now();
    let mut inner = state.lock();
    let id = format!("ch_{:06}", inner.charges.len() + 1);
    inner.charges.push(Charge {
        id: id.clone(),
        idempotency_key: key.map(str::to_owned),
        request: body.clone(),
        committed_at: now,
    });
    let done = Answer {
        status: StatusCode::OK,
        body: charge_body(&id, body),
    };
    if let Some(key) = key {
        inner.keys.insert(
            key.to_owned(),
            KeyEntry::Done {
                body: body.clone(),
                answer: done.clone(),
            },
        );
    }
    drop(inner);
    state.changed.notify_all();
    done
}

fn store(state: &State, key: Option<&str>, body: &Value, stored: &Answer) {
    if let Some(key) = key {
        state.lock().keys.insert(
            key.to_owned(),
            KeyEntry::Done {
                body: body.clone(),
                answer: stored.clone(),
            },
        );
    }
}

fn lookup(state: &State, path: &str) -> HttpResponse {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    if path == "/v1/charges" {
        return list(state, query);
    }
    let Some(rest) = path.strip_prefix("/v1/charges/") else {
        return answer(
            StatusCode::NOT_FOUND,
            &error_body("invalid_request", "no such route"),
        );
    };
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let now = state.options.clock.now();
    let inner = state.lock();
    let found = if let Some(key) = rest.strip_prefix("by-key/") {
        let key = decode(key);
        inner
            .charges
            .iter()
            .find(|charge| charge.idempotency_key.as_deref() == Some(key.as_str()))
    } else if let Some(reference) = rest.strip_prefix("by-reference/") {
        let reference = decode(reference);
        inner
            .charges
            .iter()
            .find(|charge| charge.request["reference"].as_str() == Some(reference.as_str()))
    } else {
        let id = decode(rest);
        inner.charges.iter().find(|charge| charge.id == id)
    };
    let visible = found.filter(|charge| {
        now.duration_since(charge.committed_at).unwrap_or_default() >= state.options.stale_reads
    });
    match visible {
        Some(charge) => answer(StatusCode::OK, &charge_body(&charge.id, &charge.request)),
        None => answer(
            StatusCode::NOT_FOUND,
            &error_body("invalid_request", "no such charge"),
        ),
    }
}

/// `GET /v1/charges?FIELD=VALUE&...`: every visible charge whose request
/// has each `FIELD` equal to `VALUE` (as a string or a number), oldest
/// first, as `{"object": "list", "data": [...]}`.
fn list(state: &State, query: &str) -> HttpResponse {
    let decode = |text: &str| {
        percent_encoding::percent_decode_str(&text.replace('+', " "))
            .decode_utf8_lossy()
            .into_owned()
    };
    let filters: Vec<(String, String)> = query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect();
    let matches = |request: &Value| {
        filters
            .iter()
            .all(|(name, value)| match &request[name.as_str()] {
                Value::String(text) => text == value,
                Value::Number(number) => number.to_string() == *value,
                _ => false,
            })
    };
    let now = state.options.clock.now();
    let inner = state.lock();
    let data: Vec<Value> = inner
        .charges
        .iter()
        .filter(|charge| {
            now.duration_since(charge.committed_at).unwrap_or_default() >= state.options.stale_reads
        })
        .filter(|charge| matches(&charge.request))
        .map(|charge| charge_body(&charge.id, &charge.request))
        .collect();
    answer(StatusCode::OK, &json!({"object": "list", "data": data}))
}

fn charge_body(id: &str, request: &Value) -> Value {
    let mut body = json!({"id": id, "object": "charge", "status": "succeeded"});
    if let (Some(fields), Some(out)) = (request.as_object(), body.as_object_mut()) {
        for (name, value) in fields {
            out.entry(name.clone()).or_insert_with(|| value.clone());
        }
    }
    body
}

fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"type": kind, "message": message}})
}

fn answer(status: StatusCode, body: &Value) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn with_retry_after(mut response: HttpResponse, delay: Duration) -> HttpResponse {
    response
        .headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(delay.as_secs()));
    response
}

/// What a dropped or stalled request "answers" if its connection outlives
/// the fault: never written, since the connection is closed first.
fn unreachable_response() -> HttpResponse {
    answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        &error_body("api_error", "connection closed"),
    )
}

#[cfg(test)]
mod tests;
