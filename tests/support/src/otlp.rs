//! An OTLP/HTTP receiver for the telemetry tests (issue 47): no collector
//! ships in the registries here, so what localagents (and the delegate)
//! export is decoded with the official OpenTelemetry protobuf definitions
//! (`opentelemetry-proto`), from protobuf or OTLP JSON as it came.
//!
//! [`Otlp`] answers 200 to every export; [`hang`] accepts connections and
//! never answers, the collector that must not cost a job.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::metric;
use prost::Message as _;

/// One export as it arrived.
#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    json: bool,
}

/// A span, flattened: ids in lowercase hex, attribute values as text
/// (`123`, `a`, `[end_turn]`).
#[derive(Debug, Clone)]
pub struct Span {
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    /// 1 internal, 3 client.
    pub kind: i32,
    pub attrs: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    /// 2: error.
    pub status_code: i32,
}

/// A metric's data points: its attributes and its sum (a counter's value,
/// a histogram's sum) and count (a histogram's).
#[derive(Debug, Clone)]
pub struct Point {
    pub metric: String,
    pub attrs: BTreeMap<String, String>,
    pub resource: BTreeMap<String, String>,
    pub sum: f64,
    pub count: u64,
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::ArrayValue(a)) => format!(
            "[{}]",
            a.values
                .iter()
                .map(|v| text(&Some(v.clone())))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        _ => String::new(),
    }
}

fn attrs(kv: &[KeyValue]) -> BTreeMap<String, String> {
    kv.iter().map(|k| (k.key.clone(), text(&k.value))).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Received {
    fn traces(&self) -> Option<ExportTraceServiceRequest> {
        if self.json {
            serde_json::from_slice(&self.body).ok()
        } else {
            ExportTraceServiceRequest::decode(self.body.as_slice()).ok()
        }
    }

    fn metrics(&self) -> Option<ExportMetricsServiceRequest> {
        if self.json {
            serde_json::from_slice(&self.body).ok()
        } else {
            ExportMetricsServiceRequest::decode(self.body.as_slice()).ok()
        }
    }
}

#[derive(Default)]
struct Inner {
    received: Mutex<Vec<Received>>,
}

/// A receiver on 127.0.0.1 that takes every export.
pub struct Otlp {
    url: String,
    inner: Arc<Inner>,
    _server: tokio::task::JoinHandle<()>,
}

async fn take(
    State(st): State<Arc<Inner>>,
    uri: Uri,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> &'static str {
    let json = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("json"));
    let r = Received {
        path: uri.path().to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect(),
        body: body.to_vec(),
        json,
    };
    st.received.lock().unwrap().push(r);
    // An empty Export*ServiceResponse, in either encoding.
    if json { "{}" } else { "" }
}

impl Otlp {
    /// On a free port of 127.0.0.1.
    pub async fn spawn() -> Otlp {
        Otlp::on(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
    }

    /// On `listener` (a test of the default port binds 4318 itself).
    pub fn on(listener: tokio::net::TcpListener) -> Otlp {
        let url = format!("http://{}", listener.local_addr().unwrap());
        let inner = Arc::new(Inner::default());
        let app = axum::Router::new()
            .fallback(axum::routing::post(take))
            .with_state(inner.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Otlp {
            url,
            inner,
            _server: server,
        }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn received(&self) -> Vec<Received> {
        self.inner.received.lock().unwrap().clone()
    }

    /// Every span received, in order.
    pub fn spans(&self) -> Vec<Span> {
        let mut out = Vec::new();
        for r in self.received().iter().filter(|r| r.path == "/v1/traces") {
            let Some(req) = r.traces() else { continue };
            for rs in req.resource_spans {
                let resource = rs
                    .resource
                    .as_ref()
                    .map(|r| attrs(&r.attributes))
                    .unwrap_or_default();
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        out.push(Span {
                            name: s.name.clone(),
                            trace_id: hex(&s.trace_id),
                            span_id: hex(&s.span_id),
                            parent_span_id: hex(&s.parent_span_id),
                            kind: s.kind,
                            attrs: attrs(&s.attributes),
                            resource: resource.clone(),
                            status_code: s.status.as_ref().map_or(0, |st| st.code),
                        });
                    }
                }
            }
        }
        out
    }

    /// Every data point of every metric received, in order.
    pub fn points(&self) -> Vec<Point> {
        let mut out = Vec::new();
        for r in self.received().iter().filter(|r| r.path == "/v1/metrics") {
            let Some(req) = r.metrics() else { continue };
            for rm in req.resource_metrics {
                let resource = rm
                    .resource
                    .as_ref()
                    .map(|r| attrs(&r.attributes))
                    .unwrap_or_default();
                for sm in rm.scope_metrics {
                    for m in sm.metrics {
                        let points: Vec<(BTreeMap<String, String>, f64, u64)> = match &m.data {
                            Some(metric::Data::Sum(s)) => s
                                .data_points
                                .iter()
                                .map(|p| {
                                    let v = match p.value {
                                        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsInt(i)) => i as f64,
                                        Some(opentelemetry_proto::tonic::metrics::v1::number_data_point::Value::AsDouble(d)) => d,
                                        None => 0.0,
                                    };
                                    (attrs(&p.attributes), v, 1)
                                })
                                .collect(),
                            Some(metric::Data::Histogram(h)) => h
                                .data_points
                                .iter()
                                .map(|p| (attrs(&p.attributes), p.sum.unwrap_or(0.0), p.count))
                                .collect(),
                            _ => Vec::new(),
                        };
                        for (attrs, sum, count) in points {
                            out.push(Point {
                                metric: m.name.clone(),
                                attrs,
                                resource: resource.clone(),
                                sum,
                                count,
                            });
                        }
                    }
                }
            }
        }
        out
    }
}

/// A "collector" on 127.0.0.1 that accepts connections and reads what is
/// sent, but never answers. Returns its URL; it lives as long as the task.
pub async fn hang() -> (String, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncReadExt as _;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut s, _)) = l.accept().await {
            held.push(tokio::spawn(async move {
                let mut buf = [0u8; 8192];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                // Never written to: the client waits for an answer.
                std::future::pending::<()>().await;
            }));
        }
    });
    (url, task)
}
