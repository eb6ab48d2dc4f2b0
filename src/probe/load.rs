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

use super::http_client;
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
pub fn need(kind: Option<&str>, state: Option<&str>) -> Option<Need> {
    match (kind, state) {
        (Some("router" | "llama-swap"), Some("unloaded" | "loading")) => Some(Need::Load),
        (_, Some("sleeping")) => Some(Need::Wake),
        _ => None,
    }
}

fn request(ep: &Endpoint, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    let mut req = http_client()
        .request(method, format!("{}{}", ep.base_url, path))
        .timeout(Duration::from_secs(30));
    if let Some(key) = ep.api_key() {
        req = req.bearer_auth(key);
    }
    req
}

/// The model's `status.value` in `/v1/models`, if listed.
async fn state_of(ep: &Endpoint, model: &str) -> Option<String> {
    let v: Value = request(ep, reqwest::Method::GET, "/v1/models")
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    v.get("data")?
        .as_array()?
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))?
        .pointer("/status/value")?
        .as_str()
        .map(str::to_string)
}

async fn sleeping(ep: &Endpoint) -> Option<bool> {
    let v: Value = request(ep, reqwest::Method::GET, "/props")
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    v.get("is_sleeping").and_then(Value::as_bool)
}

/// Load (or wake) and wait until the model is ready, at most `limit`.
/// Returns how long it took, or a sentence that says what failed.
pub async fn ready(
    ep: &Endpoint,
    model: &str,
    need: Need,
    swap: bool,
    limit: Duration,
) -> Result<Duration, String> {
    let started = Instant::now();
    match need {
        Need::Load if swap => {
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
                    body.chars().take(200).collect::<String>()
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
            Need::Load => state_of(ep, model).await.as_deref() == Some("loaded"),
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

    #[test]
    fn what_needs_doing() {
        assert_eq!(need(Some("router"), Some("unloaded")), Some(Need::Load));
        assert_eq!(need(Some("router"), Some("loading")), Some(Need::Load));
        assert_eq!(need(Some("router"), Some("loaded")), None);
        assert_eq!(need(Some("llama-swap"), Some("unloaded")), Some(Need::Load));
        assert_eq!(need(Some("sleeping"), Some("sleeping")), Some(Need::Wake));
        assert_eq!(need(None, None), None);
    }
}
