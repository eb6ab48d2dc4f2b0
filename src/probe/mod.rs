//! Live probing of endpoints: what each server really serves, its real
//! per-slot window, how busy it is, and, when it is down, why in one
//! sentence that names the fix.
//!
//! Every endpoint is probed concurrently and each gets the whole
//! `probe_timeout_s` budget, so one dead host never slows the others. All
//! requests of one endpoint run in parallel too, so a healthy probe costs one
//! round trip. Results are cached for about a second: Claude often calls
//! several tools in a burst, and a burst should cost one probe.

pub mod answer;
pub mod classify;
pub mod client;
pub mod load;
pub mod metrics;
pub mod replicas;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::config::{Backend, Config, Endpoint};
pub use classify::FailureKind;
// Where the tests, benches and the shim have always found them.
pub use client::{CONNECT_TIMEOUT, fresh_http_client, http_client, install_crypto_provider};
use metrics::Counters;
pub use replicas::Replica;

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
    pub context_source: Option<ContextSource>,
    /// On servers that load models on demand: `loaded`, `unloaded`,
    /// `loading`; `sleeping` for a server asleep (`--sleep-idle-seconds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<ModelState>,
    /// Which model file and server build answer under this id, as far as
    /// the server says (an eval result is stale once they change).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<ModelFile>,
}

/// Where a model's window came from (`context_source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum ContextSource {
    /// llama.cpp `/props` `default_generation_settings.n_ctx`.
    #[serde(rename = "props.n_ctx")]
    PropsNCtx,
    /// `/v1/models` `meta.n_ctx` (or `context_length`).
    #[serde(rename = "v1/models meta.n_ctx")]
    MetaNCtx,
    /// llama.cpp `/slots`, the first slot's `n_ctx`.
    #[serde(rename = "slots.n_ctx")]
    SlotsNCtx,
    /// vLLM `/v1/models` `max_model_len`.
    #[serde(rename = "max_model_len")]
    MaxModelLen,
    /// A router's launch args for a model it has not loaded.
    #[serde(rename = "preset")]
    Preset,
    /// The model's `context` in the config.
    #[serde(rename = "config")]
    Config,
}

impl ContextSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ContextSource::PropsNCtx => "props.n_ctx",
            ContextSource::MetaNCtx => "v1/models meta.n_ctx",
            ContextSource::SlotsNCtx => "slots.n_ctx",
            ContextSource::MaxModelLen => "max_model_len",
            ContextSource::Preset => "preset",
            ContextSource::Config => "config",
        }
    }
}

/// A model's state on a server that loads models on demand: a router's or
/// llama-swap's `status.value`, or `sleeping` for a server asleep.
///
/// Not a closed set: a server may report a state this build does not know
/// (a failed load, a newer server's), and `status --json` shows it as the
/// server said it, so that one is kept in [`ModelState::Other`]. Its
/// schema is therefore a plain string.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum ModelState {
    #[serde(rename = "loaded")]
    Loaded,
    #[serde(rename = "unloaded")]
    Unloaded,
    #[serde(rename = "loading")]
    Loading,
    #[serde(rename = "sleeping")]
    Sleeping,
    /// Any other state, verbatim.
    #[serde(untagged)]
    Other(String),
}

impl ModelState {
    pub fn as_str(&self) -> &str {
        match self {
            ModelState::Loaded => "loaded",
            ModelState::Unloaded => "unloaded",
            ModelState::Loading => "loading",
            ModelState::Sleeping => "sleeping",
            ModelState::Other(s) => s,
        }
    }
}

impl schemars::JsonSchema for ModelState {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ModelState".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string" })
    }
}

/// What kind of server an endpoint is, when not a plain one (`kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub enum ServerKind {
    /// llama.cpp in router mode (`/props` `role`).
    #[serde(rename = "router")]
    Router,
    /// llama-swap (`/v1/models` `owned_by`).
    #[serde(rename = "llama-swap")]
    LlamaSwap,
    /// A llama-server asleep (`/props` `is_sleeping`).
    #[serde(rename = "sleeping")]
    Sleeping,
    /// vLLM's router (`/list_workers`), its replicas in `replicas`.
    #[serde(rename = "vllm-router")]
    VllmRouter,
}

impl ServerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Router => "router",
            ServerKind::LlamaSwap => "llama-swap",
            ServerKind::Sleeping => "sleeping",
            ServerKind::VllmRouter => "vllm-router",
        }
    }
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
    /// Slots that have served nothing since the server started (their
    /// cache is empty), when `/slots` tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unused: Option<u64>,
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
    /// `router` (llama.cpp router mode), `llama-swap`, `sleeping` (a
    /// llama-server asleep) or `vllm-router` (vLLM's router in front of
    /// `replicas`); none for a plain server.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ServerKind>,
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
    /// Behind a vLLM router: each replica, probed on its own. `models`
    /// then holds every model a replica serves with the smallest window
    /// among the replicas serving it, and `slots` their sum.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<Replica>,
    /// The raw `/metrics` numbers, for per-job deltas (behind a router,
    /// each replica's are on it instead). Not serialised.
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
            replicas: Vec::new(),
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
    let resp = client::request(http_client(), ep, reqwest::Method::GET, path)
        .timeout(remaining.max(Duration::from_millis(1)))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let body = client::read_at_most(resp, PROBE_BODY_CAP).await;
    Ok(Fetched {
        status,
        body,
        elapsed: started.elapsed(),
    })
}

/// The most of one probe answer that is read (a `/metrics` of a big
/// server is tens of KB; `/props` carries the chat template).
const PROBE_BODY_CAP: usize = 8 << 20;

/// The body of a 200.
fn ok_body(f: &Result<Fetched, reqwest::Error>) -> Option<&[u8]> {
    match f {
        Ok(f) if f.status == 200 => Some(&f.body),
        _ => None,
    }
}

/// Probe one endpoint now, within `budget`.
pub async fn probe(ep: &Endpoint, budget: Duration) -> EndpointStatus {
    let deadline = Instant::now() + budget;
    // A hard stop slightly after the deadline, in case a body trickles.
    match tokio::time::timeout(
        budget + Duration::from_millis(50),
        probe_server(ep, deadline, true),
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

/// Every answer of one endpoint; none for a path not asked.
struct Answers {
    models: Result<Fetched, reqwest::Error>,
    props: Option<Result<Fetched, reqwest::Error>>,
    slots: Option<Result<Fetched, reqwest::Error>>,
    metrics: Option<Result<Fetched, reqwest::Error>>,
    /// `GET /list_workers`: a vLLM router answers it.
    list_workers: Option<Result<Fetched, reqwest::Error>>,
}

/// Fetch the paths this backend answers, in parallel; `/list_workers`
/// too when `detect_router` (not for a router's own replicas).
async fn fetch_all(ep: &Endpoint, deadline: Instant, detect_router: bool) -> Answers {
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
            .and_then(|f| answer::parse::<answer::Props>(&f.body))
            .is_some_and(|p| p.sleeping() || p.router());
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
    let workers_f = async {
        if detect_router {
            Some(fetch(ep, "/list_workers", deadline).await)
        } else {
            None
        }
    };
    let (models, (props, slots), metrics, list_workers) =
        tokio::join!(models_f, props_then_slots, metrics_f, workers_f);
    Answers {
        models,
        props,
        slots,
        metrics,
        list_workers,
    }
}

/// Probe one server (`detect_router`: and see whether it is a vLLM
/// router, whose replicas are then probed instead).
async fn probe_server(ep: &Endpoint, deadline: Instant, detect_router: bool) -> EndpointStatus {
    let mut st = EndpointStatus::new(ep);
    let budget = deadline.saturating_duration_since(Instant::now());
    let answers = fetch_all(ep, deadline, detect_router).await;
    if let Some(lw) = &answers.list_workers {
        match ok_body(lw).and_then(replicas::listed) {
            Some((urls, refused)) => {
                return through_router(ep, st, answers.models, (urls, refused), deadline).await;
            }
            None if ep.vllm_router => {
                let (kind, sentence) = match lw {
                    Err(e) => classify::transport(ep, e, budget),
                    Ok(f) => (
                        FailureKind::Http,
                        format!(
                            "endpoint `{}` is declared `backend: vllm-router`, but GET /list_workers answered {} without a list of workers: point base_url at vllm-router's --port, or remove `backend: vllm-router`",
                            ep.name, f.status
                        ),
                    ),
                };
                return st.fail(kind, sentence);
            }
            None => {}
        }
    }

    // /v1/models decides up or down.
    let data = match model_list(ep, &mut st, answers.models, budget) {
        Ok(data) => data,
        Err((kind, sentence)) => return st.fail(kind, sentence),
    };
    let props = answers
        .props
        .as_ref()
        .and_then(ok_body)
        .and_then(answer::parse::<answer::Props>)
        .filter(answer::Props::is_llama);
    let shape = Shape {
        router: props.as_ref().is_some_and(answer::Props::router),
        swap: data
            .iter()
            .any(|m| m.owned_by.value() == Some(&answer::Owner::LlamaSwap)),
        sleeping: props.as_ref().is_some_and(answer::Props::sleeping),
    };
    if shape.router {
        st.max_instances = props
            .as_ref()
            .and_then(|p| p.max_instances.value().copied());
    }
    st.kind = shape.kind();

    // Backend: configured, else detected.
    let backend = match ep.backend {
        Some(b) => b,
        None => detect(&data, props.is_some()),
    };
    st.backend = backend.as_str().to_string();
    st.up = true;

    let slots = answers
        .slots
        .as_ref()
        .and_then(ok_body)
        .and_then(answer::slots);
    st.models = served_models(&data, props.as_ref(), slots.as_deref(), backend, shape);

    if let Some(p) = &props {
        if p.chat_template_caps.present() {
            let caps = p.chat_template_caps.value();
            st.chat_template = Some(TemplateCaps {
                supports_system_role: caps.and_then(|c| c.supports_system_role.value().copied()),
                supports_tool_calls: caps.and_then(|c| c.supports_tool_calls.value().copied()),
            });
        }
        if shape.sleeping {
            st.warnings.push(
                "the server is sleeping: the first request wakes it (it reloads the model)".into(),
            );
        }
    }

    let counters = counters_of(answers.metrics.as_ref());
    st.metrics = counters.is_some();
    st.slots = slot_counts(slots.as_deref(), props.as_ref(), counters.as_ref());
    if backend == Backend::Vllm
        && let Some(c) = &counters
    {
        st.load = Some(vllm_load(c));
    }
    st.counters = counters;
    add_warnings(&mut st, backend, props.is_some());
    st
}

/// A vLLM router: each replica probed on its own, concurrently, in what is
/// left of the budget, and the router's `/workers` for its view of their
/// health; folded into the router's status ([`replicas::fold`]).
async fn through_router(
    ep: &Endpoint,
    mut st: EndpointStatus,
    models: Result<Fetched, reqwest::Error>,
    (urls, refused): (Vec<String>, Vec<String>),
    deadline: Instant,
) -> EndpointStatus {
    if let Ok(f) = &models {
        st.latency_ms = Some(f.elapsed.as_millis() as u64);
    }
    let eps: Vec<Endpoint> = urls.iter().map(|u| replicas::endpoint_of(ep, u)).collect();
    // Boxed: a replica is probed by this same function (never as a router).
    let probes = futures::future::join_all(
        eps.iter()
            .map(|r| Box::pin(probe_server(r, deadline, false))),
    );
    let (workers, statuses) = tokio::join!(fetch(ep, "/workers", deadline), probes);
    let workers = ok_body(&workers)
        .and_then(answer::parse::<replicas::Workers>)
        .unwrap_or_default();
    let list: Vec<Replica> = urls
        .iter()
        .zip(statuses.iter().cloned())
        .map(|(u, s)| replicas::replica(u, s, &workers))
        .collect();
    for r in &refused {
        st.warnings.push(format!(
            "the router lists a replica that is not probed: {r}"
        ));
    }
    if !list.iter().any(|r| r.up) {
        let (kind, sentence) = replicas::all_down(&list);
        st.kind = Some(ServerKind::VllmRouter);
        st.replicas = list;
        return st.fail(kind, sentence);
    }
    st.up = true;
    replicas::fold(&mut st, list, &statuses);
    st
}

/// `/v1/models` as a list of models each with an id, or why the endpoint
/// is down. Sets the latency once the server answered.
fn model_list(
    ep: &Endpoint,
    st: &mut EndpointStatus,
    fetched: Result<Fetched, reqwest::Error>,
    budget: Duration,
) -> Result<Vec<answer::ModelEntry>, (FailureKind, String)> {
    let f = fetched.map_err(|e| classify::transport(ep, &e, budget))?;
    st.latency_ms = Some(f.elapsed.as_millis() as u64);
    if f.status != 200 {
        return Err(classify::http(ep, "/v1/models", f.status, &f.body));
    }
    answer::parse::<answer::ModelList>(&f.body)
        .and_then(|list| list.data.into_value())
        .and_then(|data| {
            data.into_iter()
                .map(|m| m.into_value().filter(|m| m.id.value().is_some()))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| classify::bad_body(ep, "/v1/models", &f.body))
}

/// What kind of server answers, from `/props` and `/v1/models` `owned_by`.
#[derive(Debug, Clone, Copy)]
struct Shape {
    /// llama.cpp router mode (`/props` `role`).
    router: bool,
    /// llama-swap (`owned_by`).
    swap: bool,
    /// A llama-server asleep (`/props` `is_sleeping`).
    sleeping: bool,
}

impl Shape {
    fn kind(self) -> Option<ServerKind> {
        if self.router {
            Some(ServerKind::Router)
        } else if self.swap {
            Some(ServerKind::LlamaSwap)
        } else if self.sleeping {
            Some(ServerKind::Sleeping)
        } else {
            None
        }
    }
}

/// The windows the whole server reports, for [`window`].
struct ServerWindows {
    /// `/props` (never a router's own, which says 0).
    props: Option<u64>,
    /// The first slot's `n_ctx`.
    slot: Option<u64>,
    /// The server lists one model.
    single: bool,
}

/// Each listed model with its window, state and file.
fn served_models(
    data: &[answer::ModelEntry],
    props: Option<&answer::Props>,
    slots: Option<&[answer::Object<answer::Slot>]>,
    backend: Backend,
    shape: Shape,
) -> Vec<ServedModel> {
    // A router's own /props says n_ctx 0: that is no window. Never 0.
    let windows = ServerWindows {
        props: props
            .filter(|_| !shape.router)
            .and_then(answer::Props::n_ctx)
            .filter(|c| *c > 0),
        slot: slots
            .and_then(|a| a.first())
            .and_then(answer::Field::value)
            .and_then(|s| s.n_ctx.value().copied()),
        single: data.len() == 1,
    };
    // One model behind /props: its path and build are this model's.
    let (path, build) = match (props, windows.single && !shape.router && !shape.swap) {
        (Some(p), true) => (p.model_path.value().cloned(), p.build_info.value().cloned()),
        _ => (None, None),
    };
    data.iter()
        .map(|m| {
            let (context, source) = window(m, backend, shape, &windows);
            let state = m
                .state()
                .cloned()
                .or_else(|| shape.sleeping.then_some(ModelState::Sleeping));
            let path = path.clone().or_else(|| m.root.value().cloned());
            ServedModel {
                id: m.id.value().cloned().unwrap_or_default(),
                context,
                context_source: context.and(source),
                state,
                file: ModelFile::of(path, m.size(), build.clone()),
            }
        })
        .collect()
}

/// A model's per-slot window and where it came from.
fn window(
    m: &answer::ModelEntry,
    backend: Backend,
    shape: Shape,
    server: &ServerWindows,
) -> (Option<u64>, Option<ContextSource>) {
    let meta_ctx = m.meta_ctx().filter(|c| *c > 0);
    let max_model_len = m.max_model_len.value().copied();
    match backend {
        _ if shape.router || shape.swap => match (meta_ctx, preset_window(m)) {
            (Some(c), _) => (Some(c), Some(ContextSource::MetaNCtx)),
            (None, Some(c)) => (Some(c), Some(ContextSource::Preset)),
            (None, None) => (None, None),
        },
        Backend::Vllm => (max_model_len, Some(ContextSource::MaxModelLen)),
        _ => {
            if let (true, Some(c)) = (server.single, server.props) {
                (Some(c), Some(ContextSource::PropsNCtx))
            } else if let Some(c) = meta_ctx {
                (Some(c), Some(ContextSource::MetaNCtx))
            } else if let Some(c) = server.props {
                (Some(c), Some(ContextSource::PropsNCtx))
            } else if let Some(c) = server.slot {
                (Some(c), Some(ContextSource::SlotsNCtx))
            } else if let Some(c) = max_model_len {
                (Some(c), Some(ContextSource::MaxModelLen))
            } else {
                (None, None)
            }
        }
    }
}

/// The `/metrics` numbers, when it answered some.
fn counters_of(fetched: Option<&Result<Fetched, reqwest::Error>>) -> Option<Counters> {
    let body = ok_body(fetched?)?;
    let c = metrics::parse(&String::from_utf8_lossy(body));
    if c.is_empty() { None } else { Some(c) }
}

/// Slots: `/slots` first, else `/props` total plus the processing gauge.
fn slot_counts(
    slots: Option<&[answer::Object<answer::Slot>]>,
    props: Option<&answer::Props>,
    counters: Option<&Counters>,
) -> Option<Slots> {
    if let Some(arr) = slots {
        let total = arr.len() as u64;
        let busy = arr
            .iter()
            .filter(|s| s.value().is_some_and(answer::Slot::busy))
            .count() as u64;
        // Known only when every slot tells.
        let unused = arr
            .iter()
            .map(|s| s.value().and_then(answer::Slot::used))
            .try_fold(0u64, |n, used| used.map(|u| n + u64::from(!u)));
        return Some(Slots {
            total,
            busy,
            free: total.saturating_sub(busy),
            unused,
        });
    }
    let total = props?.total_slots.value().copied()?;
    let busy = metrics::first(counters?, &["llamacpp:requests_processing"])?;
    let busy = (busy as u64).min(total);
    Some(Slots {
        total,
        busy,
        free: total - busy,
        unused: None,
    })
}

/// vLLM's queue from its `/metrics`.
fn vllm_load(c: &Counters) -> Load {
    Load {
        running: metrics::first(c, &["vllm:num_requests_running"]).unwrap_or(0.0),
        waiting: metrics::first(c, &["vllm:num_requests_waiting"]).unwrap_or(0.0),
        kv_cache_usage: metrics::first(
            c,
            &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
        ),
    }
}

/// Non-fatal findings about an endpoint that is up.
fn add_warnings(st: &mut EndpointStatus, backend: Backend, props_answered: bool) {
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
    if backend == Backend::LlamaCpp && !props_answered {
        st.warnings
            .push("GET /props did not answer: per-slot window and slots unknown".into());
    }
}

/// The per-slot window a router will give a model it has not loaded, from
/// its launch args (`status.args`): `--ctx-size`/`-c`, divided by
/// `--parallel`/`-np` when that is given (with parallel on auto the slots
/// share one unified cache, each seeing the whole size).
pub fn preset_window(model: &answer::ModelEntry) -> Option<u64> {
    let args = model.args()?;
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
fn detect(data: &[answer::ModelEntry], props_answered: bool) -> Backend {
    let owned: Vec<answer::Owner> = data
        .iter()
        .filter_map(|m| m.owned_by.value().copied())
        .collect();
    if owned.contains(&answer::Owner::Vllm) {
        Backend::Vllm
    } else if owned
        .iter()
        .any(|o| matches!(o, answer::Owner::LlamaCpp | answer::Owner::LlamaSwap))
        || props_answered
    {
        // llama-swap fronts llama-server processes, as a rule.
        Backend::LlamaCpp
    } else if data.iter().any(|m| m.max_model_len.present()) {
        Backend::Vllm
    } else {
        Backend::Other
    }
}
