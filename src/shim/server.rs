//! The HTTP server and its route table: one axum server per process,
//! routes registered per job under `/j/<token>` ([`Shim`],
//! [`Registration`]), the extractor that finds a request's route and
//! refuses non-local callers, and the three forwarded paths' handlers.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock, Weak};

use axum::Router;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;

use crate::shim::count::*;
use crate::shim::errors;
use crate::shim::pipeline::json_response;
use crate::shim::reply::*;
use crate::shim::route::*;

/// Largest request body accepted (Claude Code sends ~80 KB to a few MB).
pub(crate) const MAX_BODY: usize = 64 * 1024 * 1024;

pub(crate) struct Inner {
    addr: SocketAddr,
    routes: RwLock<HashMap<String, Arc<Route>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The running shim server. Cheap to clone.
#[derive(Clone)]
pub struct Shim {
    inner: Arc<Inner>,
}

/// A route's place in the shim. Dropping it removes the route.
pub struct Registration {
    pub token: String,
    /// What `ANTHROPIC_BASE_URL` should be.
    pub base_url: String,
    pub route: Arc<Route>,
    shim: Weak<Inner>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(inner) = self.shim.upgrade()
            && let Ok(mut r) = inner.routes.write()
        {
            r.remove(&self.token);
        }
    }
}

/// 128 random bits, hex.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| std::io::Error::other(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

pub(crate) type Shared = Weak<Inner>;

impl Shim {
    /// Bind 127.0.0.1:`port` (0: the kernel picks) and serve.
    pub async fn start(port: u16) -> std::io::Result<Shim> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| {
            let app = router(weak.clone());
            // Small SSE writes must leave at once, not wait for an ACK.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            let task = tokio::spawn(async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!("shim server stopped: {e}");
                }
            });
            Inner {
                addr,
                routes: RwLock::new(HashMap::new()),
                task,
            }
        });
        Ok(Shim { inner })
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    fn insert(&self, token: String, route: Route) -> Registration {
        let route = Arc::new(route);
        if let Ok(mut r) = self.inner.routes.write() {
            r.insert(token.clone(), route.clone());
        }
        let base_url = if token.is_empty() {
            format!("http://{}", self.inner.addr)
        } else {
            format!("http://{}/j/{token}", self.inner.addr)
        };
        Registration {
            token,
            base_url,
            route,
            shim: Arc::downgrade(&self.inner),
        }
    }

    /// Add a route under a fresh unguessable token.
    pub fn register(&self, route: Route) -> std::io::Result<Registration> {
        Ok(self.insert(new_token()?, route))
    }

    /// Add the one route served without a prefix (`--no-token`).
    pub fn register_open(&self, route: Route) -> Registration {
        self.insert(String::new(), route)
    }

    /// Number of live routes.
    pub fn routes(&self) -> usize {
        self.inner.routes.read().map(|r| r.len()).unwrap_or(0)
    }
}

pub(crate) fn router(shared: Shared) -> Router {
    Router::new()
        .route("/j/{token}/v1/messages", post(messages_handler))
        .route("/j/{token}/v1/messages/count_tokens", post(count_handler))
        .route("/j/{token}/v1/models", get(models_handler))
        .route("/v1/messages", post(messages_handler))
        .route("/v1/messages/count_tokens", post(count_handler))
        .route("/v1/models", get(models_handler))
        .fallback(not_found)
        .method_not_allowed_fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(shared)
}

pub(crate) async fn not_found() -> Response {
    Rejected::NoRoute.into_response()
}

/// The route a request is for: the token after `/j/`, or the open route
/// (`--no-token`) for a bare path. An extractor, so the route is checked
/// from the request line before any body is read; an unknown route is the
/// Anthropic-shaped 404.
pub(crate) struct JobRoute(Arc<Route>);

/// The rejection of [`JobRoute`].
pub(crate) enum Rejected {
    NoRoute,
    /// A browser or a foreign host name on the open route.
    Foreign,
}

impl IntoResponse for Rejected {
    fn into_response(self) -> Response {
        match self {
            Rejected::NoRoute => json_response(
                404,
                &errors::anthropic_error(
                    "not_found_error",
                    "not found: the localagents shim serves only POST /v1/messages, POST /v1/messages/count_tokens and GET /v1/models under a job's URL",
                ),
            ),
            Rejected::Foreign => json_response(
                403,
                &errors::anthropic_error(
                    "permission_error",
                    "the open localagents shim (--no-token) answers only local programs: no Origin header, and Host 127.0.0.1, localhost or [::1]",
                ),
            ),
        }
    }
}

impl FromRequestParts<Shared> for JobRoute {
    type Rejection = Rejected;

    async fn from_request_parts(parts: &mut Parts, shared: &Shared) -> Result<Self, Rejected> {
        let token = parts
            .uri
            .path()
            .strip_prefix("/j/")
            .and_then(|rest| rest.split('/').next())
            .unwrap_or("");
        if token.is_empty() && !local_caller(&parts.headers) {
            // The open route (`--no-token`) has no secret in its URL: a
            // web page (Origin) or a DNS-rebound name (Host) must not
            // reach it.
            return Err(Rejected::Foreign);
        }
        let inner = shared.upgrade().ok_or(Rejected::NoRoute)?;
        let routes = inner.routes.read().map_err(|_| Rejected::NoRoute)?;
        routes
            .get(token)
            .cloned()
            .map(JobRoute)
            .ok_or(Rejected::NoRoute)
    }
}

/// A request from a local program: no `Origin` header (browsers always
/// send one on a cross-site POST) and a loopback `Host`.
pub(crate) fn local_caller(headers: &axum::http::HeaderMap) -> bool {
    if headers.contains_key(header::ORIGIN) {
        return false;
    }
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return true; // HTTP/1.0 without Host: not a browser
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    matches!(name, "127.0.0.1" | "localhost" | "::1")
}

/// The W3C trace context header.
const TRACEPARENT: header::HeaderName = header::HeaderName::from_static("traceparent");

pub(crate) async fn messages_handler(
    JobRoute(r): JobRoute,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Response {
    // The delegate's request span, when Claude Code sends it
    // (`CLAUDE_CODE_PROPAGATE_TRACEPARENT`): this request's span goes
    // under it.
    let incoming = headers
        .get(&TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    messages(r, incoming, body).await
}

pub(crate) async fn count_handler(JobRoute(r): JobRoute, body: Bytes) -> Response {
    count_tokens(r, body).await
}

pub(crate) async fn models_handler(JobRoute(r): JobRoute) -> Response {
    models(r).await
}
