//! Loading a model on a server that loads on demand, before a job starts.
//!
//! A llama.cpp router would load an unloaded model on the job's first
//! request anyway, but then the delegate's first turn waits for the load
//! (minutes for a 27B) under its first-byte timeout, and the window it was
//! told came from the launch args, not the running instance. So the job
//! loads first, waits with its own budget (`defaults.load_timeout_s`), and
//! probes the real window after. A sleeping server is woken the same way.
//! Nothing here starts a server: it asks one that runs.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{EndpointStatus, ModelState, ServerKind, answer, client, http_client};
use crate::config::Endpoint;

/// How often the state is polled while a model loads.
const POLL: Duration = Duration::from_millis(250);

/// What needs doing before a job can use `model` on this endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A router's model that is `unloaded` or `loading`.
    Load,
    /// A server asleep (`--sleep-idle-seconds`).
    Wake,
}

/// From the probe: does `model` need a load or a wake first?
pub fn need(kind: Option<ServerKind>, state: Option<&ModelState>) -> Option<Need> {
    match (kind, state) {
        (
            Some(
                ServerKind::Router
                | ServerKind::LlamaSwap
                | ServerKind::Ollama
                | ServerKind::LmStudio,
            ),
            Some(ModelState::Unloaded | ModelState::Loading),
        ) => Some(Need::Load),
        (_, Some(ModelState::Sleeping)) => Some(Need::Wake),
        _ => None,
    }
}

/// Models that loading `model` may unload, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Risk {
    pub models: Vec<String>,
    pub why: String,
}

/// What loading `model` on this endpoint could unload. A router past its
/// `max_instances` evicts the least recently used model (which one is not
/// published, so every loaded one is at risk); llama-swap does not publish
/// its groups, and its default group runs one model at a time, so every
/// running model is at risk. Nothing is at risk when `model` is loaded.
pub fn at_risk(st: &EndpointStatus, model: &str) -> Option<Risk> {
    let loaded = |m: &&super::ServedModel| {
        m.id != model && matches!(m.state, Some(ModelState::Loaded | ModelState::Loading))
    };
    let me = st.models.iter().find(|m| m.id == model)?;
    if matches!(me.state, Some(ModelState::Loaded | ModelState::Loading)) {
        return None;
    }
    let others: Vec<String> = st
        .models
        .iter()
        .filter(loaded)
        .map(|m| m.id.clone())
        .collect();
    if others.is_empty() {
        return None;
    }
    match st.kind {
        Some(ServerKind::Router) => {
            let max = st.max_instances.filter(|m| *m > 0)?;
            (others.len() as u64 >= max).then(|| Risk {
                models: others,
                why: format!(
                    "the router holds at most {max} loaded models (--models-max) and unloads the least recently used"
                ),
            })
        }
        Some(ServerKind::LlamaSwap) => Some(Risk {
            models: others,
            why: "llama-swap swaps models out by group (its default group runs one model at a time) and does not publish its groups".into(),
        }),
        _ => None,
    }
}

/// Unload `model` through the endpoint's own API: a router's
/// `POST /models/unload`, llama-swap's `POST /api/models/unload/<model>`.
/// Returns whether it was loaded.
pub async fn unload(ep: &Endpoint, kind: Option<ServerKind>, model: &str) -> Result<bool, String> {
    let req = match kind {
        Some(ServerKind::Router) => {
            request(ep, reqwest::Method::POST, "/models/unload").json(&json!({ "model": model }))
        }
        Some(ServerKind::LlamaSwap) => request(
            ep,
            reqwest::Method::POST,
            &format!("/api/models/unload/{model}"),
        ),
        _ => {
            return Err(format!(
                "`{}` is a plain server that cannot unload its model: stop the server on its host instead",
                ep.name
            ));
        }
    };
    let r = req
        .send()
        .await
        .map_err(|e| format!("cannot ask `{}` to unload {model}: {e}", ep.name))?;
    let status = r.status().as_u16();
    let body = r.text().await.unwrap_or_default();
    match status {
        200 => Ok(true),
        400 if body.contains("not running") => Ok(false),
        _ => Err(format!(
            "`{}` refused to unload {model} ({status}: {})",
            ep.name,
            crate::fmt::cut(&body, 200)
        )),
    }
}

fn request(ep: &Endpoint, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    client::request(http_client(), ep, method, path).timeout(Duration::from_secs(30))
}

/// The model's `status.value` in `/v1/models`, if listed.
async fn state_of(ep: &Endpoint, model: &str) -> Option<ModelState> {
    let v: Value = request(ep, reqwest::Method::GET, "/v1/models")
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let list: answer::ModelList = answer::parse_value(v)?;
    list.data
        .value()?
        .iter()
        .filter_map(answer::Field::value)
        .find(|m| m.id.value().map(String::as_str) == Some(model))?
        .state()
        .cloned()
}

/// Ollama's and LM Studio's own load, with the server's own settings
/// (never a `num_ctx` or `context_length`: the window is the user's to
/// set). Both answer once the model is loaded.
/// - Ollama: `POST /api/generate {"model"}` with no prompt loads it
///   (ollama server/routes.go, GenerateHandler; `done_reason: "load"`).
/// - LM Studio: `POST /api/v1/models/load {"model"}` (its REST API, 0.4.0+).
async fn load_local(
    ep: &Endpoint,
    model: &str,
    kind: Option<ServerKind>,
    limit: Duration,
) -> Result<(), String> {
    let path = if kind == Some(ServerKind::Ollama) {
        "/api/generate"
    } else {
        "/api/v1/models/load"
    };
    let r = request(ep, reqwest::Method::POST, path)
        .json(&json!({ "model": model }))
        .timeout(limit)
        .send()
        .await
        .map_err(|e| format!("cannot ask `{}` to load {model}: {e}", ep.name))?;
    let status = r.status().as_u16();
    let body = r.text().await.unwrap_or_default();
    // LM Studio answers a path it does not serve (0.3.x here) with a 200.
    if status == 200 && !super::local::lmstudio_unexpected(body.as_bytes()) {
        return Ok(());
    }
    let fix = if kind == Some(ServerKind::Ollama) {
        format!("check `ollama ps` and the server's log, or load it with `ollama run {model}`")
    } else {
        format!("load it in LM Studio first: `lms load {model} --context-length 65536`")
    };
    Err(format!(
        "`{}` refused to load {model} ({status}: {}): {fix}",
        ep.name,
        crate::fmt::cut(&body, 200)
    ))
}

async fn sleeping(ep: &Endpoint) -> Option<bool> {
    let v: Value = request(ep, reqwest::Method::GET, "/props")
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    answer::parse_value::<answer::Props>(v)?
        .is_sleeping
        .value()
        .copied()
}

/// Load (or wake) and wait until the model is ready, at most `limit`.
/// Returns how long it took, or a sentence that says what failed.
pub async fn ready(
    ep: &Endpoint,
    model: &str,
    need: Need,
    kind: Option<ServerKind>,
    limit: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    match need {
        Need::Load if matches!(kind, Some(ServerKind::Ollama | ServerKind::LmStudio)) => {
            return load_local(ep, model, kind, limit)
                .await
                .map(|()| started.elapsed());
        }
        Need::Load if kind == Some(ServerKind::LlamaSwap) => {
            // llama-swap loads a model on any request routed to it.
            let _ = request(
                ep,
                reqwest::Method::GET,
                &format!("/upstream/{model}/health"),
            )
            .timeout(limit)
            .send()
            .await;
        }
        Need::Load => {
            let r = request(ep, reqwest::Method::POST, "/models/load")
                .json(&json!({ "model": model }))
                .send()
                .await
                .map_err(|e| format!("cannot ask `{}` to load {model}: {e}", ep.name))?;
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            if status != 200 && !body.contains("already running") {
                return Err(format!(
                    "`{}` refused to load {model} ({status}: {}): check the router's models dir or preset",
                    ep.name,
                    crate::fmt::cut(&body, 200)
                ));
            }
        }
        Need::Wake => {
            // /slots wakes a sleeping llama-server (and waits for it).
            let _ = request(ep, reqwest::Method::GET, "/slots")
                .timeout(limit)
                .send()
                .await;
        }
    }
    loop {
        let done = match need {
            Need::Load => state_of(ep, model).await == Some(ModelState::Loaded),
            Need::Wake => sleeping(ep).await == Some(false),
        };
        if done {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            return Err(format!(
                "{model} on `{}` was not ready after {} s (defaults.load_timeout_s): check the server's log, or raise the timeout for a large model",
                ep.name,
                limit.as_secs()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(kind: ServerKind, max: Option<u64>, models: &[(&str, ModelState)]) -> EndpointStatus {
        let ep = Endpoint {
            name: "e".into(),
            base_url: "http://e".into(),
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
        let mut st = EndpointStatus::new(&ep);
        st.kind = Some(kind);
        st.max_instances = max;
        st.models = models
            .iter()
            .map(|(id, state)| super::super::ServedModel {
                id: id.to_string(),
                context: Some(32768),
                context_source: None,
                state: Some(state.clone()),
                file: None,
            })
            .collect();
        st
    }

    #[test]
    fn what_a_load_may_unload() {
        let full = status(
            ServerKind::Router,
            Some(1),
            &[("a", ModelState::Loaded), ("b", ModelState::Unloaded)],
        );
        assert_eq!(at_risk(&full, "b").unwrap().models, vec!["a".to_string()]);
        assert!(at_risk(&full, "a").is_none(), "a is loaded already");
        let room = status(
            ServerKind::Router,
            Some(2),
            &[("a", ModelState::Loaded), ("b", ModelState::Unloaded)],
        );
        assert!(at_risk(&room, "b").is_none());
        let unlimited = status(
            ServerKind::Router,
            Some(0),
            &[("a", ModelState::Loaded), ("b", ModelState::Unloaded)],
        );
        assert!(at_risk(&unlimited, "b").is_none());
        let swap = status(
            ServerKind::LlamaSwap,
            None,
            &[("a", ModelState::Loaded), ("b", ModelState::Unloaded)],
        );
        assert!(at_risk(&swap, "b").unwrap().why.contains("group"));
        let empty = status(
            ServerKind::LlamaSwap,
            None,
            &[("a", ModelState::Unloaded), ("b", ModelState::Unloaded)],
        );
        assert!(at_risk(&empty, "b").is_none());
    }

    #[test]
    fn what_needs_doing() {
        // Ollama and LM Studio load on demand, as a router does.
        for kind in [ServerKind::Ollama, ServerKind::LmStudio] {
            assert_eq!(
                need(Some(kind), Some(&ModelState::Unloaded)),
                Some(Need::Load)
            );
            assert_eq!(need(Some(kind), Some(&ModelState::Loaded)), None);
        }
        assert_eq!(
            need(Some(ServerKind::Router), Some(&ModelState::Unloaded)),
            Some(Need::Load)
        );
        assert_eq!(
            need(Some(ServerKind::Router), Some(&ModelState::Loading)),
            Some(Need::Load)
        );
        assert_eq!(
            need(Some(ServerKind::Router), Some(&ModelState::Loaded)),
            None
        );
        assert_eq!(
            need(Some(ServerKind::LlamaSwap), Some(&ModelState::Unloaded)),
            Some(Need::Load)
        );
        assert_eq!(
            need(Some(ServerKind::Sleeping), Some(&ModelState::Sleeping)),
            Some(Need::Wake)
        );
        assert_eq!(need(None, None), None);
    }
}
