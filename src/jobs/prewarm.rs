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
//! Never where it could cost anything: not on a sleeping server (it would
//! wake it), not on a model a router or llama-swap has not loaded (it
//! would load it), not while a slot is processing, and not while a job of
//! any localagents process holds a lease on the endpoint (its slot is
//! idle between turns, and a prewarm there could take its cache).
//! `defaults.prewarm: false` turns it off.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::Value;

use crate::config::{self, Config};
use crate::probe::{self, EndpointStatus, ModelState, ServerKind};
use crate::registry::{Resolved, Target};
use crate::shim::log::RequestLog;
use crate::shim::{Route, Shim};

/// The prewarm's request logs: `<state>/prewarm/<endpoint>/requests.jsonl`.
pub const DIR: &str = "prewarm";

/// What the prewarm did on one endpoint and model.
#[derive(Debug, Clone, PartialEq)]
pub struct Warmed {
    pub endpoint: String,
    pub model: String,
    /// Tokens the server processed and found cached, or why it failed.
    pub outcome: Result<(u64, u64), String>,
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
    match &p.slots {
        None => Some("no slot counts (only servers that report their slots are prewarmed)"),
        Some(s) if s.busy > 0 => Some("a slot is processing"),
        Some(_) if leased > 0 => Some("a job holds a slot"),
        Some(_) => None,
    }
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

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Answer {
    usage: AnswerUsage,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct AnswerUsage {
    input_tokens: u64,
    cache_read_input_tokens: u64,
}

/// Prewarm every idle endpoint of `config` that serves a loaded model.
/// Returns nothing to do (and captures nothing) when none qualifies.
pub async fn run(config: &Config, state_dir: &Path, shim: &Shim) -> Vec<Warmed> {
    if !config.defaults.prewarm {
        return Vec::new();
    }
    let probes = probe::probe_all(config).await;
    let mut todo = Vec::new();
    for p in &probes {
        let total = p.slots.as_ref().map_or(0, |s| s.total);
        let leased = super::lease::holders(state_dir, &p.name, total).len();
        if let Some(why) = skip_reason(p, leased) {
            tracing::debug!(endpoint = %p.name, "prewarm skipped: {why}");
            continue;
        }
        for m in loaded_models(p) {
            todo.push((p.clone(), m.clone()));
        }
    }
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
    let captured = match crate::prefix::capture(config, &claude).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(
                "prewarm skipped: the delegate's first request could not be captured: {e}"
            );
            return Vec::new();
        }
    };
    let body = request_body(&captured);
    let mut out = Vec::new();
    for (p, m) in todo {
        let w = warm_one(config, state_dir, shim, &p, &m, &body).await;
        match &w.outcome {
            Ok((input, cached)) => tracing::info!(
                endpoint = %w.endpoint, model = %w.model,
                "prewarmed the delegate prefix: {input} tokens, {cached} already cached, {} ms", w.ms
            ),
            Err(e) => {
                tracing::warn!(endpoint = %w.endpoint, model = %w.model, "prewarm failed: {e}")
            }
        }
        out.push(w);
    }
    out
}

async fn warm_one(
    config: &Config,
    state_dir: &Path,
    shim: &Shim,
    p: &EndpointStatus,
    m: &probe::ServedModel,
    body: &Value,
) -> Warmed {
    let started = Instant::now();
    let outcome = send(config, state_dir, shim, p, m, body).await;
    Warmed {
        endpoint: p.name.clone(),
        model: m.id.clone(),
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
) -> Result<(u64, u64), String> {
    let endpoint = config
        .endpoint(&p.name)
        .cloned()
        .ok_or_else(|| format!("endpoint `{}` is not in the config", p.name))?;
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
    let reg = shim
        .register(Route::for_target(
            format!("prewarm-{}", p.name),
            &target,
            m.context,
            RequestLog::new(&log_dir, false),
            super::manager::job_policy(&config.defaults),
        ))
        .map_err(|e| format!("cannot register with the shim ({e})"))?;
    // The longest a job's request may stay silent: a cold prefix on a
    // slow server is a long prefill.
    let limit = reg.route.longest_silence() + Duration::from_secs(5);
    let r = probe::fresh_http_client()
        .post(format!("{}/v1/messages", reg.base_url))
        .timeout(limit)
        .json(body)
        .send()
        .await
        .map_err(|e| format!("no answer ({e})"))?;
    let status = r.status().as_u16();
    let bytes = probe::client::read_at_most(r, 1 << 20).await;
    if status != 200 {
        return Err(format!(
            "HTTP {status}: {}",
            crate::fmt::first_chars(&String::from_utf8_lossy(&bytes), 200)
        ));
    }
    let a: Answer = serde_json::from_slice(&bytes).unwrap_or_default();
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
        };
        let mut p = EndpointStatus::new(&ep);
        p.up = true;
        p.slots = slots;
        p
    }

    #[test]
    fn only_an_idle_unleased_awake_server_is_prewarmed() {
        let idle = Some(Slots {
            total: 2,
            busy: 0,
            free: 2,
        });
        assert_eq!(skip_reason(&up(idle), 0), None);
        assert_eq!(skip_reason(&up(idle), 1), Some("a job holds a slot"));
        let busy = Some(Slots {
            total: 2,
            busy: 1,
            free: 1,
        });
        assert_eq!(skip_reason(&up(busy), 0), Some("a slot is processing"));
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
