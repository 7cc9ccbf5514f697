//! An OTLP/HTTP receiver on loopback: hyper serving `/v1/traces` and
//! `/v1/metrics`, decoding each protobuf payload with opentelemetry-proto
//! and keeping the raw bytes too (for the byte-wise secret check).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;

/// What the receiver was sent.
#[derive(Debug, Default)]
struct Received {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
    /// Every request body, as sent.
    bodies: Vec<Vec<u8>>,
}

/// The receiver, running until the test process ends.
#[derive(Debug, Clone)]
pub struct Receiver {
    pub endpoint: String,
    received: Arc<Mutex<Received>>,
}

/// One span, flattened.
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: Vec<u8>,
    pub span_id: Vec<u8>,
    pub parent_span_id: Vec<u8>,
    pub attributes: BTreeMap<String, String>,
    /// Linked spans, as (trace id, span id).
    pub links: Vec<(Vec<u8>, Vec<u8>)>,
    /// The OTLP status code (2 = error).
    pub status_code: i32,
    pub scope_schema_url: String,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

/// One metric point: a sum's value, or a histogram's count.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub name: String,
    pub attributes: BTreeMap<String, String>,
    pub value: f64,
}

impl Receiver {
    /// Starts serving on a loopback port, on a runtime of its own.
    pub fn start() -> Receiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::clone(&received);
        std::thread::spawn(move || {
            runtime.block_on(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let state = Arc::clone(&state);
                    tokio::spawn(async move {
                        let service =
                            service_fn(move |request| handle(request, Arc::clone(&state)));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Receiver { endpoint, received }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        let received = self.received.lock().unwrap();
        let mut spans = Vec::new();
        for request in &received.traces {
            for resource in &request.resource_spans {
                for scope in &resource.scope_spans {
                    for span in &scope.spans {
                        spans.push(Span {
                            name: span.name.clone(),
                            trace_id: span.trace_id.clone(),
                            span_id: span.span_id.clone(),
                            parent_span_id: span.parent_span_id.clone(),
                            attributes: attributes(&span.attributes),
                            links: span
                                .links
                                .iter()
                                .map(|link| (link.trace_id.clone(), link.span_id.clone()))
                                .collect(),
                            status_code: span.status.as_ref().map_or(0, |status| status.code),
                            scope_schema_url: scope.schema_url.clone(),
                        });
                    }
                }
            }
        }
        spans
    }

    /// The latest value of every metric point (the export is cumulative):
    /// a sum's value, a histogram's count.
    pub fn points(&self) -> Vec<Point> {
        let received = self.received.lock().unwrap();
        let mut latest: BTreeMap<(String, BTreeMap<String, String>), f64> = BTreeMap::new();
        for request in &received.metrics {
            for resource in &request.resource_metrics {
                for scope in &resource.scope_metrics {
                    for metric in &scope.metrics {
                        let mut put = |attrs: &[KeyValue], value: f64| {
                            latest.insert((metric.name.clone(), attributes(attrs)), value);
                        };
                        match &metric.data {
                            Some(metric::Data::Sum(sum)) => {
                                for point in &sum.data_points {
                                    #[allow(clippy::cast_precision_loss)]
                                    let value = match point.value {
                                        Some(number_data_point::Value::AsInt(n)) => n as f64,
                                        Some(number_data_point::Value::AsDouble(x)) => x,
                                        None => 0.0,
                                    };
                                    put(&point.attributes, value);
                                }
                            }
                            Some(metric::Data::Histogram(histogram)) => {
                                for point in &histogram.data_points {
                                    #[allow(clippy::cast_precision_loss)]
                                    put(&point.attributes, point.count as f64);
                                }
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        latest
            .into_iter()
            .map(|((name, attributes), value)| Point {
                name,
                attributes,
                value,
            })
            .collect()
    }

    /// True when some request body holds `needle`, byte for byte.
    pub fn bytes_contain(&self, needle: &[u8]) -> bool {
        self.received
            .lock()
            .unwrap()
            .bodies
            .iter()
            .any(|body| body.windows(needle.len()).any(|window| window == needle))
    }

    /// How many request bodies were received.
    pub fn requests(&self) -> usize {
        self.received.lock().unwrap().bodies.len()
    }
}

async fn handle(
    request: Request<Incoming>,
    state: Arc<Mutex<Received>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let Ok(body) = request.into_body().collect().await else {
        return Ok(status(StatusCode::BAD_REQUEST));
    };
    let body = body.to_bytes();
    let mut received = state.lock().unwrap();
    let decoded = match path.as_str() {
        "/v1/traces" => ExportTraceServiceRequest::decode(body.clone())
            .map(|request| received.traces.push(request))
            .is_ok(),
        "/v1/metrics" => ExportMetricsServiceRequest::decode(body.clone())
            .map(|request| received.metrics.push(request))
            .is_ok(),
        _ => false,
    };
    received.bodies.push(body.to_vec());
    if !decoded {
        return Ok(status(StatusCode::BAD_REQUEST));
    }
    // An empty export response (all accepted) is an empty protobuf message.
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::new()))
        .unwrap())
}

fn status(code: StatusCode) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn attributes(attributes: &[KeyValue]) -> BTreeMap<String, String> {
    attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(text).unwrap_or_default(),
            )
        })
        .collect()
}

fn text(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}
