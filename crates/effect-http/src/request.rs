//! [`HttpRequest`] and [`HttpResponse`]: what a handler sends and what the
//! provider answered, the same for the sync and the async client.

use reqwest::Method;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde::Serialize;
use serde_json::Value;

/// A request to send as an effect. The provider key header is added by
/// [`HttpEffect`](crate::HttpEffect) on every attempt; a value set here
/// under that name is replaced.
///
/// ```
/// use effect_http::HttpRequest;
/// use serde_json::json;
///
/// let request = HttpRequest::post("http://127.0.0.1:9/v1/charges")
///     .header("Authorization", "Bearer sk_test")
///     .json(&json!({"amount": 1250, "currency": "eur"}));
/// assert_eq!(request.method().as_str(), "POST");
/// assert_eq!(request.body(), Some(br#"{"amount":1250,"currency":"eur"}"#.as_slice()));
/// ```
#[derive(Debug, Clone)]
pub struct HttpRequest {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<Result<Vec<u8>, String>>,
}

impl HttpRequest {
    /// A request with `method` to `url`.
    pub fn new(method: Method, url: impl Into<String>) -> Self {
        HttpRequest {
            method,
            url: url.into(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// A `GET`.
    pub fn get(url: impl Into<String>) -> Self {
        HttpRequest::new(Method::GET, url)
    }

    /// A `POST`.
    pub fn post(url: impl Into<String>) -> Self {
        HttpRequest::new(Method::POST, url)
    }

    /// A `PUT`.
    pub fn put(url: impl Into<String>) -> Self {
        HttpRequest::new(Method::PUT, url)
    }

    /// A `DELETE`.
    pub fn delete(url: impl Into<String>) -> Self {
        HttpRequest::new(Method::DELETE, url)
    }

    /// Adds a header. An invalid name or value makes the request fail as
    /// not sent.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets a JSON body and `Content-Type: application/json`. A value that
    /// cannot be serialized makes the request fail as not sent.
    #[must_use]
    pub fn json<T: Serialize + ?Sized>(mut self, body: &T) -> Self {
        self.body = Some(serde_json::to_vec(body).map_err(|err| err.to_string()));
        self.header("content-type", "application/json")
    }

    /// Sets a raw body.
    #[must_use]
    pub fn body_bytes(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = Some(Ok(body.into()));
        self
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.method
    }

    /// The URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The body, when it has one that could be built.
    pub fn body(&self) -> Option<&[u8]> {
        match &self.body {
            Some(Ok(body)) => Some(body),
            _ => None,
        }
    }

    /// The headers as sent: the request's own, `key_header` set to `key`
    /// (replacing any the request set) when there is a key. An error names
    /// what cannot be sent.
    pub(crate) fn header_map(
        &self,
        key_header: &HeaderName,
        key: Option<&str>,
    ) -> Result<HeaderMap, String> {
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{name:?} is not a valid header name"))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| format!("the value of header {name} is not a valid header value"))?;
            headers.append(name, value);
        }
        if let Some(key) = key {
            let value = HeaderValue::from_str(key).map_err(|_| {
                "the provider idempotency key is not a valid header value".to_owned()
            })?;
            headers.insert(key_header.clone(), value);
        }
        Ok(headers)
    }

    /// The body to send, or why it cannot be built.
    pub(crate) fn body_to_send(&self) -> Result<Option<Vec<u8>>, String> {
        match &self.body {
            None => Ok(None),
            Some(Ok(body)) => Ok(Some(body.clone())),
            Some(Err(err)) => Err(format!("the request body cannot be serialized: {err}")),
        }
    }
}

/// What the provider answered: status, headers and the whole body.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl HttpResponse {
    /// A response, for a classifier's or a probe's tests.
    pub fn new(status: u16, headers: HeaderMap, body: impl Into<Vec<u8>>) -> Self {
        HttpResponse {
            status,
            headers,
            body: body.into(),
        }
    }

    /// The status code.
    pub fn status(&self) -> u16 {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// A header's value, when present and text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    /// The body's bytes.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body as JSON, or as a JSON string when it is not JSON (`null`
    /// when it is empty).
    pub fn json(&self) -> Value {
        if self.body.is_empty() {
            return Value::Null;
        }
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&self.body).into_owned()))
    }
}
