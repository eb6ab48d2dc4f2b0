//! The keys of `models.yaml`, their defaults, and their validation.
//!
//! Two shapes live here. [`FileShape`] mirrors one file with every field
//! optional and is the one place that names the keys. [`Config`] is the
//! merged result with defaults filled in, in config order (which is
//! priority order).

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

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
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(rename = "model (a mapping with notes, host, ...)")]
pub(super) struct ModelShape {
    pub notes: Option<String>,
    pub host: Option<String>,
    pub served_name: Option<String>,
    pub endpoint: Option<String>,
    pub context: Option<u64>,
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
}

/// Env values may be written as numbers or booleans; they become strings.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub(super) enum ScalarShape {
    S(String),
    N(serde_json::Number),
    B(bool),
}

impl ScalarShape {
    fn text(&self) -> String {
        match self {
            ScalarShape::S(s) => s.clone(),
            ScalarShape::N(n) => n.to_string(),
            ScalarShape::B(b) => b.to_string(),
        }
    }
}

/// The keys a shape accepts, from its schema.
fn keys_of<T: JsonSchema>() -> Vec<String> {
    let schema = schemars::schema_for!(T);
    schema
        .get("properties")
        .and_then(|p| p.as_object())
        .map(|p| p.keys().cloned().collect())
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

/// Which kind of server an endpoint is. `None` in [`Endpoint::backend`]
/// means "detect it".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Backend {
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    #[serde(rename = "vllm")]
    Vllm,
    #[serde(rename = "other")]
    Other,
}

impl Backend {
    pub fn parse(s: &str) -> Option<Backend> {
        match s.trim().to_ascii_lowercase().as_str() {
            "llama.cpp" | "llamacpp" | "llama-cpp" | "llama_cpp" | "llama-server" => {
                Some(Backend::LlamaCpp)
            }
            "vllm" => Some(Backend::Vllm),
            "other" | "openai" | "anthropic" => Some(Backend::Other),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::LlamaCpp => "llama.cpp",
            Backend::Vllm => "vllm",
            Backend::Other => "other",
        }
    }
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
}

impl Endpoint {
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
            acceptance_timeout_s: 600,
            load_timeout_s: 300,
            backend_fail_s: 120,
            reference_model: super::prices::DEFAULT_REFERENCE_MODEL.into(),
            loop_limit: 3,
            runaway_limit: DEFAULT_RUNAWAY_LIMIT,
            thinking: Thinking::Auto,
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
    pub fn builtin() -> Config {
        let local = |name: &str, port: u16, notes: &str| Endpoint {
            name: name.into(),
            base_url: format!("http://127.0.0.1:{port}"),
            backend: Some(Backend::LlamaCpp),
            host: Some("this machine".into()),
            notes: Some(notes.into()),
            env: IndexMap::new(),
            api_key_env: None,
            allow_insecure_key: false,
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
            if let Some(b) = e.backend {
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
    merged
        .get("trusted_projects")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|v| home_path(v.as_str()?))
        .collect()
}

/// A string that says something (empty ones count as unset).
fn text(s: &Option<String>) -> Option<String> {
    s.clone().filter(|v| !v.trim().is_empty())
}

fn valid_endpoint_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
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

/// Check an endpoint URL: http or https with a host. Returns it without a
/// trailing slash, or a sentence saying what is wrong.
pub fn check_base_url(raw: &str) -> Result<String, String> {
    let url = url::Url::parse(raw.trim()).map_err(|e| format!("`{raw}` is not a URL ({e})"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "`{raw}` uses scheme `{}`; only http and https are allowed",
            url.scheme()
        ));
    }
    if url.host_str().is_none() {
        return Err(format!("`{raw}` has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "`{raw}` has a query or fragment; give the bare base URL"
        ));
    }
    Ok(url.as_str().trim_end_matches('/').to_string())
}

/// Turn the merged value into a [`Config`]. Problems with single entries
/// become warnings and the entry is dropped or defaulted.
pub(super) fn build(merged: Value) -> (Config, Vec<String>) {
    let mut warnings = Vec::new();
    if merged.as_mapping().is_none_or(|m| m.is_empty()) {
        return (Config::builtin(), warnings);
    }
    let shape: FileShape = match serde_yaml_ng::from_value(merged) {
        Ok(s) => s,
        Err(e) => {
            warnings.push(format!(
                "the merged config does not fit together ({e}); using the built-in default"
            ));
            return (Config::builtin(), warnings);
        }
    };
    let mut endpoints: Vec<Endpoint> = shape
        .endpoints
        .iter()
        .flatten()
        .filter_map(|(name, entry)| build_endpoint(name, entry.as_ref(), &mut warnings))
        .collect();
    let models = build_models(shape.models.as_ref(), &endpoints, &mut warnings);
    let mut defaults = Defaults::default();
    if let Some(d) = &shape.defaults {
        apply_job_defaults(&mut defaults, d, &mut warnings);
        apply_guard_defaults(&mut defaults, d, &mut warnings);
    }
    let prices = build_prices(shape.prices.as_ref(), &mut warnings);
    let trusted_projects = shape
        .trusted_projects
        .iter()
        .flatten()
        .filter_map(|p| home_path(p))
        .collect();
    if shape.endpoints.is_none() {
        // Only models or defaults were written: keep the zero-config endpoint.
        endpoints = Config::builtin().endpoints;
    } else if endpoints.is_empty() {
        warnings.push(
            "no usable endpoint in the config: add one under `endpoints:` (e.g. base_url: http://127.0.0.1:8080)"
                .into(),
        );
    }
    (
        Config {
            endpoints,
            models,
            defaults,
            trusted_projects,
            prices,
        },
        warnings,
    )
}

/// One entry of `endpoints`, or none (with a warning saying why) when it
/// cannot be used.
fn build_endpoint(
    name: &str,
    entry: Option<&EndpointShape>,
    warnings: &mut Vec<String>,
) -> Option<Endpoint> {
    if !valid_endpoint_name(name) {
        warnings.push(format!(
            "endpoint `{name}`: names may use only letters, digits, `_`, `.` and `-`; it is skipped"
        ));
        return None;
    }
    let empty = EndpointShape::default();
    let m = entry.unwrap_or(&empty);
    let Some(raw_url) = text(&m.base_url) else {
        warnings.push(format!(
            "endpoint `{name}` has no base_url; it is skipped (add e.g. `base_url: http://127.0.0.1:8080`)"
        ));
        return None;
    };
    let base_url = match check_base_url(&raw_url) {
        Ok(u) => u,
        Err(why) => {
            warnings.push(format!("endpoint `{name}`: {why}; it is skipped"));
            return None;
        }
    };
    let backend = match text(&m.backend) {
        None => None,
        Some(b) if b.eq_ignore_ascii_case("auto") => None,
        Some(b) => match Backend::parse(&b) {
            Some(b) => Some(b),
            None => {
                warnings.push(format!(
                    "endpoint `{name}`: unknown backend `{b}` (use llama.cpp, vllm or other); it will be detected"
                ));
                None
            }
        },
    };
    let env: IndexMap<String, String> = m
        .env
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.text()))
        .collect();
    let api_key_env = text(&m.api_key_env);
    if let Some(var) = &api_key_env
        && std::env::var_os(var).is_none()
    {
        warnings.push(format!(
            "endpoint `{name}`: api_key_env names `{var}`, which is not set in this environment; export it where localagents runs"
        ));
    }
    let allow_insecure_key = m.allow_insecure_key.unwrap_or(false);
    if api_key_env.is_some() && !allow_insecure_key && !key_safe_url(&base_url) {
        warnings.push(format!(
            "endpoint `{name}`: its key is not sent: {base_url} is plain http to a host that is not loopback or private; use https, or set allow_insecure_key: true on it if you accept that"
        ));
    }
    Some(Endpoint {
        name: name.to_string(),
        base_url,
        allow_insecure_key,
        backend,
        host: text(&m.host),
        notes: text(&m.notes),
        env,
        api_key_env,
    })
}

/// The menu of models; one naming an endpoint that is not defined is kept,
/// with a warning.
fn build_models(
    shapes: Option<&IndexMap<String, Option<ModelShape>>>,
    endpoints: &[Endpoint],
    warnings: &mut Vec<String>,
) -> Vec<ModelEntry> {
    let mut models = Vec::new();
    for (name, entry) in shapes.into_iter().flatten() {
        let empty = ModelShape::default();
        let m = entry.as_ref().unwrap_or(&empty);
        let endpoint = text(&m.endpoint);
        if let Some(e) = &endpoint
            && !endpoints.iter().any(|x: &Endpoint| &x.name == e)
        {
            warnings.push(format!(
                "model `{name}`: endpoint `{e}` is not defined under `endpoints`"
            ));
        }
        models.push(ModelEntry {
            name: name.clone(),
            notes: text(&m.notes),
            host: text(&m.host),
            served_name: text(&m.served_name),
            endpoint,
            context: m.context,
            bring_up: text(&m.bring_up),
        });
    }
    models
}

/// The `defaults` that shape a job: model, permissions, tools, timeouts,
/// Claude's own settings.
fn apply_job_defaults(defaults: &mut Defaults, d: &DefaultsShape, warnings: &mut Vec<String>) {
    if let Some(v) = text(&d.model) {
        defaults.model = Some(v);
    }
    if let Some(v) = text(&d.permission_mode) {
        defaults.permission_mode = v;
    }
    if let Some(v) = &d.allowed_tools {
        defaults.allowed_tools = v.clone();
    }
    if let Some(v) = &d.disallowed_tools {
        defaults.disallowed_tools = v.clone();
    }
    if let Some(v) = &d.setting_sources {
        defaults.setting_sources = v.clone();
    }
    if let Some(v) = d.max_turns {
        defaults.max_turns = v;
    }
    if let Some(v) = d.timeout_s {
        defaults.timeout_s = v;
    }
    if let Some(v) = d.probe_timeout_s {
        if v > 0.0 && v <= 60.0 {
            defaults.probe_timeout_s = v;
        } else {
            warnings.push(format!(
                "defaults.probe_timeout_s = {v} is out of range (0, 60]; using 2.5"
            ));
        }
    }
    if let Some(v) = text(&d.system_prompt_append) {
        defaults.system_prompt_append = v;
    }
    if let Some(v) = d.dump_requests {
        defaults.dump_requests = v;
    }
    if let Some(v) = text(&d.claude_path) {
        defaults.claude_path = Some(v);
    }
    if let Some(v) = d.stream_idle_timeout_s {
        defaults.stream_idle_timeout_s = v.max(1);
    }
    if let Some(v) = text(&d.mcp_config) {
        defaults.mcp_config = Some(v);
    }
    if let Some(v) = d.first_byte_timeout_s {
        defaults.first_byte_timeout_s = Some(v.clamp(1, 24 * 3600));
    }
    if let Some(v) = d.allow_bypass_permissions {
        defaults.allow_bypass_permissions = v;
    }
}

/// The `defaults` that bound what a job may do: roots, sandbox, rounds,
/// load and acceptance timeouts, the loop guard, thinking.
fn apply_guard_defaults(defaults: &mut Defaults, d: &DefaultsShape, warnings: &mut Vec<String>) {
    for r in d.allowed_roots.iter().flatten() {
        match home_path(r) {
            Some(p) => defaults.allowed_roots.push(p),
            None => warnings.push(format!(
                "defaults.allowed_roots: `{r}` is not an absolute path (or one under ~/); it is ignored"
            )),
        }
    }
    if let Some(v) = d.sandbox {
        defaults.sandbox = v;
    }
    if let Some(v) = d.queue {
        defaults.queue = v;
    }
    if let Some(v) = d.prewarm {
        defaults.prewarm = v;
    }
    if let Some(v) = d.fix_rounds {
        if v <= 10 {
            defaults.fix_rounds = v;
        } else {
            warnings.push(format!("defaults.fix_rounds = {v} is over 10; using 2"));
        }
    }
    if let Some(v) = d.acceptance_timeout_s {
        defaults.acceptance_timeout_s = v.clamp(1, 7 * 24 * 3600);
    }
    if let Some(v) = d.load_timeout_s {
        defaults.load_timeout_s = v.clamp(1, 24 * 3600);
    }
    if let Some(v) = d.backend_fail_s {
        defaults.backend_fail_s = v.min(7 * 24 * 3600);
    }
    if let Some(v) = d
        .reference_model
        .as_deref()
        .map(str::trim)
        .filter(|v| !v.is_empty())
    {
        defaults.reference_model = v.to_string();
    }
    if let Some(v) = d.loop_limit {
        if v == 0 || (2..=50).contains(&v) {
            defaults.loop_limit = v;
        } else {
            warnings.push(format!(
                "defaults.loop_limit = {v} is not 2 to 50; using 3 (0 turns the guard off)"
            ));
        }
    }
    if let Some(v) = d.runaway_limit {
        if v <= 20 {
            defaults.runaway_limit = v;
        } else {
            warnings.push(format!(
                "defaults.runaway_limit = {v} is over 20; using {DEFAULT_RUNAWAY_LIMIT} (0 turns the guard off)"
            ));
        }
    }
    if let Some(v) = d.thinking.as_deref() {
        match Thinking::parse(v) {
            Some(t) => defaults.thinking = t,
            None => warnings.push(format!(
                "defaults.thinking = `{v}` is not auto, keep or drop; using auto"
            )),
        }
    }
}

/// `prices`, by model; an entry without both prices is ignored, with a
/// warning.
fn build_prices(
    shapes: Option<&IndexMap<String, PriceShape>>,
    warnings: &mut Vec<String>,
) -> IndexMap<String, super::prices::Price> {
    let mut prices = IndexMap::new();
    for (model, p) in shapes.into_iter().flatten() {
        match (p.input, p.output) {
            (Some(input), Some(output)) if input >= 0.0 && output >= 0.0 => {
                let cache_read = p.cache_read.filter(|c| *c >= 0.0).unwrap_or(input / 10.0);
                prices.insert(
                    model.clone(),
                    super::prices::Price {
                        input,
                        output,
                        cache_read,
                    },
                );
            }
            _ => warnings.push(format!(
                "prices.{model} needs input and output (USD per million tokens, not negative); ignored"
            )),
        }
    }
    prices
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
