//! The fake provider's key semantics and faults, over raw HTTP/1.1.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use effect_core::ManualClock;

use super::*;

/// What a raw client saw: the status line's code, the headers (lowercase)
/// and the body, or `None` when the connection closed without an answer.
#[derive(Debug)]
struct Seen {
    status: u16,
    headers: Vec<(String, String)>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn send(
    provider: &FakeHttpProvider,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: &str,
) -> Option<Seen> {
    let mut stream = TcpStream::connect(provider.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let key = key
        .map(|k| format!("Idempotency-Key: {k}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{key}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8(raw).unwrap();
    if text.is_empty() {
        return None;
    }
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|line| line.split_once(": "))
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_owned()))
        .collect();
    Some(Seen {
        status,
        headers,
        body: serde_json::from_str(body).unwrap(),
    })
}

fn post(provider: &FakeHttpProvider, key: Option<&str>, body: &str) -> Option<Seen> {
    send(provider, "POST", "/v1/charges", key, body)
}

#[test]
fn same_key_same_body_replays_the_stored_answer() {
    let provider = FakeHttpProvider::start().unwrap();
    let first = post(&provider, Some("k1"), r#"{"amount": 100}"#).unwrap();
    let again = post(&provider, Some("k1"), r#"{"amount": 100}"#).unwrap();
    assert_eq!((first.status, again.status), (200, 200));
    assert_eq!(first.body["id"], "ch_000001");
    assert_eq!(first.body["amount"], 100);
    assert_eq!(again.body, first.body);
    assert_eq!(first.header(REPLAYED_HEADER), None);
    assert_eq!(again.header(REPLAYED_HEADER), Some("true"));
    assert_eq!(provider.committed_count(), 1);
    assert_eq!(provider.replayed_count(), 1);
}

#[test]
fn same_key_other_body_is_refused_with_422_and_commits_nothing() {
    let provider = FakeHttpProvider::start().unwrap();
    post(&provider, Some("k1"), r#"{"amount": 100}"#).unwrap();
    let other = post(&provider, Some("k1"), r#"{"amount": 999}"#).unwrap();
    assert_eq!(other.status, 422);
    assert_eq!(other.body["error"]["type"], "idempotency_error");
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn without_a_key_or_with_keys_ignored_every_post_commits() {
    let provider = FakeHttpProvider::start().unwrap();
    post(&provider, None, r#"{"amount": 1}"#).unwrap();
    post(&provider, None, r#"{"amount": 1}"#).unwrap();
    assert_eq!(provider.committed_count(), 2);
    let careless =
        FakeHttpProvider::start_with(FakeHttpOptions::default().honour_keys(false)).unwrap();
    post(&careless, Some("k"), r#"{"amount": 1}"#).unwrap();
    post(&careless, Some("k"), r#"{"amount": 1}"#).unwrap();
    assert_eq!(careless.committed_count(), 2);
}

#[test]
fn a_key_in_progress_answers_409_until_the_first_request_commits() {
    let provider = Arc::new(FakeHttpProvider::start().unwrap());
    let gate = Gate::new();
    provider.push_fault(HttpFault::HoldBeforeCommit(gate.clone()));
    let first = {
        let provider = Arc::clone(&provider);
        std::thread::spawn(move || post(&provider, Some("k1"), r#"{"amount": 5}"#))
    };
    provider.wait_until_held(1);
    let concurrent = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(concurrent.status, 409);
    assert_eq!(provider.committed_count(), 0);
    gate.open();
    let first = first.join().unwrap().unwrap();
    assert_eq!(first.status, 200);
    assert_eq!(provider.committed_count(), 1);
    let after = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(after.header(REPLAYED_HEADER), Some("true"));
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn drop_after_commit_closes_the_connection_with_nothing_written() {
    let provider = FakeHttpProvider::start().unwrap();
    provider.push_fault(HttpFault::DropAfterCommit);
    assert!(post(&provider, Some("k1"), r#"{"amount": 5}"#).is_none());
    assert_eq!(provider.committed_count(), 1);
    let retry = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(retry.header(REPLAYED_HEADER), Some("true"));
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn error_after_commit_answers_the_5xx_and_replays_the_success() {
    let provider = FakeHttpProvider::start().unwrap();
    provider.push_fault(HttpFault::ErrorAfterCommit { status: 502 });
    assert_eq!(
        post(&provider, Some("k1"), r#"{"amount": 5}"#)
            .unwrap()
            .status,
        502
    );
    assert_eq!(provider.committed_count(), 1);
    let retry = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(
        (retry.status, retry.header(REPLAYED_HEADER)),
        (200, Some("true"))
    );
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn rate_limits_and_unavailability_store_nothing_under_the_key() {
    let provider = FakeHttpProvider::start().unwrap();
    provider.push_fault(HttpFault::RateLimited {
        retry_after: Duration::from_secs(2),
    });
    provider.push_fault(HttpFault::Unavailable {
        retry_after: Duration::from_secs(3),
    });
    let limited = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(
        (limited.status, limited.header("retry-after")),
        (429, Some("2"))
    );
    let unavailable = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(
        (unavailable.status, unavailable.header("retry-after")),
        (503, Some("3"))
    );
    assert_eq!(provider.committed_count(), 0);
    let then = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!((then.status, then.header(REPLAYED_HEADER)), (200, None));
    assert_eq!(provider.committed_count(), 1);
}

#[test]
fn a_decline_commits_nothing_and_is_replayed() {
    let provider = FakeHttpProvider::start().unwrap();
    provider.push_fault(HttpFault::Decline { status: 402 });
    assert_eq!(
        post(&provider, Some("k1"), r#"{"amount": 5}"#)
            .unwrap()
            .status,
        402
    );
    let again = post(&provider, Some("k1"), r#"{"amount": 5}"#).unwrap();
    assert_eq!(
        (again.status, again.header(REPLAYED_HEADER)),
        (402, Some("true"))
    );
    assert_eq!(provider.committed_count(), 0);
}

#[test]
fn lookups_by_key_and_id_miss_until_the_stale_window_passes() {
    let clock = Arc::new(ManualClock::new(
        std::time::UNIX_EPOCH + Duration::from_secs(1_000),
    ));
    let provider = FakeHttpProvider::start_with(
        FakeHttpOptions::default()
            .stale_reads(Duration::from_millis(500))
            .clock(clock.clone()),
    )
    .unwrap();
    post(
        &provider,
        Some("capture:INV 1"),
        r#"{"amount": 5, "reference": "r-1"}"#,
    )
    .unwrap();
    let by_key = "/v1/charges/by-key/capture:INV%201";
    assert_eq!(
        send(&provider, "GET", by_key, None, "").unwrap().status,
        404
    );
    assert_eq!(
        send(&provider, "GET", "/v1/charges/ch_000001", None, "")
            .unwrap()
            .status,
        404
    );
    clock.advance(Duration::from_millis(500));
    let found = send(&provider, "GET", by_key, None, "").unwrap();
    assert_eq!(
        (found.status, found.body["id"].as_str()),
        (200, Some("ch_000001"))
    );
    assert_eq!(
        send(&provider, "GET", "/v1/charges/ch_000001", None, "")
            .unwrap()
            .status,
        200
    );
    assert_eq!(
        send(&provider, "GET", "/v1/charges/ch_000002", None, "")
            .unwrap()
            .status,
        404
    );
    assert_eq!(provider.committed_count(), 1);
    assert_eq!(provider.requests().len(), 6);
    assert_eq!(provider.posts().len(), 1);
}

#[test]
fn a_stalled_request_is_released_when_the_provider_stops() {
    let provider = FakeHttpProvider::start().unwrap();
    provider.push_fault(HttpFault::StallAfterCommit);
    let addr = provider.addr();
    let client = std::thread::spawn(move || {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .write_all(b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            .unwrap();
        let mut raw = Vec::new();
        let _ = stream.read_to_end(&mut raw);
        raw
    });
    provider.wait_until_committed(1);
    drop(provider);
    assert!(
        client.join().unwrap().is_empty(),
        "a stalled request is never answered"
    );
}

#[test]
fn the_list_route_filters_charges_by_request_fields() {
    let provider =
        FakeHttpProvider::start_with(FakeHttpOptions::default().honour_keys(false)).unwrap();
    for body in [
        r#"{"invoice_id":"INV 1","amount":5}"#,
        r#"{"invoice_id":"INV 1","amount":6}"#,
        r#"{"invoice_id":"INV-2","amount":5}"#,
    ] {
        assert_eq!(post(&provider, Some("k"), body).unwrap().status, 200);
    }
    let ids = |query: &str| -> Vec<String> {
        let seen = send(&provider, "GET", &format!("/v1/charges{query}"), None, "").unwrap();
        assert_eq!(seen.status, 200);
        seen.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|charge| charge["id"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids("?invoice_id=INV%201"), ["ch_000001", "ch_000002"]);
    assert_eq!(ids("?invoice_id=INV+1&amount=6"), ["ch_000002"]);
    assert_eq!(ids("?amount=5"), ["ch_000001", "ch_000003"]);
    assert_eq!(ids("?invoice_id=INV-3"), Vec::<String>::new());
    assert_eq!(ids("").len(), 3);
    assert_eq!(provider.committed_count(), 3);
}
