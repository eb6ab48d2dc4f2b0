//! A bare Anthropic Messages endpoint, as cheap as an answer can be: for
//! the shim bench, which times the shim against a straight hop to it, so
//! the fake must add nothing of its own (no script, no recorded bodies, no
//! template). A request with `"stream": true` gets `events` SSE events (a
//! text block of `events - 5` deltas), each written and flushed on its own
//! like llama-server's; any other gets a one-token answer, held
//! [`Bare::delay_ms`] first. `POST /v1/chat/completions` answers the same
//! in llama-server's chat form (a `role` chunk, the deltas, a
//! `finish_reason` chunk, a `usage` chunk and `[DONE]`; or a whole
//! `chat.completion`), for the chat wire's figures (issue 53). `GET
//! /v1/models` names the model `bench`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;

/// A running bare fake.
pub struct Bare {
    /// Milliseconds to hold each non-streaming answer (for a bench's
    /// memory run: requests held in flight).
    pub delay_ms: AtomicU64,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    events: usize,
}

/// Start one on a free loopback port, `events` events a stream.
pub async fn spawn(events: usize) -> Arc<Bare> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the bare fake");
    let addr = l.local_addr().expect("its address");
    let bare = Arc::new(Bare {
        delay_ms: AtomicU64::new(0),
        url: format!("http://{addr}"),
        events,
    });
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .with_state(bare.clone());
    tokio::spawn(async move { axum::serve(l, app).await.expect("the bare fake") });
    bare
}

/// `events` as an SSE answer, like llama-server's: each event written and
/// flushed on its own (the task yields between events, so hyper flushes
/// each one).
fn sse(events: Vec<Result<Bytes, std::io::Error>>) -> Response {
    let stream = futures::stream::unfold(events.into_iter(), |mut it| async move {
        let next = it.next()?;
        tokio::task::yield_now().await;
        Some((next, it))
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// The prompt tokens the fake says it read: half the request's bytes,
/// above any request's lower bound of tokens (its runs of letters and of
/// digits), so the shim's truncation guard sees an honest server.
fn read_of(body: &Bytes) -> usize {
    body.len() / 2
}

async fn messages(State(f): State<Arc<Bare>>, body: Bytes) -> Response {
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if req["stream"] == true {
        let head = format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_b\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"usage\":{{\"input_tokens\":{},\"output_tokens\":0}}}}}}\n\nevent: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n",
            read_of(&body)
        );
        let mut events: Vec<Result<Bytes, std::io::Error>> = vec![Ok(Bytes::from(head))];
        for i in 0..f.events.saturating_sub(5) {
            events.push(Ok(Bytes::from(format!(
                "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"tok{i} \"}}}}\n\n"
            ))));
        }
        events.push(Ok(Bytes::from_static(b"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":1995}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")));
        return sse(events);
    }
    let d = f.delay_ms.load(Ordering::SeqCst);
    if d > 0 {
        tokio::time::sleep(Duration::from_millis(d)).await;
    }
    axum::Json(json!({"id": "msg_b", "type": "message", "role": "assistant", "model": "bench", "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "usage": {"input_tokens": 50000, "output_tokens": 1}})).into_response()
}

async fn chat(State(f): State<Arc<Bare>>, body: Bytes) -> Response {
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let read = read_of(&body);
    let chunk = |delta: &str, finish: &str| {
        Bytes::from(format!(
            "data: {{\"choices\":[{{\"finish_reason\":{finish},\"index\":0,\"delta\":{delta}}}],\"created\":1,\"id\":\"chatcmpl-b\",\"model\":\"bench\",\"object\":\"chat.completion.chunk\",\"timings\":{{\"cache_n\":0,\"prompt_n\":{read},\"predicted_n\":1}}}}\n\n"
        ))
    };
    if req["stream"] == true {
        let mut events: Vec<Result<Bytes, std::io::Error>> = vec![Ok(chunk(
            "{\"role\":\"assistant\",\"content\":null}",
            "null",
        ))];
        for i in 0..f.events.saturating_sub(5) {
            events.push(Ok(chunk(&format!("{{\"content\":\"tok{i} \"}}"), "null")));
        }
        events.push(Ok(chunk("{}", "\"stop\"")));
        events.push(Ok(Bytes::from(format!("data: {{\"choices\":[],\"id\":\"chatcmpl-b\",\"model\":\"bench\",\"usage\":{{\"completion_tokens\":1995,\"prompt_tokens\":{read},\"prompt_tokens_details\":{{\"cached_tokens\":0}}}}}}\n\ndata: [DONE]\n\n"))));
        return sse(events);
    }
    let d = f.delay_ms.load(Ordering::SeqCst);
    if d > 0 {
        tokio::time::sleep(Duration::from_millis(d)).await;
    }
    axum::Json(json!({"id": "chatcmpl-b", "object": "chat.completion", "model": "bench", "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "ok"}}], "usage": {"prompt_tokens": 50000, "completion_tokens": 1}})).into_response()
}

async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [{"id": "bench", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx": 262144}}]})).into_response()
}
