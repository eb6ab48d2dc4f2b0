//! What a probe says of one endpoint: `EndpointStatus` (the `endpoints[]`
//! object of `status --json` and `list_models`) and the parts it is made
//! of, with the windows that decide a warning. Types only: `fetch.rs` fills
//! them, `read.rs` reads a server's answers into them.

use std::time::Duration;

use serde::Serialize;

use super::classify::FailureKind;
use super::metrics::Counters;
use super::replicas::Replica;
use crate::config::Endpoint;

/// How long a probe result is reused.
pub const CACHE_TTL: Duration = Duration::from_millis(1000);

/// Below this per-slot window a delegate runs on a window budget
/// ([`crate::budget`]): Claude Code's defaults (32k of output, compaction
/// at window − 33k) do not fit it.
pub const SMALL_WINDOW: u64 = 131_072;

/// The smallest per-slot window a delegate is supported on (issue 45):
/// under it `status` warns, and on Ollama and LM Studio (which truncate a
/// longer prompt without an error) no job starts. With the window budget
/// ([`crate::budget`]) Claude Code 2.1.328 compacts at
/// `window − 2·output − one tool result − 1.7k`, and below 16k that point
/// is under its fixed prompt (4,581 tokens lean) plus one whole tool
/// result: the conversation cannot hold what the model just read. At
/// 16,384 the reader job of `cargo bench --bench long_jobs` (20 files of
/// 4,500 tokens) finishes on the fake and on the real llama-server
/// (e2e t24); docs/benchmarks.md has the figures.
pub const MIN_WINDOW: u64 = 16_384;

/// One model id a server serves.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ServedModel {
    pub id: String,
    /// Per-slot context window in tokens, when known.
    pub context: Option<u64>,
    /// Where `context` came from: `props.n_ctx`, `v1/models meta.n_ctx`,
    /// `slots.n_ctx`, `max_model_len`, `preset` (a router's launch args for
    /// a model it has not loaded), `config` (the model's `context:` or
    /// `window:`, else the endpoint's `window:`), `api/ps context_length`
    /// (Ollama), `loaded_instances.config.context_length` or
    /// `loaded_context_length` (LM Studio), `v1/models context_length`
    /// (exo, Lemonade), `engines/_configure context-size` or
    /// `dmr.context_window` (Docker Model Runner), `v1/model max_seq_len`
    /// (TabbyAPI), `true_max_context_length` (KoboldCpp).
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
    /// Ollama `/api/ps` `context_length` of a loaded model.
    #[serde(rename = "api/ps context_length")]
    OllamaPs,
    /// LM Studio `/api/v1/models` `loaded_instances[].config.context_length`.
    #[serde(rename = "loaded_instances.config.context_length")]
    LmsInstance,
    /// LM Studio `/api/v0/models` `loaded_context_length`.
    #[serde(rename = "loaded_context_length")]
    LmsV0,
    /// `/v1/models` `context_length` (exo, Lemonade).
    #[serde(rename = "v1/models context_length")]
    ContextLength,
    /// Docker Model Runner `/engines/_configure` `Config.context-size`.
    #[serde(rename = "engines/_configure context-size")]
    DmrConfigure,
    /// Docker Model Runner `/v1/models` `dmr.context_window`.
    #[serde(rename = "dmr.context_window")]
    DmrContextWindow,
    /// TabbyAPI `/v1/model` `parameters.max_seq_len`.
    #[serde(rename = "v1/model max_seq_len")]
    MaxSeqLen,
    /// KoboldCpp `/api/extra/true_max_context_length`.
    #[serde(rename = "true_max_context_length")]
    TrueMaxContext,
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
            ContextSource::OllamaPs => "api/ps context_length",
            ContextSource::LmsInstance => "loaded_instances.config.context_length",
            ContextSource::LmsV0 => "loaded_context_length",
            ContextSource::ContextLength => "v1/models context_length",
            ContextSource::DmrConfigure => "engines/_configure context-size",
            ContextSource::DmrContextWindow => "dmr.context_window",
            ContextSource::MaxSeqLen => "v1/model max_seq_len",
            ContextSource::TrueMaxContext => "true_max_context_length",
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
    /// Ollama (`/api/ps`, `/api/version`): loads models on demand.
    #[serde(rename = "ollama")]
    Ollama,
    /// LM Studio (`/api/v1/models` `loaded_instances`, or its 200 carrying
    /// `Unexpected endpoint or method.`): loads models on demand.
    #[serde(rename = "lmstudio")]
    LmStudio,
}

impl ServerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerKind::Router => "router",
            ServerKind::LlamaSwap => "llama-swap",
            ServerKind::Sleeping => "sleeping",
            ServerKind::VllmRouter => "vllm-router",
            ServerKind::Ollama => "ollama",
            ServerKind::LmStudio => "lmstudio",
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
    pub(super) fn of(path: Option<String>, size: Option<u64>, build: Option<String>) -> Option<ModelFile> {
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
    /// llama-server asleep), `vllm-router` (vLLM's router in front of
    /// `replicas`), `ollama` or `lmstudio`; none for a plain server.
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

    pub(super) fn fail(mut self, kind: FailureKind, sentence: String) -> Self {
        self.up = false;
        self.error_kind = Some(kind);
        self.error = Some(sentence);
        self
    }
}
