//! The keys of `models.yaml`, their defaults, and the checks of a key or a URL.
//!
//! Two shapes live here. [`FileShape`] mirrors one file with every field
//! optional and is the one place that names the keys. [`Config`] is the
//! merged result with defaults filled in, in config order (which is
//! priority order). The checks that turn the one into the other live in
//! [`super::build`].

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

pub use super::backend::Backend;
pub use super::wire::WireSetting;

/// One file (and the merged result), every field optional. These structs
/// are the one place that names the keys: deserialising gives line and
/// column for type errors, `serde_ignored` reports unknown keys, the
/// "did you mean" hints come from their schema, and [`build`] reads them.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "models.yaml (a mapping with endpoints, models, defaults)")]
pub(super) struct FileShape {
    #[schemars(with = "Option<std::collections::BTreeMap<String, Option<EndpointShape>>>")]
    pub endpoints: Option<IndexMap<String, Option<EndpointShape>>>,
    #[schemars(with = "Option<std::collections::BTreeMap<String, Option<ModelShape>>>")]
    pub models: Option<IndexMap<String, Option<ModelShape>>>,
    pub defaults: Option<DefaultsShape>,
    /// Projects whose own models.yaml is read in full (`localagents trust`).
    /// Honoured only from user scope.
    pub trusted_projects: Option<Vec<String>>,
    /// List prices per million tokens for the ledger, by model name.
    #[schemars(with = "Option<std::collections::BTreeMap<String, PriceShape>>")]
    pub prices: Option<IndexMap<String, PriceShape>>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "price (a mapping with input, output, cache_read in USD per million tokens)")]
pub(super) struct PriceShape {
    pub input: Option<f64>,
    pub output: Option<f64>,
    pub cache_read: Option<f64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "endpoint (a mapping with base_url, backend, ...)")]
pub(super) struct EndpointShape {
    pub base_url: Option<String>,
    pub backend: Option<String>,
    pub host: Option<String>,
    pub notes: Option<String>,
    #[schemars(with = "Option<std::collections::BTreeMap<String, ScalarShape>>")]
    pub env: Option<IndexMap<String, ScalarShape>>,
    pub api_key_env: Option<String>,
    pub allow_insecure_key: Option<bool>,
    pub session_header: Option<String>,
    pub wire: Option<String>,
    pub window: Option<u64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "model (a mapping with notes, host, ...)")]
pub(super) struct ModelShape {
    pub notes: Option<String>,
    pub host: Option<String>,
    pub served_name: Option<String>,
    pub endpoint: Option<String>,
    pub context: Option<u64>,
    pub window: Option<u64>,
    pub bring_up: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "defaults (a mapping)")]
pub(super) struct DefaultsShape {
    pub model: Option<String>,
    pub permission_mode: Option<String>,
    pub allowed_tools: Option<Vec<String>>,
    pub disallowed_tools: Option<Vec<String>>,
    pub setting_sources: Option<Vec<String>>,
    pub max_turns: Option<u32>,
    pub timeout_s: Option<u64>,
    pub probe_timeout_s: Option<f64>,
    pub system_prompt_append: Option<String>,
    pub dump_requests: Option<bool>,
    pub claude_path: Option<String>,
    pub stream_idle_timeout_s: Option<u64>,
    pub mcp_config: Option<String>,
    pub first_byte_timeout_s: Option<u64>,
    pub allow_bypass_permissions: Option<bool>,
    pub allowed_roots: Option<Vec<String>>,
    pub sandbox: Option<bool>,
    pub queue: Option<bool>,
    pub prewarm: Option<bool>,
    pub fix_rounds: Option<u32>,
    pub acceptance_timeout_s: Option<u64>,
    pub load_timeout_s: Option<u64>,
    pub backend_fail_s: Option<u64>,
    pub reference_model: Option<String>,
    pub loop_limit: Option<u32>,
    pub runaway_limit: Option<u32>,
    pub thinking: Option<String>,
    pub window_budget: Option<bool>,
    pub clear_tool_results: Option<String>,
    pub nudges: Option<u32>,
    pub keep_days: Option<u32>,
    pub otel: Option<super::otel::OtelShape>,
}

/// Days an ended job is kept by default: as long as Claude Code keeps its
/// own sessions (`cleanupPeriodDays`).
pub const DEFAULT_KEEP_DAYS: u32 = 30;

/// The longest `defaults.keep_days` (a century): `cleanup_jobs`' longest
/// age too, which retention passes it to.
pub const MAX_KEEP_DAYS: u32 = 36_500;

/// Env values may be written as numbers or booleans; they become strings.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum ScalarShape {
    S(String),
    N(serde_json::Number),
    B(bool),
}

impl ScalarShape {
    pub(super) fn text(&self) -> String {
        match self {
            ScalarShape::S(s) => s.clone(),
            ScalarShape::N(n) => n.to_string(),
            ScalarShape::B(b) => b.to_string(),
        }
    }
}

/// The keys a shape accepts, from its schema.
fn keys_of<T: JsonSchema>() -> Vec<String> {
    /// The part of a JSON schema read here.
    #[derive(Deserialize)]
    struct Properties {
        #[serde(default)]
        properties: serde_json::Map<String, serde_json::Value>,
    }
    let schema = schemars::schema_for!(T);
    serde_json::from_value::<Properties>(schema.into())
        .map(|p| p.properties.keys().cloned().collect())
        .unwrap_or_default()
}

/// The valid keys of each section.
pub fn top_keys() -> Vec<String> {
    keys_of::<FileShape>()
}
pub fn endpoint_keys() -> Vec<String> {
    keys_of::<EndpointShape>()
}
pub fn model_keys() -> Vec<String> {
    keys_of::<ModelShape>()
}
pub fn default_keys() -> Vec<String> {
    keys_of::<DefaultsShape>()
}

/// A place that serves `/v1/messages`.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    pub name: String,
    /// Without a trailing slash.
    pub base_url: String,
    /// `None`: detect from `/v1/models` and which endpoints answer.
    pub backend: Option<Backend>,
    pub host: Option<String>,
    pub notes: Option<String>,
    /// Extra env for delegate sessions on this endpoint.
    pub env: IndexMap<String, String>,
    /// Name of the env var holding the API key. Never the key itself.
    pub api_key_env: Option<String>,
    /// Send the key over plain http to a host that is not loopback or
    /// private (off by default).
    pub allow_insecure_key: bool,
    /// The header that carries a job's session identity on every request
    /// of the job ([`DEFAULT_SESSION_HEADER`]); `None`: none is sent
    /// (`session_header: ""`). A router in front of several servers keeps a
    /// session on one of them by it.
    pub session_header: Option<String>,
    /// Declared `backend: vllm-router`: the endpoint is vLLM's router, and
    /// its replicas are probed one by one (detected from `/list_workers`
    /// otherwise). The replicas' own backend stays in [`Endpoint::backend`]
    /// (`None`: detected from them).
    pub vllm_router: bool,
    /// `wire: messages | chat`: which endpoint a job's requests go to
    /// (`None`: the shim's rule, `crate::shim::chat::choose`).
    pub wire: Option<WireSetting>,
    /// `window:`: the per-request window of every model this server
    /// serves, for a server that does not say its own (an
    /// OpenAI-compatible one, mlx_lm.server, Jan). The server's own word
    /// wins.
    pub window: Option<u64>,
}

/// `session_header` when an endpoint does not set it: the first header
/// vLLM's router (`vllm-router --policy consistent_hash`) hashes a request
/// by.
pub const DEFAULT_SESSION_HEADER: &str = "X-Session-ID";

/// Headers `session_header` may not name: they carry credentials, or
/// framing the HTTP client owns.
pub const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "cookie",
    "x-api-key",
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
    "accept",
    "anthropic-version",
];

impl Endpoint {
    /// An endpoint at `base_url` with nothing else set: backend detected,
    /// no key, no env, no session header (a router's replica, a probe of
    /// a URL alone).
    pub fn at(name: &str, base_url: &str) -> Endpoint {
        Endpoint {
            name: name.to_string(),
            base_url: base_url.to_string(),
            backend: None,
            host: None,
            notes: None,
            env: IndexMap::new(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        }
    }

    /// The API key, read from the environment now. Never log it.
    pub fn api_key(&self) -> Option<String> {
        if !self.allow_insecure_key && !key_safe_url(&self.base_url) {
            return None;
        }
        let var = self.api_key_env.as_deref()?;
        std::env::var(var).ok().filter(|k| !k.is_empty())
    }

    /// A label for the machine, for "ask the user to start it on HOST".
    pub fn host_label(&self) -> String {
        if let Some(h) = &self.host {
            return h.clone();
        }
        url::Url::parse(&self.base_url)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string))
            .unwrap_or_else(|| self.name.clone())
    }
}

/// One name on the menu of models.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelEntry {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// Exact served id, or a glob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub served_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Fallback window when the server does not report one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// A command that starts the model (used by `bringup`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bring_up: Option<String>,
}

/// `defaults.runaway_limit` when unset: answers the shim's runaway guard
/// stops in one job before the job fails. Claude Code answers a stream
/// that ends in an error by asking the same thing once more without
/// streaming: that is the model's second chance (a loop can be a sampling
/// accident); a second runaway means the model or its template is broken
/// for this work.
pub const DEFAULT_RUNAWAY_LIMIT: u32 = 2;

/// `defaults:`; see `models.example.yaml` for what each key does.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Defaults {
    pub model: Option<String>,
    pub permission_mode: String,
    pub allowed_tools: Vec<String>,
    pub disallowed_tools: Vec<String>,
    pub setting_sources: Vec<String>,
    pub max_turns: u32,
    pub timeout_s: u64,
    pub probe_timeout_s: f64,
    pub system_prompt_append: String,
    pub dump_requests: bool,
    pub claude_path: Option<String>,
    /// Longest silence tolerated inside a streamed answer.
    pub stream_idle_timeout_s: u64,
    /// An MCP config file (`claude --mcp-config`) whose servers delegates
    /// get; none by default (delegates run with `--strict-mcp-config`).
    pub mcp_config: Option<String>,
    /// Longest wait for a streamed answer's first byte; `None`: from the
    /// window (see `shim::first_byte_timeout`).
    pub first_byte_timeout_s: Option<u64>,
    /// May a `run_agent` call ask for `bypassPermissions`? Off by default.
    pub allow_bypass_permissions: bool,
    /// Directories (besides the calling session's project) that `run_agent`
    /// may run in.
    pub allowed_roots: Vec<PathBuf>,
    /// Run delegates inside Claude Code's own sandbox.
    pub sandbox: bool,
    /// A job takes a lease on one slot of its endpoint and waits in a
    /// queue when every slot is leased.
    pub queue: bool,
    /// Send the delegate's fixed prefix to each idle server when `serve`
    /// starts.
    pub prewarm: bool,
    /// Fix rounds after a failed acceptance command.
    pub fix_rounds: u32,
    /// Days an ended job is kept before retention removes it (0: kept
    /// for ever); work not merged is never removed.
    pub keep_days: u32,
    /// Longest run of one acceptance command.
    pub acceptance_timeout_s: u64,
    /// Longest wait for a server to load (or wake) a job's model.
    pub load_timeout_s: u64,
    /// A job whose backend has failed every request this long stops with
    /// the shim's sentence for the failure (0: wait out `timeout_s`).
    pub backend_fail_s: u64,
    /// The Anthropic model whose list prices the ledger uses.
    pub reference_model: String,
    /// Identical calls with identical results in a row before the loop
    /// guard's note (twice as many stop the job); 0 turns it off.
    pub loop_limit: u32,
    /// Answers the runaway guard stops in one job before the job fails
    /// with the likely cause and its fix; 0 turns the guard off.
    pub runaway_limit: u32,
    /// What the shim does with thinking blocks in the history.
    pub thinking: Thinking,
    /// Under 128k, hold the delegate to a budget of its window
    /// ([`crate::budget`]): its output, one tool result, and where it
    /// compacts. Off: Claude Code's own settings for the window.
    pub window_budget: bool,
    /// Whether the shim replaces old tool results with a one-line stub
    /// once the prompt fills a share of the window.
    pub clear_tool_results: ClearToolResults,
    /// Times a job without an acceptance command resumes a delegate that
    /// ended its turn announcing a step it did not take
    /// ([`crate::jobs::pending`]); 0 turns the nudge off.
    pub nudges: u32,
    /// Where the telemetry goes when no `OTEL_*` variable says
    /// ([`super::otel`]); `None`: not set.
    pub otel: Option<super::otel::OtelConfig>,
}

/// `defaults.clear_tool_results`. Off by default: on the reader and
/// edit-heavy jobs (`cargo bench --bench long_jobs`) clearing halved the
/// compactions at 32k and 64k but re-processed more prompt tokens than
/// those compactions did (docs/benchmarks.md, "Long jobs on small
/// windows").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ClearToolResults {
    /// On for windows under 128k.
    Auto,
    /// On for every window.
    On,
    /// Never.
    #[default]
    Off,
}

impl ClearToolResults {
    pub fn parse(s: &str) -> Option<ClearToolResults> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(ClearToolResults::Auto),
            "on" | "true" => Some(ClearToolResults::On),
            "off" | "false" => Some(ClearToolResults::Off),
            _ => None,
        }
    }

    /// Whether clearing is on for a job on `window`.
    pub fn on_for(self, window: Option<u64>) -> bool {
        match self {
            ClearToolResults::Auto => window.is_some_and(|w| w < 131_072),
            ClearToolResults::On => window.is_some(),
            ClearToolResults::Off => false,
        }
    }
}

/// `defaults.thinking`: thinking blocks that Claude Code sends back in the
/// history. llama.cpp turns them into the template's `reasoning_content`
/// (and ignores `redacted_thinking`); vLLM turns them into `reasoning` since
/// 0.17, while older builds refuse the block type with a 400.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Thinking {
    /// Keep them; when the server refuses a request for them, drop them
    /// from then on (the request is sent again without them).
    #[default]
    Auto,
    /// Always send them (a refusal is passed on).
    Keep,
    /// Never send them.
    Drop,
}

impl Thinking {
    pub fn parse(s: &str) -> Option<Thinking> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Some(Thinking::Auto),
            "keep" => Some(Thinking::Keep),
            "drop" => Some(Thinking::Drop),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Thinking::Auto => "auto",
            Thinking::Keep => "keep",
            Thinking::Drop => "drop",
        }
    }
}

pub const DEFAULT_SYSTEM_PROMPT_APPEND: &str = "You are a delegate: another agent wrote this task for you and will review your work. Work only on the task. Do not ask questions; nobody can answer them. When you finish, report in a few lines: what you changed (files), how you verified it (the commands you ran and their outcome), and anything you could not finish or are unsure about.";

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            model: None,
            permission_mode: "acceptEdits".into(),
            allowed_tools: ["Read", "Edit", "Write", "Glob", "Grep", "Bash", "WebFetch"]
                .map(String::from)
                .to_vec(),
            disallowed_tools: ["Agent", "Task"].map(String::from).to_vec(),
            setting_sources: ["project", "local"].map(String::from).to_vec(),
            max_turns: 60,
            timeout_s: 1800,
            probe_timeout_s: 2.5,
            system_prompt_append: DEFAULT_SYSTEM_PROMPT_APPEND.into(),
            dump_requests: false,
            claude_path: None,
            stream_idle_timeout_s: 300,
            mcp_config: None,
            first_byte_timeout_s: None,
            allow_bypass_permissions: false,
            allowed_roots: Vec::new(),
            sandbox: false,
            queue: true,
            prewarm: true,
            fix_rounds: 2,
            keep_days: DEFAULT_KEEP_DAYS,
            acceptance_timeout_s: 600,
            load_timeout_s: 300,
            backend_fail_s: 120,
            reference_model: super::prices::DEFAULT_REFERENCE_MODEL.into(),
            loop_limit: 3,
            runaway_limit: DEFAULT_RUNAWAY_LIMIT,
            thinking: Thinking::Auto,
            window_budget: true,
            nudges: 1,
            clear_tool_results: ClearToolResults::Off,
            otel: None,
        }
    }
}

/// The zero-config endpoint on llama.cpp's announced new default port.
pub const BUILTIN_NEXT_PORT_NAME: &str = "local-9931";

/// The merged config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub endpoints: Vec<Endpoint>,
    pub models: Vec<ModelEntry>,
    pub defaults: Defaults,
    /// Projects whose models.yaml is read in full.
    pub trusted_projects: Vec<PathBuf>,
    /// The user's list prices (over the built-in table).
    pub prices: IndexMap<String, super::prices::Price>,
}

impl Config {
    /// Zero config: llama.cpp's default port on this machine, `local` at
    /// `127.0.0.1:8080`, and the new default its README announces,
    /// `local-9931` at `127.0.0.1:9931` (ggml-org/llama.cpp PR 26508: the
    /// builds of late 2026 still listen on 8080 and print a notice).
    /// Ollama's and LM Studio's default ports too (`ollama` at 11434,
    /// `lmstudio` at 1234), declared so that their probe asks only their
    /// own paths; all four are probed at once within the one budget.
    pub fn builtin() -> Config {
        let local = |name: &str, port: u16, notes: &str| Endpoint {
            name: name.into(),
            base_url: format!("http://127.0.0.1:{port}"),
            backend: Some(match port {
                11434 => Backend::Ollama,
                1234 => Backend::LmStudio,
                _ => Backend::LlamaCpp,
            }),
            host: Some("this machine".into()),
            notes: Some(notes.into()),
            env: IndexMap::new(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: Some(DEFAULT_SESSION_HEADER.into()),
            vllm_router: false,
            wire: None,
            window: None,
        };
        Config {
            endpoints: vec![
                local(
                    "local",
                    8080,
                    "built-in default: no models.yaml was found (llama.cpp's default port)",
                ),
                local(
                    BUILTIN_NEXT_PORT_NAME,
                    9931,
                    "built-in default: llama.cpp's announced new default port",
                ),
                local("ollama", 11434, "built-in default: Ollama's default port"),
                local("lmstudio", 1234, "built-in default: LM Studio's default port"),
            ],
            models: Vec::new(),
            defaults: Defaults::default(),
            trusted_projects: Vec::new(),
            prices: IndexMap::new(),
        }
    }

    /// Are these endpoints the zero-config pair?
    pub fn endpoints_are_builtin(&self) -> bool {
        self.endpoints == Config::builtin().endpoints
    }

    /// The reference model's price (none when neither table has it).
    pub fn reference_price(&self) -> Option<super::prices::Price> {
        super::prices::lookup(&self.prices, &self.defaults.reference_model)
    }

    /// The list price of `model` as Anthropic's API names it
    /// (`claude-sonnet-4-5-20250929` is the table's `claude-sonnet-4.5`).
    pub fn price_of(&self, model: &str) -> Option<super::prices::Price> {
        super::prices::lookup(&self.prices, model)
            .or_else(|| super::prices::lookup(&self.prices, &super::prices::table_name(model)))
    }

    /// These token counts at the reference model's list prices, in USD
    /// rounded to 1/100 cent.
    pub fn equivalent_usd(&self, input: u64, cache_read: u64, output: u64) -> Option<f64> {
        self.reference_price()
            .map(|p| (p.usd(input, cache_read, output) * 10_000.0).round() / 10_000.0)
    }

    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    pub fn model(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }

    /// A YAML value of the merged config, for `config check`.
    pub fn to_value(&self) -> Value {
        let mut eps = Mapping::new();
        for e in &self.endpoints {
            let mut m = Mapping::new();
            m.insert("base_url".into(), e.base_url.clone().into());
            if e.vllm_router {
                m.insert("backend".into(), "vllm-router".into());
            } else if let Some(b) = e.backend {
                m.insert("backend".into(), b.as_str().into());
            }
            if let Some(h) = &e.host {
                m.insert("host".into(), h.clone().into());
            }
            if let Some(n) = &e.notes {
                m.insert("notes".into(), n.clone().into());
            }
            if !e.env.is_empty() {
                let env: Mapping = e
                    .env
                    .iter()
                    .map(|(k, v)| (Value::from(k.clone()), Value::from(v.clone())))
                    .collect();
                m.insert("env".into(), Value::Mapping(env));
            }
            if let Some(k) = &e.api_key_env {
                m.insert("api_key_env".into(), k.clone().into());
            }
            if e.allow_insecure_key {
                m.insert("allow_insecure_key".into(), true.into());
            }
            if e.session_header.as_deref() != Some(DEFAULT_SESSION_HEADER) {
                m.insert(
                    "session_header".into(),
                    e.session_header.clone().unwrap_or_default().into(),
                );
            }
            if let Some(w) = e.wire {
                m.insert("wire".into(), w.as_str().into());
            }
            eps.insert(e.name.clone().into(), Value::Mapping(m));
        }
        let mut models = Mapping::new();
        for m in &self.models {
            let mut v = serde_yaml_ng::to_value(m).unwrap_or(Value::Null);
            if let Value::Mapping(map) = &mut v {
                map.remove("name");
            }
            models.insert(m.name.clone().into(), v);
        }
        let mut root = Mapping::new();
        root.insert("endpoints".into(), Value::Mapping(eps));
        root.insert("models".into(), Value::Mapping(models));
        root.insert(
            "defaults".into(),
            serde_yaml_ng::to_value(&self.defaults).unwrap_or(Value::Null),
        );
        if !self.trusted_projects.is_empty() {
            root.insert(
                "trusted_projects".into(),
                serde_yaml_ng::to_value(&self.trusted_projects).unwrap_or(Value::Null),
            );
        }
        Value::Mapping(root)
    }
}

/// The nearest valid key, if it is near enough to be a typo.
pub fn nearest<'a>(key: &str, valid: &'a [String]) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    valid
        .iter()
        .map(|v| (strsim::damerau_levenshtein(&key_l, v), v.as_str()))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, v)| *d <= (v.len() / 3).max(2))
        .map(|(_, v)| v)
}

/// The segments of a path `serde_ignored` reports (map keys and fields).
fn segments(path: &serde_ignored::Path) -> Vec<String> {
    use serde_ignored::Path as P;
    match path {
        P::Root => Vec::new(),
        P::Seq { parent, index } => {
            let mut v = segments(parent);
            v.push(index.to_string());
            v
        }
        P::Map { parent, key } => {
            let mut v = segments(parent);
            v.push(key.clone());
            v
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            segments(parent)
        }
    }
}

/// The typed pass over one file: type errors with line and column, and the
/// unknown keys (as segment lists) that `serde_ignored` saw.
pub(super) fn check_text(text: &str) -> Result<Vec<Vec<String>>, serde_yaml_ng::Error> {
    let mut unknown = Vec::new();
    let de = serde_yaml_ng::Deserializer::from_str(text);
    let _: FileShape = serde_ignored::deserialize(de, |p| unknown.push(segments(&p)))?;
    Ok(unknown)
}

/// Remove one unknown key from a file's value, with the warning for it.
pub(super) fn strip_unknown(path: &Path, value: &mut Value, key: &[String]) -> Option<String> {
    let (last, parents) = key.split_last()?;
    let valid = match parents {
        [] => top_keys(),
        [s, _] if s == "endpoints" => endpoint_keys(),
        [s, _] if s == "models" => model_keys(),
        [s] if s == "defaults" => default_keys(),
        _ => return None,
    };
    let mut at = &mut *value;
    for p in parents {
        at = at.get_mut(p.as_str())?;
    }
    at.as_mapping_mut()?.shift_remove(last.as_str())?;
    let shown = key.join(".");
    let hint = match nearest(last, &valid) {
        Some(n) => format!("did you mean `{n}`?"),
        None => format!("valid keys: {}", valid.join(", ")),
    };
    Some(format!(
        "{}: unknown key `{shown}` ({hint}); it is ignored",
        path.display()
    ))
}

/// An absolute path, or one under `~/` (expanded with HOME).
pub fn home_path(s: &str) -> Option<PathBuf> {
    let p = match s.strip_prefix("~/") {
        Some(rest) => PathBuf::from(std::env::var_os("HOME")?).join(rest),
        None if s == "~" => PathBuf::from(std::env::var_os("HOME")?),
        None => PathBuf::from(s),
    };
    p.is_absolute().then_some(p)
}

/// The `trusted_projects` of a (user-scope) merged value, before it is
/// built: the loader needs them to decide how to read the project's files.
pub(super) fn trusted_projects(merged: &Value) -> Vec<PathBuf> {
    /// The one key read before the value is built (any other shape: none).
    #[derive(Deserialize)]
    struct Trusted {
        #[serde(default)]
        trusted_projects: Vec<Value>,
    }
    Trusted::deserialize(merged)
        .map(|t| t.trusted_projects)
        .unwrap_or_default()
        .iter()
        .filter_map(|v| home_path(v.as_str()?))
        .collect()
}

/// May a key travel to this URL? https always; plain http only to a
/// loopback or private address (or `localhost`).
pub fn key_safe_url(base_url: &str) -> bool {
    let Ok(u) = url::Url::parse(base_url) else {
        return false;
    };
    if u.scheme() == "https" {
        return true;
    }
    match u.host() {
        Some(url::Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        Some(url::Host::Ipv6(ip)) => {
            ip.is_loopback() || ip.is_unique_local() || ip.is_unicast_link_local()
        }
        None => false,
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn keys_come_from_the_shapes() {
        assert_eq!(
            top_keys(),
            [
                "endpoints",
                "models",
                "defaults",
                "trusted_projects",
                "prices"
            ]
        );
        assert!(default_keys().iter().any(|k| k == "mcp_config"));
        assert!(endpoint_keys().iter().any(|k| k == "api_key_env"));
        let valid = model_keys();
        assert_eq!(nearest("srved_name", &valid), Some("served_name"));
        let unknown = check_text("models:\n  a.b:\n    notse: x\ndefaults:\n  modle: m\n").unwrap();
        assert_eq!(
            unknown,
            [
                vec!["models".to_string(), "a.b".into(), "notse".into()],
                vec!["defaults".to_string(), "modle".into()]
            ]
        );
    }
}
