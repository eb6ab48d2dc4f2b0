//! Turning a failed probe into one sentence that names the fix.
//!
//! Users read these sentences in `localagents status` and Claude reads them
//! in `list_models`; both need "what is wrong and what to do", not a chain of
//! library errors.

use std::time::Duration;

use serde::Serialize;

use super::answer;
use crate::config::Endpoint;

/// The class of a probe failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// TCP connection refused: host up, nothing listening.
    Refused,
    /// No route to the host, or the name does not resolve.
    Unreachable,
    /// No answer within the budget.
    Timeout,
    /// 401/403: the server wants an API key, or rejected ours.
    Unauthorized,
    /// 503 while the model loads.
    Loading,
    /// Any other HTTP error status.
    Http,
    /// 200, but not what this backend sends.
    BadBody,
    /// TLS or another transport error.
    Transport,
}

fn host_port(ep: &Endpoint) -> (String, u16) {
    match url::Url::parse(&ep.base_url) {
        Ok(u) => (
            u.host_str().unwrap_or("?").to_string(),
            u.port_or_known_default().unwrap_or(0),
        ),
        Err(_) => (ep.base_url.clone(), 0),
    }
}

fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn io_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        cur = err.source();
    }
    None
}

/// An error and its sources, `: `-joined.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    chain_text(e)
}

fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        parts.push(err.to_string());
        cur = err.source();
    }
    parts.join(": ")
}

/// A sentence for "no answer within the budget".
pub fn timeout_sentence(ep: &Endpoint, budget: Duration, connected: bool) -> (FailureKind, String) {
    let (host, port) = host_port(ep);
    let s = if connected {
        format!(
            "{host}:{port} accepted the connection but sent no answer within {}: the server is hung or still starting; check its log or restart it",
            secs(budget)
        )
    } else {
        format!(
            "no answer from {host}:{port} within {}: the host is off or a firewall drops the packets; power it on or open the port",
            secs(budget)
        )
    };
    (FailureKind::Timeout, s)
}

/// Classify a transport-level failure of `reqwest`.
pub fn transport(ep: &Endpoint, e: &reqwest::Error, budget: Duration) -> (FailureKind, String) {
    let (host, port) = host_port(ep);
    let kind = io_kind(e);
    let text = chain_text(e).to_ascii_lowercase();
    use std::io::ErrorKind as K;
    if e.is_timeout() || matches!(kind, Some(K::TimedOut)) {
        return timeout_sentence(ep, budget, !e.is_connect());
    }
    match kind {
        Some(K::ConnectionRefused) => (
            FailureKind::Refused,
            format!(
                "host is up, nothing listens on port {port} at {host}: start the server or fix the port in base_url"
            ),
        ),
        Some(K::HostUnreachable | K::NetworkUnreachable | K::AddrNotAvailable) => (
            FailureKind::Unreachable,
            format!(
                "{host} is unreachable (no route): check the address in base_url and that the machine is on this network"
            ),
        ),
        Some(K::ConnectionReset | K::ConnectionAborted | K::UnexpectedEof | K::BrokenPipe) => (
            FailureKind::Transport,
            format!(
                "{host}:{port} closed the connection without an HTTP answer: is this port really the server's HTTP port (not TLS, not another service)?"
            ),
        ),
        _ if text.contains("dns error")
            || text.contains("failed to lookup")
            || text.contains("name or service not known")
            || text.contains("no address associated") =>
        {
            (
                FailureKind::Unreachable,
                format!(
                    "cannot resolve host name {host}: fix the host in base_url or add it to DNS or /etc/hosts"
                ),
            )
        }
        _ if text.contains("certificate") || text.contains("tls") || text.contains("handshake") => {
            (
                FailureKind::Transport,
                format!(
                    "TLS to {host}:{port} failed ({}): use http:// for a plain local server, or fix its certificate",
                    short(&text)
                ),
            )
        }
        _ => (
            FailureKind::Transport,
            format!(
                "request to {host}:{port} failed ({}): check base_url",
                short(&text)
            ),
        ),
    }
}

fn short(s: &str) -> String {
    crate::fmt::cut(s.trim(), 160)
}

/// The `message` of a JSON error body, in either llama.cpp's or Anthropic's
/// or OpenAI's shape, else the start of the raw text.
pub fn error_message(body: &[u8]) -> String {
    if let Some(s) = answer::parse::<answer::ErrorBody>(body).and_then(|b| b.message()) {
        return short(&s);
    }
    short(&String::from_utf8_lossy(body))
}

/// Classify an HTTP error status on `path`.
pub fn http(ep: &Endpoint, path: &str, status: u16, body: &[u8]) -> (FailureKind, String) {
    let msg = error_message(body);
    match status {
        401 | 403 => match (&ep.api_key_env, ep.api_key()) {
            (None, _) => (
                FailureKind::Unauthorized,
                "the server wants an API key: set api_key_env on this endpoint to the name of an env var that holds it".into(),
            ),
            (Some(var), None) => (
                FailureKind::Unauthorized,
                format!("the server wants an API key, and api_key_env names `{var}`, which is not set: export {var} where localagents runs"),
            ),
            (Some(var), Some(_)) => (
                FailureKind::Unauthorized,
                format!("the server rejected the API key from `{var}`: check that it matches the server's --api-key"),
            ),
        },
        503 => (
            FailureKind::Loading,
            format!("model still loading ({msg}): wait until the server has loaded it, then retry"),
        ),
        404 if path == "/v1/models" && ep.base_url.trim_end_matches('/').ends_with("/v1") => (
            FailureKind::Http,
            format!("GET {path} answered 404: base_url ends in /v1; drop the /v1 (it is added per request)"),
        ),
        404 => (
            FailureKind::Http,
            format!("GET {path} answered 404: this does not look like a model server (none of {}); check base_url", crate::config::Backend::names()),
        ),
        _ => (
            FailureKind::Http,
            format!("GET {path} answered HTTP {status} ({msg}): check the server's log"),
        ),
    }
}

/// A 200 whose body is not what the backend sends.
pub fn bad_body(ep: &Endpoint, path: &str, body: &[u8]) -> (FailureKind, String) {
    let what = ep
        .backend
        .map(|b| match b {
            crate::config::Backend::OpenAi => "OpenAI-compatible",
            crate::config::Backend::Other => "model",
            b => b.title(),
        })
        .unwrap_or("model");
    let start = short(&String::from_utf8_lossy(&body[..body.len().min(80)]));
    (
        FailureKind::BadBody,
        format!(
            "GET {path} answered 200 but not with a model list (starts with `{start}`): base_url does not point at a {what} server; fix base_url"
        ),
    )
}
