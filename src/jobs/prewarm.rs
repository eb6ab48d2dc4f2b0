//! Prewarm: the delegate's fixed prefix sent once to each idle server when
//! `serve` starts, so the session's first job starts from the cache.
//!
//! Every delegate's first request begins with the same `system` and
//! `tools` (the lean delegates made them job-invariant, about 5k tokens).
//! A server that has never seen them processes them cold on the first
//! job's first turn; on the real llama-server that was most of the turn
//! (docs/benchmarks.md). So when `serve` starts, the prefix is captured
//! exactly as `doctor` captures it ([`crate::prefix`]: the real CLI with
//! the job's own command line, against a capture server) and sent once as
//! a 1-token request through the shim, as a job's request would go.
//!
//! Only on a server nothing has used since it started: every slot idle
//! and empty (llama-server's `/slots` shows `id_task` on a slot once it has
//! served a request), so no one's cache is taken, no job of any
//! localagents process holding a lease, not asleep (a request would wake
//! it), and only for models a router or llama-swap has loaded (a request
//! would load one). Checked again right before sending, since the capture
//! takes seconds. It sends one request per slot at once: llama-server
//! gives a request the idle slot whose cached prompt it matches best and
//! skips empty slots in that search, so with `--slot-prompt-similarity
//! 0.9` a job whose brief is long would land on an empty slot and start
//! cold; with every slot warm, whichever slot a job gets holds the prefix.
//! `defaults.prewarm: false` turns it off.

use std::path::Path;
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::Value;

use crate::config::{self, Config};
use crate::probe::{self, EndpointStatus, ModelState, ServerKind};
use crate::registry::{Resolved, Target};
use crate::shim::log::RequestLog;
use crate::shim::{Route, Shim};

/// The prewarm's request logs: `<state>/prewarm/<endpoint>/requests.jsonl`.
pub const DIR: &str = "prewarm";

/// Why a prewarm request failed (logged; the prewarm is best effort).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WarmError {
    #[error("endpoint `{0}` is not in the config")]
    NotInConfig(String),
    #[error("cannot register with the shim ({0})")]
    Register(String),
    /// The request got no answer (its URL, which holds the route's
    /// token, left out).
    #[error("no answer ({0})")]
    NoAnswer(String),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("an answer without usage ({why}): {body}")]
    NoUsage { why: String, body: String },
}

impl WarmError {
    pub fn kind(&self) -> crate::error::Kind {
        use crate::error::Kind;
        match self {
            WarmError::NotInConfig(_) => Kind::Config,
            WarmError::Register(_) => Kind::Io,
            WarmError::NoAnswer(_) | WarmError::Status { .. } | WarmError::NoUsage { .. } => {
                Kind::ModelUnavailable
            }
        }
    }
}

/// What the prewarm did on one endpoint and model.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmed {
    pub endpoint: String,
    pub model: String,
    /// Requests sent (one per slot).
    pub slots: u64,
    /// Tokens the server processed and found cached over them, or why the
    /// first one that failed did.
    pub outcome: Result<(u64, u64), WarmError>,
    pub ms: u64,
}

/// Why an endpoint or model was passed over (for the log).
fn skip_reason(p: &EndpointStatus, leased: usize) -> Option<&'static str> {
    if !p.up {
        return Some("not answering");
    }
    if p.kind == Some(ServerKind::Sleeping) {
        return Some("asleep (a request would wake it)");
    }
    let Some(s) = &p.slots else {
        return Some("no slot counts (only servers that report their slots are prewarmed)");
    };
    if s.busy > 0 {
        return Some("a slot is processing");
    }
    if leased > 0 {
        return Some("a job holds a slot");
    }
    match s.unused {
        None => Some("its /slots does not say whether a slot is empty"),
        Some(n) if n < s.total => Some(
            "a slot has served requests since the server started (its cache may be somebody's)",
        ),
        Some(_) => None,
    }
}

/// The endpoint's probe now, and why it would be passed over.
fn check(state_dir: &Path, p: &EndpointStatus) -> Option<&'static str> {
    let total = p.slots.as_ref().map_or(0, |s| s.total);
    let leased = super::lease::holders(state_dir, &p.name, total).len();
    skip_reason(p, leased)
}

/// The loaded models of an endpoint: a plain server's one model, or what a
/// router or llama-swap has loaded now.
fn loaded_models(p: &EndpointStatus) -> Vec<&probe::ServedModel> {
    p.models
        .iter()
        .filter(|m| matches!(m.state, None | Some(ModelState::Loaded)))
        .collect()
}

/// The 1-token request: the captured first request with its answer cut to
/// one token and no stream.
pub fn request_body(captured: &Value) -> Value {
    let mut body = captured.clone();
    if let Some(o) = body.as_object_mut() {
        o.insert("max_tokens".into(), 1.into());
        o.insert("stream".into(), false.into());
    }
    body
}

#[derive(Debug, Deserialize)]
struct Answer {
    usage: AnswerUsage,
}

#[derive(Debug, Deserialize)]
struct AnswerUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cache_read_input_tokens: u64,
}

/// Prewarm every idle endpoint of `config` that serves a loaded model.
/// Returns nothing to do (and captures nothing) when none qualifies.
pub async fn run(config: &Config, state_dir: &Path, shim: &Shim) -> Vec<Warmed> {
    if !config.defaults.prewarm {
        return Vec::new();
    }
    let candidates = |probes: Vec<EndpointStatus>| -> Vec<EndpointStatus> {
        probes
            .into_iter()
            .filter(|p| match check(state_dir, p) {
                Some(why) => {
                    tracing::debug!(endpoint = %p.name, "prewarm skipped: {why}");
                    false
                }
                None => !loaded_models(p).is_empty(),
            })
            .collect()
    };
    let todo = candidates(probe::probe_all(config).await);
    if todo.is_empty() {
        return Vec::new();
    }
    let claude = match crate::runner::find_claude(config) {
        Ok(c) => c,
        Err(e) => {
            tracing::info!("prewarm skipped: {e}");
            return Vec::new();
        }
    };
    let env_of = |name: &str| {
        config
            .endpoint(name)
            .map(|e| e.env.clone())
            .unwrap_or_default()
    };
    // One capture per distinct endpoint env (Claude Code reads some of it
    // into its tool descriptions).
    let mut captured: Vec<(IndexMap<String, String>, Result<Value, String>)> = Vec::new();
    for p in &todo {
        let env = env_of(&p.name);
        if !captured.iter().any(|(e, _)| *e == env) {
            let body = crate::prefix::capture(config, &claude, &env).await;
            captured.push((env, body));
        }
    }
    // The capture took seconds: look again, and warm only what still
    // qualifies.
    let now = candidates(probe::probe_all(config).await);
    let mut out = Vec::new();
    for p in now.iter().filter(|p| todo.iter().any(|t| t.name == p.name)) {
        let env = env_of(&p.name);
        let body = match captured.iter().find(|(e, _)| *e == env).map(|(_, b)| b) {
            Some(Ok(b)) => request_body(b),
            Some(Err(e)) => {
                tracing::warn!(endpoint = %p.name, "prewarm skipped: the delegate's first request could not be captured: {e}");
                continue;
            }
            None => continue,
        };
        for m in loaded_models(p) {
            let w = warm_one(config, state_dir, shim, p, m, &body).await;
            match &w.outcome {
                Ok((input, cached)) => tracing::info!(
                    endpoint = %w.endpoint, model = %w.model,
                    "prewarmed {} slots with the delegate prefix: {input} tokens, {cached} already cached, {} ms", w.slots, w.ms
                ),
                Err(e) => {
                    tracing::warn!(endpoint = %w.endpoint, model = %w.model, "prewarm failed: {e}")
                }
            }
            out.push(w);
        }
    }
    out
}

/// One request per slot, all at once: pinned to each slot by `id_slot` on
/// the chat wire (the wire a job takes there, so its prefix is what a job
/// sends), else each lands on its own slot because a busy slot is never
/// chosen.
async fn warm_one(
    config: &Config,
    state_dir: &Path,
    shim: &Shim,
    p: &EndpointStatus,
    m: &probe::ServedModel,
    body: &Value,
) -> Warmed {
    let started = Instant::now();
    let n = p.slots.as_ref().map_or(1, |s| s.total.max(1));
    let results =
        futures::future::join_all((0..n).map(|i| send(config, state_dir, shim, p, m, body, i)))
            .await;
    let mut outcome = Ok((0, 0));
    for r in results {
        outcome = match (outcome, r) {
            (Ok((i, c)), Ok((i2, c2))) => Ok((i + i2, c + c2)),
            (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        };
    }
    Warmed {
        endpoint: p.name.clone(),
        model: m.id.clone(),
        slots: n,
        outcome,
        ms: started.elapsed().as_millis() as u64,
    }
}

async fn send(
    config: &Config,
    state_dir: &Path,
    shim: &Shim,
    p: &EndpointStatus,
    m: &probe::ServedModel,
    body: &Value,
    slot: u64,
) -> Result<(u64, u64), WarmError> {
    let endpoint = config
        .endpoint(&p.name)
        .cloned()
        .ok_or_else(|| WarmError::NotInConfig(p.name.clone()))?;
    let target = Target {
        config: std::sync::Arc::new(config.clone()),
        resolved: Resolved {
            requested: m.id.clone(),
            endpoint: p.name.clone(),
            base_url: p.base_url.clone(),
            served_id: m.id.clone(),
            context: m.context,
            context_source: m.context_source,
            matched_by: "prewarm".into(),
            alternatives: Vec::new(),
            queued_note: None,
        },
        endpoint,
        backend: config::Backend::parse(&p.backend).unwrap_or(config::Backend::Other),
        probe: p.clone(),
    };
    let log_dir = state_dir.join(DIR).join(super::lease::component(&p.name));
    let route = Route::for_target(
        format!("prewarm-{}", p.name),
        &target,
        m.context,
        RequestLog::new(&log_dir, false),
        super::policy::job_policy(&config.defaults),
    )
    .pinned(Some(slot), p.kind);
    let reg = shim
        .register(route)
        .map_err(|e| WarmError::Register(e.to_string()))?;
    // The longest a job's request may stay silent: a cold prefix on a
    // slow server is a long prefill.
    let limit = reg.route.longest_silence() + Duration::from_secs(5);
    let r = probe::fresh_http_client()
        .post(format!("{}/v1/messages", reg.base_url))
        .timeout(limit)
        .json(body)
        .send()
        .await
        // The URL holds the route's token: leave it out.
        .map_err(|e| WarmError::NoAnswer(e.without_url().to_string()))?;
    let status = r.status().as_u16();
    let bytes = probe::client::read_at_most(r, 1 << 20).await;
    if status != 200 {
        return Err(WarmError::Status {
            status,
            body: crate::fmt::first_chars(&String::from_utf8_lossy(&bytes), 200),
        });
    }
    let a: Answer = serde_json::from_slice(&bytes).map_err(|e| WarmError::NoUsage {
        why: e.to_string(),
        body: crate::fmt::first_chars(&String::from_utf8_lossy(&bytes), 200),
    })?;
    Ok((a.usage.input_tokens, a.usage.cache_read_input_tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::Slots;

    fn up(slots: Option<Slots>) -> EndpointStatus {
        let ep = crate::config::Endpoint {
            name: "gpu".into(),
            base_url: "http://127.0.0.1:1".into(),
            backend: None,
            host: None,
            notes: None,
            env: Default::default(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        };
        let mut p = EndpointStatus::new(&ep);
        p.up = true;
        p.slots = slots;
        p
    }

    #[test]
    fn only_an_unused_idle_unleased_awake_server_is_prewarmed() {
        let slots = |busy: u64, unused: Option<u64>| {
            Some(Slots {
                total: 2,
                busy,
                free: 2 - busy,
                unused,
            })
        };
        let idle = slots(0, Some(2));
        assert_eq!(skip_reason(&up(idle), 0), None);
        assert_eq!(skip_reason(&up(idle), 1), Some("a job holds a slot"));
        let busy = slots(1, Some(1));
        assert_eq!(skip_reason(&up(busy), 0), Some("a slot is processing"));
        let used = slots(0, Some(1));
        assert!(
            skip_reason(&up(used), 0)
                .unwrap()
                .contains("served requests")
        );
        let unknown = slots(0, None);
        assert!(
            skip_reason(&up(unknown), 0)
                .unwrap()
                .contains("does not say")
        );
        assert!(skip_reason(&up(None), 0).is_some());
        let mut asleep = up(idle);
        asleep.kind = Some(ServerKind::Sleeping);
        assert!(skip_reason(&asleep, 0).unwrap().contains("asleep"));
        let mut down = up(idle);
        down.up = false;
        assert!(skip_reason(&down, 0).is_some());
    }

    #[test]
    fn the_request_is_the_captured_one_cut_to_one_token() {
        let captured = serde_json::json!({"model": "capture", "max_tokens": 32000, "stream": true,
            "system": [{"type": "text", "text": "s"}], "tools": [{"name": "Bash"}],
            "messages": [{"role": "user", "content": "Reply with one word."}]});
        let b = request_body(&captured);
        assert_eq!(b["max_tokens"], 1);
        assert_eq!(b["stream"], false);
        assert_eq!(b["system"], captured["system"]);
        assert_eq!(b["tools"], captured["tools"]);
        assert_eq!(b["messages"], captured["messages"]);
    }
}
