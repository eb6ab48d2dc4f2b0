//! A scripted model in front of the real llama-server: the tiny model
//! cannot carry a multi-turn task, so a relay decides each answer from a
//! script (the tool calls a task needs) while the real server does the
//! part that is measured here, the prompt processing. Each `/v1/messages`
//! body is sent on to the real server as it came, cut to one output token
//! and not streamed; its real `usage` (tokens processed, tokens cached)
//! goes back with the scripted answer, so the shim logs what the server
//! counted. Everything else (`/props`, `/slots`, `/v1/models`,
//! `count_tokens`, `/metrics`) is passed through, so the probe sees the
//! real server.
//!
//! A job on the chat wire (issue 53) sends `/v1/chat/completions`: the
//! same, with its `id_slot` kept, so the real server serves it on the
//! job's slot; the script reads the Anthropic request it came from and
//! its answer goes back as the real server writes a chat answer
//! (`support::fake_chat`).
//!
//! `one_at_a_time` forwards one request at a time: the two jobs' requests
//! then reach the server interleaved but never overlapping, the case in
//! which llama-server routes by prompt similarity alone (an overlapping
//! request cannot take a busy slot).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::support::script::{self, Script};

struct Relay {
    upstream: String,
    client: reqwest::Client,
    script: Script,
    one_at_a_time: Option<tokio::sync::Mutex<()>>,
    seen: Seen,
}

/// Each `/v1/messages` request the relay answered: its body, and the real
/// server's prompt tokens processed and cached.
pub type Seen = Arc<std::sync::Mutex<Vec<(String, u64, u64)>>>;

pub struct Running {
    pub url: String,
    pub seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The request at `body` sent on to the real server's `path` cut to one
/// output token and not streamed, one at a time when asked: the request,
/// and the real answer; or the real server's own error, as it sent it.
async fn forward(r: &Relay, path: &str, body: &Bytes) -> Result<(Value, Value), Response> {
    let Ok(req) = serde_json::from_slice::<Value>(body) else {
        return Err((StatusCode::BAD_REQUEST, "not JSON").into_response());
    };
    let mut cut = req.clone();
    cut["max_tokens"] = 1.into();
    cut["stream"] = false.into();
    if let Some(o) = cut.as_object_mut() {
        o.remove("stream_options");
    }
    let _turn = match &r.one_at_a_time {
        Some(m) => Some(m.lock().await),
        None => None,
    };
    let up = r
        .client
        .post(format!("{}{path}", r.upstream))
        .json(&cut)
        .send()
        .await
        .map_err(|e| (StatusCode::BAD_GATEWAY, e.to_string()).into_response())?;
    let status = up.status();
    let bytes = up.bytes().await.unwrap_or_default();
    if !status.is_success() {
        return Err((status, [(header::CONTENT_TYPE, "application/json")], bytes).into_response());
    }
    Ok((req, serde_json::from_slice(&bytes).unwrap_or_default()))
}

async fn messages(State(r): State<Arc<Relay>>, body: Bytes) -> Response {
    let (req, answer) = match forward(&r, "/v1/messages", &body).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let usage = &answer["usage"];
    let (input, cached) = (
        usage["input_tokens"].as_u64().unwrap_or(0),
        usage["cache_read_input_tokens"].as_u64().unwrap_or(0),
    );
    if let Ok(mut s) = r.seen.lock() {
        s.push((String::from_utf8_lossy(&body).into_owned(), input, cached));
    }
    let model = answer["model"].as_str().unwrap_or("gemma3-270m");
    let reply = (r.script)(&req);
    if req["stream"] == true {
        (
            [(header::CONTENT_TYPE, "text/event-stream")],
            script::message_sse(model, &reply, input, cached),
        )
            .into_response()
    } else {
        axum::Json(script::message_json(model, &reply, input, cached)).into_response()
    }
}

/// `/v1/chat/completions`: as [`messages`], on the chat endpoint.
async fn chat(State(r): State<Arc<Relay>>, body: Bytes) -> Response {
    use crate::support::fake_chat;
    let (req, answer) = match forward(&r, "/v1/chat/completions", &body).await {
        Ok(a) => a,
        Err(resp) => return resp,
    };
    let usage = &answer["usage"];
    let cached = usage["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0);
    let input = usage["prompt_tokens"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(cached);
    if let Ok(mut s) = r.seen.lock() {
        s.push((String::from_utf8_lossy(&body).into_owned(), input, cached));
    }
    let model = answer["model"].as_str().unwrap_or("gemma3-270m");
    let anthropic = fake_chat::to_anthropic(&req);
    let reply = (r.script)(&anthropic);
    let asked = fake_chat::Asked::of(&req);
    if req["stream"] == true {
        let sse = script::message_sse(model, &reply, input, cached);
        let body = fake_chat::stream(Body::from(sse), model, asked);
        ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
    } else {
        let whole = script::message_json(model, &reply, input, cached);
        axum::Json(fake_chat::whole(&whole, asked)).into_response()
    }
}

async fn pass(
    State(r): State<Arc<Relay>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let mut req = r
        .client
        .request(method, format!("{}{path}", r.upstream))
        .body(body);
    if let Some(ct) = headers.get(header::CONTENT_TYPE) {
        req = req.header(header::CONTENT_TYPE, ct);
    }
    match req.send().await {
        Ok(up) => {
            let status = up.status();
            let ct = up.headers().get(header::CONTENT_TYPE).cloned();
            let bytes = up.bytes().await.unwrap_or_default();
            let mut resp = Response::new(Body::from(bytes));
            *resp.status_mut() = status;
            if let Some(ct) = ct {
                resp.headers_mut().insert(header::CONTENT_TYPE, ct);
            }
            resp
        }
        Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
    }
}

/// A relay to the real server at `upstream` answering by `script`.
pub async fn start(upstream: &str, script: Script, one_at_a_time: bool) -> Running {
    let relay = Arc::new(Relay {
        upstream: upstream.trim_end_matches('/').to_string(),
        client: crate::support::http_client(),
        script,
        one_at_a_time: one_at_a_time.then(|| tokio::sync::Mutex::new(())),
        seen: Seen::default(),
    });
    let seen = relay.seen.clone();
    let app = Router::new()
        .route("/v1/messages", axum::routing::post(messages))
        .route("/v1/chat/completions", axum::routing::post(chat))
        .fallback(pass)
        .with_state(relay);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Running { url, seen, task }
}
