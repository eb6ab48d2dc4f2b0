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
use serde_json::{Value, json};

use crate::config::{Backend, Thinking};
use crate::shim::errors::{self, Translated};
use crate::shim::fold;
use crate::shim::log::{self, RequestRecord};
use crate::shim::pipeline::*;
use crate::shim::repair;
use crate::shim::route::*;
use crate::shim::runaway;
use crate::shim::sse;
use crate::wire::Note;

/// `POST /v1/messages` on `route` without an HTTP hop: what a one-shot
/// completion sends, through the same folding, translation and log.
pub async fn relay_messages(route: Arc<Route>, body: Bytes) -> Response {
    messages(route, body).await
}

/// `POST /v1/messages`.
pub(crate) async fn messages(route: Arc<Route>, body: Bytes) -> Response {
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
                rec.error = tap.error.as_deref().map(|e| crate::fmt::cut(e, 500));
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
pub(crate) const MAX_COLLECTED: usize = 32 * 1024 * 1024;

/// A streamed backend answer to a non-streamed request, through the relay
/// and its runaway guard, put together as one Messages response; or the
/// error it ended with. A runaway closes the backend's response at once.
pub(crate) async fn collect_stream(
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
            rec.error = Some(crate::fmt::cut(&message, 500));
            Err(Translated {
                status: errors::status_of(&typ),
                body: errors::anthropic_error(&typ, &message),
                note: relay.tap.translated.last().cloned(),
            })
        }
    }
}

/// The runaway in a whole (non-streamed) answer's text and thinking.
pub(crate) fn runaway_in(v: &Value) -> Option<runaway::Found> {
    let blocks = v.get("content")?.as_array()?;
    runaway::scan_blocks(blocks.iter().filter_map(|b| {
        b.get("text")
            .or_else(|| b.get("thinking"))
            .and_then(Value::as_str)
    }))
}
