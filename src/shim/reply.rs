//! `POST /v1/messages`: the retries (a model loading, thinking refused,
//! `max_tokens` lowered) and the reply, streamed through the relay or
//! collected and repaired whole.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;

use crate::anthropic::{Block, Reply};
use crate::config::{Backend, Thinking};
use crate::shim::chat::{self, Wire};
use crate::shim::errors::{self, Translated};
use crate::shim::fold;
use crate::shim::log::{self, RequestRecord};
use crate::shim::pipeline::*;
use crate::shim::repair;
use crate::shim::route::*;
use crate::shim::runaway;
use crate::shim::sse;
use crate::shim::truncation;
use crate::wire::Note;

/// `POST /v1/messages` on `route` without an HTTP hop: what a one-shot
/// completion sends, through the same folding, translation and log.
pub async fn relay_messages(route: Arc<Route>, body: Bytes) -> Response {
    messages(route, None, body).await
}

/// One `/v1/messages` request on its way: its route, record and notes,
/// and when it came.
struct Turn {
    route: Arc<Route>,
    rec: RequestRecord,
    notes: Vec<String>,
    started: Instant,
    /// What the truncation guard knows of the request sent.
    sending: Option<Sending>,
    /// Its read of the request, on the blocking pool while the request
    /// goes out, and the turn it was sent at.
    reading: Option<(u64, tokio::task::JoinHandle<Option<truncation::Sent>>)>,
}

/// The backend's answer as Anthropic SSE bytes (a chat-completions stream
/// translated on its way in).
type Upstream = futures::stream::BoxStream<'static, Result<Bytes, reqwest::Error>>;

/// `resp`'s body as the Anthropic stream the relay reads.
fn anthropic_stream(resp: reqwest::Response, chat: bool) -> Upstream {
    use futures::StreamExt;
    if chat {
        chat::answer::stream(resp.bytes_stream()).boxed()
    } else {
        resp.bytes_stream().boxed()
    }
}

/// Why a request ends without the backend's answer.
enum Failure {
    /// The answer to send instead.
    Answer(Translated),
    /// The backend could not be reached or sent no headers.
    Unsent(SendError),
}

impl Turn {
    /// The answer comes on the chat wire ([`chat::answer`] turns it
    /// back): the request reached the chat endpoint.
    fn on_chat(&self) -> bool {
        self.rec.upstream_path.is_some()
    }

    /// The guard's read of the request sent, once it is done.
    async fn read_sent(&mut self) {
        let Some((turn, reading)) = self.reading.take() else {
            return;
        };
        if let Ok(Some(sent)) = reading.await {
            self.rec.lower_bound = Some(sent.lower_bound);
            self.sending = Some(Sending { turn, sent });
        }
    }

    /// Answer with `f`, and log it.
    fn fail(self, f: Failure) -> Response {
        match f {
            Failure::Answer(tr) => reply_error(&self.route, tr, self.rec, self.started, self.notes),
            Failure::Unsent(e) => send_failed(&self.route, e, self.rec, self.started, self.notes),
        }
    }
}

/// `POST /v1/messages`: prepared, sent (and sent again where a retry can
/// mend the answer), then relayed as a stream or answered whole.
pub(crate) async fn messages(
    route: Arc<Route>,
    traceparent: Option<String>,
    body: Bytes,
) -> Response {
    let started = Instant::now();
    let ts = log::now_ts();
    let rec = RequestRecord {
        ts: ts.clone(),
        path: "/v1/messages".into(),
        bytes_in: body.len(),
        span: route.log.span_for(traceparent.as_deref()),
        ..Default::default()
    };
    let mut t = Turn {
        route,
        rec,
        notes: Vec::new(),
        started,
        sending: None,
        reading: None,
    };
    let (mut out, tools) = match outgoing(&mut t, body) {
        Ok(o) => o,
        Err(tr) => return t.fail(Failure::Answer(tr)),
    };
    t.route.log.dump_body(&ts, "/v1/messages", &out);
    let stream = t.rec.stream;
    // After a runaway, Claude Code asks the same thing again without
    // streaming: that answer is streamed from the backend all the same,
    // so the guard can stop it early, and put together here.
    let collect = !stream
        && t.route.guard.policy.runaway_limit > 0
        && t.route.guard.runaways.load(Ordering::Relaxed) > 0;
    if collect && let Some(streamed) = with_field(&out, "stream", Value::Bool(true)) {
        out = Bytes::from(streamed);
        t.notes.push(Note::StreamedUpstream.into());
    }
    let resp = match upstream(&mut t, out, stream || collect).await {
        Ok(r) => r,
        Err(f) => return t.fail(f),
    };
    t.read_sent().await;
    // A request whose bound is above the window, answered 200: the
    // server cut it. Nothing of the answer is read; it is closed.
    if let Some(s) = &t.sending
        && let Some((tr, why)) = t.route.truncation(s, None)
    {
        drop(resp);
        t.rec.upstream_status = Some(200);
        t.rec.truncated = Some(tr);
        return t.fail(Failure::Answer(errors::truncated(&why)));
    }
    t.rec.upstream_status = Some(resp.status().as_u16());
    t.rec.status = resp.status().as_u16();
    if stream && !is_sse(&resp) {
        // LM Studio answers an error with 200 and JSON (#2322).
        let (_, v, text) = read_error(resp).await;
        let m = crate::anthropic::ErrorBody::of(&v).message().unwrap_or(text);
        t.rec.error = Some(crate::fmt::cut(&m, 500));
        let tr = errors::error_in_200(&t.route.endpoint.base_url, &t.route.served_id, &m);
        return t.fail(Failure::Answer(tr));
    }
    if stream {
        return relayed(t, resp, tools);
    }
    let bytes = if collect {
        let up = anthropic_stream(resp, t.on_chat());
        collect_stream(&t.route, up, t.started, &mut t.rec)
            .await
            .map_err(Failure::Answer)
    } else {
        let chat = t.on_chat();
        resp.bytes()
            .await
            .map(|b| match chat.then(|| chat::answer::whole(&b)).flatten() {
                Some(anthropic) => Bytes::from(anthropic),
                None => b,
            })
            .map_err(|e| {
                Failure::Answer(errors::unreachable(
                    &t.route.endpoint.base_url,
                    &format!("the answer broke off: {e}"),
                ))
            })
    };
    match bytes {
        Ok(b) => whole(t, b, tools.as_ref()),
        Err(f) => t.fail(f),
    }
}

/// The body to send: the request prepared (folded, its model set), and
/// the tools it offers for the repair; or the answer that stops it first.
fn outgoing(t: &mut Turn, body: Bytes) -> Result<(Bytes, Option<repair::LazyTools>), Translated> {
    // A job whose backend failed for good (or whose model is stuck) gets
    // the same answer again from the shim: Claude Code sends a refused
    // request twice more, and the backend must not see it.
    if t.route.guard.policy.stop_on_fatal
        && let Some(why) = t.route.guard.fatal()
    {
        return Err(errors::fatal_again(&why));
    }
    let p = prepare(&t.route, &body, &mut t.rec, &mut t.notes, true)?;
    // Memory: the incoming body is not needed once the outgoing one exists.
    drop(body);
    if let Some(why) = p.stuck {
        // Twice the loop limit: the model will not get out by itself.
        return Err(errors::stuck(&why));
    }
    let out = Bytes::from(p.body);
    // The guard's read of the request (a parse and a walk of the whole
    // body) runs on the blocking pool while the request is sent.
    let turn = t.route.guard.turns.fetch_add(1, Ordering::Relaxed) + 1;
    let body = out.clone();
    let reading = tokio::task::spawn_blocking(move || truncation::Sent::of(&body));
    t.reading = Some((turn, reading));
    let tools = p
        .tools_range
        .map(|(a, b)| repair::LazyTools::new(out.slice(a..b)));
    Ok((out, tools))
}

/// Send `out` until the backend answers with success: a loading model is
/// waited for, and a refusal a retry can mend ([`mended`]) is sent again
/// mended. Any other error is the answer.
async fn upstream(t: &mut Turn, mut out: Bytes, stream: bool) -> Result<reqwest::Response, Failure> {
    let route = t.route.clone();
    let mut retried = false;
    let mut loading_since: Option<Instant> = None;
    // Translated once per body: a model's load is waited for by sending
    // the same bytes again.
    let (mut wire, mut path, mut body) = on_the_wire(route.wire_now(), &out).await;
    loop {
        let tp = t.rec.span.as_ref().map(crate::wire::SpanIds::traceparent);
        let resp = send(&route, path, body.clone(), stream, tp.as_deref(), &mut t.notes)
            .await
            .map_err(Failure::Unsent)?;
        t.rec.upstream_path = matches!(wire, Wire::Chat(_)).then(|| path.to_string());
        if resp.status().is_success() {
            if let Some(since) = loading_since.take() {
                t.notes
                    .push(Note::WaitedForLoad(since.elapsed().as_secs_f64()).into());
            }
            if let Wire::Chat(pin) = wire {
                t.rec.slot = pin.slot;
            }
            return Ok(resp);
        }
        let (status, err_body, text) = read_error(resp).await;
        if matches!(wire, Wire::Chat(_))
            && route.backend.has_messages()
            && chat::refused(status, &crate::anthropic::ErrorBody::of(&err_body))
        {
            // Said once: the route keeps to /v1/messages from now on.
            route.guard.chat_refused.store(true, Ordering::Relaxed);
            t.notes.push(Note::ChatRefused(status).into());
            tracing::warn!(
                route = %route.label,
                status,
                "{} refused /v1/chat/completions ({}): this job's requests go to /v1/messages, unpinned (set wire: messages on the endpoint to skip the try)",
                route.endpoint.base_url,
                crate::fmt::cut(&text, 200)
            );
            (wire, path, body) = (Wire::Messages, "/v1/messages", out.clone());
            continue;
        }
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
            t.notes
                .push(Note::WaitedForLoad(since.elapsed().as_secs_f64()).into());
        }
        t.rec.upstream_status = Some(status);
        t.rec.error = Some(text);
        if let Some(again) = mended(&route, &out, status, &err_body, &mut retried, &mut t.notes) {
            out = again;
            (wire, path, body) = on_the_wire(wire, &out).await;
            continue;
        }
        return Err(Failure::Answer(errors::translate(
            route.backend,
            &route.endpoint.base_url,
            &route.served_id,
            status,
            &err_body,
            route.window,
        )));
    }
}

/// Where `out` (a prepared Messages request) goes on `wire`, and as what:
/// the chat wire's translation (a parse and a rebuild of the whole body,
/// on the blocking pool), or the request itself, also when it does not
/// translate (not JSON: the server then answers it as today).
async fn on_the_wire(wire: Wire, out: &Bytes) -> (Wire, &'static str, Bytes) {
    if let Wire::Chat(pin) = wire {
        let body = out.clone();
        let chat = tokio::task::spawn_blocking(move || chat::request::to_chat(&body, pin)).await;
        if let Ok(Ok(translated)) = chat {
            return (wire, chat::PATH, Bytes::from(translated));
        }
    }
    (Wire::Messages, "/v1/messages", out.clone())
}

/// The request mended for a refusal that a retry can get past, if this
/// is one: thinking blocks a server refuses are dropped (from now on),
/// and `max_tokens` is lowered once when only it pushed the request past
/// the window.
fn mended(
    route: &Route,
    out: &Bytes,
    status: u16,
    err_body: &Value,
    retried: &mut bool,
    notes: &mut Vec<String>,
) -> Option<Bytes> {
    // A server that refuses thinking blocks in the history (vLLM before
    // 0.17): drop them, from now on, and send the request again.
    if route.guard.policy.thinking == Thinking::Auto
        && !route.guard.drops_thinking()
        && errors::refuses_thinking(status, err_body)
        && let Ok((again, f)) = fold::fold_raw_with(
            out,
            None,
            None,
            fold::Extras {
                loops: None,
                drop_thinking: true,
                turns: None,
                lift_images: false,
            },
        )
        && f.thinking_dropped > 0
    {
        route.guard.thinking_refused.store(true, Ordering::Relaxed);
        notes.push(Note::ThinkingRefused(f.thinking_dropped as u64).into());
        return Some(Bytes::from(again));
    }
    // vLLM counts prompt + max_tokens: lower max_tokens once if it fits.
    if !*retried
        && let Some(o) = errors::overflow(err_body, route.window)
        && o.only_max_tokens()
        && let (Some(p), Some(m)) = (o.prompt, o.max)
        && m - p >= 1024
        && let Some(again) = with_field(out, "max_tokens", (m - p).into())
    {
        notes.push(
            Note::MaxTokensRetry {
                asked: o.requested_output.unwrap_or(0),
                lowered: m - p,
            }
            .into(),
        );
        *retried = true;
        return Some(Bytes::from(again));
    }
    None
}

/// `body` (a JSON object) with `key` set to `value`; none when it is not
/// an object.
fn with_field(body: &[u8], key: &str, value: Value) -> Option<Vec<u8>> {
    let mut v = serde_json::from_slice::<Value>(body).ok()?;
    v.as_object_mut()?.insert(key.into(), value);
    Some(serde_json::to_vec(&v).unwrap_or_default())
}

/// A streamed answer, through the relay: the tap fills the record when
/// the stream ends.
fn relayed(t: Turn, resp: reqwest::Response, tools: Option<repair::LazyTools>) -> Response {
    let route = t.route.clone();
    // llama-server sends its headers when the slot starts and nothing
    // but `:` comments (every 30 s, or none) until the first token: the
    // prefill's wait is the first-byte budget, not the idle timeout.
    let mut relay = sse::Relay::new(t.started, route.backend, route.window)
        .with_first_wait(route.first_byte_timeout);
    if let Some(tools) = tools {
        relay = relay.with_repair(tools);
    }
    if route.guard.policy.runaway_limit > 0 {
        let r = route.clone();
        relay = relay.with_runaway(Box::new(move |f: &mut runaway::Found| {
            r.guard.runaway(f, r.backend == Backend::LlamaCpp)
        }));
    }
    if let Some(s) = t.sending.clone() {
        let r = route.clone();
        relay = relay.with_truncation(Box::new(move |tap: &sse::Tap| {
            let read = truncation::Read {
                tokens: tap
                    .input_seen
                    .then(|| tap.usage.input.saturating_add(tap.usage.cache_read)),
                empty: tap.tool_uses == 0 && tap.text_deltas == 0,
            };
            r.truncation(&s, Some(read))
        }));
    }
    let up = anthropic_stream(resp, t.on_chat());
    let on_done: sse::OnDone =
        Box::new(move |tap: &sse::Tap, report: &repair::Report| streamed(t, tap, report));
    let body = sse::relay(up, relay, route.idle_timeout, on_done);
    let mut out = Response::new(Body::from_stream(body));
    let h = out.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    out
}

/// A relayed stream has ended: its record, from what the tap saw and
/// the repair did, and the backend's health.
fn streamed(t: Turn, tap: &sse::Tap, report: &repair::Report) {
    let Turn {
        route,
        mut rec,
        mut notes,
        started,
        sending: _,
        reading: _,
    } = t;
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
        rec.error = tap.error.as_deref().map(|e| crate::fmt::cut(e, 500));
    }
    notes.extend(tap.translated.iter().cloned());
    rec.runaway = tap.runaway.clone();
    rec.truncated = tap.truncated.clone();
    if tap.runaway.is_some() || tap.truncated.is_some() {
        // The model's fault, not the backend's: it answered.
        route.guard.backend_answered();
    } else if tap
        .translated
        .iter()
        .any(|t| Note::parse(t) == Note::StreamCut)
        && let Some(e) = &tap.error
    {
        route.guard.backend_failed(e);
    } else if tap.saw_stop {
        route.guard.backend_answered();
    }
    finish_record(&route, rec, started, &notes);
}

/// A whole answer: its text-form calls repaired, its runaway stopped,
/// its usage and stop reason logged.
fn whole(mut t: Turn, mut bytes: Bytes, tools: Option<&repair::LazyTools>) -> Response {
    let route = t.route.clone();
    if let Ok(mut v) = serde_json::from_slice::<Value>(&bytes) {
        if let Some(tools) = tools {
            let report = repair::repair_message(&mut v, tools.get());
            if report.calls() > 0 {
                bytes = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
            }
            log::note_repair(&mut t.rec, &report);
        }
        // Read after the repair: it may have turned text into calls.
        let reply = Reply::deserialize(&v).unwrap_or_default();
        if reply.content.is_none()
            && let Some(m) = crate::anthropic::ErrorBody::of(&v).message()
        {
            // A 200 carrying an error (LM Studio, #2322).
            t.rec.error = Some(crate::fmt::cut(&m, 500));
            let tr = errors::error_in_200(&route.endpoint.base_url, &route.served_id, &m);
            return t.fail(Failure::Answer(tr));
        }
        if let Some(u) = &reply.usage {
            t.rec.usage.update(u);
        }
        t.rec.empty = reply.content.as_ref().is_some_and(Vec::is_empty);
        if route.guard.policy.runaway_limit > 0
            && let Some(mut found) = runaway_in(&reply)
        {
            let (typ, message) = route
                .guard
                .runaway(&mut found, route.backend == Backend::LlamaCpp);
            t.rec.runaway = Some(found);
            t.rec.upstream_status = Some(200);
            route.guard.backend_answered();
            return t.fail(Failure::Answer(errors::runaway(typ, &message)));
        }
        if let Some(s) = &t.sending
            && let Some((tr, why)) = route.truncation(s, Some(read_of(&reply)))
        {
            t.rec.truncated = Some(tr);
            t.rec.upstream_status = Some(200);
            route.guard.backend_answered();
            return t.fail(Failure::Answer(errors::truncated(&why)));
        }
        t.rec.stop_reason = reply.stop_reason;
    }
    t.rec.ttft_ms = Some(t.started.elapsed().as_millis() as u64);
    t.rec.bytes_out = bytes.len();
    route.guard.backend_answered();
    finish_record(&route, t.rec, t.started, &t.notes);
    let mut out = Response::new(Body::from(bytes));
    out.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    out
}

/// The most a collected answer may hold (a whole answer of `max_tokens`
/// is far less).
pub(crate) const MAX_COLLECTED: usize = 32 * 1024 * 1024;

/// A streamed backend answer to a non-streamed request, through the relay
/// and its runaway guard, put together as one Messages response; or the
/// error it ended with. A runaway closes the backend's response at once.
pub(crate) async fn collect_stream(
    route: &Arc<Route>,
    mut up: Upstream,
    started: Instant,
    rec: &mut RequestRecord,
) -> Result<Bytes, Translated> {
    use futures::StreamExt;
    let r = route.clone();
    let mut relay = sse::Relay::new(started, route.backend, route.window).with_runaway(Box::new(
        move |f: &mut runaway::Found| r.guard.runaway(f, r.backend == Backend::LlamaCpp),
    ));
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
            rec.error = Some(crate::fmt::cut(&message, 500));
            Err(Translated {
                status: errors::status_of(&typ),
                body: errors::anthropic_error(&typ, &message),
                note: relay.tap.translated.last().cloned(),
            })
        }
    }
}

/// A streamed answer's headers say it is a stream (no content type: it
/// is taken as one).
fn is_sse(resp: &reqwest::Response) -> bool {
    resp.headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|c| !c.contains("json"))
}

/// What a whole answer says the server read, for the truncation guard.
fn read_of(reply: &Reply) -> truncation::Read {
    let u = reply.usage.unwrap_or_default();
    truncation::Read {
        tokens: u
            .input_tokens
            .map(|i| i.saturating_add(u.cache_read_input_tokens.unwrap_or(0))),
        empty: !reply
            .blocks()
            .iter()
            .any(|b| matches!(b, Block::Text { .. } | Block::ToolUse { .. })),
    }
}

/// The runaway in a whole (non-streamed) answer's text and thinking.
pub(crate) fn runaway_in(reply: &Reply) -> Option<runaway::Found> {
    runaway::scan_blocks(reply.blocks().iter().filter_map(|b| match b {
        Block::Text { text } => text.as_deref(),
        Block::Thinking { thinking } => thinking.as_deref(),
        _ => None,
    }))
}
