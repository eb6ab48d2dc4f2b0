//! The HTTP clients localagents talks to backends with, and the one place a
//! request to an endpoint is built.
//!
//! Why one module: the probe, the model loader, the shim, the token count
//! and the eval all talk to the same servers, and each used to build its
//! request and add the endpoint's API key by itself. A key rule that lives
//! in six places drifts; here it lives once ([`request`]), with the two
//! clients every caller shares (a pool per process is what keeps a probe to
//! one round trip).

use std::sync::OnceLock;
use std::time::Duration;

use crate::config::Endpoint;

/// Longest a TCP (and TLS) connect to a backend may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Install rustls's ring crypto provider as the process default. reqwest is
/// built with `rustls-no-provider`, so building a `reqwest::Client` before
/// this panics. Idempotent; every client localagents builds calls it first,
/// and so do the tests' own clients.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The shared HTTP client. Proxies are off on purpose: backends are on this
/// machine or the LAN, and a corporate proxy would only get in the way.
pub fn http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        install_crypto_provider();
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// A client that keeps no idle connections: each request gets a fresh one
/// (the shim's retry after a stale pooled connection).
pub fn fresh_http_client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        install_crypto_provider();
        reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_max_idle_per_host(0)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new())
    })
}

/// A request for `path` (from the leading `/`) on `ep`, through `client`,
/// with `Authorization: Bearer` when the endpoint has a key
/// ([`Endpoint::api_key`]: its `api_key_env` is set and non-empty, and the
/// URL is one a key may go to); without any when it has none.
pub fn request(
    client: &reqwest::Client,
    ep: &Endpoint,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let req = client.request(method, format!("{}{}", ep.base_url, path));
    match ep.api_key() {
        Some(key) => req.bearer_auth(key),
        None => req,
    }
}

/// At most `cap` bytes of a response's body (what arrived before an error
/// or the cap; the rest is not read).
pub async fn read_at_most(mut resp: reqwest::Response, cap: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while bytes.len() < cap {
        match resp.chunk().await {
            Ok(Some(c)) => bytes.extend_from_slice(&c[..c.len().min(cap - bytes.len())]),
            _ => break,
        }
    }
    bytes
}
