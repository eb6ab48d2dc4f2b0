//! The shim between a headless Claude Code session and a local backend.
//!
//! One HTTP server per localagents process, bound to 127.0.0.1 on a port the
//! kernel picks (we never pick a port and release it). Each job gets a route
//! prefix `/j/<token>` whose token carries 128 random bits, so no other local
//! process can guess its way to a backend. Only three paths are forwarded:
//! `POST /v1/messages`, `POST /v1/messages/count_tokens`, `GET /v1/models`;
//! anything else, and any unknown token, gets an Anthropic-shaped 404. The
//! backend's API key is added on the way out and is never logged.
//!
//! Requests are folded ([`fold`]), `max_tokens` is kept within the window,
//! errors are put in the form Claude Code acts on ([`errors`]), streams are
//! relayed as they arrive ([`sse`]), and every request is logged ([`log`]).
//! The model's own faults are handled on the way: tool calls that came
//! back as text become `tool_use` again ([`repair`]), a model that repeats
//! itself gets a note and then is stopped ([`loops`]), an answer that
//! runs away (a line or its template's markers over and over) is cut off
//! and its backend request closed ([`runaway`]), and thinking blocks in
//! the history are kept or dropped as the backend needs ([`Guard`]).

pub mod errors;
pub mod fold;
pub mod log;
pub mod loops;
pub mod repair;
pub mod runaway;
#[cfg(test)]
#[path = "runaway_fixtures.rs"]
pub mod runaway_fixtures;
pub mod sse;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use serde_json::{Value, json};

use crate::config::{Backend, Endpoint, Thinking};
use crate::wire::Note;
use errors::Translated;
use log::{RequestLog, RequestRecord};

/// Largest request body accepted (Claude Code sends ~80 KB to a few MB).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Where one job's traffic goes.
#[derive(Debug)]
pub struct Route {
    /// Job id, or `standalone`.
    pub label: String,
    pub endpoint: Endpoint,
    /// The backend kind (configured or detected).
    pub backend: Backend,
    /// The id sent as `model`.
    pub served_id: String,
    /// Per-slot window: `max_tokens` is never sent larger.
    pub window: Option<u64>,
    pub log: RequestLog,
    /// Longest silence tolerated inside a stream.
    pub idle_timeout: Duration,
    /// Longest wait for a streamed answer's response headers
    /// (`defaults.first_byte_timeout_s`, else [`first_byte_timeout`]).
    pub first_byte_timeout: Duration,
    /// What is done about the model's faults on this route.
    pub guard: Guard,
}

/// What the shim does about a model's faults on one route, and what it saw.
#[derive(Debug, Default)]
pub struct Guard {
    pub policy: Policy,
    /// Where the loop notes of this route's conversation sit.
    pub marks: loops::Marks,
    /// The first failure that no retry can mend (a chat template or grammar
    /// the server cannot build, a model stuck in a loop): the sentence the
    /// job ends with.
    pub fatal: Mutex<Option<String>>,
    /// The server refused thinking blocks once (`thinking: auto`): they are
    /// dropped from then on.
    pub thinking_refused: AtomicBool,
    /// Answers the runaway guard stopped on this route.
    pub runaways: AtomicU32,
    /// Whether the backend's last answers were faults, since when.
    health: Mutex<Health>,
}

/// The backend's faults in a row on one route (hung, reset, slow, 5xx, a
/// stream cut short): since when, how many, and the shim's last sentence.
#[derive(Debug, Default)]
struct Health {
    failing_since: Option<Instant>,
    tries: u32,
    last: Option<String>,
}

/// The backend's run of faults on a route: how long every request has
/// failed, and the shim's sentence for the last one, with the tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub for_: Duration,
    pub why: String,
}

impl Guard {
    pub fn new(policy: Policy) -> Guard {
        Guard {
            policy,
            ..Guard::default()
        }
    }

    /// The first fatal sentence, if one was seen.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// Are thinking blocks dropped from this route's requests now?
    pub fn drops_thinking(&self) -> bool {
        match self.policy.thinking {
            Thinking::Keep => false,
            Thinking::Drop => true,
            Thinking::Auto => self.thinking_refused.load(Ordering::Relaxed),
        }
    }

    /// The backend failed a request; `why` is the shim's sentence for it.
    pub fn backend_failed(&self, why: &str) {
        if let Ok(mut h) = self.health.lock() {
            h.failing_since.get_or_insert_with(Instant::now);
            h.tries = h.tries.saturating_add(1);
            h.last = Some(why.to_string());
        }
    }

    /// The backend answered a request: its run of faults is over.
    pub fn backend_answered(&self) {
        if let Ok(mut h) = self.health.lock() {
            *h = Health::default();
        }
    }

    /// Has every request failed since the last answer (at least one)?
    pub fn backend_failing(&self) -> Option<Failing> {
        let h = self.health.lock().ok()?;
        let since = h.failing_since?;
        let last = h.last.as_deref()?;
        let tries = match h.tries {
            1 => "1 try".to_string(),
            n => format!("{n} tries"),
        };
        Some(Failing {
            for_: since.elapsed(),
            why: format!("{} ({tries})", last.trim_end_matches('.')),
        })
    }

    /// Count a runaway and decide the answer: a retryable error (type
    /// `api_error`) while under `runaway_limit`, then the fatal sentence
    /// (`invalid_request_error`), which ends the job.
    pub fn runaway(&self, found: &mut runaway::Found, llama_cpp: bool) -> (&'static str, String) {
        let n = self
            .runaways
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let sentence = found.sentence(llama_cpp);
        found.why = sentence.clone();
        let limit = self.policy.runaway_limit;
        if n >= limit {
            self.set_fatal(&sentence);
            ("invalid_request_error", sentence)
        } else {
            (
                "api_error",
                format!(
                    "{sentence} (the shim stopped the answer: runaway {n} of defaults.runaway_limit {limit})"
                ),
            )
        }
    }

    fn set_fatal(&self, why: &str) {
        if let Ok(mut f) = self.fatal.lock()
            && f.is_none()
        {
            *f = Some(why.to_string());
        }
    }
}

/// The per-route settings of the [`Guard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `defaults.loop_limit` (0: no guard).
    pub loop_limit: u32,
    /// `defaults.runaway_limit`: runaways before the route's fatal answer
    /// (0: no runaway guard).
    pub runaway_limit: u32,
    /// Thinking blocks in the history (`defaults.thinking`).
    pub thinking: Thinking,
    /// Turn text-form tool calls into `tool_use` blocks.
    pub repair: bool,
    /// After a fatal answer, answer every later request the same way
    /// without sending it (a job's route; not the standalone shim, whose
    /// one route serves any session).
    pub stop_on_fatal: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            loop_limit: loops::DEFAULT_LIMIT,
            runaway_limit: runaway::DEFAULT_LIMIT,
            thinking: Thinking::Auto,
            repair: true,
            stop_on_fatal: false,
        }
    }
}

impl Route {
    /// A route to `t`'s endpoint and model, told `window` (the target's,
    /// or what a load found), with the config's timeouts: the first-byte
    /// budget for that window, then `defaults.stream_idle_timeout_s`.
    pub fn for_target(
        label: String,
        t: &crate::registry::Target,
        window: Option<u64>,
        log: log::RequestLog,
        policy: Policy,
    ) -> Route {
        let d = &t.config.defaults;
        Route {
            label,
            endpoint: t.endpoint.clone(),
            backend: t.backend,
            served_id: t.resolved.served_id.clone(),
            window,
            log,
            idle_timeout: Duration::from_secs(d.stream_idle_timeout_s),
            first_byte_timeout: first_byte_timeout(d.first_byte_timeout_s, window),
            guard: Guard::new(policy),
        }
    }

    /// The longest the shim waits on a silent stream before it answers
    /// with an error event: the first-byte budget until the first event
    /// (a long prefill), the idle timeout after it.
    pub fn longest_silence(&self) -> Duration {
        self.first_byte_timeout.max(self.idle_timeout)
    }
}

struct Inner {
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

type Shared = Weak<Inner>;

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

fn router(shared: Shared) -> Router {
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

fn json_response(status: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (code, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

async fn not_found() -> Response {
    Rejected::NoRoute.into_response()
}

/// The route a request is for: the token after `/j/`, or the open route
/// (`--no-token`) for a bare path. An extractor, so the route is checked
/// from the request line before any body is read; an unknown route is the
/// Anthropic-shaped 404.
struct JobRoute(Arc<Route>);

/// The rejection of [`JobRoute`].
enum Rejected {
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
fn local_caller(headers: &axum::http::HeaderMap) -> bool {
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

async fn messages_handler(JobRoute(r): JobRoute, body: Bytes) -> Response {
    messages(r, body).await
}

async fn count_handler(JobRoute(r): JobRoute, body: Bytes) -> Response {
    count_tokens(r, body).await
}

async fn models_handler(JobRoute(r): JobRoute) -> Response {
    models(r).await
}

fn upstream(route: &Route, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
    upstream_with(crate::probe::http_client(), route, method, path)
}

fn upstream_with(
    client: &reqwest::Client,
    route: &Route,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    crate::probe::client::request(client, &route.endpoint, method, path)
        .header(header::CONTENT_TYPE, "application/json")
}

fn first_500(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).chars().take(500).collect()
}

fn join_notes(notes: &[String]) -> Option<String> {
    Note::join(notes)
}

fn bad_json(e: impl std::fmt::Display) -> Translated {
    Translated {
        status: 400,
        body: errors::anthropic_error(
            "invalid_request_error",
            &format!("request body is not a valid JSON object ({e})"),
        ),
        note: Some(Note::BadJson.into()),
    }
}

/// What [`prepare`] learned that the answer needs.
struct Prepared {
    body: Vec<u8>,
    tools_range: Option<(usize, usize)>,
    stuck: Option<String>,
}

/// Fold, set `model`, cap `max_tokens`, on the raw bytes; fill the record.
fn prepare(
    route: &Route,
    body: &[u8],
    rec: &mut RequestRecord,
    notes: &mut Vec<String>,
    guard_loops: bool,
) -> Result<Prepared, Translated> {
    let p = route.guard.policy;
    let extras = fold::Extras {
        loops: (guard_loops && p.loop_limit > 0).then_some((&route.guard.marks, p.loop_limit)),
        drop_thinking: route.guard.drops_thinking(),
    };
    let (out, facts) = fold::fold_raw_with(body, Some(&route.served_id), route.window, extras)
        .map_err(bad_json)?;
    if facts.loops.new_note {
        rec.loop_note = Some(loops::note_text(p.loop_limit));
    }
    if facts.thinking_dropped > 0 {
        notes.push(Note::ThinkingDropped(facts.thinking_dropped as u64).into());
    }
    rec.folded_system = facts.stats.folded;
    if facts.stats.billing_dropped > 0 {
        notes.push(Note::BillingHeaderDropped.into());
    }
    // What went upstream: the system entries are gone.
    rec.messages = facts.messages.saturating_sub(facts.stats.folded);
    rec.tools = facts.tools;
    rec.stream = facts.stream;
    rec.model = Some(route.served_id.clone());
    if facts.model.as_deref() != Some(route.served_id.as_str()) {
        notes.push(
            Note::Model {
                asked: facts.model.as_deref().unwrap_or("none").to_string(),
                served: route.served_id.clone(),
            }
            .into(),
        );
    }
    if let (Some(w), Some(m)) = (route.window, facts.max_tokens)
        && m > w
    {
        notes.push(
            Note::MaxTokens {
                asked: m,
                window: w,
            }
            .into(),
        );
    }
    Ok(Prepared {
        body: out,
        tools_range: facts.tools_range.filter(|_| p.repair && facts.tools > 0),
        stuck: facts.loops.stuck,
    })
}

fn finish_record(route: &Route, mut rec: RequestRecord, started: Instant, notes: &[String]) {
    rec.ms = started.elapsed().as_millis() as u64;
    rec.translated = join_notes(notes);
    route.log.record(&rec);
}

fn reply_error(
    route: &Route,
    tr: Translated,
    mut rec: RequestRecord,
    started: Instant,
    mut notes: Vec<String>,
) -> Response {
    rec.status = tr.status;
    if rec.path == "/v1/messages"
        && tr.status >= 500
        && rec.runaway.is_none()
        && let Some(m) = tr.body.pointer("/error/message").and_then(Value::as_str)
    {
        route.guard.backend_failed(m);
    }
    let mut fatal = false;
    if let Some(n) = tr.note.clone() {
        if errors::is_fatal_note(&n) {
            fatal = true;
            if let Some(m) = tr.body.pointer("/error/message").and_then(Value::as_str) {
                route.guard.set_fatal(m);
            }
        }
        notes.push(n);
    }
    let body = tr.body.to_string();
    rec.bytes_out = body.len();
    finish_record(route, rec, started, &notes);
    let mut resp = json_response(tr.status, &tr.body);
    if fatal {
        // The Anthropic SDK honours it; Claude Code's own retries of a 400
        // are answered by the shim ([`Guard::fatal`]), not the backend.
        resp.headers_mut()
            .insert("x-should-retry", HeaderValue::from_static("false"));
    }
    resp
}

/// How long a streamed request may wait for the backend's response
/// headers: long enough for a prompt that fills the whole window at 100
/// tokens/s (a 27B partly offloaded to the CPU, cold), at least 5 minutes,
/// at most an hour. A non-streamed request has `idle_timeout` for all of it.
/// `configured` (`defaults.first_byte_timeout_s`) wins when set.
pub fn first_byte_timeout(configured: Option<u64>, window: Option<u64>) -> Duration {
    Duration::from_secs(
        configured.unwrap_or_else(|| (window.unwrap_or(131_072) / 100).clamp(300, 3600)),
    )
}

/// Why a request got no response.
enum SendError {
    Transport(reqwest::Error),
    /// Accepted, but no response headers within this long.
    NoHeaders(Duration),
}

/// A pooled connection the server had already closed fails before any
/// byte of the request is answered ("connection closed before message
/// completed", a reset on write). Such a request never reached the model:
/// it is sent once more, on a fresh connection.
fn retry_fresh(e: &reqwest::Error) -> bool {
    !e.is_timeout() && (e.is_request() || e.is_connect())
}

/// One attempt on `client`.
async fn send_once(
    client: &reqwest::Client,
    route: &Route,
    path: &str,
    body: Bytes,
    stream: bool,
) -> Result<reqwest::Response, SendError> {
    let req = upstream_with(client, route, reqwest::Method::POST, path).body(body);
    if !stream {
        return req
            .timeout(route.idle_timeout)
            .send()
            .await
            .map_err(SendError::Transport);
    }
    let limit = route.first_byte_timeout;
    let req = req.header(header::ACCEPT, "text/event-stream");
    match tokio::time::timeout(limit, req.send()).await {
        Ok(r) => r.map_err(SendError::Transport),
        Err(_) => Err(SendError::NoHeaders(limit)),
    }
}

async fn send(
    route: &Route,
    path: &str,
    body: Bytes,
    stream: bool,
    notes: &mut Vec<String>,
) -> Result<reqwest::Response, SendError> {
    let pooled = crate::probe::http_client();
    match send_once(pooled, route, path, body.clone(), stream).await {
        Err(SendError::Transport(e)) if retry_fresh(&e) => {
            notes.push(
                Note::RetryFreshConnection(
                    crate::probe::classify::error_chain(&e)
                        .chars()
                        .take(120)
                        .collect(),
                )
                .into(),
            );
            let fresh = crate::probe::fresh_http_client();
            send_once(fresh, route, path, body, stream).await
        }
        other => other,
    }
}

/// How often a request is sent again while the server loads the model.
const LOADING_POLL: Duration = Duration::from_millis(500);

/// At most this much of a backend's error body is read.
const MAX_ERROR_BODY: usize = 64 * 1024;

async fn read_error(resp: reqwest::Response) -> (u16, Value, String) {
    let status = resp.status().as_u16();
    let bytes = crate::probe::client::read_at_most(resp, MAX_ERROR_BODY).await;
    let text = first_500(&bytes);
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(text.clone()));
    (status, v, text)
}

/// Answer an upstream error status in the form Claude Code acts on, and log it.
async fn upstream_error(
    route: &Route,
    resp: reqwest::Response,
    mut rec: RequestRecord,
    started: Instant,
    notes: Vec<String>,
) -> Response {
    let (status, err_body, text) = read_error(resp).await;
    rec.upstream_status = Some(status);
    rec.error = Some(text);
    let tr = errors::translate(
        route.backend,
        &route.endpoint.base_url,
        status,
        &err_body,
        route.window,
    );
    reply_error(route, tr, rec, started, notes)
}

/// Answer a backend that could not be reached, and log it.
fn unreachable_reply(
    route: &Route,
    e: &reqwest::Error,
    wait: Duration,
    mut rec: RequestRecord,
    started: Instant,
    notes: Vec<String>,
) -> Response {
    let why = crate::probe::classify::transport(&route.endpoint, e, wait).1;
    rec.error = Some(why.chars().take(500).collect());
    reply_error(
        route,
        errors::unreachable(&route.endpoint.base_url, &why),
        rec,
        started,
        notes,
    )
}

/// Answer a request that got no response from the backend.
fn send_failed(
    route: &Route,
    e: SendError,
    mut rec: RequestRecord,
    started: Instant,
    notes: Vec<String>,
) -> Response {
    match e {
        SendError::Transport(e) => {
            unreachable_reply(route, &e, route.idle_timeout, rec, started, notes)
        }
        SendError::NoHeaders(limit) => {
            let why = format!(
                "accepted the request but sent no response headers within {} s (defaults.first_byte_timeout_s): it is hung, or still on a prompt too big for it",
                limit.as_secs(),
            );
            rec.error = Some(why.clone());
            reply_error(
                route,
                errors::no_headers(&route.endpoint.base_url, &why),
                rec,
                started,
                notes,
            )
        }
    }
}

/// `POST /v1/messages` on `route` without an HTTP hop: what a one-shot
/// completion sends, through the same folding, translation and log.
pub async fn relay_messages(route: Arc<Route>, body: Bytes) -> Response {
    messages(route, body).await
}

/// `POST /v1/messages`.
async fn messages(route: Arc<Route>, body: Bytes) -> Response {
    let started = Instant::now();
    let ts = log::now_ts();
    let mut rec = RequestRecord {
        ts: ts.clone(),
        path: "/v1/messages".into(),
        bytes_in: body.len(),
        ..Default::default()
    };
    let mut notes = Vec::new();
    // A job whose backend failed for good (or whose model is stuck) gets
    // the same answer again from the shim: Claude Code sends a refused
    // request twice more, and the backend must not see it.
    if route.guard.policy.stop_on_fatal
        && let Some(why) = route.guard.fatal()
    {
        return reply_error(&route, errors::fatal_again(&why), rec, started, notes);
    }
    let parsed = prepare(&route, &body, &mut rec, &mut notes, true);
    // Memory: the incoming body is not needed once the outgoing one exists.
    drop(body);
    let (mut out, tools_range) = match parsed {
        Ok(Prepared {
            stuck: Some(why), ..
        }) => {
            // Twice the loop limit: the model will not get out by itself.
            return reply_error(&route, errors::stuck(&why), rec, started, notes);
        }
        Ok(p) => (Bytes::from(p.body), p.tools_range),
        Err(tr) => return reply_error(&route, tr, rec, started, notes),
    };
    let tools = tools_range.map(|(a, b)| repair::LazyTools::new(out.slice(a..b)));
    route.log.dump_body(&ts, "/v1/messages", &out);
    let stream = rec.stream;
    // After a runaway, Claude Code asks the same thing again without
    // streaming: that answer is streamed from the backend all the same,
    // so the guard can stop it early, and put together here.
    let collect = !stream
        && route.guard.policy.runaway_limit > 0
        && route.guard.runaways.load(Ordering::Relaxed) > 0;
    if collect
        && let Ok(mut v) = serde_json::from_slice::<Value>(&out)
        && let Some(o) = v.as_object_mut()
    {
        o.insert("stream".into(), Value::Bool(true));
        out = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
        notes.push(Note::StreamedUpstream.into());
    }
    let mut retried = false;
    let mut loading_since: Option<Instant> = None;
    let resp = loop {
        let resp = match send(
            &route,
            "/v1/messages",
            out.clone(),
            stream || collect,
            &mut notes,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => return send_failed(&route, e, rec, started, notes),
        };
        if resp.status().is_success() {
            if let Some(since) = loading_since.take() {
                notes.push(Note::WaitedForLoad(since.elapsed().as_secs_f64()).into());
            }
            break resp;
        }
        let (status, err_body, text) = read_error(resp).await;
        // A model being loaded: wait and ask again, within the first-byte
        // budget (a router or llama-swap loading a 27B takes minutes).
        if errors::loading(status, &err_body) {
            let since = *loading_since.get_or_insert_with(Instant::now);
            if since.elapsed() < route.first_byte_timeout {
                tokio::time::sleep(LOADING_POLL).await;
                continue;
            }
        }
        if let Some(since) = loading_since.take() {
            notes.push(Note::WaitedForLoad(since.elapsed().as_secs_f64()).into());
        }
        rec.upstream_status = Some(status);
        rec.error = Some(text);
        // A server that refuses thinking blocks in the history (vLLM before
        // 0.17): drop them, from now on, and send the request again.
        if route.guard.policy.thinking == Thinking::Auto
            && !route.guard.drops_thinking()
            && errors::refuses_thinking(status, &err_body)
            && let Ok((again, f)) = fold::fold_raw_with(
                &out,
                None,
                None,
                fold::Extras {
                    loops: None,
                    drop_thinking: true,
                },
            )
            && f.thinking_dropped > 0
        {
            route.guard.thinking_refused.store(true, Ordering::Relaxed);
            notes.push(Note::ThinkingRefused(f.thinking_dropped as u64).into());
            out = Bytes::from(again);
            continue;
        }
        // vLLM counts prompt + max_tokens: lower max_tokens once if it fits.
        if !retried
            && let Some(o) = errors::overflow(&err_body, route.window)
            && o.only_max_tokens()
            && let (Some(p), Some(m)) = (o.prompt, o.max)
            && m - p >= 1024
            && let Ok(mut again) = serde_json::from_slice::<Value>(&out)
            && let Some(obj) = again.as_object_mut()
        {
            let lowered = m - p;
            notes.push(
                Note::MaxTokensRetry {
                    asked: o.requested_output.unwrap_or(0),
                    lowered,
                }
                .into(),
            );
            obj.insert("max_tokens".into(), json!(lowered));
            out = Bytes::from(serde_json::to_vec(&again).unwrap_or_default());
            retried = true;
            continue;
        }
        let tr = errors::translate(
            route.backend,
            &route.endpoint.base_url,
            status,
            &err_body,
            route.window,
        );
        return reply_error(&route, tr, rec, started, notes);
    };
    rec.upstream_status = Some(resp.status().as_u16());
    rec.status = resp.status().as_u16();
    if stream {
        // llama-server sends its headers when the slot starts and nothing
        // but `:` comments (every 30 s, or none) until the first token: the
        // prefill's wait is the first-byte budget, not the idle timeout.
        let mut relay = sse::Relay::new(started, route.backend, route.window)
            .with_first_wait(route.first_byte_timeout);
        if let Some(t) = tools {
            relay = relay.with_repair(t);
        }
        if route.guard.policy.runaway_limit > 0 {
            let r = route.clone();
            relay = relay.with_runaway(Box::new(move |f: &mut runaway::Found| {
                r.guard.runaway(f, r.backend == Backend::LlamaCpp)
            }));
        }
        let route2 = route.clone();
        let on_done: sse::OnDone = Box::new(move |tap: &sse::Tap, report: &repair::Report| {
            let mut rec = rec;
            let mut notes = notes;
            rec.ttft_ms = tap.ttft.map(|d| d.as_millis() as u64);
            rec.usage = tap.usage;
            rec.stop_reason = tap.stop_reason.clone();
            if report.calls() > 0 {
                rec.stop_reason = Some("tool_use".into());
            }
            rec.bytes_out = tap.bytes_out;
            rec.empty = tap.empty();
            log::note_repair(&mut rec, report);
            if rec.error.is_none() {
                rec.error = tap.error.as_ref().map(|e| e.chars().take(500).collect());
            }
            notes.extend(tap.translated.iter().cloned());
            rec.runaway = tap.runaway.clone();
            if tap.runaway.is_some() {
                // The model's fault, not the backend's: it answered.
                route2.guard.backend_answered();
            } else if tap
                .translated
                .iter()
                .any(|t| Note::parse(t) == Note::StreamCut)
                && let Some(e) = &tap.error
            {
                route2.guard.backend_failed(e);
            } else if tap.saw_stop {
                route2.guard.backend_answered();
            }
            finish_record(&route2, rec, started, &notes);
        });
        let body = sse::relay(resp.bytes_stream(), relay, route.idle_timeout, on_done);
        let mut out = Response::new(Body::from_stream(body));
        let h = out.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream"),
        );
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        return out;
    }
    let bytes = if collect {
        match collect_stream(&route, resp, started, &mut rec).await {
            Ok(b) => b,
            Err(tr) => return reply_error(&route, tr, rec, started, notes),
        }
    } else {
        match resp.bytes().await {
            Ok(b) => b,
            Err(e) => {
                let tr = errors::unreachable(
                    &route.endpoint.base_url,
                    &format!("the answer broke off: {e}"),
                );
                return reply_error(&route, tr, rec, started, notes);
            }
        }
    };
    let mut bytes = bytes;
    if let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) {
        if let Some(u) = v.get("usage") {
            sse::usage_from(u, &mut rec.usage);
        }
        if let Some(t) = &tools {
            let report = repair::repair_message(&mut v, t.get());
            if report.calls() > 0 {
                bytes = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
            }
            log::note_repair(&mut rec, &report);
        }
        rec.empty = v
            .get("content")
            .and_then(Value::as_array)
            .is_some_and(|c| c.is_empty());
        if route.guard.policy.runaway_limit > 0
            && let Some(mut found) = runaway_in(&v)
        {
            let (typ, message) = route
                .guard
                .runaway(&mut found, route.backend == Backend::LlamaCpp);
            rec.runaway = Some(found);
            rec.upstream_status = Some(200);
            route.guard.backend_answered();
            return reply_error(&route, errors::runaway(typ, &message), rec, started, notes);
        }
        rec.stop_reason = v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    rec.ttft_ms = Some(started.elapsed().as_millis() as u64);
    rec.bytes_out = bytes.len();
    route.guard.backend_answered();
    finish_record(&route, rec, started, &notes);
    let mut out = Response::new(Body::from(bytes));
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// The most a collected answer may hold (a whole answer of `max_tokens`
/// is far less).
const MAX_COLLECTED: usize = 32 * 1024 * 1024;

/// A streamed backend answer to a non-streamed request, through the relay
/// and its runaway guard, put together as one Messages response; or the
/// error it ended with. A runaway closes the backend's response at once.
async fn collect_stream(
    route: &Arc<Route>,
    resp: reqwest::Response,
    started: Instant,
    rec: &mut RequestRecord,
) -> Result<Bytes, Translated> {
    use futures::StreamExt;
    let r = route.clone();
    let mut relay = sse::Relay::new(started, route.backend, route.window).with_runaway(Box::new(
        move |f: &mut runaway::Found| r.guard.runaway(f, r.backend == Backend::LlamaCpp),
    ));
    let mut up = resp.bytes_stream();
    let mut out: Vec<u8> = Vec::new();
    loop {
        let end = match tokio::time::timeout(route.idle_timeout, up.next()).await {
            Ok(Some(Ok(chunk))) => {
                out.extend_from_slice(&relay.push(chunk));
                if relay.stopped() {
                    break;
                }
                if out.len() > MAX_COLLECTED {
                    Some("grew past 32 MiB".to_string())
                } else {
                    None
                }
            }
            Ok(Some(Err(e))) => Some(format!("broke ({e})")),
            Ok(None) => Some("ended".to_string()),
            Err(_) => Some(format!(
                "was silent for {}s (idle timeout)",
                route.idle_timeout.as_secs()
            )),
        };
        if let Some(why) = end {
            if let Some(b) = relay.finish(&why) {
                out.extend_from_slice(&b);
            }
            break;
        }
    }
    // The backend's response is closed here, before the answer is made.
    drop(up);
    rec.runaway = relay.tap.runaway.clone();
    rec.ttft_ms = relay.tap.ttft.map(|d| d.as_millis() as u64);
    match sse::assemble(&out) {
        Ok(v) => Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default())),
        Err((typ, message)) if rec.runaway.is_some() => Err(errors::runaway(&typ, &message)),
        Err((typ, message)) => {
            rec.error = Some(crate::fmt::first_chars(&message, 500));
            Err(Translated {
                status: errors::status_of(&typ),
                body: errors::anthropic_error(&typ, &message),
                note: relay.tap.translated.last().cloned(),
            })
        }
    }
}

/// The runaway in a whole (non-streamed) answer's text and thinking.
fn runaway_in(v: &Value) -> Option<runaway::Found> {
    let blocks = v.get("content")?.as_array()?;
    runaway::scan_blocks(blocks.iter().filter_map(|b| {
        b.get("text")
            .or_else(|| b.get("thinking"))
            .and_then(Value::as_str)
    }))
}

/// Bytes a token, where a server cannot count: the one estimate of the
/// program (the shim's `count_tokens` for backends without it, a
/// completion's fit check, a review's cut). Code and JSON run 3-4 bytes a
/// token in the tokenizers of the models people serve (Qwen, Gemma,
/// Llama), so 3 errs towards more tokens: a prompt is thought a little
/// longer than it is, so Claude Code compacts a little early and a
/// completion is refused a little early, instead of a slot overflowing,
/// which fails the request.
pub const BYTES_PER_TOKEN: u64 = 3;

/// [`BYTES_PER_TOKEN`] applied to `bytes`.
pub fn tokens_of_bytes(bytes: u64) -> u64 {
    bytes.div_ceil(BYTES_PER_TOKEN)
}

/// A token estimate of a Messages body's prompt (system, messages, tools).
pub fn estimate_tokens(body: &Value) -> u64 {
    let mut n = 0usize;
    for key in ["system", "messages", "tools"] {
        if let Some(v) = body.get(key) {
            n += v.to_string().len();
        }
    }
    tokens_of_bytes(n as u64)
}

/// `POST /v1/messages/count_tokens`.
async fn count_tokens(route: Arc<Route>, body: Bytes) -> Response {
    let started = Instant::now();
    let mut rec = RequestRecord {
        ts: log::now_ts(),
        path: "/v1/messages/count_tokens".into(),
        bytes_in: body.len(),
        ..Default::default()
    };
    let mut notes = Vec::new();
    let mut v: Value = match prepare(&route, &body, &mut rec, &mut notes, false)
        .and_then(|p| serde_json::from_slice(&p.body).map_err(bad_json))
    {
        Ok(v) => v,
        Err(tr) => return reply_error(&route, tr, rec, started, notes),
    };
    if let Some(o) = v.as_object_mut() {
        o.remove("stream");
        o.remove("max_tokens");
    }
    rec.stream = false;
    let estimate = |mut rec: RequestRecord, notes: Vec<String>| {
        let out = json!({"input_tokens": estimate_tokens(&v)});
        rec.status = 200;
        rec.estimated = true;
        rec.usage.input = out["input_tokens"].as_u64().unwrap_or(0);
        rec.bytes_out = out.to_string().len();
        finish_record(&route, rec, started, &notes);
        json_response(200, &out)
    };
    let out = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
    match send(&route, "/v1/messages/count_tokens", out, false, &mut notes).await {
        Err(e) => send_failed(&route, e, rec, started, notes),
        Ok(resp) if matches!(resp.status().as_u16(), 404 | 405 | 501) => {
            rec.upstream_status = Some(resp.status().as_u16());
            estimate(rec, notes)
        }
        Ok(resp) if !resp.status().is_success() => {
            upstream_error(&route, resp, rec, started, notes).await
        }
        Ok(resp) => {
            rec.upstream_status = Some(resp.status().as_u16());
            let bytes = resp.bytes().await.unwrap_or_default();
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(out) if out.get("input_tokens").is_some() => {
                    rec.status = 200;
                    rec.usage.input = out["input_tokens"].as_u64().unwrap_or(0);
                    rec.bytes_out = bytes.len();
                    finish_record(&route, rec, started, &notes);
                    json_response(200, &out)
                }
                _ => {
                    notes.push(Note::CountTokensUnparsable.into());
                    estimate(rec, notes)
                }
            }
        }
    }
}

/// `GET /v1/models`.
async fn models(route: Arc<Route>) -> Response {
    let started = Instant::now();
    let mut rec = RequestRecord {
        ts: log::now_ts(),
        path: "/v1/models".into(),
        model: Some(route.served_id.clone()),
        ..Default::default()
    };
    let notes = Vec::new();
    let resp = upstream(&route, reqwest::Method::GET, "/v1/models")
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    match resp {
        Err(e) => unreachable_reply(&route, &e, Duration::from_secs(30), rec, started, notes),
        Ok(resp) if !resp.status().is_success() => {
            upstream_error(&route, resp, rec, started, notes).await
        }
        Ok(resp) => {
            let status = resp.status().as_u16();
            let bytes = resp.bytes().await.unwrap_or_default();
            rec.upstream_status = Some(status);
            rec.status = status;
            rec.bytes_out = bytes.len();
            finish_record(&route, rec, started, &notes);
            let mut out = Response::new(Body::from(bytes));
            out.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_faults_is_counted_until_an_answer() {
        let g = Guard::default();
        assert_eq!(g.backend_failing(), None);
        g.backend_failed("backend http://b sent nothing.");
        let f = g.backend_failing().unwrap();
        assert_eq!(f.why, "backend http://b sent nothing (1 try)");
        g.backend_failed("llama.cpp at http://b: bad gateway");
        let f2 = g.backend_failing().unwrap();
        assert_eq!(f2.why, "llama.cpp at http://b: bad gateway (2 tries)");
        assert!(f2.for_ >= f.for_, "the run is timed from its first fault");
        g.backend_answered();
        assert_eq!(g.backend_failing(), None);
    }
}
