//! The operations behind the MCP tools and the matching CLI commands.
//!
//! Each is a plain async function over explicit inputs that returns a JSON
//! value or an [`ApiError`] whose text says what to do. The MCP handlers and
//! the CLI are thin wrappers over these, so tests can call them directly.

use std::path::PathBuf;

use serde_json::{Value, json};

use crate::config::{self, ConfigError, Discovery};
use crate::probe;
use crate::registry;

/// Shared context of a running `localagents` process.
#[derive(Debug, Clone)]
pub struct Context {
    /// `--config` / `LOCALAGENTS_CONFIG`.
    pub explicit_config: Option<PathBuf>,
    /// `--state-dir` / `LOCALAGENTS_STATE_DIR`.
    pub state_dir: PathBuf,
}

impl Context {
    /// Discovery for this call: the cwd is read now, not at start.
    pub fn discovery(&self) -> Discovery {
        Discovery::standard(self.explicit_config.clone())
    }
}

/// A failure a caller can act on. The text is one or two sentences that
/// name the fix.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("config error: {0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Invalid(String),
    /// Nothing serves the model: the message says whom to ask for what.
    #[error("{}", .0.message)]
    Unavailable(Box<registry::Unavailable>),
}

/// A model resolved to a live endpoint, with what a shim route needs.
#[derive(Debug, Clone)]
pub struct Target {
    pub config: std::sync::Arc<config::Config>,
    pub resolved: registry::Resolved,
    pub endpoint: config::Endpoint,
    pub backend: config::Backend,
}

/// Load, probe and resolve `model` (or the default) on `endpoint` (or any).
pub async fn resolve_target(
    ctx: &Context,
    model: Option<&str>,
    endpoint: Option<&str>,
) -> Result<Target, ApiError> {
    let loaded = config::load(&ctx.discovery())?;
    let probes = probe::probe_all(&loaded.config).await;
    let resolved = registry::resolve(&loaded.config, &probes, model, endpoint)
        .map_err(ApiError::Unavailable)?;
    let ep = loaded
        .config
        .endpoint(&resolved.endpoint)
        .cloned()
        .ok_or_else(|| {
            ApiError::Invalid(format!(
                "endpoint `{}` vanished from the config",
                resolved.endpoint
            ))
        })?;
    let backend = probes
        .iter()
        .find(|p| p.name == resolved.endpoint)
        .and_then(|p| config::Backend::parse(&p.backend))
        .unwrap_or(config::Backend::Other);
    Ok(Target {
        config: loaded.config.clone(),
        resolved,
        endpoint: ep,
        backend,
    })
}

/// `list_models`: the status object plus short guidance.
pub async fn list_models(ctx: &Context) -> Result<Value, ApiError> {
    let (_, status) = registry::status(&ctx.discovery()).await?;
    let mut v = serde_json::to_value(&status).unwrap_or(Value::Null);
    if let Value::Object(m) = &mut v {
        m.insert("guidance".into(), registry::guidance(&status));
    }
    Ok(v)
}

/// Arguments of `register_endpoint`.
#[derive(Debug, Clone, Default)]
pub struct RegisterArgs {
    pub name: String,
    pub base_url: String,
    pub backend: Option<String>,
    pub host: Option<String>,
    pub notes: Option<String>,
    pub api_key_env: Option<String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `register_endpoint`: validate, write the sidecar, probe the new endpoint.
pub async fn register_endpoint(ctx: &Context, args: RegisterArgs) -> Result<Value, ApiError> {
    let name = args.name.trim();
    if !valid_name(name) {
        return Err(ApiError::Invalid(format!(
            "invalid endpoint name `{name}`: use 1-64 letters, digits, `_`, `.` or `-`"
        )));
    }
    let base_url = config::check_base_url(&args.base_url)
        .map_err(|why| ApiError::Invalid(format!("invalid base_url: {why}")))?;
    let backend = match args
        .backend
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    {
        None => None,
        Some(b) if b.eq_ignore_ascii_case("auto") => None,
        Some(b) => Some(config::Backend::parse(b).ok_or_else(|| {
            ApiError::Invalid(format!(
                "unknown backend `{b}`: use llama.cpp, vllm or other, or leave it out to detect it"
            ))
        })?),
    };
    if let Some(var) = &args.api_key_env
        && !valid_env_name(var)
    {
        return Err(ApiError::Invalid(format!(
            "api_key_env must be the NAME of an environment variable (like LLAMA_API_KEY), not `{var}`; never pass the key itself"
        )));
    }
    let discovery = ctx.discovery();
    let sidecar = discovery.active_sidecar().ok_or_else(|| {
        ApiError::Invalid(
            "no place to write the sidecar: neither a config dir nor a project dir is known; pass --config".into(),
        )
    })?;
    let mut entry = serde_yaml_ng::Mapping::new();
    entry.insert("base_url".into(), base_url.clone().into());
    if let Some(b) = backend {
        entry.insert("backend".into(), b.as_str().into());
    }
    for (k, v) in [
        ("host", &args.host),
        ("notes", &args.notes),
        ("api_key_env", &args.api_key_env),
    ] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            entry.insert(k.into(), v.into());
        }
    }
    config::write_sidecar_endpoint(&sidecar, name, entry)?;
    probe::invalidate();
    let loaded = config::load(&discovery)?;
    let Some(ep) = loaded.config.endpoint(name) else {
        return Err(ApiError::Invalid(format!(
            "wrote {} but endpoint `{name}` did not survive the merge; run `localagents config check`",
            sidecar.display()
        )));
    };
    let budget = std::time::Duration::from_secs_f64(loaded.config.defaults.probe_timeout_s);
    let st = probe::probe_cached(ep, budget).await;
    Ok(json!({
        "registered": name,
        "written_to": sidecar,
        "endpoint": st,
        "warnings": loaded.warnings,
    }))
}
