//! The console in-process: its router called with requests as a browser or
//! a script would send them, on a ledger seeded as agents would.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_effect_ops::{Console, ConsoleConfig};
use axum::body::Body;
use axum::extract::connect_info::ConnectInfo;
use axum::http::{HeaderMap, Request};
use effect_core::{
    Claim, Clock, EffectLedger, EffectLedgerExt as _, Evidence, NewOperation, RequestFingerprint,
    SystemClock,
};
use effect_ledger_sqlite::{SqliteLedger, SqliteOptions};
use http_body_util::BodyExt as _;
use production_agent_systems::open::LedgerUrl;
use serde_json::{Value, json};
use tempfile::TempDir;
use tower::ServiceExt as _;

/// A token and its hash line, for the tokens file.
pub const OPERATOR_TOKEN: &str = "op-token-6f1d2c";
pub const APPROVER_TOKEN: &str = "approver-token-91ab";

/// The quarantined capture of the incident, as the scenario names it.
pub const CAPTURE: &str = "invoice:INV-1042:capture";
/// A refund awaiting approval, with its amount in its stored intent.
pub const REFUND: &str = "refund:INV-1042";

/// A console on a fresh ledger.
pub struct Site {
    /// Holds the ledger's directory until the site is dropped.
    _dir: TempDir,
    pub console: Console,
    pub runtime: tokio::runtime::Runtime,
    /// The address requests come from.
    pub peer: SocketAddr,
}

/// What the console answered.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap())
            .unwrap_or("")
    }
}

/// The tokens file a configuration names.
pub fn tokens_file(dir: &Path) -> PathBuf {
    let path = dir.join("console-tokens");
    let line = |token: &str, who: &str, role: &str| {
        format!("sha256:{} {who} {role}\n", sha256_hex(token.as_bytes()))
    };
    std::fs::write(
        &path,
        format!(
            "# console tokens\n{}{}",
            line(OPERATOR_TOKEN, "alice@example.com", "operator"),
            line(APPROVER_TOKEN, "bob@example.com", "approver")
        ),
    )
    .unwrap();
    path
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A SQLite ledger seeded by [`seed`].
pub fn sqlite_ledger() -> (TempDir, LedgerUrl, Arc<dyn EffectLedger>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("effects.sqlite3");
    let ledger: Arc<dyn EffectLedger> =
        Arc::new(SqliteLedger::open(&path, SqliteOptions::default()).unwrap());
    seed(ledger.as_ref());
    (dir, LedgerUrl::Sqlite(path), ledger)
}

/// The incident: a quarantined capture, and a refund awaiting approval
/// whose stored intent holds its amount.
pub fn seed(ledger: &dyn EffectLedger) {
    quarantined(ledger, CAPTURE, "capture_payment");
    let refund = json!({"invoice_id": "INV-1042", "amount_cents": 1250, "currency": "EUR"});
    ledger
        .prepare(
            REFUND,
            &NewOperation::new("refund_payment", "1", RequestFingerprint::of_value(&refund))
                .with_provider_idempotency_key(Some("refund-key-INV-1042".into()))
                .with_intent(Some(refund))
                .with_requires_approval(true),
        )
        .unwrap();
}

/// Prepares, dispatches and quarantines `id`, as an interrupted dispatch
/// without probe or key ends.
pub fn quarantined(ledger: &dyn EffectLedger, id: &str, contract: &str) {
    quarantined_with(ledger, id, contract, false);
}

/// As [`quarantined`]; with `handler_may_run`, the evidence says a previous
/// handler may still be running (a missed deadline).
pub fn quarantined_with(
    ledger: &dyn EffectLedger,
    id: &str,
    contract: &str,
    handler_may_run: bool,
) {
    ledger
        .prepare(
            id,
            &NewOperation::new(
                contract,
                "1",
                RequestFingerprint::of_value(&json!({"id": id})),
            ),
        )
        .unwrap();
    let claim = Claim::new(format!("owner-{id}"), Duration::from_secs(30));
    assert!(ledger.claim_dispatch(id, &claim).unwrap());
    let mut evidence = Evidence::new();
    evidence.insert("dispatch_interruption".into(), "handler_exception".into());
    if handler_may_run {
        evidence.insert("handler_may_still_be_running".into(), true.into());
    }
    ledger
        .mark_outcome_unknown(
            id,
            Some(&claim.owner_token),
            "timed out waiting for the provider's acknowledgement",
            &evidence,
        )
        .unwrap();
    ledger
        .quarantine(
            id,
            "no authoritative outcome probe or provider idempotency guarantee is available",
            &evidence,
        )
        .unwrap();
}

impl Site {
    /// A console on `db` with the configuration `toml` (tokens file at
    /// `{tokens}`).
    pub fn new(dir: TempDir, db: LedgerUrl, toml: &str) -> Site {
        let tokens = tokens_file(dir.path());
        let text = toml.replace("{tokens}", tokens.to_str().unwrap());
        let config = ConsoleConfig::parse(&text).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let console = Console::new(&db, false, config, clock).unwrap();
        Site {
            _dir: dir,
            console,
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap(),
            peer: "127.0.0.1:50000".parse().unwrap(),
        }
    }

    pub fn send(&self, request: Request<Body>) -> Reply {
        let mut request = request;
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let router = self.console.router();
        self.runtime.block_on(async move {
            let response = router.oneshot(request).await.unwrap();
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let bytes = response.into_body().collect().await.unwrap().to_bytes();
            Reply {
                status,
                headers,
                body: String::from_utf8(bytes.to_vec()).unwrap(),
            }
        })
    }

    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::get(path);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request.body(Body::empty()).unwrap())
    }

    pub fn post(&self, path: &str, form: &[(&str, &str)], headers: &[(&str, &str)]) -> Reply {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut request =
            Request::post(path).header("content-type", "application/x-www-form-urlencoded");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request.body(Body::from(body)).unwrap())
    }

    /// Signs in with `token`: the session cookie header to send.
    pub fn login(&self, token: &str) -> String {
        let reply = self.post("/login", &[("token", token)], &[]);
        assert_eq!(reply.status, 303, "{reply:?}");
        let cookie = reply.header("set-cookie");
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        cookie.split(';').next().unwrap().to_owned()
    }

    /// The CSRF token in a page's forms.
    pub fn csrf(&self, page: &str) -> String {
        let at = page
            .find("name=\"csrf\" value=\"")
            .expect("a form with a CSRF token");
        let rest = &page[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }

    /// Serves the console on a loopback port, for clients that need a
    /// socket (the live stream, the browser).
    pub fn listen(&self) -> SocketAddr {
        let router = self.console.router();
        self.runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap();
            tokio::spawn(async move {
                axum::serve(
                    listener,
                    router.into_make_service_with_connect_info::<SocketAddr>(),
                )
                .await
                .unwrap();
            });
            address
        })
    }
}

/// Percent-encodes a form value.
pub fn enc(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The events of `id`, from a handle of the test's own.
pub fn events(ledger: &dyn EffectLedger, id: &str) -> Vec<(String, Value)> {
    ledger
        .events(id)
        .unwrap()
        .into_iter()
        .map(|e| (e.event_type, e.data))
        .collect()
}

/// Opens `/live` on `address` and returns a reader positioned after the
/// response headers.
pub fn live(address: SocketAddr, headers: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(address).unwrap();
    // A bound on a broken stream, not a wait: the test waits for an event.
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET /live HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n{headers}\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            return reader;
        }
    }
}

/// Reads the stream until an event `ledger` arrives; returns its sequence.
pub fn next_ledger_event(reader: &mut BufReader<TcpStream>) -> u64 {
    let mut line = String::new();
    let mut is_ledger = false;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).unwrap();
        assert!(read > 0, "the live stream ended");
        let text = line.trim();
        // Chunked transfer: chunk sizes are lines of their own; skip them.
        if text == "event: ledger" {
            is_ledger = true;
        } else if let Some(data) = text.strip_prefix("data: ")
            && is_ledger
        {
            return data.parse().unwrap();
        }
    }
}
