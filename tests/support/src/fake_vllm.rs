//! A fake vLLM OpenAI server: `/health`, `/v1/models` with `max_model_len`,
//! and `/metrics` with `model_name` labels. Unknown paths answer FastAPI's
//! `{"detail":"Not Found"}`; errors on the API routes use OpenAI's shape.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use super::fake_llama::Running;

#[derive(Debug, Clone)]
pub struct VllmOpts {
    /// `--served-model-name`.
    pub served: String,
    /// `--max-model-len`.
    pub max_model_len: u64,
    /// Answer as vLLM before 0.17 does when the history holds a thinking
    /// block: its pydantic model lists only text, image, tool_use and
    /// tool_result (vllm/entrypoints/anthropic/protocol.py), and the body
    /// fails validation with a 400.
    pub refuse_thinking: bool,
}

impl Default for VllmOpts {
    fn default() -> Self {
        VllmOpts {
            served: "deepseek-v4-flash".into(),
            max_model_len: 163840,
            refuse_thinking: false,
        }
    }
}

pub struct VllmState {
    pub opts: VllmOpts,
    pub running: AtomicU64,
    pub waiting: AtomicU64,
    /// `max_tokens` of every /v1/messages request, in order.
    pub max_tokens_seen: std::sync::Mutex<Vec<u64>>,
    /// Prompt tokens to report for every request.
    pub prompt_tokens: AtomicU64,
    /// The scripted model (None: "ok").
    pub script: std::sync::Mutex<Option<super::script::Script>>,
    /// Status codes answered on /v1/messages, in order.
    pub statuses: std::sync::Mutex<Vec<u16>>,
}

pub struct FakeVllm {
    pub server: Running,
    pub state: Arc<VllmState>,
}

impl FakeVllm {
    pub fn url(&self) -> &str {
        &self.server.url
    }
    pub fn set_script(&self, s: super::script::Script) {
        *self.state.script.lock().unwrap() = Some(s);
    }
    pub fn statuses(&self) -> Vec<u16> {
        self.state.statuses.lock().unwrap().clone()
    }
}

/// vLLM 0.15's 400 for a thinking block in the history. The shape is its
/// validation handler's (vllm/entrypoints/serve/exception_handler/handler/
/// validation.py: "N validation errors:" then each pydantic error dict, type
/// "Bad Request", code 400); the errors are pydantic's for `content: str |
/// list[AnthropicContentBlock]` with `type` outside the Literal. Built from
/// that code, not captured from a running server.
fn thinking_refused(msg_index: usize, block_index: usize) -> serde_json::Value {
    let message = format!(
        "2 validation errors:\n  {{'type': 'string_type', 'loc': ('body', 'messages', {msg_index}, 'content', 'str'), 'msg': 'Input should be a valid string', 'input': [...]}}\n  {{'type': 'literal_error', 'loc': ('body', 'messages', {msg_index}, 'content', 'list[AnthropicContentBlock]', {block_index}, 'type'), 'msg': \"Input should be 'text', 'image', 'tool_use' or 'tool_result'\", 'input': 'thinking', 'ctx': {{'expected': \"'text', 'image', 'tool_use' or 'tool_result'\"}}}}"
    );
    json!({"error": {"message": message, "type": "Bad Request", "param": null, "code": 400}})
}

async fn models(State(st): State<Arc<VllmState>>) -> Response {
    let o = &st.opts;
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": o.served,
            "object": "model",
            "created": 1764460800,
            "owned_by": "vllm",
            "root": format!("/models/{}", o.served),
            "parent": null,
            "max_model_len": o.max_model_len,
            "permission": [{
                "id": "modelperm-fake", "object": "model_permission", "created": 1764460800,
                "allow_create_engine": false, "allow_sampling": true, "allow_logprobs": true,
                "allow_search_indices": false, "allow_view": true, "allow_fine_tuning": false,
                "organization": "*", "group": null, "is_blocking": false
            }]
        }]
    }))
    .into_response()
}

async fn metrics(State(st): State<Arc<VllmState>>) -> Response {
    let m = &st.opts.served;
    let text = format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{{engine=\"0\",model_name=\"{m}\"}} {}\n\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{{engine=\"0\",model_name=\"{m}\"}} {}\n\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
# TYPE vllm:kv_cache_usage_perc gauge\n\
vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"{m}\"}} 0.25\n\
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n\
# TYPE vllm:prefix_cache_queries_total counter\n\
vllm:prefix_cache_queries_total{{engine=\"0\",model_name=\"{m}\"}} 1000.0\n\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n\
# TYPE vllm:prefix_cache_hits_total counter\n\
vllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"{m}\"}} 900.0\n\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n\
# TYPE vllm:prompt_tokens_total counter\n\
vllm:prompt_tokens_total{{engine=\"0\",model_name=\"{m}\"}} 1000.0\n\
# HELP vllm:generation_tokens_total Number of generation tokens processed.\n\
# TYPE vllm:generation_tokens_total counter\n\
vllm:generation_tokens_total{{engine=\"0\",model_name=\"{m}\"}} 50.0\n",
        st.running.load(Ordering::SeqCst),
        st.waiting.load(Ordering::SeqCst),
    );
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

/// vLLM counts prompt + max_tokens against the window (form 3 of backends.md).
async fn messages(State(st): State<Arc<VllmState>>, body: axum::body::Bytes) -> Response {
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let record = |code: u16| st.statuses.lock().unwrap().push(code);
    if st.opts.refuse_thinking {
        let found = req["messages"].as_array().and_then(|ms| {
            ms.iter().enumerate().find_map(|(i, m)| {
                m["content"].as_array().and_then(|c| {
                    c.iter()
                        .position(|b| b["type"] == "thinking" || b["type"] == "redacted_thinking")
                        .map(|j| (i, j))
                })
            })
        });
        if let Some((i, j)) = found {
            record(400);
            return (StatusCode::BAD_REQUEST, axum::Json(thinking_refused(i, j))).into_response();
        }
    }
    let script = st.script.lock().unwrap().clone();
    if let Some(f) = script {
        let reply = f(&req);
        record(200);
        let model = req["model"].as_str().unwrap_or(&st.opts.served).to_string();
        if req["stream"] == true {
            let text = super::script::message_sse(&model, &reply, super::tokens::count(&req), 0);
            return (
                StatusCode::OK,
                [("content-type", "text/event-stream")],
                text,
            )
                .into_response();
        }
        return axum::Json(super::script::message_json(
            &model,
            &reply,
            super::tokens::count(&req),
            0,
        ))
        .into_response();
    }
    let max_tokens = req["max_tokens"].as_u64().unwrap_or(0);
    st.max_tokens_seen.lock().unwrap().push(max_tokens);
    let prompt = st.prompt_tokens.load(Ordering::SeqCst);
    let len = st.opts.max_model_len;
    if prompt + max_tokens > len {
        let msg = format!(
            "'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum context length is {len} tokens and your request has {prompt} input tokens ({max_tokens} > {len} - {prompt})."
        );
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(
                json!({"type": "error", "error": {"type": "BadRequestError", "message": msg}}),
            ),
        )
            .into_response();
    }
    let reply = super::script::Reply::Text("ok".into());
    axum::Json(super::script::message_json(
        &st.opts.served,
        &reply,
        prompt.max(super::tokens::count(&req)),
        0,
    ))
    .into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"detail": "Not Found"})),
    )
        .into_response()
}

pub fn router(state: Arc<VllmState>) -> Router {
    Router::new()
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/v1/messages", axum::routing::post(messages))
        .fallback(not_found)
        .with_state(state)
}

pub async fn spawn(opts: VllmOpts) -> FakeVllm {
    let state = Arc::new(VllmState {
        opts,
        running: AtomicU64::new(0),
        waiting: AtomicU64::new(0),
        max_tokens_seen: std::sync::Mutex::new(Vec::new()),
        prompt_tokens: AtomicU64::new(1000),
        script: std::sync::Mutex::new(None),
        statuses: std::sync::Mutex::new(Vec::new()),
    });
    let server = Running::serve(router(state.clone())).await;
    FakeVllm { server, state }
}
