//! Telemetry: jobs and their backend requests as OpenTelemetry spans and
//! metrics in the user's own collector, beside Claude Code's telemetry.
//!
//! Off by default; on by the standard switches ([`settings`]). What is
//! exported follows the OpenTelemetry GenAI semantic conventions as of
//! semconv **1.42.0** ([`semconv`]): a job is an `invoke_agent <agent>`
//! span, each `/v1/messages` request a `chat <model>` CLIENT span under it
//! (or under the delegate's own span, when Claude Code sends a
//! `traceparent`), and the metrics `gen_ai.client.token.usage`,
//! `gen_ai.client.operation.duration`,
//! `gen_ai.client.operation.time_to_first_chunk` and three counters of
//! ours. No job id on a metric: it would multiply their series.
//!
//! Spans are made when what they describe has ended, from the shim's
//! request record and the job's final record, with the ids chosen when it
//! began: the request span's id is known before the request goes out, so
//! its `traceparent` reaches the backend (vLLM reads it). The SDK picks
//! ids itself, so ours reach it through [`ids::Chosen`].
//!
//! Telemetry never costs a job: the SDK's batch queue is bounded (2048
//! spans; a full queue drops), exports run on the SDK's own threads, and
//! [`shutdown`] waits at most its bound (2 s for a CLI command) for a
//! collector that does not answer.

pub mod check;
pub mod ids;
pub mod semconv;
pub mod settings;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

use crate::wire::{RequestRecord, SpanIds};
use opentelemetry::trace::{SpanId, TraceId};
pub use settings::{Resolved, Settings};

/// How long a CLI command waits at exit for its telemetry to be sent.
pub const FLUSH_BOUND: Duration = Duration::from_secs(2);

/// The instruments of one process.
#[derive(Debug)]
struct Instruments {
    tokens: Histogram<u64>,
    duration: Histogram<f64>,
    first_chunk: Histogram<f64>,
    jobs: Counter<u64>,
    slot_losses: Counter<u64>,
    runaways: Counter<u64>,
}

/// This process's exporters: spans, metrics, or both.
#[derive(Debug)]
pub struct Telemetry {
    tracer: Option<(SdkTracerProvider, SdkTracer)>,
    meters: Option<(SdkMeterProvider, Instruments)>,
    settings: Settings,
}

/// Why the exporters could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the OTLP {signal} exporter ({why})")]
pub struct SetupError {
    signal: &'static str,
    why: String,
}

fn exporter_headers(s: &settings::Signal) -> std::collections::HashMap<String, String> {
    s.headers
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().to_string()))
        .collect()
}

fn protocol(s: &settings::Signal) -> opentelemetry_otlp::Protocol {
    match s.protocol {
        settings::Protocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        settings::Protocol::HttpJson => opentelemetry_otlp::Protocol::HttpJson,
    }
}

fn resource(s: &Settings) -> opentelemetry_sdk::Resource {
    opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(s.service_name.clone())
        .with_attributes(
            s.resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        )
        .build()
}

/// An OTLP/HTTP exporter of `$kind` (the span and metric exporters have
/// the same builder, of two types) for `$sig`.
macro_rules! otlp_http {
    ($kind:path, $sig:expr, $signal:literal) => {{
        use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
        let sig: &settings::Signal = $sig;
        <$kind>::builder()
            .with_http()
            .with_protocol(protocol(sig))
            .with_endpoint(sig.url.clone())
            .with_timeout(Duration::from_millis(sig.timeout_ms))
            .with_headers(exporter_headers(sig))
            .build()
            .map_err(|e| SetupError {
                signal: $signal,
                why: e.to_string(),
            })
    }};
}

fn tracer(s: &Settings, sig: &settings::Signal) -> Result<(SdkTracerProvider, SdkTracer), SetupError> {
    let exporter = otlp_http!(opentelemetry_otlp::SpanExporter, sig, "traces")?;
    let batch = opentelemetry_sdk::trace::BatchSpanProcessor::builder(exporter)
        .with_batch_config(
            opentelemetry_sdk::trace::BatchConfigBuilder::default()
                .with_max_queue_size(2048)
                .build(),
        )
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(batch)
        .with_id_generator(ids::Chosen::default())
        .with_resource(resource(s))
        .build();
    let tracer = provider.tracer("localagents");
    Ok((provider, tracer))
}

fn meters(s: &Settings, sig: &settings::Signal) -> Result<(SdkMeterProvider, Instruments), SetupError> {
    let exporter = otlp_http!(opentelemetry_otlp::MetricExporter, sig, "metrics")?;
    let reader = opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource(s))
        .build();
    let m = provider.meter("localagents");
    let i = Instruments {
        tokens: m
            .u64_histogram(semconv::TOKEN_USAGE)
            .with_unit("{token}")
            .with_description("Number of input and output tokens used")
            .with_boundaries(semconv::TOKEN_BUCKETS.to_vec())
            .build(),
        duration: m
            .f64_histogram(semconv::OPERATION_DURATION)
            .with_unit("s")
            .with_description("GenAI operation duration")
            .with_boundaries(semconv::DURATION_BUCKETS.to_vec())
            .build(),
        first_chunk: m
            .f64_histogram(semconv::TIME_TO_FIRST_CHUNK)
            .with_unit("s")
            .with_description("Time to the first chunk of a streamed answer")
            .with_boundaries(semconv::DURATION_BUCKETS.to_vec())
            .build(),
        jobs: m
            .u64_counter("localagents.jobs")
            .with_unit("{job}")
            .with_description("Jobs ended, by status")
            .build(),
        slot_losses: m
            .u64_counter("localagents.slot_losses")
            .with_unit("{loss}")
            .with_description("Times a job's server slot was taken by another prompt")
            .build(),
        runaways: m
            .u64_counter("localagents.runaways")
            .with_unit("{answer}")
            .with_description("Answers the runaway guard stopped")
            .build(),
    };
    Ok((provider, i))
}

impl Telemetry {
    /// The exporters `s` asks for; nothing is sent until there is something
    /// to send.
    pub fn new(s: Settings) -> Result<Telemetry, SetupError> {
        // The exporters' HTTP client is reqwest's, built without a default
        // crypto provider.
        crate::probe::client::install_crypto_provider();
        let tracer = s.traces.as_ref().map(|t| tracer(&s, t)).transpose()?;
        let meters = s.metrics.as_ref().map(|m| meters(&s, m)).transpose()?;
        Ok(Telemetry {
            tracer,
            meters,
            settings: s,
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// A job's telemetry: its trace begins now.
    pub fn job(self: &Arc<Self>, job: JobStart) -> JobTrace {
        JobTrace {
            t: self.clone(),
            trace_id: ids::new_trace_id(),
            span_id: ids::new_span_id(),
            started: SystemTime::now(),
            job,
        }
    }

    /// Send what is queued and stop, waiting at most `bound`; a collector
    /// that does not answer costs that long and no more.
    pub fn shutdown(&self, bound: Duration) {
        let tracer = self.tracer.as_ref().map(|(p, _)| p.clone());
        let meters = self.meters.as_ref().map(|(p, _)| p.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        // The SDK's metric shutdown takes no bound of its own: a thread
        // of its own, waited for at most `bound`.
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                if let Some(p) = tracer
                    && let Err(e) = p.shutdown_with_timeout(bound)
                {
                    tracing::warn!("telemetry: spans not all sent: {e}");
                }
                if let Some(p) = meters
                    && let Err(e) = p.shutdown()
                {
                    tracing::warn!("telemetry: metrics not all sent: {e}");
                }
                let _ = tx.send(());
            });
        if spawned.is_ok() && rx.recv_timeout(bound).is_err() {
            tracing::warn!(
                "telemetry: the collector did not take everything within {} s; the rest is dropped",
                bound.as_secs_f64()
            );
        }
    }
}

static CURRENT: OnceLock<Arc<Telemetry>> = OnceLock::new();

/// This process's telemetry, once [`install`]ed and on.
pub fn current() -> Option<Arc<Telemetry>> {
    CURRENT.get().cloned()
}

/// Resolve and install this process's telemetry from the environment over
/// `defaults.otel`. Problems are logged; none stops the command. Builds
/// the exporters on a thread of its own (the SDK's blocking HTTP client
/// must not be made on an async worker).
pub fn install(cfg: &crate::config::otel::OtelConfig) -> Resolved {
    let r = settings::from_process(cfg);
    for p in &r.problems {
        tracing::warn!("telemetry: {p}");
    }
    let Some(s) = r.settings.clone() else {
        return r;
    };
    let built = std::thread::spawn(move || Telemetry::new(s)).join();
    match built {
        Ok(Ok(t)) => {
            let _ = CURRENT.set(Arc::new(t));
        }
        Ok(Err(e)) => tracing::warn!("telemetry: {e}; telemetry is off"),
        Err(_) => tracing::warn!("telemetry: its setup failed; telemetry is off"),
    }
    r
}

/// At exit: send what is queued, waiting at most `bound`.
pub fn shutdown(bound: Duration) {
    if let Some(t) = CURRENT.get() {
        t.shutdown(bound);
    }
}

/// What a job's spans and metrics say of where it runs.
#[derive(Debug, Clone)]
pub struct JobStart {
    pub job_id: String,
    /// `gen_ai.agent.name`: the subagent profile, or `localagents`.
    pub agent: String,
    /// `gen_ai.provider.name` (`llama.cpp`, `vllm`, `ollama`, `lmstudio`).
    pub provider: String,
    /// The served model id.
    pub model: String,
    /// The backend's base URL (its host and port become `server.*`).
    pub base_url: String,
}

/// One job's trace: its ids, and what each of its requests reports.
#[derive(Debug, Clone)]
pub struct JobTrace {
    t: Arc<Telemetry>,
    trace_id: TraceId,
    span_id: SpanId,
    started: SystemTime,
    job: JobStart,
}

/// How a job ended, for its span and the job counters.
#[derive(Debug, Clone, Default)]
pub struct JobEnd {
    /// `succeeded`, `failed`, `timeout`, `cancelled`.
    pub status: String,
    /// `error.type` when it did not succeed (`incomplete`, `runaway`,
    /// `truncated`, or the status).
    pub error_type: Option<String>,
    /// Claude Code's session id (`gen_ai.conversation.id`).
    pub conversation_id: Option<String>,
    pub turns: Option<u64>,
    pub tool_calls: u64,
    /// The model faults seen, by name.
    pub faults: Vec<String>,
    pub slot_losses: u64,
    pub runaways: u64,
}

fn server(base_url: &str) -> Vec<KeyValue> {
    let Ok(u) = url::Url::parse(base_url) else {
        return Vec::new();
    };
    let mut kv = Vec::new();
    if let Some(h) = u.host_str() {
        kv.push(KeyValue::new(semconv::SERVER_ADDRESS, h.to_string()));
    }
    if let Some(p) = u.port_or_known_default() {
        kv.push(KeyValue::new(semconv::SERVER_PORT, i64::from(p)));
    }
    kv
}

impl JobTrace {
    /// Are spans exported (and so a `traceparent` worth sending)?
    pub fn traces(&self) -> bool {
        self.t.tracer.is_some()
    }

    /// The job span's W3C `traceparent`.
    pub fn traceparent(&self) -> String {
        ids::traceparent(self.trace_id, self.span_id)
    }

    /// The ids of a request's span: a child of the delegate's span when it
    /// sent a valid `traceparent`, else of the job's.
    pub fn request(&self, incoming: Option<&str>) -> SpanIds {
        let (trace, parent) = incoming
            .and_then(ids::parse_traceparent)
            .unwrap_or((self.trace_id, self.span_id));
        SpanIds {
            trace_id: trace.to_string(),
            span_id: ids::new_span_id().to_string(),
            parent_span_id: parent.to_string(),
        }
    }

    /// The variables the delegate gets: its `TRACEPARENT` (its spans go
    /// under the job's) and, when the user turned Claude Code's telemetry
    /// on, that telemetry tagged with the job's id. Values may be secrets
    /// (headers): they go to the child's environment and nowhere else.
    pub fn delegate_env(&self) -> Vec<(String, String)> {
        delegate_env(&self.t.settings.delegate, &self.job.job_id, self.traces().then(|| self.traceparent()))
    }

    fn common(&self, operation: &str) -> Vec<KeyValue> {
        let mut kv = vec![
            KeyValue::new(semconv::OPERATION_NAME, operation.to_string()),
            KeyValue::new(semconv::PROVIDER_NAME, self.job.provider.clone()),
            KeyValue::new(semconv::REQUEST_MODEL, self.job.model.clone()),
        ];
        kv.extend(server(&self.job.base_url));
        kv
    }

    /// A `/v1/messages` request ended: its span and its metrics.
    pub fn request_done(&self, rec: &RequestRecord) {
        let end = SystemTime::now();
        let start = end
            .checked_sub(Duration::from_millis(rec.ms))
            .unwrap_or(end);
        let error_type = request_error(rec);
        // The convention counts cached tokens in ([`semconv`]).
        let input = rec.usage.input.saturating_add(rec.usage.cache_read);
        let mut common = self.common("chat");
        if let Some((_, inst)) = &self.t.meters {
            if rec.status == 200 {
                for (kind, n) in [("input", input), ("output", rec.usage.output)] {
                    let mut kv = common.clone();
                    kv.push(KeyValue::new(semconv::TOKEN_TYPE, kind));
                    inst.tokens.record(n, &kv);
                }
            }
            if let Some(ms) = rec.ttft_ms {
                inst.first_chunk.record(ms as f64 / 1000.0, &common);
            }
            let mut kv = common.clone();
            if let Some(e) = &error_type {
                kv.push(KeyValue::new(semconv::ERROR_TYPE, e.clone()));
            }
            inst.duration.record(rec.ms as f64 / 1000.0, &kv);
        }
        let (Some((_, tracer)), Some(ids)) = (&self.t.tracer, &rec.span) else {
            return;
        };
        let (Some((trace, span)), Some(parent)) = (
            ids::parse_ids(&ids.trace_id, &ids.span_id),
            ids::parse_span(&ids.parent_span_id),
        ) else {
            return;
        };
        if rec.status == 200 {
            common.extend([
                KeyValue::new(semconv::USAGE_INPUT_TOKENS, int(input)),
                KeyValue::new(
                    semconv::USAGE_CACHE_READ_INPUT_TOKENS,
                    int(rec.usage.cache_read),
                ),
                KeyValue::new(semconv::USAGE_OUTPUT_TOKENS, int(rec.usage.output)),
            ]);
        }
        if let Some(r) = &rec.stop_reason {
            common.push(KeyValue::new(
                semconv::RESPONSE_FINISH_REASONS,
                opentelemetry::Value::Array(vec![opentelemetry::StringValue::from(r.clone())].into()),
            ));
        }
        if let Some(ms) = rec.ttft_ms {
            common.push(KeyValue::new(
                semconv::RESPONSE_TIME_TO_FIRST_CHUNK,
                ms as f64 / 1000.0,
            ));
        }
        if let Some(s) = rec.upstream_status {
            common.push(KeyValue::new(semconv::HTTP_STATUS, i64::from(s)));
        }
        if let Some(e) = &error_type {
            common.push(KeyValue::new(semconv::ERROR_TYPE, e.clone()));
        }
        let parent = remote(trace, parent);
        ids::Chosen::next(span);
        let mut sp = tracer
            .span_builder(format!("chat {}", self.job.model))
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(common)
            .start_with_context(tracer, &parent);
        if error_type.is_some() {
            sp.set_status(Status::error(""));
        }
        sp.end_with_timestamp(end);
    }

    /// The job ended: its span and the job counters.
    pub fn ended(&self, end: &JobEnd) {
        if let Some((_, inst)) = &self.t.meters {
            let kv = [
                KeyValue::new(semconv::JOB_STATUS, end.status.clone()),
                KeyValue::new(semconv::PROVIDER_NAME, self.job.provider.clone()),
                KeyValue::new(semconv::REQUEST_MODEL, self.job.model.clone()),
            ];
            inst.jobs.add(1, &kv);
            if end.slot_losses > 0 {
                inst.slot_losses.add(end.slot_losses, &kv[1..]);
            }
            if end.runaways > 0 {
                inst.runaways.add(end.runaways, &kv[1..]);
            }
        }
        let Some((_, tracer)) = &self.t.tracer else {
            return;
        };
        let mut kv = self.common("invoke_agent");
        kv.push(KeyValue::new(semconv::AGENT_NAME, self.job.agent.clone()));
        if let Some(c) = &end.conversation_id {
            kv.push(KeyValue::new(semconv::CONVERSATION_ID, c.clone()));
        }
        kv.extend([
            KeyValue::new(semconv::JOB_ID, self.job.job_id.clone()),
            KeyValue::new(semconv::JOB_STATUS, end.status.clone()),
            KeyValue::new(
                semconv::JOB_TOOL_CALLS,
                int(end.tool_calls),
            ),
            KeyValue::new(
                semconv::JOB_SLOT_LOSSES,
                int(end.slot_losses),
            ),
        ]);
        if let Some(t) = end.turns {
            kv.push(KeyValue::new(
                semconv::JOB_TURNS,
                int(t),
            ));
        }
        if !end.faults.is_empty() {
            let faults: Vec<opentelemetry::StringValue> =
                end.faults.iter().map(|f| f.clone().into()).collect();
            kv.push(KeyValue::new(
                semconv::JOB_FAULTS,
                opentelemetry::Value::Array(faults.into()),
            ));
        }
        if let Some(e) = &end.error_type {
            kv.push(KeyValue::new(semconv::ERROR_TYPE, e.clone()));
        }
        ids::Chosen::root(self.trace_id, self.span_id);
        let mut sp = tracer
            .span_builder(format!("invoke_agent {}", self.job.agent))
            .with_kind(SpanKind::Internal)
            .with_start_time(self.started)
            .with_attributes(kv)
            .start_with_context(tracer, &opentelemetry::Context::new());
        if end.error_type.is_some() {
            sp.set_status(Status::error(""));
        }
        sp.end_with_timestamp(SystemTime::now());
    }
}

/// An attribute's integer: a count past `i64::MAX` reads as that.
fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A context whose span is the remote parent `span` of `trace`.
fn remote(trace: TraceId, span: SpanId) -> opentelemetry::Context {
    opentelemetry::Context::new().with_remote_span_context(SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

/// `error.type` of a request: the shim's answer when it was not 200.
fn request_error(rec: &RequestRecord) -> Option<String> {
    if rec.truncated.is_some() {
        return Some("truncated".into());
    }
    if rec.runaway.is_some() {
        return Some("runaway".into());
    }
    if rec.status == 200 {
        return None;
    }
    Some(match rec.upstream_status {
        Some(s) => s.to_string(),
        None if rec.status == 0 => "unanswered".into(),
        None => rec.status.to_string(),
    })
}

/// The delegate's variables ([`JobTrace::delegate_env`]).
pub fn delegate_env(
    d: &settings::Delegate,
    job_id: &str,
    traceparent: Option<String>,
) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some(tp) = traceparent {
        env.push(("TRACEPARENT".to_string(), tp));
        // Claude Code sends its request span's traceparent with each API
        // request only when told to (or on Anthropic's own API).
        env.push(("CLAUDE_CODE_PROPAGATE_TRACEPARENT".into(), "1".into()));
    }
    if !d.on {
        return env;
    }
    env.extend(
        d.env
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().to_string())),
    );
    let tag = format!("localagents.job.id={job_id}");
    let attrs = match &d.resource_attributes {
        Some(a) => format!("{a},{tag}"),
        None => tag,
    };
    env.push(("OTEL_RESOURCE_ATTRIBUTES".into(), attrs));
    env
}
