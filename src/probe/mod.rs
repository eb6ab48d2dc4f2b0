//! Live probing of endpoints: what each server really serves, its real
//! per-slot window, how busy it is, and, when it is down, why in one
//! sentence that names the fix.
//!
//! Every endpoint is probed concurrently and each gets the whole
//! `probe_timeout_s` budget, so one dead host never slows the others. All
//! requests of one endpoint run in parallel too, so a healthy probe costs one
//! round trip. Results are cached for about a second: Claude often calls
//! several tools in a burst, and a burst should cost one probe.

pub mod classify;
pub mod load;
pub mod metrics;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;

use crate::config::{Backend, Config, Endpoint};
pub use classify::FailureKind;
use metrics::Counters;

/// How long a probe result is reused.
pub const CACHE_TTL: Duration = Duration::from_millis(1000);

/// Below this per-slot window a delegate's output budget shrinks to
/// window/8: Claude Code's auto-compact threshold is window minus max
/// output, which would otherwise sit near zero.
pub const SMALL_WINDOW: u64 = 131_072;

/// Below this per-slot window `status` warns. Measured with the lean
/// delegate (`cargo bench --bench window`): a scripted 6-turn job peaks at
/// about 9.3k prompt tokens, and Claude Code 2.1.328 starts compacting
/// near window − window/8 − 13k, so 26,624 is the smallest window that ran
/// it without compacting; 32k leaves a little room.
pub const MIN_WINDOW: u64 = 32_768;

/// One model id a server serves.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ServedModel {
    pub id: String,
    /// Per-slot context window in tokens, when known.
    pub context: Option<u64>,
    /// Where `context` came from: `props.n_ctx`, `v1/models meta.n_ctx`,
    /// `slots.n_ctx`, `max_model_len`, `preset` (a router's launch args for
    /// a model it has not loaded), or `config`.
    pub context_source: Option<String>,
    /// On servers that load models on demand: `loaded`, `unloaded`,
    /// `loading`; `sleeping` for a server asleep (`--sleep-idle-seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Which model file and server build answer under this id, as far as
    /// the server says (an eval result is stale once they change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<ModelFile>,
}

/// A served model's identity: llama.cpp's `/props` `model_path` and
/// `build_info`, `/v1/models` `meta.size`; vLLM's `root`.
#[derive(
    Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema, Default,
)]
pub struct ModelFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
}

impl ModelFile {
    fn of(path: Option<String>, size: Option<u64>, build: Option<String>) -> Option<ModelFile> {
        (path.is_some() || size.is_some() || build.is_some()).then_some(ModelFile {
            path,
            size,
            build,
        })
    }
}

/// Slot occupancy (llama.cpp).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema, serde::Deserialize,
)]
pub struct Slots {
    pub total: u64,
    pub busy: u64,
    pub free: u64,
}

/// Queue state (vLLM `/metrics`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Load {
    pub running: f64,
    pub waiting: f64,
    /// KV-cache usage, 0..1, when reported.
    pub kv_cache_usage: Option<f64>,
}

/// What the chat template says about itself (llama.cpp `/props`).
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct TemplateCaps {
    pub supports_system_role: Option<bool>,
    pub supports_tool_calls: Option<bool>,
}

/// The live state of one endpoint. This is the `endpoints[]` object of
/// `status --json` and `list_models`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct EndpointStatus {
    pub name: String,
    pub base_url: String,
    /// Configured, or detected when the config leaves it out; `unknown` when
    /// it could not be detected.
    pub backend: String,
    /// True when `backend` was detected rather than configured.
    pub backend_detected: bool,
    pub host: Option<String>,
    pub notes: Option<String>,
    pub up: bool,
    /// One sentence: what failed and what to do. Null when up.
    pub error: Option<String>,
    /// Machine-readable failure class (`refused`, `timeout`, ...).
    pub error_kind: Option<FailureKind>,
    /// Round trip of `GET /v1/models`.
    pub latency_ms: Option<u64>,
    /// `router` (llama.cpp router mode), `llama-swap`, or `sleeping` (a
    /// llama-server asleep); none for a plain server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A router's `max_instances` (`--models-max`; 0 = unlimited): loading
    /// one more model past it unloads the least recently used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u64>,
    pub models: Vec<ServedModel>,
    pub slots: Option<Slots>,
    pub load: Option<Load>,
    /// Whether `/metrics` answers.
    pub metrics: bool,
    pub chat_template: Option<TemplateCaps>,
    /// Non-fatal findings, e.g. a small window.
    pub warnings: Vec<String>,
    /// The raw `/metrics` numbers, for per-job deltas. Not serialised.
    #[serde(skip)]
    pub counters: Option<Counters>,
}

impl EndpointStatus {
    pub(crate) fn new(ep: &Endpoint) -> Self {
        EndpointStatus {
            name: ep.name.clone(),
            base_url: ep.base_url.clone(),
            backend: ep
                .backend
                .map(|b| b.as_str().to_string())
                .unwrap_or_else(|| "unknown".into()),
            backend_detected: ep.backend.is_none(),
            host: ep.host.clone(),
            notes: ep.notes.clone(),
            up: false,
            error: None,
            error_kind: None,
            latency_ms: None,
            kind: None,
            max_instances: None,
            models: Vec::new(),
            slots: None,
            load: None,
            metrics: false,
            chat_template: None,
            warnings: Vec::new(),
            counters: None,
        }
    }

    fn fail(mut self, kind: FailureKind, sentence: String) -> Self {
        self.up = false;
        self.error_kind = Some(kind);
        self.error = Some(sentence);
        self
    }
}

/// Install rustls's ring crypto provider as the process default. reqwest is
/// built with `rustls-no-provider`, so building a `reqwest::Client` before
/// this panics. Idempotent; every client localagents builds calls it first,
/// and so do the tests' own clients.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The shared HTTP client. Proxies are off on purpose: backends are on this
/// machine or the LAN, and a corporate proxy would only get in the way.
pub fn http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        install_crypto_provider();
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// Longest a TCP (and TLS) connect to a backend may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client that keeps no idle connections: each request gets a fresh one
/// (the shim's retry after a stale pooled connection).
pub fn fresh_http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        install_crypto_provider();
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

type CacheKey = (String, String, Option<Backend>, Option<String>);

type ProbeCache = Mutex<HashMap<CacheKey, (Instant, EndpointStatus)>>;

fn cache() -> &'static ProbeCache {
    static CACHE: OnceLock<ProbeCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key_of(ep: &Endpoint) -> CacheKey {
    (
        ep.name.clone(),
        ep.base_url.clone(),
        ep.backend,
        ep.api_key_env.clone(),
    )
}

/// Probe every endpoint of the config concurrently, reusing results younger
/// than [`CACHE_TTL`]. Order follows the config.
pub async fn probe_all(config: &Config) -> Vec<EndpointStatus> {
    let budget = Duration::from_secs_f64(config.defaults.probe_timeout_s);
    let futs = config.endpoints.iter().map(|ep| probe_cached(ep, budget));
    futures::future::join_all(futs).await
}

/// Probe one endpoint, through the cache.
pub async fn probe_cached(ep: &Endpoint, budget: Duration) -> EndpointStatus {
    let key = key_of(ep);
    if let Ok(c) = cache().lock()
        && let Some((at, st)) = c.get(&key)
        && at.elapsed() < CACHE_TTL
    {
        return st.clone();
    }
    let st = probe(ep, budget).await;
    if let Ok(mut c) = cache().lock() {
        c.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        c.insert(key, (Instant::now(), st.clone()));
    }
    st
}

/// Forget cached probes (after `register_endpoint`, or in tests).
pub fn invalidate() {
    if let Ok(mut c) = cache().lock() {
        c.clear();
    }
}

/// A fetched path: status and body, or a transport failure.
struct Fetched {
    status: u16,
    body: Vec<u8>,
    elapsed: Duration,
}

async fn fetch(ep: &Endpoint, path: &str, deadline: Instant) -> Result<Fetched, reqwest::Error> {
    let started = Instant::now();
    let remaining = deadline.saturating_duration_since(started);
    let mut req = http_client()
        .get(format!("{}{}", ep.base_url, path))
        .timeout(remaining.max(Duration::from_millis(1)));
    if let Some(key) = ep.api_key() {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    let body = resp.bytes().await?.to_vec();
    Ok(Fetched {
        status,
        body,
        elapsed: started.elapsed(),
    })
}

fn json_of(f: &Result<Fetched, reqwest::Error>) -> Option<Value> {
    match f {
        Ok(f) if f.status == 200 => serde_json::from_slice(&f.body).ok(),
        _ => None,
    }
}

/// Probe one endpoint now, within `budget`.
pub async fn probe(ep: &Endpoint, budget: Duration) -> EndpointStatus {
    let deadline = Instant::now() + budget;
    // A hard stop slightly after the deadline, in case a body trickles.
    match tokio::time::timeout(
        budget + Duration::from_millis(50),
        probe_inner(ep, deadline),
    )
    .await
    {
        Ok(st) => st,
        Err(_) => {
            let (kind, sentence) = classify::timeout_sentence(ep, budget, true);
            EndpointStatus::new(ep).fail(kind, sentence)
        }
    }
}

async fn probe_inner(ep: &Endpoint, deadline: Instant) -> EndpointStatus {
    let mut st = EndpointStatus::new(ep);
    let budget = deadline.saturating_duration_since(Instant::now());
    let want_llama = matches!(ep.backend, None | Some(Backend::LlamaCpp));
    let want_metrics = matches!(ep.backend, None | Some(Backend::LlamaCpp | Backend::Vllm));

    let models_f = fetch(ep, "/v1/models", deadline);
    let props_f = async {
        if want_llama {
            Some(fetch(ep, "/props", deadline).await)
        } else {
            None
        }
    };
    // /slots wakes a sleeping server and a router answers it 400: ask only
    // once /props says it is neither (one more local round trip).
    let props_then_slots = async {
        let props = props_f.await;
        let quiet = props
            .as_ref()
            .and_then(|r| r.as_ref().ok())
            .and_then(|f| serde_json::from_slice::<Value>(&f.body).ok())
            .is_some_and(|p| {
                p.get("is_sleeping").and_then(Value::as_bool) == Some(true)
                    || p.get("role").and_then(Value::as_str) == Some("router")
            });
        let slots = if want_llama && !quiet {
            Some(fetch(ep, "/slots", deadline).await)
        } else {
            None
        };
        (props, slots)
    };
    let metrics_f = async {
        if want_metrics {
            Some(fetch(ep, "/metrics", deadline).await)
        } else {
            None
        }
    };
    let (models_r, (props_r, slots_r), metrics_r) =
        tokio::join!(models_f, props_then_slots, metrics_f);

    // /v1/models decides up or down.
    let models_fetched = match models_r {
        Err(e) => {
            let (kind, sentence) = classify::transport(ep, &e, budget);
            return st.fail(kind, sentence);
        }
        Ok(f) => f,
    };
    st.latency_ms = Some(models_fetched.elapsed.as_millis() as u64);
    if models_fetched.status != 200 {
        let (kind, sentence) = classify::http(
            ep,
            "/v1/models",
            models_fetched.status,
            &models_fetched.body,
        );
        return st.fail(kind, sentence);
    }
    let list: Option<Value> = serde_json::from_slice(&models_fetched.body).ok();
    let data = list
        .as_ref()
        .and_then(|v| v.get("data"))
        .and_then(Value::as_array)
        .filter(|d| {
            d.iter()
                .all(|m| m.get("id").and_then(Value::as_str).is_some())
        });
    let Some(data) = data else {
        let (kind, sentence) = classify::bad_body(ep, "/v1/models", &models_fetched.body);
        return st.fail(kind, sentence);
    };

    let props = props_r.as_ref().and_then(json_of);
    let props = props.filter(|p| {
        p.get("default_generation_settings").is_some() || p.get("total_slots").is_some()
    });
    let router = props
        .as_ref()
        .is_some_and(|p| p.get("role").and_then(Value::as_str) == Some("router"));
    let sleeping = props
        .as_ref()
        .is_some_and(|p| p.get("is_sleeping").and_then(Value::as_bool) == Some(true));
    let swap = data
        .iter()
        .any(|m| m.get("owned_by").and_then(Value::as_str) == Some("llama-swap"));
    if router {
        st.max_instances = props
            .as_ref()
            .and_then(|p| p.get("max_instances"))
            .and_then(Value::as_u64);
    }
    st.kind = if router {
        Some("router".into())
    } else if swap {
        Some("llama-swap".into())
    } else if sleeping {
        Some("sleeping".into())
    } else {
        None
    };

    // Backend: configured, else detected.
    let backend = match ep.backend {
        Some(b) => b,
        None => detect(data, props.is_some()),
    };
    st.backend = backend.as_str().to_string();
    st.up = true;

    // A router's own /props says n_ctx 0: that is no window. Never 0.
    let props_ctx = props
        .as_ref()
        .filter(|_| !router)
        .and_then(|p| {
            p.pointer("/default_generation_settings/n_ctx")
                .or_else(|| p.get("n_ctx"))
        })
        .and_then(Value::as_u64)
        .filter(|c| *c > 0);
    let slots_json = slots_r.as_ref().and_then(json_of);
    let slots_arr = slots_json.as_ref().and_then(Value::as_array);
    let slot_ctx = slots_arr
        .and_then(|a| a.first())
        .and_then(|s| s.get("n_ctx"))
        .and_then(Value::as_u64);
    let single = data.len() == 1;
    for m in data {
        let id = m
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let meta_ctx = m
            .pointer("/meta/n_ctx")
            .or_else(|| m.get("context_length"))
            .and_then(Value::as_u64)
            .filter(|c| *c > 0);
        let state = m
            .pointer("/status/value")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| sleeping.then(|| "sleeping".to_string()));
        let preset_ctx = preset_window(m);
        let (context, source) = match backend {
            _ if router || swap => match (meta_ctx, preset_ctx) {
                (Some(c), _) => (Some(c), "v1/models meta.n_ctx"),
                (None, Some(c)) => (Some(c), "preset"),
                (None, None) => (None, ""),
            },
            Backend::Vllm => (
                m.get("max_model_len").and_then(Value::as_u64),
                "max_model_len",
            ),
            _ => {
                if let (true, Some(c)) = (single, props_ctx) {
                    (Some(c), "props.n_ctx")
                } else if let Some(c) = meta_ctx {
                    (Some(c), "v1/models meta.n_ctx")
                } else if let Some(c) = props_ctx {
                    (Some(c), "props.n_ctx")
                } else if let Some(c) = slot_ctx {
                    (Some(c), "slots.n_ctx")
                } else if let Some(c) = m.get("max_model_len").and_then(Value::as_u64) {
                    (Some(c), "max_model_len")
                } else {
                    (None, "")
                }
            }
        };
        // One model behind /props: its path and build are this model's.
        let (path, build) = match (&props, single && !router && !swap) {
            (Some(p), true) => (
                p.get("model_path")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                p.get("build_info")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            ),
            _ => (None, None),
        };
        let path = path.or_else(|| m.get("root").and_then(Value::as_str).map(str::to_string));
        let size = m.pointer("/meta/size").and_then(Value::as_u64);
        st.models.push(ServedModel {
            id,
            context,
            context_source: context.map(|_| source.to_string()),
            state,
            file: ModelFile::of(path, size, build),
        });
    }

    if let Some(p) = &props {
        let caps = p.get("chat_template_caps");
        if let Some(caps) = caps {
            st.chat_template = Some(TemplateCaps {
                supports_system_role: caps.get("supports_system_role").and_then(Value::as_bool),
                supports_tool_calls: caps.get("supports_tool_calls").and_then(Value::as_bool),
            });
        }
        if sleeping {
            st.warnings.push(
                "the server is sleeping: the first request wakes it (it reloads the model)".into(),
            );
        }
    }

    // Metrics.
    let counters = match &metrics_r {
        Some(Ok(f)) if f.status == 200 => {
            let text = String::from_utf8_lossy(&f.body);
            let c = metrics::parse(&text);
            if c.is_empty() { None } else { Some(c) }
        }
        _ => None,
    };
    st.metrics = counters.is_some();

    // Slots: /slots first, else /props total plus the processing gauge.
    if let Some(arr) = slots_arr {
        let total = arr.len() as u64;
        let busy = arr
            .iter()
            .filter(|s| {
                s.get("is_processing")
                    .and_then(Value::as_bool)
                    .unwrap_or(false)
                    || s.get("state")
                        .and_then(Value::as_u64)
                        .is_some_and(|v| v != 0)
            })
            .count() as u64;
        st.slots = Some(Slots {
            total,
            busy,
            free: total.saturating_sub(busy),
        });
    } else if let (Some(total), Some(c)) = (
        props
            .as_ref()
            .and_then(|p| p.get("total_slots"))
            .and_then(Value::as_u64),
        counters.as_ref(),
    ) && let Some(busy) = metrics::first(c, &["llamacpp:requests_processing"])
    {
        let busy = (busy as u64).min(total);
        st.slots = Some(Slots {
            total,
            busy,
            free: total - busy,
        });
    }

    if backend == Backend::Vllm
        && let Some(c) = &counters
    {
        st.load = Some(Load {
            running: metrics::first(c, &["vllm:num_requests_running"]).unwrap_or(0.0),
            waiting: metrics::first(c, &["vllm:num_requests_waiting"]).unwrap_or(0.0),
            kv_cache_usage: metrics::first(
                c,
                &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
            ),
        });
    }
    st.counters = counters;

    if st.models.is_empty() {
        st.warnings
            .push("the server answers but serves no model yet".into());
    }
    for m in &st.models {
        if let Some(c) = m.context
            && c < MIN_WINDOW
        {
            st.warnings.push(format!(
                "{}: window {} per slot is under 32k; even a short job makes Claude Code compact (it starts near window - window/8 - 13k): give each slot 32k or more, 64k+ for jobs that read several files",
                m.id, c
            ));
        }
    }
    if backend == Backend::LlamaCpp && props.is_none() {
        st.warnings
            .push("GET /props did not answer: per-slot window and slots unknown".into());
    }
    st
}

/// The per-slot window a router will give a model it has not loaded, from
/// its launch args (`status.args`): `--ctx-size`/`-c`, divided by
/// `--parallel`/`-np` when that is given (with parallel on auto the slots
/// share one unified cache, each seeing the whole size).
pub fn preset_window(model: &Value) -> Option<u64> {
    let args: Vec<&str> = model
        .pointer("/status/args")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let value = |names: &[&str]| -> Option<i64> {
        args.windows(2)
            .rev()
            .find(|w| names.contains(&w[0]))
            .and_then(|w| w[1].parse().ok())
    };
    let ctx = value(&["--ctx-size", "-c"]).filter(|c| *c > 0)? as u64;
    match value(&["--parallel", "-np"]) {
        Some(p) if p > 0 => Some(ctx / p as u64).filter(|c| *c > 0),
        _ => Some(ctx),
    }
}

/// Backend from `owned_by` and which endpoints answered.
fn detect(data: &[Value], props_answered: bool) -> Backend {
    let owned: Vec<&str> = data
        .iter()
        .filter_map(|m| m.get("owned_by").and_then(Value::as_str))
        .collect();
    if owned.iter().any(|o| o.eq_ignore_ascii_case("vllm")) {
        Backend::Vllm
    } else if owned
        .iter()
        .any(|o| o.eq_ignore_ascii_case("llamacpp") || o.eq_ignore_ascii_case("llama-swap"))
        || props_answered
    {
        // llama-swap fronts llama-server processes, as a rule.
        Backend::LlamaCpp
    } else if data.iter().any(|m| m.get("max_model_len").is_some()) {
        Backend::Vllm
    } else {
        Backend::Other
    }
}
