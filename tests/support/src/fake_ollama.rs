//! A fake Ollama, answering with the shapes the real one sends. Sources:
//! `github.com/ollama/ollama` at v0.33.0-rc2 (fb30760), cited beside each
//! body (and ../shared/reference/ollama-lmstudio.md).
//!
//! - `GET /` `Ollama is running`; `GET /api/version`;
//! - `GET /api/ps`: each loaded model with `context_length`, its per-slot
//!   window;
//! - `GET /v1/models`: every downloaded model, `"data": null` when none;
//! - `POST /api/generate {"model"}` with no prompt loads the model with the
//!   server's own settings (recorded, so a test sees no `options`);
//! - `POST /v1/messages` loads the model on first use, then answers from
//!   the scripted model;
//! - every other path: gin's `404 page not found` as text/plain.
//!
//! A model's window is the one it is loaded with (`OModel::context`): on
//! the real server the Modelfile's `num_ctx`, `OLLAMA_CONTEXT_LENGTH` or
//! the VRAM default (4096 below 23 GiB). A prompt over it is cut
//! silently, as the real one does ([`super::tokens::silently_cut`]): the
//! count (`tokens::count`, pre-tokens) is what it kept.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::fake_llama::Running;
use super::script::{self, Reply, Script};

/// One downloaded model.
#[derive(Debug, Clone)]
pub struct OModel {
    /// As `/v1/models` `id` and `/api/ps` `name` show it (`qwen3-coder:latest`).
    pub name: String,
    /// The window it is loaded with.
    pub context: u64,
    /// Loaded when the fake starts.
    pub loaded: bool,
    /// How long a load takes.
    pub load: Duration,
}

pub struct OllamaState {
    models: Vec<OModel>,
    loaded: Mutex<BTreeSet<String>>,
    script: Mutex<Script>,
    /// Every request, `METHOD /path`, in order.
    pub hits: Mutex<Vec<String>>,
    /// The bodies of `POST /api/generate`, in order.
    pub loads: Mutex<Vec<Value>>,
    /// The bodies of `POST /v1/messages`, in order.
    pub messages: Mutex<Vec<Value>>,
    /// Each `/v1/messages` request's bytes, its tokens, and the tokens
    /// kept after the silent cut (and reported as `input_tokens`).
    pub truncations: Mutex<Vec<(u64, u64, u64)>>,
}

pub struct FakeOllama {
    pub server: Running,
    pub state: Arc<OllamaState>,
}

impl FakeOllama {
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
    /// Each request's (bytes, tokens, tokens kept and reported).
    pub fn truncations(&self) -> Vec<(u64, u64, u64)> {
        self.state.truncations.lock().unwrap().clone()
    }
    pub fn loaded(&self) -> Vec<String> {
        self.state.loaded.lock().unwrap().iter().cloned().collect()
    }
}

/// gin's answer to a path no route serves (O:server/routes.go:1870-1926
/// registers no fallback; gin's default 404 is `404 page not found`,
/// text/plain).
fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        [("content-type", "text/plain")],
        "404 page not found",
    )
        .into_response()
}

/// Ollama's Anthropic error (O:anthropic/anthropic.go:31-62, 983-990;
/// middleware/anthropic.go:31-47): the status kept, `request_id` added.
fn anthropic_error(code: u16, typ: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": typ, "message": message}, "request_id": "req_0123456789abcdef01234567"});
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        format!("{body}\n"),
    )
        .into_response()
}

/// Load `name` (taking its load time) unless it is loaded. False: no
/// such model.
async fn ensure(st: &OllamaState, name: &str) -> bool {
    let Some(m) = st.models.iter().find(|m| m.name == name).cloned() else {
        return false;
    };
    if st.loaded.lock().unwrap().contains(name) {
        return true;
    }
    tokio::time::sleep(m.load).await;
    st.loaded.lock().unwrap().insert(m.name);
    true
}

/// `GET /api/ps` (O:api/types.go:835-844, ProcessModelResponse;
/// PsHandler routes.go:2271-2302): `context_length` is not omitempty.
async fn ps(axum::extract::State(st): axum::extract::State<Arc<OllamaState>>) -> Response {
    let loaded = st.loaded.lock().unwrap().clone();
    let models: Vec<Value> = st
        .models
        .iter()
        .filter(|m| loaded.contains(&m.name))
        .map(|m| {
            json!({
                "name": m.name, "model": m.name, "size": 5_368_709_120u64,
                "digest": "a1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f90",
                "details": {"parent_model": "", "format": "gguf", "family": "qwen3", "families": ["qwen3"], "parameter_size": "30.5B", "quantization_level": "Q4_K_M"},
                "expires_at": "2026-12-04T20:30:00.000000000Z", "size_vram": 5_368_709_120u64,
                "context_length": m.context,
            })
        })
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

/// `GET /v1/models` (O:openai/openai.go:208-211, 450-470): `Data []Model`
/// has no omitempty, so no model at all is `"data": null`; `owned_by` is
/// the name's namespace (`library` for official models).
async fn v1_models(axum::extract::State(st): axum::extract::State<Arc<OllamaState>>) -> Response {
    let data: Vec<Value> = st
        .models
        .iter()
        .map(|m| json!({"id": m.name, "object": "model", "created": 1796049471, "owned_by": "library"}))
        .collect();
    let data = if data.is_empty() {
        Value::Null
    } else {
        json!(data)
    };
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

/// `POST /api/generate` with no prompt (O:server/routes.go:404-415,
/// 478-486): loads the model with its own settings and blocks until it is
/// ready; `"keep_alive": 0` unloads it instead.
async fn generate(
    axum::extract::State(st): axum::extract::State<Arc<OllamaState>>,
    body: axum::body::Bytes,
) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or_default();
    st.loads.lock().unwrap().push(req.clone());
    let Some(name) = req["model"].as_str() else {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "model is required"})),
        )
            .into_response();
    };
    if req["keep_alive"] == 0 {
        st.loaded.lock().unwrap().remove(name);
        return axum::Json(json!({"model": name, "created_at": "2026-12-04T20:00:00Z", "response": "", "done": true, "done_reason": "unload"})).into_response();
    }
    if !ensure(&st, name).await {
        return (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": format!("model '{name}' not found")})),
        )
            .into_response();
    }
    axum::Json(json!({"model": name, "created_at": "2026-12-04T20:00:00Z", "response": "", "done": true, "done_reason": "load"})).into_response()
}

/// `POST /v1/messages` (O:anthropic/, middleware/anthropic.go): an unknown
/// model is 404 `model 'x' not found` (routes.go:2485,2500); a known one
/// is loaded first, then the scripted model answers. `usage` carries
/// `input_tokens` and `output_tokens` only, no cache fields
/// (anthropic.go:219-222).
async fn messages(
    axum::extract::State(st): axum::extract::State<Arc<OllamaState>>,
    body: axum::body::Bytes,
) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return anthropic_error(400, "invalid_request_error", "invalid request");
    };
    st.messages.lock().unwrap().push(req.clone());
    let model = req["model"].as_str().unwrap_or_default().to_string();
    if !ensure(&st, &model).await {
        return anthropic_error(
            404,
            "not_found_error",
            &format!("model '{model}' not found"),
        );
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
    // Ollama cuts a prompt over the window silently and counts what it
    // kept (routes.go:2695 truncate on; prompt.go:20-92).
    let window = st
        .models
        .iter()
        .find(|m| m.name == model)
        .map_or(u64::MAX, |m| m.context);
    let whole = super::tokens::count(&req);
    let input = super::tokens::silently_cut(&req, whole, window);
    st.truncations
        .lock()
        .unwrap()
        .push((body.len() as u64, whole, input));
    if req["stream"] == true {
        // anthropic.go:1077-1117: the start's count is len(chars)/4.
        let estimate = body.len() as u64 / 4;
        let text = script::message_sse_estimated(&model, &reply, estimate, input);
        return (
            StatusCode::OK,
            [("content-type", "text/event-stream")],
            text,
        )
            .into_response();
    }
    let mut answer = script::message_json(&model, &reply, input, 0);
    // anthropic.go:219-222: no cache fields.
    if let Some(u) = answer["usage"].as_object_mut() {
        u.remove("cache_read_input_tokens");
    }
    axum::Json(answer).into_response()
}

async fn record(
    axum::extract::State(st): axum::extract::State<Arc<OllamaState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    st.hits
        .lock()
        .unwrap()
        .push(format!("{} {}", req.method(), req.uri().path()));
    next.run(req).await
}

pub async fn spawn(models: Vec<OModel>) -> FakeOllama {
    spawn_on(models, 0).await.expect("bind")
}

/// The fake on loopback `port` (its real default port, say); `None` when
/// the port is taken.
pub async fn spawn_on(models: Vec<OModel>, port: u16) -> Option<FakeOllama> {
    let loaded = models
        .iter()
        .filter(|m| m.loaded)
        .map(|m| m.name.clone())
        .collect();
    let state = Arc::new(OllamaState {
        models,
        loaded: Mutex::new(loaded),
        script: Mutex::new(script::text("ok")),
        hits: Mutex::new(Vec::new()),
        loads: Mutex::new(Vec::new()),
        messages: Mutex::new(Vec::new()),
        truncations: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        // O:server/routes.go:1877-1878.
        .route("/", get(|| async { "Ollama is running" }))
        // O:server/routes.go:1879-1880: the only field.
        .route(
            "/api/version",
            get(|| async { axum::Json(json!({"version": "0.32.15"})) }),
        )
        .route("/api/ps", get(ps))
        .route("/v1/models", get(v1_models))
        .route("/api/generate", post(generate))
        .route("/v1/messages", post(messages))
        .fallback(|| async { not_found() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), record))
        .with_state(state.clone());
    let server = Running::serve_on(app, port).await?;
    Some(FakeOllama { server, state })
}
