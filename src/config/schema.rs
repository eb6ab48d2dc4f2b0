//! The keys of `models.yaml`, their defaults, and their validation.
//!
//! Two shapes live here. [`FileShape`] mirrors one file with every field
//! optional; deserialising into it only exists to turn type errors into
//! messages with line and column. [`Config`] is the merged result with
//! defaults filled in, in config order (which is priority order).

use std::path::Path;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_yaml_ng::{Mapping, Value};

pub const TOP_KEYS: &[&str] = &["endpoints", "models", "defaults"];
pub const ENDPOINT_KEYS: &[&str] = &["base_url", "backend", "host", "notes", "env", "api_key_env"];
pub const MODEL_KEYS: &[&str] = &[
    "notes",
    "host",
    "served_name",
    "endpoint",
    "context",
    "bring_up",
];
pub const DEFAULT_KEYS: &[&str] = &[
    "model",
    "permission_mode",
    "allowed_tools",
    "disallowed_tools",
    "setting_sources",
    "max_turns",
    "timeout_s",
    "probe_timeout_s",
    "system_prompt_append",
    "dump_requests",
    "claude_path",
    "stream_idle_timeout_s",
    "mcp_config",
];

/// One file, every field optional. Only used for its type errors.
#[derive(Deserialize)]
#[serde(rename = "models.yaml (a mapping with endpoints, models, defaults)")]
#[allow(dead_code)]
pub(super) struct FileShape {
    endpoints: Option<IndexMap<String, Option<EndpointShape>>>,
    models: Option<IndexMap<String, Option<ModelShape>>>,
    defaults: Option<DefaultsShape>,
}

#[derive(Deserialize)]
#[serde(rename = "endpoint (a mapping with base_url, backend, ...)")]
#[allow(dead_code)]
struct EndpointShape {
    base_url: Option<String>,
    backend: Option<String>,
    host: Option<String>,
    notes: Option<String>,
    env: Option<IndexMap<String, ScalarShape>>,
    api_key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename = "model (a mapping with notes, host, ...)")]
#[allow(dead_code)]
struct ModelShape {
    notes: Option<String>,
    host: Option<String>,
    served_name: Option<String>,
    endpoint: Option<String>,
    context: Option<u64>,
    bring_up: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename = "defaults (a mapping)")]
#[allow(dead_code)]
struct DefaultsShape {
    model: Option<String>,
    permission_mode: Option<String>,
    allowed_tools: Option<Vec<String>>,
    disallowed_tools: Option<Vec<String>>,
    setting_sources: Option<Vec<String>>,
    max_turns: Option<u32>,
    timeout_s: Option<u64>,
    probe_timeout_s: Option<f64>,
    system_prompt_append: Option<String>,
    dump_requests: Option<bool>,
    claude_path: Option<String>,
    stream_idle_timeout_s: Option<u64>,
    mcp_config: Option<String>,
}

/// Env values may be written as numbers or booleans; they become strings.
#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum ScalarShape {
    S(String),
    N(serde_json::Number),
    B(bool),
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
}

impl Endpoint {
    /// The API key, read from the environment now. Never log it.
    pub fn api_key(&self) -> Option<String> {
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
        }
    }
}

/// The merged config.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub endpoints: Vec<Endpoint>,
    pub models: Vec<ModelEntry>,
    pub defaults: Defaults,
}

impl Config {
    /// Zero config: one llama.cpp endpoint `local` at `127.0.0.1:8080`.
    pub fn builtin() -> Config {
        Config {
            endpoints: vec![Endpoint {
                name: "local".into(),
                base_url: "http://127.0.0.1:8080".into(),
                backend: Some(Backend::LlamaCpp),
                host: Some("this machine".into()),
                notes: Some("built-in default: no models.yaml was found".into()),
                env: IndexMap::new(),
                api_key_env: None,
            }],
            models: Vec::new(),
            defaults: Defaults::default(),
        }
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
        Value::Mapping(root)
    }
}

/// The nearest valid key, if it is near enough to be a typo.
pub fn nearest<'a>(key: &str, valid: &[&'a str]) -> Option<&'a str> {
    let key_l = key.to_ascii_lowercase();
    valid
        .iter()
        .map(|v| (strsim::damerau_levenshtein(&key_l, v), *v))
        .min_by_key(|(d, _)| *d)
        .filter(|(d, v)| *d <= (v.len() / 3).max(2))
        .map(|(_, v)| v)
}

fn unknown_warning(path: &Path, at: &str, key: &str, valid: &[&str]) -> String {
    let hint = match nearest(key, valid) {
        Some(n) => format!("did you mean `{n}`?"),
        None => format!("valid keys: {}", valid.join(", ")),
    };
    format!(
        "{}: unknown key `{at}{key}` ({hint}); it is ignored",
        path.display()
    )
}

fn key_str(k: &Value) -> String {
    match k {
        Value::String(s) => s.clone(),
        other => serde_yaml_ng::to_string(other)
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

fn strip_map(path: &Path, at: &str, map: &mut Mapping, valid: &[&str], warnings: &mut Vec<String>) {
    let unknown: Vec<Value> = map
        .keys()
        .filter(|k| !valid.contains(&key_str(k).as_str()))
        .cloned()
        .collect();
    for k in unknown {
        warnings.push(unknown_warning(path, at, &key_str(&k), valid));
        map.shift_remove(&k);
    }
}

/// Remove unknown keys from one file's value, with a warning for each.
pub(super) fn strip_unknown(path: &Path, value: &mut Value, warnings: &mut Vec<String>) {
    let Value::Mapping(top) = value else { return };
    strip_map(path, "", top, TOP_KEYS, warnings);
    for (section, valid) in [("endpoints", ENDPOINT_KEYS), ("models", MODEL_KEYS)] {
        if let Some(Value::Mapping(entries)) = top.get_mut(section) {
            for (name, entry) in entries.iter_mut() {
                if let Value::Mapping(m) = entry {
                    let at = format!("{section}.{}.", key_str(name));
                    strip_map(path, &at, m, valid, warnings);
                }
            }
        }
    }
    if let Some(Value::Mapping(d)) = top.get_mut("defaults") {
        strip_map(path, "defaults.", d, DEFAULT_KEYS, warnings);
    }
}

fn get_str(m: &Mapping, key: &str) -> Option<String> {
    match m.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
    .filter(|s| !s.trim().is_empty())
}

fn get_list(m: &Mapping, key: &str) -> Option<Vec<String>> {
    match m.get(key)? {
        Value::Sequence(seq) => Some(
            seq.iter()
                .filter_map(|v| match v {
                    Value::String(s) => Some(s.clone()),
                    _ => None,
                })
                .collect(),
        ),
        Value::String(s) => Some(
            s.split(',')
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty())
                .collect(),
        ),
        _ => None,
    }
}

fn valid_endpoint_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
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
    let Value::Mapping(top) = merged else {
        return (Config::builtin(), warnings);
    };
    if top.is_empty() {
        return (Config::builtin(), warnings);
    }
    let mut endpoints = Vec::new();
    if let Some(Value::Mapping(eps)) = top.get("endpoints") {
        for (name, entry) in eps {
            let name = key_str(name);
            if !valid_endpoint_name(&name) {
                warnings.push(format!(
                    "endpoint `{name}`: names may use only letters, digits, `_`, `.` and `-`; it is skipped"
                ));
                continue;
            }
            let empty = Mapping::new();
            let m = match entry {
                Value::Mapping(m) => m,
                _ => &empty,
            };
            let Some(raw_url) = get_str(m, "base_url") else {
                warnings.push(format!(
                    "endpoint `{name}` has no base_url; it is skipped (add e.g. `base_url: http://127.0.0.1:8080`)"
                ));
                continue;
            };
            let base_url = match check_base_url(&raw_url) {
                Ok(u) => u,
                Err(why) => {
                    warnings.push(format!("endpoint `{name}`: {why}; it is skipped"));
                    continue;
                }
            };
            let backend = match get_str(m, "backend") {
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
            let mut env = IndexMap::new();
            if let Some(Value::Mapping(e)) = m.get("env") {
                for (k, v) in e {
                    let val = match v {
                        Value::String(s) => s.clone(),
                        Value::Number(n) => n.to_string(),
                        Value::Bool(b) => b.to_string(),
                        _ => continue,
                    };
                    env.insert(key_str(k), val);
                }
            }
            let api_key_env = get_str(m, "api_key_env");
            if let Some(var) = &api_key_env
                && std::env::var_os(var).is_none()
            {
                warnings.push(format!(
                    "endpoint `{name}`: api_key_env names `{var}`, which is not set in this environment; export it where localagents runs"
                ));
            }
            endpoints.push(Endpoint {
                name,
                base_url,
                backend,
                host: get_str(m, "host"),
                notes: get_str(m, "notes"),
                env,
                api_key_env,
            });
        }
    }
    let mut models = Vec::new();
    if let Some(Value::Mapping(ms)) = top.get("models") {
        for (name, entry) in ms {
            let name = key_str(name);
            let empty = Mapping::new();
            let m = match entry {
                Value::Mapping(m) => m,
                _ => &empty,
            };
            let endpoint = get_str(m, "endpoint");
            if let Some(e) = &endpoint
                && !endpoints.iter().any(|x: &Endpoint| &x.name == e)
            {
                warnings.push(format!(
                    "model `{name}`: endpoint `{e}` is not defined under `endpoints`"
                ));
            }
            models.push(ModelEntry {
                name,
                notes: get_str(m, "notes"),
                host: get_str(m, "host"),
                served_name: get_str(m, "served_name"),
                endpoint,
                context: m.get("context").and_then(Value::as_u64),
                bring_up: get_str(m, "bring_up"),
            });
        }
    }
    let mut defaults = Defaults::default();
    if let Some(Value::Mapping(d)) = top.get("defaults") {
        if let Some(v) = get_str(d, "model") {
            defaults.model = Some(v);
        }
        if let Some(v) = get_str(d, "permission_mode") {
            defaults.permission_mode = v;
        }
        if let Some(v) = get_list(d, "allowed_tools") {
            defaults.allowed_tools = v;
        }
        if let Some(v) = get_list(d, "disallowed_tools") {
            defaults.disallowed_tools = v;
        }
        if let Some(v) = get_list(d, "setting_sources") {
            defaults.setting_sources = v;
        }
        if let Some(v) = d.get("max_turns").and_then(Value::as_u64) {
            defaults.max_turns = v.min(u32::MAX as u64) as u32;
        }
        if let Some(v) = d.get("timeout_s").and_then(Value::as_u64) {
            defaults.timeout_s = v;
        }
        if let Some(v) = d.get("probe_timeout_s").and_then(Value::as_f64) {
            if v > 0.0 && v <= 60.0 {
                defaults.probe_timeout_s = v;
            } else {
                warnings.push(format!(
                    "defaults.probe_timeout_s = {v} is out of range (0, 60]; using 2.5"
                ));
            }
        }
        if let Some(v) = get_str(d, "system_prompt_append") {
            defaults.system_prompt_append = v;
        }
        if let Some(v) = d.get("dump_requests").and_then(Value::as_bool) {
            defaults.dump_requests = v;
        }
        if let Some(v) = get_str(d, "claude_path") {
            defaults.claude_path = Some(v);
        }
        if let Some(v) = d.get("stream_idle_timeout_s").and_then(Value::as_u64) {
            defaults.stream_idle_timeout_s = v.max(1);
        }
        if let Some(v) = get_str(d, "mcp_config") {
            defaults.mcp_config = Some(v);
        }
    }
    if top.get("endpoints").is_none() {
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
        },
        warnings,
    )
}
