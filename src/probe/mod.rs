//! Live probing of endpoints: what each server really serves, its real
//! per-slot window, how busy it is, and, when it is down, why in one
//! sentence that names the fix.
//!
//! Every endpoint is probed concurrently and each gets the whole
//! `probe_timeout_s` budget, so one dead host never slows the others. All
//! requests of one endpoint run in parallel too, so a healthy probe costs one
//! round trip. Results are cached for about a second: Claude often calls
//! several tools in a burst, and a burst should cost one probe.
//!
//! This file owns the cache and the entry points; the status a probe gives
//! is in `types.rs`, the fetching of one server's paths in `fetch.rs`, and
//! the pure reading of its answers into that status in `read.rs`.

pub mod answer;
pub mod classify;
pub mod client;
mod fetch;
pub mod load;
mod local;
pub mod metrics;
mod others;
mod read;
pub mod replicas;
pub mod saved;
mod types;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::config::{Backend, Config, Endpoint};
pub use classify::FailureKind;
pub use client::{CONNECT_TIMEOUT, fresh_http_client, http_client, install_crypto_provider};
pub use fetch::probe;
pub use local::{refusals, small_window};
pub use others::{guard_note, no_window, window_refusal};
pub use read::preset_window;
pub use replicas::Replica;
pub use types::{
    CACHE_TTL, ContextSource, EndpointStatus, Load, MIN_WINDOW, ModelFile, ModelState,
    SMALL_WINDOW, ServedModel, ServerKind, Slots, TemplateCaps,
};

type CacheKey = (String, String, Option<Backend>, Option<String>);

type ProbeCache = Mutex<HashMap<CacheKey, (Instant, EndpointStatus)>>;

fn cache() -> &'static ProbeCache {
    static CACHE: OnceLock<ProbeCache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

fn key_of(ep: &Endpoint) -> CacheKey {
    (
        ep.name.clone(),
        ep.base_url.clone(),
        ep.backend,
        ep.api_key_env.clone(),
    )
}

/// Probe every endpoint of the config concurrently, reusing results younger
/// than [`CACHE_TTL`]. Order follows the config.
pub async fn probe_all(config: &Config) -> Vec<EndpointStatus> {
    let budget = Duration::from_secs_f64(config.defaults.probe_timeout_s);
    let futs = config.endpoints.iter().map(|ep| probe_cached(ep, budget));
    futures::future::join_all(futs).await
}

/// Probe one endpoint, through the cache.
pub async fn probe_cached(ep: &Endpoint, budget: Duration) -> EndpointStatus {
    let key = key_of(ep);
    if let Ok(c) = cache().lock()
        && let Some((at, st)) = c.get(&key)
        && at.elapsed() < CACHE_TTL
    {
        return st.clone();
    }
    let st = probe(ep, budget).await;
    if let Ok(mut c) = cache().lock() {
        c.retain(|_, (at, _)| at.elapsed() < CACHE_TTL);
        c.insert(key, (Instant::now(), st.clone()));
    }
    st
}

/// Forget cached probes (after `register_endpoint`, or in tests).
pub fn invalidate() {
    if let Ok(mut c) = cache().lock() {
        c.clear();
    }
}
