//! What is served and who may serve it: `list_models`, the savings
//! ledger's line, `register_endpoint` and `localagents trust`.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{Context, Error, m_store, stopped};
use crate::config;
use crate::probe;
use crate::registry;

/// `list_models`: the status object plus short guidance.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ModelsReport {
    #[serde(flatten)]
    pub status: registry::Report,
    pub guidance: Value,
    /// "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at
    /// claude-sonnet-4.5 list prices" (an equivalent, not a bill).
    pub savings: String,
    /// One line per served model: its last `localagents eval`, or that it
    /// has none. Prefer a model that passed.
    pub evals: Vec<crate::eval::EvalLine>,
    /// Endpoints whose recent jobs lost their slot's cache, with the fix
    /// (tell the user; run fewer jobs at once meanwhile).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub slot_losses: Vec<String>,
    /// Endpoints whose recent jobs ran away (a line or the template's
    /// markers over and over), with the likely cause and the fix.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runaways: Vec<String>,
    /// The user's subagent profiles a job can run as (`run_agent`'s
    /// `agent`): `.claude/agents/*.md` of the project, then the user's.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<AgentProfile>,
}

/// A subagent profile `run_agent` can run as.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentProfile {
    pub name: String,
    /// Its one-line description.
    pub description: Option<String>,
    /// `project` or `user`.
    pub scope: config::agents::Scope,
}

/// `list_models`.
pub async fn list_models(ctx: &Context) -> Result<ModelsReport, Error> {
    let (_, status) = registry::status(&ctx.discovery()).await?;
    let guidance = registry::guidance(&status);
    // The ledger reads the week's records, request logs and Claude Code
    // transcripts, and the slot losses and eval lines read records too:
    // on the blocking pool, never on an async worker.
    let (c, endpoints) = (ctx.clone(), status.endpoints.clone());
    let project = status.cwd.clone();
    let (evals, slot_losses, runaways, savings, agents) = tokio::task::spawn_blocking(move || {
        let evals = crate::eval::lines(&c.state_dir, &endpoints);
        let (slot_losses, runaways) = recent_fault_lines(&c);
        let agents = config::agents::list(project.as_deref())
            .0
            .into_iter()
            .map(|p| AgentProfile {
                name: p.name,
                description: p.description,
                scope: p.scope,
            })
            .collect();
        (evals, slot_losses, runaways, savings_line(&c), agents)
    })
    .await
    .map_err(stopped)?;
    Ok(ModelsReport {
        status,
        guidance,
        savings,
        evals,
        slot_losses,
        runaways,
        agents,
    })
}

/// `localagents status`: the status object and what the text prints
/// under the endpoints, so `status` and `status --json` carry the same.
#[derive(Debug, Serialize, JsonSchema)]
pub struct StatusReport {
    #[serde(flatten)]
    pub status: registry::Report,
    /// One line per served model: its last `localagents eval`, or that it
    /// has none.
    pub evals: Vec<crate::eval::EvalLine>,
    /// The queued jobs that wait (and for what), then the endpoints whose
    /// recent jobs lost their slot's cache or ran away, a line each.
    pub notes: Vec<String>,
    /// The ledger's line for the last 7 days.
    pub savings: String,
    /// What retention did last, and the state dir's size then.
    pub retention: Option<super::retention::RetentionReport>,
    /// The same in one line.
    pub retention_line: String,
}

/// `localagents status`: probe every endpoint, then read the eval results,
/// the notes and the ledger on the blocking pool (they read records, logs
/// and transcripts).
pub async fn status(ctx: &Context) -> Result<StatusReport, Error> {
    let (_, status) = registry::status(&ctx.discovery()).await?;
    let (c, endpoints) = (ctx.clone(), status.endpoints.clone());
    let (evals, notes, savings, retention) = tokio::task::spawn_blocking(move || {
        (
            crate::eval::lines(&c.state_dir, &endpoints),
            status_notes(&c),
            savings_line(&c),
            super::retention::last(&c.state_dir),
        )
    })
    .await
    .map_err(stopped)?;
    Ok(StatusReport {
        status,
        evals,
        notes,
        savings,
        retention_line: super::retention::line(retention.as_ref()),
        retention,
    })
}

/// What `localagents status` adds under the endpoints, a line each: the
/// queued jobs that wait (and for what), then the endpoints whose recent
/// jobs lost their slot's cache or ran away.
fn status_notes(ctx: &Context) -> Vec<String> {
    let store = m_store(ctx);
    let mut lines = Vec::new();
    for j in store.list(Some(super::Status::Queued), 20) {
        if let Some(w) = j.list_item().waiting {
            lines.push(format!("job {} {w}", j.id()));
        }
    }
    let (slot_losses, runaways) = recent_fault_lines(ctx);
    lines.extend(slot_losses);
    lines.extend(runaways);
    lines
}

/// The endpoints whose recent jobs lost their slot's cache, and those
/// whose recent jobs ran away, a line each: what `status` and
/// `list_models` both say.
fn recent_fault_lines(ctx: &Context) -> (Vec<String>, Vec<String>) {
    let days = crate::jobs::metrics::SLOT_LOSS_DAYS;
    let recent = m_store(ctx).recent(Some(chrono::Utc::now() - chrono::Duration::days(days)));
    let slot_losses = crate::jobs::metrics::recent_slot_losses(&recent)
        .iter()
        .map(|l| l.line(days))
        .collect();
    let runaways = crate::jobs::metrics::recent_runaways(&recent)
        .iter()
        .map(|l| l.line(days))
        .collect();
    (slot_losses, runaways)
}

/// The ledger over a period (`localagents savings`).
pub fn savings(
    ctx: &Context,
    since: crate::ledger::Since,
) -> Result<crate::ledger::Savings, Error> {
    let cfg = config::load(&ctx.discovery())?.config;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let projects = crate::ledger::transcript::projects_dir(home.as_deref());
    Ok(crate::ledger::savings(
        &ctx.state_dir,
        &cfg,
        since,
        &projects,
    ))
}

/// The ledger's one line for the last 7 days (status, list_models).
pub fn savings_line(ctx: &Context) -> String {
    let since = crate::ledger::Since::Days(7);
    match savings(ctx, since) {
        Ok(s) => crate::ledger::line(&s, since),
        Err(e) => format!("savings: {e}"),
    }
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

/// `register_endpoint`: validate, write the sidecar, probe the new endpoint.
/// What `register_endpoint` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Registered {
    pub registered: String,
    pub written_to: PathBuf,
    pub endpoint: probe::EndpointStatus,
    pub warnings: Vec<String>,
}

/// What `localagents trust` did.
#[derive(Debug, Serialize, JsonSchema)]
pub struct TrustReport {
    /// The project directory (canonical).
    pub dir: String,
    /// The user file that records it.
    pub recorded_in: String,
    pub trusted: bool,
    /// False when it already was (or was not) trusted.
    pub changed: bool,
}

/// `localagents trust [DIR]`: read this project's models.yaml in full from
/// now on (or, with `trusted: false`, only its menu entries again). A CLI
/// command only: trust is the user's act, never a tool call's.
pub fn trust_project(ctx: &Context, dir: &Path, trusted: bool) -> Result<TrustReport, Error> {
    if ctx.explicit_config.is_some() {
        return Err(Error::Invalid(
            "with --config / LOCALAGENTS_CONFIG no project models.yaml is read, so there is nothing to trust: edit that file instead".into(),
        ));
    }
    let dir = dir.canonicalize().map_err(|e| {
        Error::Invalid(format!(
            "cannot trust {}: {e}; pass an existing directory",
            dir.display()
        ))
    })?;
    let sidecar = ctx.discovery().active_sidecar().ok_or_else(|| {
        Error::Invalid("no user config dir is known (HOME and XDG_CONFIG_HOME are unset)".into())
    })?;
    let changed = config::set_trusted(&sidecar, &dir, trusted)?;
    Ok(TrustReport {
        dir: dir.display().to_string(),
        recorded_in: sidecar.display().to_string(),
        trusted,
        changed,
    })
}

pub async fn register_endpoint(ctx: &Context, args: RegisterArgs) -> Result<Registered, Error> {
    let name = args.name.trim();
    if !valid_name(name) {
        return Err(Error::Invalid(format!(
            "invalid endpoint name `{name}`: use 1-64 letters, digits, `_`, `.` or `-`"
        )));
    }
    let base_url = config::check_base_url(&args.base_url)
        .map_err(|why| Error::Invalid(format!("invalid base_url: {why}")))?;
    let backend = match args
        .backend
        .as_deref()
        .map(str::trim)
        .filter(|b| !b.is_empty())
    {
        None => None,
        Some(b) if b.eq_ignore_ascii_case("auto") => None,
        Some(b) => Some(config::Backend::parse(b).ok_or_else(|| {
            Error::Invalid(format!(
                "unknown backend `{b}`: use one of {}, or leave it out to detect it",
                config::Backend::names()
            ))
        })?),
    };
    if args.api_key_env.is_some() {
        // A prompt-injected call must not be able to send a secret from the
        // environment to a URL of its choosing.
        return Err(Error::Invalid(format!(
            "register_endpoint does not take api_key_env: a key is the user's to configure, never a tool call's; ask the user to add `api_key_env: NAME` under endpoints.{name} in ~/.config/localagents/models.yaml themselves"
        )));
    }
    let discovery = ctx.discovery();
    let sidecar = discovery.active_sidecar().ok_or_else(|| {
        Error::Invalid(
            "no place to write the sidecar: no user config dir is known (HOME and XDG_CONFIG_HOME are unset); pass --config".into(),
        )
    })?;
    let mut entry = serde_yaml_ng::Mapping::new();
    entry.insert("base_url".into(), base_url.clone().into());
    if let Some(b) = backend {
        entry.insert("backend".into(), b.as_str().into());
    }
    for (k, v) in [("host", &args.host), ("notes", &args.notes)] {
        if let Some(v) = v.as_deref().map(str::trim).filter(|v| !v.is_empty()) {
            entry.insert(k.into(), v.into());
        }
    }
    config::write_sidecar_endpoint(&sidecar, name, entry)?;
    probe::invalidate();
    let loaded = config::load(&discovery)?;
    let Some(ep) = loaded.config.endpoint(name) else {
        return Err(Error::Invalid(format!(
            "wrote {} but endpoint `{name}` did not survive the merge; run `localagents config check`",
            sidecar.display()
        )));
    };
    let budget = std::time::Duration::from_secs_f64(loaded.config.defaults.probe_timeout_s);
    let st = probe::probe_cached(ep, budget).await;
    Ok(Registered {
        registered: name.to_string(),
        written_to: sidecar,
        endpoint: st,
        warnings: loaded.warnings.clone(),
    })
}
