//! A fake llama-swap (mostlygeek/llama-swap, `internal/server`), answering
//! with the shapes the real one sends: `/v1/models` with `owned_by:
//! "llama-swap"` and `status.value` `loaded`/`unloaded` (a starting model
//! counts as loaded), `context_length` and `meta.n_ctx` only where the
//! config declares `capabilities.context`; `/running`; `/upstream/<model>/…`
//! and model-dispatched requests that start the model and block until it
//! is ready; `POST /api/models/unload/<model>` and `GET /unload` answering
//! plain `OK`; unknown models 404 with its error body. Its default group
//! runs one model at a time: starting a model stops every other.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::fake_llama::Running;
use super::script::{self, Reply, Script};

/// One model of the config.
#[derive(Debug, Clone)]
pub struct SwapModel {
    pub id: String,
    /// `capabilities.context`, when the config declares it.
    pub context: Option<u64>,
    /// How long its process takes to become ready.
    pub load: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ProcState {
    Starting,
    Ready,
}

pub struct SwapState {
    models: Vec<SwapModel>,
    running: Mutex<BTreeMap<String, ProcState>>,
    script: Mutex<Script>,
    /// Paths requested, in order.
    pub hits: Mutex<Vec<String>>,
    /// Models started, in order.
    pub starts: Mutex<Vec<String>>,
}

pub struct FakeSwap {
    pub server: Running,
    pub state: Arc<SwapState>,
}

impl FakeSwap {
    pub fn url(&self) -> &str {
        &self.server.url
    }
    pub fn set_script(&self, s: Script) {
        *self.state.script.lock().unwrap() = s;
    }
    /// Ids whose process runs (starting or ready).
    pub fn running(&self) -> Vec<String> {
        self.state.running.lock().unwrap().keys().cloned().collect()
    }
    pub fn starts(&self) -> Vec<String> {
        self.state.starts.lock().unwrap().clone()
    }
    /// Start a model as a request would (without waiting for it).
    pub fn begin_start(&self, id: &str) {
        let st = self.state.clone();
        let id = id.to_string();
        tokio::spawn(async move { ensure(&st, &id).await });
    }
}

fn swap_error(code: u16, status: &str, message: &str) -> Response {
    (
        StatusCode::from_u16(code).unwrap(),
        axum::Json(json!({"src": "llama-swap", "error": {"message": message, "type": "invalid_request_error", "param": null, "code": status}})),
    )
        .into_response()
}

/// Start `id` if it is not running (stopping every other model: the
/// default group swaps) and wait until it is ready. False: unknown model.
async fn ensure(st: &Arc<SwapState>, id: &str) -> bool {
    let Some(m) = st.models.iter().find(|m| m.id == id).cloned() else {
        return false;
    };
    let start = {
        let mut run = st.running.lock().unwrap();
        if run.contains_key(id) {
            false
        } else {
            run.clear();
            run.insert(id.to_string(), ProcState::Starting);
            st.starts.lock().unwrap().push(id.to_string());
            true
        }
    };
    if start {
        tokio::time::sleep(m.load).await;
        if let Some(s) = st.running.lock().unwrap().get_mut(id) {
            *s = ProcState::Ready;
        }
    }
    loop {
        match st.running.lock().unwrap().get(id) {
            Some(ProcState::Ready) | None => return true,
            Some(ProcState::Starting) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn list_models(State(st): State<Arc<SwapState>>) -> Response {
    let run = st.running.lock().unwrap().clone();
    let mut data: Vec<Value> = st
        .models
        .iter()
        .map(|m| {
            let mut v = json!({
                "id": m.id, "object": "model", "created": 1796049471, "owned_by": "llama-swap",
                "status": {"value": if run.contains_key(&m.id) { "loaded" } else { "unloaded" }},
            });
            if let Some(c) = m.context {
                v["context_length"] = json!(c);
                v["meta"] = json!({"llamaswap": {"type": "model", "aliases": []}, "n_ctx": c});
            }
            v
        })
        .collect();
    data.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

async fn running(State(st): State<Arc<SwapState>>) -> Response {
    let run = st.running.lock().unwrap().clone();
    let list: Vec<Value> = run
        .iter()
        .map(|(id, s)| {
            json!({"model": id, "state": if *s == ProcState::Ready { "ready" } else { "starting" },
                   "cmd": format!("llama-server --port 5800 -m /models/{id}.gguf"),
                   "proxy": "http://localhost:5800", "ttl": 0, "name": "", "description": ""})
        })
        .collect();
    axum::Json(json!({"running": list})).into_response()
}

async fn upstream(
    State(st): State<Arc<SwapState>>,
    Path((model, rest)): Path<(String, String)>,
) -> Response {
    if !ensure(&st, &model).await {
        return (StatusCode::NOT_FOUND, "model not found").into_response();
    }
    let ctx = st
        .models
        .iter()
        .find(|m| m.id == model)
        .and_then(|m| m.context)
        .unwrap_or(4096);
    match rest.as_str() {
        "health" => axum::Json(json!({"status": "ok"})).into_response(),
        "props" => axum::Json(json!({"default_generation_settings": {"n_ctx": ctx}, "total_slots": 1, "model_alias": model})).into_response(),
        _ => (StatusCode::NOT_FOUND, "File Not Found").into_response(),
    }
}

async fn messages(State(st): State<Arc<SwapState>>, body: axum::body::Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return swap_error(400, "invalid_request_error", "could not parse JSON body");
    };
    let Some(model) = req["model"].as_str().map(str::to_string) else {
        return swap_error(404, "not_found", "no model id could be identified");
    };
    if !ensure(&st, &model).await {
        return swap_error(404, "not_found", "no router for requested model");
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
    let input = super::tokens::count(&req);
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

async fn unload_one(State(st): State<Arc<SwapState>>, Path(model): Path<String>) -> Response {
    st.running.lock().unwrap().remove(&model);
    "OK".into_response()
}

async fn unload_all(State(st): State<Arc<SwapState>>) -> Response {
    st.running.lock().unwrap().clear();
    "OK".into_response()
}

async fn props_without_model() -> Response {
    swap_error(404, "not_found", "no model id could be identified")
}

async fn record(
    State(st): State<Arc<SwapState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    st.hits.lock().unwrap().push(req.uri().path().to_string());
    next.run(req).await
}

pub async fn spawn(models: Vec<SwapModel>) -> FakeSwap {
    let state = Arc::new(SwapState {
        models,
        running: Mutex::new(BTreeMap::new()),
        script: Mutex::new(script::text("ok")),
        hits: Mutex::new(Vec::new()),
        starts: Mutex::new(Vec::new()),
    });
    let app = Router::new()
        .route("/v1/models", get(list_models))
        .route("/models", get(list_models))
        .route("/running", get(running))
        .route("/health", get(|| async { "OK" }))
        .route("/props", get(props_without_model))
        .route("/upstream/{model}/{*rest}", get(upstream))
        .route("/v1/messages", post(messages))
        .route("/api/models/unload/{model}", post(unload_one))
        .route("/unload", get(unload_all))
        .fallback(|| async { (StatusCode::NOT_FOUND, "404 page not found\n") })
        .layer(axum::middleware::from_fn_with_state(state.clone(), record))
        .with_state(state.clone());
    let server = Running::serve(app).await;
    FakeSwap { server, state }
}
