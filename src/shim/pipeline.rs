//! One request's way to the backend and back, shared by every path:
//! preparing the body (folding, `max_tokens`, the notes), sending it (one
//! retry on a fresh connection), reading an error, and finishing the
//! request log's record with the answer sent.

use std::time::{Duration, Instant};

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::Value;

use crate::shim::clear;
use crate::shim::errors::{self, Translated};
use crate::shim::fold;
use crate::shim::log::RequestRecord;
use crate::shim::loops;
use crate::shim::route::*;
use crate::wire::Note;

pub(crate) fn upstream(
    route: &Route,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    upstream_with(crate::probe::http_client(), route, method, path)
}

pub(crate) fn upstream_with(
    client: &reqwest::Client,
    route: &Route,
    method: reqwest::Method,
    path: &str,
) -> reqwest::RequestBuilder {
    let req = crate::probe::client::request(client, &route.endpoint, method, path)
        .header(header::CONTENT_TYPE, "application/json");
    match session_header(route) {
        Some((name, value)) => req.header(name, value),
        None => req,
    }
}

/// The route's session header, when its endpoint sends one and the route
/// has a session: the one header localagents adds to what the user
/// configured (a router keeps the session on one replica by it).
pub(crate) fn session_header(route: &Route) -> Option<(header::HeaderName, HeaderValue)> {
    let name = route.endpoint.session_header.as_deref()?;
    let name = header::HeaderName::from_bytes(name.as_bytes()).ok()?;
    let value = HeaderValue::from_str(route.session.as_deref()?).ok()?;
    Some((name, value))
}

pub(crate) fn first_500(bytes: &[u8]) -> String {
    crate::fmt::cut(&String::from_utf8_lossy(bytes), 500)
}

pub(crate) fn join_notes(notes: &[String]) -> Option<String> {
    Note::join(notes)
}

pub(crate) fn bad_json(e: impl std::fmt::Display) -> Translated {
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
pub(crate) struct Prepared {
    pub(crate) body: Vec<u8>,
    pub(crate) tools_range: Option<(usize, usize)>,
    pub(crate) stuck: Option<String>,
}

/// Fold, set `model`, cap `max_tokens`, on the raw bytes; fill the record.
/// `turn`: a request of the conversation (not `count_tokens`): the loop
/// guard and the clearing of old tool results see it.
pub(crate) fn prepare(
    route: &Route,
    body: &[u8],
    rec: &mut RequestRecord,
    notes: &mut Vec<String>,
    turn: bool,
) -> Result<Prepared, Translated> {
    let p = route.guard.policy;
    let extras = fold::Extras {
        loops: (turn && p.loop_limit > 0).then_some((&route.guard.marks, p.loop_limit)),
        drop_thinking: route.guard.drops_thinking(),
        turns: turn.then_some(&route.guard.turn_budget),
        lift_images: !route.backend.images_in_tool_results(),
    };
    let (out, mut facts) = fold::fold_raw_with(body, Some(&route.served_id), route.window, extras)
        .map_err(bad_json)?;
    if facts.loops.new_note {
        rec.loop_note = Some(loops::note_text(p.loop_limit));
    }
    rec.turn_note = facts.turn_note.take();
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
    let mut prepared = Prepared {
        body: out,
        tools_range: facts.tools_range,
        stuck: facts.loops.stuck,
    };
    if turn
        && let Some(w) = route.window.filter(|w| p.clear.on_for(Some(*w)))
        && let Some(c) = route
            .guard
            .clearing
            .apply(&prepared.body, w, clear::Marks::of(w))
    {
        rec.cleared = c.stubs as u64;
        rec.clearing = c.batch as u64;
        prepared.body = c.body;
        prepared.tools_range = c.tools_range;
    }
    prepared.tools_range = prepared
        .tools_range
        .filter(|_| p.repair && facts.tools > 0);
    Ok(prepared)
}

pub(crate) fn finish_record(
    route: &Route,
    mut rec: RequestRecord,
    started: Instant,
    notes: &[String],
) {
    rec.ms = started.elapsed().as_millis() as u64;
    rec.translated = join_notes(notes);
    if rec.path == "/v1/messages" && rec.status == 200 {
        let u = rec.usage;
        route.guard.clearing.answered(u.input.saturating_add(u.cache_read));
    }
    route.log.record(&rec);
}

pub(crate) fn reply_error(
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
        && let Some(m) = tr.message()
    {
        route.guard.backend_failed(&m);
    }
    let mut fatal = false;
    if let Some(n) = tr.note.clone() {
        if errors::is_fatal_note(&n) {
            fatal = true;
            if let Some(m) = tr.message() {
                route.guard.set_fatal(&m);
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

/// Why a request got no response.
pub(crate) enum SendError {
    Transport(reqwest::Error),
    /// Accepted, but no response headers within this long.
    NoHeaders(Duration),
}

/// A pooled connection the server had already closed fails before any
/// byte of the request is answered ("connection closed before message
/// completed", a reset on write). Such a request never reached the model:
/// it is sent once more, on a fresh connection.
pub(crate) fn retry_fresh(e: &reqwest::Error) -> bool {
    !e.is_timeout() && (e.is_request() || e.is_connect())
}

/// One attempt on `client`. `traceparent`: this request's span, sent so a
/// backend that traces (vLLM) joins the job's trace.
pub(crate) async fn send_once(
    client: &reqwest::Client,
    route: &Route,
    path: &str,
    body: Bytes,
    stream: bool,
    traceparent: Option<&str>,
) -> Result<reqwest::Response, SendError> {
    let mut req = upstream_with(client, route, reqwest::Method::POST, path).body(body);
    if let Some(tp) = traceparent {
        req = req.header("traceparent", tp);
    }
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

pub(crate) async fn send(
    route: &Route,
    path: &str,
    body: Bytes,
    stream: bool,
    traceparent: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<reqwest::Response, SendError> {
    let pooled = crate::probe::http_client();
    match send_once(pooled, route, path, body.clone(), stream, traceparent).await {
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
            send_once(fresh, route, path, body, stream, traceparent).await
        }
        other => other,
    }
}

/// How often a request is sent again while the server loads the model.
pub(crate) const LOADING_POLL: Duration = Duration::from_millis(500);

/// At most this much of a backend's error body is read.
pub(crate) const MAX_ERROR_BODY: usize = 64 * 1024;

pub(crate) async fn read_error(resp: reqwest::Response) -> (u16, Value, String) {
    let status = resp.status().as_u16();
    let bytes = crate::probe::client::read_at_most(resp, MAX_ERROR_BODY).await;
    let text = first_500(&bytes);
    let v = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(text.clone()));
    (status, v, text)
}

/// Answer an upstream error status in the form Claude Code acts on, and log it.
pub(crate) async fn upstream_error(
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
        &route.served_id,
        status,
        &err_body,
        route.window,
    );
    reply_error(route, tr, rec, started, notes)
}

/// Answer a backend that could not be reached, and log it.
pub(crate) fn unreachable_reply(
    route: &Route,
    e: &reqwest::Error,
    wait: Duration,
    mut rec: RequestRecord,
    started: Instant,
    notes: Vec<String>,
) -> Response {
    let why = crate::probe::classify::transport(&route.endpoint, e, wait).1;
    rec.error = Some(crate::fmt::cut(&why, 500));
    reply_error(
        route,
        errors::unreachable(&route.endpoint.base_url, &why),
        rec,
        started,
        notes,
    )
}

/// Answer a request that got no response from the backend.
pub(crate) fn send_failed(
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

pub(crate) fn json_response(status: u16, body: &Value) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = (code, body.to_string()).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}
