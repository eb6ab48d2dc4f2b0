//! Seeing through vLLM's router (`vllm-router`, PyPI): an endpoint that
//! answers `GET /list_workers` with `{"urls": [...]}` fronts several
//! servers, its replicas.
//!
//! Why probe each replica: the router forwards `/props`, `/slots`,
//! `/metrics` and `/v1/models` to one replica of its choosing, so asking
//! the router describes one replica, not always the same one. A job's
//! window must fit every replica its session may land on (the smallest),
//! admission needs every slot (the sum), and a job's `/metrics` delta
//! must come from the replica that served it. Each replica is probed as a
//! server of its own, concurrently, in the probe's one budget.
//!
//! The list of replicas is the router's answer, so it is untrusted: only
//! `http(s)` URLs without credentials are probed, at most
//! [`MAX_REPLICAS`], and never with the endpoint's API key (a replica
//! that wants one is reported as such).

use serde::{Deserialize, Serialize};

use super::answer::{self, Field};
use super::classify::FailureKind;
use super::metrics::Counters;
use super::{EndpointStatus, ModelState, ServedModel, Slots};
use crate::config::Endpoint;

/// Replicas probed at most (the rest are named in a warning).
pub const MAX_REPLICAS: usize = 16;

/// One server behind a router: the `replicas[]` of an endpoint in
/// `status --json` and `list_models`.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Replica {
    /// As the router lists it (`/list_workers`).
    pub url: String,
    /// Answered our probe.
    pub up: bool,
    /// The router's own view (`GET /workers` `is_healthy`): it sends
    /// requests only to replicas it holds healthy, and notices a dead one
    /// only at its next health check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// Requests the router has in flight to it (`/workers` `load`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load: Option<i64>,
    /// One sentence: what failed and what to do. Null when up.
    pub error: Option<String>,
    pub error_kind: Option<FailureKind>,
    /// Round trip of its `GET /v1/models`.
    pub latency_ms: Option<u64>,
    /// Detected from its answers (`llama.cpp`, `vllm`, ...).
    pub backend: String,
    pub models: Vec<ServedModel>,
    pub slots: Option<Slots>,
    /// Its `/metrics` numbers, for a job's delta. Not serialised.
    #[serde(skip)]
    pub counters: Option<Counters>,
}

impl Replica {
    /// The router's view of it: "router: healthy, 0 in flight" (none
    /// when the router's `/workers` did not say).
    pub fn router_says(&self) -> Option<String> {
        let health = if self.healthy? {
            "healthy"
        } else {
            "unhealthy"
        };
        Some(match self.load {
            Some(l) => format!("router: {health}, {l} in flight"),
            None => format!("router: {health}"),
        })
    }
}

/// `GET /list_workers`.
#[derive(Debug, Deserialize)]
pub(super) struct WorkerList {
    #[serde(default)]
    pub urls: Field<Vec<Field<String>>>,
}

/// `GET /workers`.
#[derive(Debug, Default, Deserialize)]
pub(super) struct Workers {
    #[serde(default)]
    pub workers: Field<Vec<answer::Object<Worker>>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Worker {
    #[serde(default)]
    pub url: Field<String>,
    #[serde(default)]
    pub is_healthy: Field<bool>,
    #[serde(default)]
    pub load: Field<i64>,
}

/// The replicas a `/list_workers` body names, when it is a router's
/// answer: the URLs that may be probed, and the ones that may not (with
/// why). `None`: not a router's answer.
pub(super) fn listed(body: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    let list = answer::parse::<WorkerList>(body)?;
    let urls = list.urls.into_value()?;
    let mut ok: Vec<String> = Vec::new();
    let mut refused = Vec::new();
    for u in urls.into_iter().filter_map(Field::into_value) {
        match probeable(&u) {
            Some(clean) if ok.len() < MAX_REPLICAS => {
                if !ok.contains(&clean) {
                    ok.push(clean);
                }
            }
            Some(_) => refused.push(format!(
                "{}: more than {MAX_REPLICAS} replicas",
                crate::fmt::cut(&u, 80)
            )),
            None => refused.push(format!(
                "{}: not an http(s) URL without credentials",
                crate::fmt::cut(&u, 80)
            )),
        }
    }
    // The router lists them in no fixed order: sorted, `status` is stable.
    ok.sort();
    Some((ok, refused))
}

/// A replica URL without a trailing slash, when it is one localagents
/// may probe.
fn probeable(u: &str) -> Option<String> {
    let url = url::Url::parse(u.trim()).ok()?;
    let plain = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.query().is_none()
        && url.fragment().is_none();
    plain.then(|| url.as_str().trim_end_matches('/').to_string())
}

/// The endpoint a replica is probed as: its URL, the router's configured
/// backend (else detected), no key and no session header.
pub(super) fn endpoint_of(router: &Endpoint, url: &str) -> Endpoint {
    Endpoint {
        backend: router.backend,
        ..Endpoint::at(&format!("{} replica", router.name), url)
    }
}

/// A replica as the registry shows it, from its probe and the router's
/// `/workers` entry.
pub(super) fn replica(url: &str, st: EndpointStatus, workers: &Workers) -> Replica {
    let entry = workers
        .workers
        .value()
        .into_iter()
        .flatten()
        .filter_map(Field::value)
        .find(|w| {
            w.url
                .value()
                .is_some_and(|u| u.trim_end_matches('/') == url)
        });
    let healthy = entry.and_then(|w| w.is_healthy.value().copied());
    let error = st.error.map(|e| {
        let then = if healthy == Some(false) {
            "the router holds it unhealthy and sends its sessions to another replica, which processes their conversations again"
        } else {
            "until the router's health check marks it down, requests of its sessions fail (the router answers 502)"
        };
        format!(
            "replica {url} is down: {}; {then}",
            e.replace("in base_url", "in the router's --worker-urls")
        )
    });
    Replica {
        url: url.to_string(),
        up: st.up,
        healthy,
        load: entry.and_then(|w| w.load.value().copied()),
        error,
        error_kind: st.error_kind,
        latency_ms: st.latency_ms,
        backend: st.backend,
        models: st.models,
        slots: st.slots,
        counters: st.counters,
    }
}

/// Fold the replicas into the router's status: every model any replica
/// serves, with the smallest window of the replicas serving it (a session
/// may land on any of them); the slots summed; the backend detected from
/// the replicas unless configured. `statuses` holds each replica's own
/// probe, for its template caps and warnings.
pub(super) fn fold(st: &mut EndpointStatus, replicas: Vec<Replica>, statuses: &[EndpointStatus]) {
    st.kind = Some(super::ServerKind::VllmRouter);
    st.counters = None;
    let up: Vec<&Replica> = replicas.iter().filter(|r| r.up).collect();
    if st.backend_detected {
        st.backend = up
            .first()
            .map(|r| r.backend.clone())
            .unwrap_or_else(|| "unknown".into());
    }
    let mut models: Vec<ServedModel> = Vec::new();
    for r in &up {
        for m in &r.models {
            match models.iter_mut().find(|x| x.id == m.id) {
                None => models.push(m.clone()),
                Some(x) => {
                    if let Some(c) = m.context
                        && x.context.is_none_or(|xc| c < xc)
                    {
                        x.context = Some(c);
                        x.context_source = m.context_source;
                    }
                    if x.state != Some(ModelState::Loaded) && m.state.is_some() {
                        x.state = m.state.clone();
                    }
                }
            }
        }
    }
    st.models = models;
    let counted: Vec<Slots> = up.iter().filter_map(|r| r.slots).collect();
    st.slots = (!counted.is_empty()).then(|| Slots {
        total: counted.iter().map(|s| s.total).sum(),
        busy: counted.iter().map(|s| s.busy).sum(),
        free: counted.iter().map(|s| s.free).sum(),
        unused: counted
            .iter()
            .map(|s| s.unused)
            .try_fold(0u64, |n, u| u.map(|u| n + u)),
    });
    st.metrics = statuses.iter().any(|s| s.metrics);
    let loads: Vec<&super::Load> = statuses.iter().filter_map(|s| s.load.as_ref()).collect();
    if !loads.is_empty() {
        st.load = Some(super::Load {
            running: loads.iter().map(|l| l.running).sum(),
            waiting: loads.iter().map(|l| l.waiting).sum(),
            kv_cache_usage: None,
        });
    }
    st.chat_template = statuses
        .iter()
        .filter(|s| s.up)
        .find_map(|s| s.chat_template.clone());
    for (r, s) in replicas.iter().zip(statuses) {
        for w in &s.warnings {
            let w = format!("replica {}: {w}", r.url);
            if !st.warnings.contains(&w) {
                st.warnings.push(w);
            }
        }
        // A replica that is down says so in its own `error`.
        if r.up && r.healthy == Some(false) {
            st.warnings.push(format!(
                "replica {} answers, but the router holds it unhealthy: it sends it nothing until its next health check passes",
                r.url
            ));
        }
    }
    let served: Vec<&str> = st.models.iter().map(|m| m.id.as_str()).collect();
    for r in &up {
        let missing: Vec<&str> = served
            .iter()
            .copied()
            .filter(|id| !r.models.iter().any(|m| m.id == *id))
            .collect();
        if !missing.is_empty() {
            st.warnings.push(format!(
                "replica {} does not serve {}: vllm-router sends a session to any replica whatever its model, so give every replica the same models",
                r.url,
                missing.join(", ")
            ));
        }
    }
    st.replicas = replicas;
}

/// Every replica is down: the router's failure, naming each.
pub(super) fn all_down(replicas: &[Replica]) -> (FailureKind, String) {
    let kind = replicas
        .iter()
        .find_map(|r| r.error_kind)
        .unwrap_or(FailureKind::Http);
    let each: Vec<String> = replicas.iter().filter_map(|r| r.error.clone()).collect();
    let s = if replicas.is_empty() {
        "the vLLM router lists no replica (`GET /list_workers` is empty): start it with --worker-urls, or add workers to it".to_string()
    } else {
        format!(
            "every replica behind the vLLM router is down: {}",
            each.join("; ")
        )
    };
    (kind, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_are_probed_and_at_most_sixteen() {
        let mut urls: Vec<String> = vec![
            "http://127.0.0.1:8081/".into(),
            "http://127.0.0.1:8081".into(),
            "file:///etc/passwd".into(),
            "http://user:pw@10.0.0.1:8000".into(),
            "https://gpu2:8000".into(),
        ];
        urls.extend((0..20).map(|i| format!("http://h{i}:1")));
        let body = serde_json::to_vec(&serde_json::json!({ "urls": urls })).unwrap();
        let (ok, refused) = listed(&body).unwrap();
        assert_eq!(ok[0], "http://127.0.0.1:8081");
        assert!(ok.contains(&"https://gpu2:8000".to_string()));
        assert_eq!(ok.len(), MAX_REPLICAS);
        assert!(ok.windows(2).all(|w| w[0] < w[1]), "sorted: {ok:?}");
        assert!(refused.iter().any(|r| r.starts_with("file:///etc/passwd")));
        assert!(refused.iter().any(|r| r.contains("user:pw")));
        assert!(refused.iter().any(|r| r.contains("more than 16")));
    }

    #[test]
    fn a_server_that_is_no_router_is_not_read_as_one() {
        // llama-server's 404 body, a list of another shape, not JSON.
        assert!(
            listed(
                br#"{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}"#
            )
            .is_none()
        );
        assert!(listed(br#"{"urls":"http://x"}"#).is_none());
        assert!(listed(b"<html>").is_none());
    }
}
