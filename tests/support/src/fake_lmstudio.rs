//! A fake LM Studio server (0.4.x), answering with the shapes the real one
//! sends. Sources: LM Studio's docs (`github.com/lmstudio-ai/docs` at
//! c6854fb, "LD:") and its bug tracker
//! (`github.com/lmstudio-ai/lmstudio-bug-tracker/issues/N`, "BT#N"), cited
//! beside each body (and ../shared/reference/ollama-lmstudio.md).
//!
//! - every path or method it does not serve (our `/props`, `/slots`,
//!   `/metrics`, `GET /`): **200** with `{"error":"Unexpected endpoint or
//!   method. (GET /props)"}` (BT#618, BT#1323, BT#2085);
//! - `GET /v1/models`, `GET /api/v1/models` (`loaded_instances[].config`
//!   with `context_length` and `parallel`), `GET /api/v0/models` (`state`,
//!   `max_context_length`, `loaded_context_length`);
//! - `POST /api/v1/models/load {"model"}` (recorded, so a test sees no
//!   `context_length`);
//! - `POST /v1/messages`: loads the model on first use (JIT), then the
//!   scripted model answers.
//!
//! A model's window is the one it is loaded with (`LModel::context`); the
//! app's default is 4,096.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::fake_llama::Running;
use super::script::{self, Reply, Script};

/// What the fake does with a prompt longer than the loaded window. No
/// documentation says what the Anthropic endpoint does; these are the
/// answers users saw on the other endpoints
/// (../shared/reference/ollama-lmstudio.md B5).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum Overflow {
    /// HTTP 400 `{"error": "… (n_keep: N>= n_ctx: W) …"}`
    /// (Gitlawb/openclaude#353, 2026-04, the OpenAI endpoint).
    #[default]
    Error400,
    /// HTTP 200 carrying that error (BT#2322 on 0.4.21).
    Error200,
    /// HTTP 200, an empty stream with usage 0 (BT#2339, GGUF, 2026-08).
    EmptyStream,
    // Not here: the SDK's default policy, `truncateMiddle`
    // (lmstudio-js `packages/lms-kv-config/src/schema.ts:74`), which no
    // report shows through the API, nor what count it would give.
}

/// The empty stream of BT#2339: no content block, usage 0.
pub const EMPTY_STREAM: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

/// One downloaded model.
#[derive(Debug, Clone)]
pub struct LModel {
    /// `key` in `/api/v1/models`, `id` in `/v1/models` and v0.
    pub key: String,
    /// The window it is loaded with (`loaded_instances[].config.context_length`).
    pub context: u64,
    /// `loaded_instances[].config.parallel`.
    pub parallel: u64,
    /// Loaded when the fake starts.
    pub loaded: bool,
    /// How long a load takes.
    pub load: Duration,
}

pub struct LmsState {
    models: Vec<LModel>,
    loaded: Mutex<BTreeSet<String>>,
    script: Mutex<Script>,
    /// Every request, `METHOD /path`, in order.
    pub hits: Mutex<Vec<String>>,
    /// The bodies of `POST /api/v1/models/load`, in order.
    pub loads: Mutex<Vec<Value>>,
    /// The bodies of `POST /v1/messages`, in order.
    pub messages: Mutex<Vec<Value>>,
    /// False: 0.3.x, which has `/api/v0/models` only.
    v1_api: std::sync::atomic::AtomicBool,
    /// With auth on: the token, sent as `Authorization: Bearer` or
    /// `x-api-key` (LD:1_developer/4_anthropic-compat/index.mdx).
    token: Mutex<Option<String>>,
    /// Requests refused for want of the token, `METHOD /path`.
    pub unauthorized: Mutex<Vec<String>>,
    overflow: Mutex<Overflow>,
    /// Each `/v1/messages` request's bytes, its tokens, and the tokens
    /// reported as read.
    pub truncations: Mutex<Vec<(u64, u64, u64)>>,
}

pub struct FakeLmStudio {
    pub server: Running,
    pub state: Arc<LmsState>,
}

impl FakeLmStudio {
    pub fn url(&self) -> &str {
        &self.server.url
    }
    pub fn set_script(&self, s: Script) {
        *self.state.script.lock().unwrap() = s;
    }
    pub fn hits(&self) -> Vec<String> {
        self.state.hits.lock().unwrap().clone()
    }
    pub fn loads(&self) -> Vec<Value> {
        self.state.loads.lock().unwrap().clone()
    }
    pub fn messages(&self) -> Vec<Value> {
        self.state.messages.lock().unwrap().clone()
    }
    pub fn loaded(&self) -> Vec<String> {
        self.state.loaded.lock().unwrap().iter().cloned().collect()
    }
    /// Turn auth on: every request needs `token`.
    pub fn require_token(&self, token: &str) {
        *self.state.token.lock().unwrap() = Some(token.to_string());
    }
    pub fn unauthorized(&self) -> Vec<String> {
        self.state.unauthorized.lock().unwrap().clone()
    }
    /// What a prompt over the window gets.
    pub fn set_overflow(&self, o: Overflow) {
        *self.state.overflow.lock().unwrap() = o;
    }
    /// Each request's (bytes, tokens, tokens reported).
    pub fn truncations(&self) -> Vec<(u64, u64, u64)> {
        self.state.truncations.lock().unwrap().clone()
    }
    /// Answer as 0.3.x does: `/api/v1/*` is an unknown path, v0 remains.
    pub fn without_v1_api(&self) {
        self.state
            .v1_api
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// What LM Studio answers any path or method it does not serve: HTTP 200,
/// Express, this one-key JSON (BT#618 with `curl -v` on 0.3.14, BT#2085 on
/// 0.4.17; for count_tokens BT#2055 shows the query string kept).
async fn unexpected(req: axum::extract::Request) -> Response {
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    (
        StatusCode::OK,
        [
            ("content-type", "application/json; charset=utf-8"),
            ("x-powered-by", "Express"),
        ],
        json!({"error": format!("Unexpected endpoint or method. ({} {path})", req.method())})
            .to_string(),
    )
        .into_response()
}

async fn ensure(st: &LmsState, key: &str) -> bool {
    let Some(m) = st.models.iter().find(|m| m.key == key).cloned() else {
        return false;
    };
    if st.loaded.lock().unwrap().contains(key) {
        return true;
    }
    tokio::time::sleep(m.load).await;
    st.loaded.lock().unwrap().insert(m.key);
    true
}

/// `GET /v1/models` (LD:1_developer/3_openai-compat/models.md; BT#2139):
/// no window; with JIT on it lists every downloaded model.
async fn v1_models(State(st): State<Arc<LmsState>>) -> Response {
    let data: Vec<Value> = st
        .models
        .iter()
        .map(|m| json!({"id": m.key, "object": "model", "owned_by": "organization_owner"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `GET /api/v1/models` (0.4.0+; LD:1_developer/2_rest/list.md:62-97,
/// 153-197): an unloaded model has `loaded_instances: []`.
async fn api_v1_models(State(st): State<Arc<LmsState>>, req: axum::extract::Request) -> Response {
    if !st.v1_api.load(std::sync::atomic::Ordering::SeqCst) {
        return unexpected(req).await;
    }
    let loaded = st.loaded.lock().unwrap().clone();
    let models: Vec<Value> = st
        .models
        .iter()
        .map(|m| {
            let instances = if loaded.contains(&m.key) {
                json!([{"id": m.key, "config": {"context_length": m.context, "eval_batch_size": 512, "flash_attention": true, "num_experts": 0, "offload_kv_cache_to_gpu": true, "parallel": m.parallel}}])
            } else {
                json!([])
            };
            json!({
                "type": "llm", "publisher": "qwen", "key": m.key, "display_name": m.key,
                "architecture": "qwen3_moe", "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
                "size_bytes": 18_556_696_128u64, "params_string": "30B-A3B",
                "loaded_instances": instances, "max_context_length": 262_144,
                "format": "gguf", "capabilities": {"vision": false, "trained_for_tool_use": true},
                "description": null,
            })
        })
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// `GET /api/v0/models` (0.3.6+; LD:…/2_rest/endpoints.mdx:64-117):
/// `loaded_context_length` on a loaded entry.
async fn api_v0_models(State(st): State<Arc<LmsState>>) -> Response {
    let loaded = st.loaded.lock().unwrap().clone();
    let data: Vec<Value> = st
        .models
        .iter()
        .map(|m| {
            let on = loaded.contains(&m.key);
            let mut v = json!({
                "id": m.key, "object": "model", "type": "llm", "publisher": "qwen",
                "arch": "qwen3_moe", "compatibility_type": "gguf", "quantization": "Q4_K_M",
                "state": if on { "loaded" } else { "not-loaded" }, "max_context_length": 262_144,
            });
            if on {
                v["loaded_context_length"] = json!(m.context);
            }
            v
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /api/v1/models/load` (LD:…/2_rest/load.md): `context_length` is
/// optional; without it the model's own settings apply.
async fn load(State(st): State<Arc<LmsState>>, body: axum::body::Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    st.loads.lock().unwrap().push(req.clone());
    let key = req["model"].as_str().unwrap_or_default().to_string();
    if !ensure(&st, &key).await {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {"message": format!("Model not found: {key}"), "type": "invalid_request_error"}})),
        )
            .into_response();
    }
    axum::Json(
        json!({"type": "llm", "instance_id": key, "load_time_seconds": 1.2, "status": "loaded"}),
    )
    .into_response()
}

/// `POST /v1/messages` (0.4.1+; LD:1_developer/4_anthropic-compat/): JIT
/// loads the model on first use.
async fn messages(State(st): State<Arc<LmsState>>, body: axum::body::Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    st.messages.lock().unwrap().push(req.clone());
    let model = req["model"].as_str().unwrap_or_default().to_string();
    if !ensure(&st, &model).await {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"type": "error", "error": {"type": "invalid_request_error", "message": format!("Invalid model identifier \"{model}\".")}})),
        )
            .into_response();
    }
    let script = st.script.lock().unwrap().clone();
    let reply = script(&req);
    if let Reply::Error { status, body } = &reply {
        return (
            StatusCode::from_u16(*status).unwrap(),
            axum::Json(body.clone()),
        )
            .into_response();
    }
    let window = st
        .models
        .iter()
        .find(|m| m.key == model)
        .map_or(u64::MAX, |m| m.context);
    let whole = super::tokens::count(&req);
    let over = whole > window;
    let overflow = *st.overflow.lock().unwrap();
    let input = if over { 0 } else { whole };
    st.truncations
        .lock()
        .unwrap()
        .push((body.len() as u64, whole, input));
    if over && matches!(overflow, Overflow::Error400 | Overflow::Error200) {
        let error = format!(
            "The number of tokens to keep from the initial prompt is greater than the context length (n_keep: {whole}>= n_ctx: {window}). Try to load the model with a larger context length, or provide a shorter input."
        );
        let status = if overflow == Overflow::Error400 {
            StatusCode::BAD_REQUEST
        } else {
            StatusCode::OK
        };
        return (
            status,
            [("content-type", "application/json; charset=utf-8")],
            json!({ "error": error }).to_string(),
        )
            .into_response();
    }
    let reply = if over && overflow == Overflow::EmptyStream {
        Reply::RawSse(EMPTY_STREAM.into())
    } else {
        reply
    };
    if req["stream"] == true {
        let text = script::message_sse(&model, &reply, input, 0);
        return (
            StatusCode::OK,
            [("content-type", "text/event-stream")],
            text,
        )
            .into_response();
    }
    axum::Json(script::message_json(&model, &reply, input, 0)).into_response()
}

async fn record(
    State(st): State<Arc<LmsState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let hit = format!("{} {}", req.method(), req.uri().path());
    st.hits.lock().unwrap().push(hit.clone());
    let token = st.token.lock().unwrap().clone();
    if let Some(t) = token {
        let header = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let ok = header("authorization") == Some(format!("Bearer {t}"))
            || header("x-api-key") == Some(t);
        if !ok {
            st.unauthorized.lock().unwrap().push(hit);
            // [inferred] body: the docs name the 401, not its body.
            return (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "Invalid or missing API token"})),
            )
                .into_response();
        }
    }
    next.run(req).await
}

pub async fn spawn(models: Vec<LModel>) -> FakeLmStudio {
    spawn_on(models, 0).await.expect("bind")
}

/// The fake on loopback `port` (its real default port, say); `None` when
/// the port is taken.
pub async fn spawn_on(models: Vec<LModel>, port: u16) -> Option<FakeLmStudio> {
    let loaded = models
        .iter()
        .filter(|m| m.loaded)
        .map(|m| m.key.clone())
        .collect();
    let state = Arc::new(LmsState {
        models,
        loaded: Mutex::new(loaded),
        script: Mutex::new(script::text("ok")),
        hits: Mutex::new(Vec::new()),
        loads: Mutex::new(Vec::new()),
        messages: Mutex::new(Vec::new()),
        v1_api: std::sync::atomic::AtomicBool::new(true),
        token: Mutex::new(None),
        unauthorized: Mutex::new(Vec::new()),
        overflow: Mutex::new(Overflow::default()),
        truncations: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/models", get(v1_models))
        .route("/api/v1/models", get(api_v1_models))
        .route("/api/v0/models", get(api_v0_models))
        .route("/api/v1/models/load", post(load))
        .route("/v1/messages", post(messages))
        .fallback(unexpected)
        .layer(axum::middleware::from_fn_with_state(state.clone(), record))
        .with_state(state.clone());
    let server = Running::serve_on(app, port).await?;
    Some(FakeLmStudio { server, state })
}
