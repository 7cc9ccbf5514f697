use std::time::{Duration, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderValue, RETRY_AFTER};

use super::*;

fn response(status: u16, retry_after: Option<&str>) -> HttpResponse {
    let mut headers = HeaderMap::new();
    if let Some(value) = retry_after {
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
    }
    HttpResponse::new(status, headers, "")
}

#[test]
fn default_rules_per_status() {
    let cases = [
        (200, HttpClass::Success),
        (204, HttpClass::Success),
        (301, HttpClass::Unknown),
        (400, HttpClass::Rejected),
        (402, HttpClass::Rejected),
        (404, HttpClass::Rejected),
        (408, HttpClass::Unknown),
        (409, HttpClass::Unknown),
        (422, HttpClass::Rejected),
        (429, HttpClass::Unknown),
        (500, HttpClass::Unknown),
        (502, HttpClass::Unknown),
        (503, HttpClass::Unknown),
    ];
    for (status, class) in cases {
        assert_eq!(
            Classifier::new().classify(&response(status, None)),
            class,
            "{status}"
        );
    }
}

#[test]
fn overrides_and_custom_rules_come_before_the_defaults() {
    let classifier = Classifier::new()
        .status(404, HttpClass::Unknown)
        .with(|r| (r.status() == 200 && r.body().is_empty()).then_some(HttpClass::Unknown));
    assert_eq!(
        classifier.classify(&response(404, None)),
        HttpClass::Unknown
    );
    assert_eq!(
        classifier.classify(&response(200, None)),
        HttpClass::Unknown
    );
    assert_eq!(
        classifier.classify(&HttpResponse::new(200, HeaderMap::new(), "{}")),
        HttpClass::Success
    );
}

#[test]
fn rate_limits_and_unavailability_never_count_as_not_sent() {
    let classifier = Classifier::new()
        .status(429, HttpClass::NotSent)
        .status(503, HttpClass::NotSent)
        .status(500, HttpClass::NotSent);
    assert_eq!(
        classifier.classify(&response(429, Some("1"))),
        HttpClass::Unknown
    );
    assert_eq!(
        classifier.classify(&response(503, Some("1"))),
        HttpClass::Unknown
    );
    assert_eq!(
        classifier.classify(&response(500, None)),
        HttpClass::NotSent,
        "an explicit claim for another status stands"
    );
}

#[test]
fn retry_after_in_seconds_or_as_an_http_date() {
    let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
    assert_eq!(
        retry_after(&response(429, Some("120")), now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(
        retry_after(&response(503, Some("Sun, 06 Nov 1994 08:49:47 GMT")), now),
        Some(Duration::from_secs(10))
    );
    assert_eq!(
        retry_after(&response(503, Some("Sun, 06 Nov 1994 08:49:30 GMT")), now),
        Some(Duration::ZERO),
        "a date in the past asks for no wait"
    );
    assert_eq!(retry_after(&response(429, Some("soon")), now), None);
    assert_eq!(
        retry_after(&response(500, Some("5")), now),
        None,
        "only 429 and 503 ask for a delay"
    );
    assert_eq!(retry_after(&response(429, None), now), None);
}
