//! A shim route to a llama.cpp backend, for tests that drive the shim in
//! process (the real server in e2e, a fake here).

use std::path::Path;
use std::time::Duration;

use localagents::config::{Backend, Endpoint};
use localagents::shim::Route;
use localagents::shim::log::RequestLog;

/// A route to `url` serving `served` with a `window`-token slot, logging
/// under `dir` (bodies too when `dump`).
pub fn llama(url: &str, served: &str, window: u64, dir: &Path, dump: bool) -> Route {
    Route {
        label: "test".into(),
        session: None,
        endpoint: Endpoint {
            name: "box".into(),
            base_url: url.into(),
            backend: Some(Backend::LlamaCpp),
            host: None,
            notes: None,
            env: Default::default(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        },
        backend: Backend::LlamaCpp,
        served_id: served.into(),
        window: Some(window),
        log: RequestLog::new(dir, dump),
        idle_timeout: Duration::from_secs(300),
        first_byte_timeout: Duration::from_secs(300),
        guard: Default::default(),
        wire: Default::default(),
    }
}
