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
    /// The endpoint's probe at resolution (slots and `/metrics` counters).
    pub probe: probe::EndpointStatus,
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
    let Some(status) = probes.into_iter().find(|p| p.name == resolved.endpoint) else {
        return Err(ApiError::Invalid(format!(
            "endpoint `{}` has no probe result",
            resolved.endpoint
        )));
    };
    let backend = config::Backend::parse(&status.backend).unwrap_or(config::Backend::Other);
    Ok(Target {
        config: loaded.config.clone(),
        resolved,
        endpoint: ep,
        backend,
        probe: status,
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

// ---- jobs -------------------------------------------------------------

use crate::jobs::manager::{MAX_WAIT, Manager, RunArgs, StartError};
use crate::jobs::{JobError, Status};

/// A job tool failure: a sentence, or the structured `model_unavailable`.
#[derive(Debug)]
pub enum ToolFailure {
    Text(String),
    Structured(Value),
}

impl From<JobError> for ToolFailure {
    fn from(e: JobError) -> Self {
        ToolFailure::Text(e.to_string())
    }
}

impl From<StartError> for ToolFailure {
    fn from(e: StartError) -> Self {
        match e {
            StartError::Unavailable(u) => {
                ToolFailure::Structured(serde_json::to_value(&*u).unwrap_or(Value::Null))
            }
            other => ToolFailure::Text(other.to_string()),
        }
    }
}

/// `run_agent`: start a job; return its summary at once or after `wait_s`.
pub async fn run_agent(
    m: &std::sync::Arc<Manager>,
    args: RunArgs,
    wait_s: u64,
) -> Result<Value, ToolFailure> {
    let rec = m.start(args).await?;
    let (rec, still) = if wait_s > 0 {
        m.wait(
            &rec.id,
            std::time::Duration::from_secs(wait_s).min(MAX_WAIT),
        )
        .await?
    } else {
        let still = !rec.status.terminal();
        (rec, still)
    };
    let mut s = rec.summary();
    if let Value::Object(o) = &mut s {
        o.insert("still_running".into(), json!(still));
        if still {
            o.insert(
                "next".into(),
                json!(format!(
                    "wait_job(\"{}\") to wait up to 110 s, or carry on and check job_status later",
                    rec.id
                )),
            );
        }
    }
    Ok(s)
}

/// `wait_job`.
pub async fn wait_job(m: &Manager, id: &str, timeout_s: u64) -> Result<Value, ToolFailure> {
    let (rec, still) = m
        .wait(id, std::time::Duration::from_secs(timeout_s))
        .await?;
    let mut s = rec.summary();
    if let Value::Object(o) = &mut s {
        o.insert("still_running".into(), json!(still));
    }
    Ok(s)
}

/// `job_status`.
pub fn job_status(m: &Manager, id: &str) -> Result<Value, ToolFailure> {
    Ok(m.store.load(id)?.summary())
}

/// `list_jobs`.
pub fn list_jobs(m: &Manager, status: Option<&str>, limit: usize) -> Result<Value, ToolFailure> {
    let status = match status.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(Status::parse(s).ok_or_else(|| {
            ToolFailure::Text(format!(
                "unknown status `{s}`: use queued, running, succeeded, failed, cancelled, timeout or lost"
            ))
        })?),
    };
    let limit = limit.clamp(1, 200);
    let jobs: Vec<Value> = m
        .store
        .list(status, limit)
        .iter()
        .map(|r| r.list_item())
        .collect();
    Ok(json!({"jobs": jobs, "count": jobs.len()}))
}

const LOG_CAP: usize = 20_000;

/// `job_log`: a page of one of the job's logs.
pub fn job_log(
    m: &Manager,
    id: &str,
    stream: &str,
    tail_lines: usize,
    offset: Option<usize>,
) -> Result<Value, ToolFailure> {
    let dir = m.store.dir(id)?;
    let _ = m.store.load(id)?;
    let file = match stream {
        "transcript" => "transcript.txt",
        "requests" => "requests.jsonl",
        "events" => "events.jsonl",
        other => {
            return Err(ToolFailure::Text(format!(
                "unknown stream `{other}`: use transcript, requests or events"
            )));
        }
    };
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let n = tail_lines.clamp(1, 2000);
    let from = match offset {
        Some(o) => o.min(lines.len()),
        None => lines.len().saturating_sub(n),
    };
    let mut out = String::new();
    let mut to = from;
    for l in lines.iter().skip(from).take(n) {
        let l: String = if l.chars().count() > 2000 {
            format!("{}…", l.chars().take(2000).collect::<String>())
        } else {
            l.to_string()
        };
        if out.len() + l.len() > LOG_CAP && to > from {
            break;
        }
        out.push_str(&l);
        out.push('\n');
        to += 1;
    }
    Ok(json!({
        "job_id": id,
        "stream": stream,
        "total_lines": lines.len(),
        "from": from,
        "to": to,
        "next_offset": if to < lines.len() { Some(to) } else { None },
        "text": out,
    }))
}

/// `job_diff`: the full diff of a job, paged by bytes.
pub fn job_diff(
    m: &Manager,
    id: &str,
    max_bytes: usize,
    offset: usize,
) -> Result<Value, ToolFailure> {
    let rec = m.store.load(id)?;
    let diff = match &rec.worktree {
        Some(w) if w.path.exists() => crate::worktree::diff_text(w),
        Some(w) => {
            return Err(ToolFailure::Text(format!(
                "job {id}'s worktree is gone ({}): {}",
                w.path.display(),
                w.note.clone().unwrap_or_else(|| "it was removed".into())
            )));
        }
        None => crate::worktree::diff_paths(&rec.cwd, &rec.files_changed),
    }
    .map_err(|e| ToolFailure::Text(format!("job {id}: cannot compute the diff: {e}")))?;
    let max = max_bytes.clamp(1000, 100_000);
    let start = offset.min(diff.len());
    let mut end = (start + max).min(diff.len());
    while !diff.is_char_boundary(end) {
        end -= 1;
    }
    let mut start_b = start;
    while !diff.is_char_boundary(start_b) {
        start_b -= 1;
    }
    Ok(json!({
        "job_id": id,
        "isolation": rec.isolation,
        "branch": rec.worktree.as_ref().map(|w| w.branch.clone()),
        "diffstat": rec.worktree.as_ref().and_then(|w| w.diffstat.clone()),
        "files_changed": rec.files_changed,
        "total_bytes": diff.len(),
        "offset": start_b,
        "next_offset": if end < diff.len() { Some(end) } else { None },
        "diff": &diff[start_b..end],
    }))
}

/// `cancel_job`.
pub async fn cancel_job(m: &Manager, id: &str) -> Result<Value, ToolFailure> {
    Ok(m.cancel(id).await?.summary())
}

/// `cleanup_jobs`: remove kept worktrees, their branches and old job dirs.
pub fn cleanup_jobs(
    m: &Manager,
    older_than_days: Option<u64>,
    job_id: Option<&str>,
) -> Result<Value, ToolFailure> {
    let mut removed = Vec::new();
    let mut skipped = Vec::new();
    let candidates: Vec<String> = match job_id {
        Some(id) => {
            m.store.dir(id)?;
            vec![id.to_string()]
        }
        None => m.store.ids(),
    };
    let days = older_than_days.unwrap_or(7);
    let cutoff = chrono::Utc::now() - chrono::Duration::days(days as i64);
    for id in candidates {
        let rec = match m.store.load(&id) {
            Ok(r) => r,
            Err(e) => {
                if job_id.is_some() {
                    return Err(e.into());
                }
                continue;
            }
        };
        if !rec.status.terminal() {
            skipped.push(format!("{id}: still {}", rec.status.as_str()));
            continue;
        }
        if job_id.is_none() {
            let created = chrono::DateTime::parse_from_rfc3339(&rec.created)
                .map(|t| t.with_timezone(&chrono::Utc));
            if created.is_ok_and(|c| c > cutoff) {
                continue;
            }
        }
        let mut what = Vec::new();
        if let Some(w) = &rec.worktree
            && (w.kept || w.path.exists())
        {
            match crate::worktree::remove(w, &id) {
                Ok(()) => what.push(format!(
                    "worktree {} and branch {}",
                    w.path.display(),
                    w.branch
                )),
                Err(e) => {
                    skipped.push(format!("{id}: {e}"));
                    continue;
                }
            }
        }
        if let Ok(dir) = m.store.dir(&id)
            && std::fs::remove_dir_all(&dir).is_ok()
        {
            what.push(format!("job dir {}", dir.display()));
        }
        removed.push(json!({"job_id": id, "removed": what}));
    }
    Ok(
        json!({"removed": removed, "skipped": skipped, "older_than_days": if job_id.is_none() { Some(days) } else { None }}),
    )
}
