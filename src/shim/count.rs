//! `POST /v1/messages/count_tokens` (forwarded, else estimated from the
//! body's size) and `GET /v1/models`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::anthropic::TokenCount;
use crate::shim::log::{self, RequestRecord};
use crate::shim::pipeline::*;
use crate::shim::route::*;
use crate::wire::Note;

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
pub(crate) async fn count_tokens(route: Arc<Route>, body: Bytes) -> Response {
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
        let n = estimate_tokens(&v);
        let out = json!({ "input_tokens": n });
        rec.status = 200;
        rec.estimated = true;
        rec.usage.input = n;
        rec.bytes_out = out.to_string().len();
        finish_record(&route, rec, started, &notes);
        json_response(200, &out)
    };
    // A server without /v1/messages has no count_tokens either.
    if !route.backend.has_messages() {
        return estimate(rec, notes);
    }
    let out = Bytes::from(serde_json::to_vec(&v).unwrap_or_default());
    match send(&route, "/v1/messages/count_tokens", out, false, None, &mut notes).await {
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
            match (
                TokenCount::parse(&bytes),
                serde_json::from_slice::<Value>(&bytes),
            ) {
                (Some(c), Ok(out)) => {
                    rec.status = 200;
                    rec.usage.input = c.tokens().unwrap_or(0);
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
pub(crate) async fn models(route: Arc<Route>) -> Response {
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
