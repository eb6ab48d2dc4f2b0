//! Stand-ins for the servers beyond llama.cpp, vLLM, Ollama and LM
//! Studio, each answering with the shapes its source builds. One fake,
//! one [`Kind`] per server: the paths it answers and their bodies, the
//! API it serves a job on, and what its answers count. The sources are
//! cited beside each body; docs/servers/ holds the notes they come from,
//! each fact with its repository, commit, file and line.
//!
//! Every stand-in also answers the paths of the servers it imitates
//! (Ollama's `/api/version` and `/api/ps`, llama.cpp's `/props`), as the
//! real ones do, so that a test sees it is not taken for them.
//!
//! A prompt over the window is cut silently, Ollama's way
//! ([`super::tokens::silently_cut`]), and the cut count reported: what
//! KoboldCpp does (it trims the front to fit), SGLang with
//! `--allow-auto-truncate`, and the servers that check no window at all
//! (exo, vllm-mlx, mlx_lm.server) do in their own ways. The refusals of
//! the servers that do refuse are read by the shim's unit tests
//! (src/shim/errors.rs).

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::fake_llama::Running;
use super::script::{self, Reply, Script};

/// Which server a stand-in answers as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sglang,
    Exo,
    DockerModelRunner,
    Lemonade,
    LocalAi,
    Llamafile,
    Jan,
    VllmMlx,
    MlxLm,
    TabbyApi,
    KoboldCpp,
    /// A plain OpenAI chat-completions server, saying no window.
    OpenAi,
}

/// What a server's answers count of the prompt it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Usage {
    /// `input_tokens` and `cache_read_input_tokens` (llama.cpp's).
    Read,
    /// `input_tokens` and `output_tokens` only.
    NoCache,
    /// `input_tokens` 0 in a stream.
    Zero,
}

impl Kind {
    pub const ALL: [Kind; 12] = [
        Kind::Sglang,
        Kind::Exo,
        Kind::DockerModelRunner,
        Kind::Lemonade,
        Kind::LocalAi,
        Kind::Llamafile,
        Kind::Jan,
        Kind::VllmMlx,
        Kind::MlxLm,
        Kind::TabbyApi,
        Kind::KoboldCpp,
        Kind::OpenAi,
    ];

    /// Its `backend:` name.
    pub fn backend(self) -> &'static str {
        use localagents::config::Backend as B;
        match self {
            Kind::Sglang => B::Sglang,
            Kind::Exo => B::Exo,
            Kind::DockerModelRunner => B::DockerModelRunner,
            Kind::Lemonade => B::Lemonade,
            Kind::LocalAi => B::LocalAi,
            Kind::Llamafile => B::Llamafile,
            Kind::Jan => B::Jan,
            Kind::VllmMlx => B::VllmMlx,
            Kind::MlxLm => B::MlxLm,
            Kind::TabbyApi => B::TabbyApi,
            Kind::KoboldCpp => B::KoboldCpp,
            Kind::OpenAi => B::OpenAi,
        }
        .as_str()
    }

    /// Whether `status` finds its window on the server (else `window:`).
    pub fn says_window(self) -> bool {
        !matches!(
            self,
            Kind::LocalAi | Kind::Jan | Kind::VllmMlx | Kind::MlxLm | Kind::OpenAi
        )
    }

    /// Whether it is told apart from `base_url` alone (`openai` is
    /// declared).
    pub fn recognised(self) -> bool {
        self != Kind::OpenAi
    }

    /// Where `status --json` says the window came from.
    pub fn context_source(self) -> &'static str {
        match self {
            Kind::Sglang => "max_model_len",
            Kind::Exo => "v1/models context_length",
            Kind::DockerModelRunner => "engines/_configure context-size",
            Kind::Lemonade => "slots.n_ctx",
            Kind::Llamafile => "props.n_ctx",
            Kind::TabbyApi => "v1/model max_seq_len",
            Kind::KoboldCpp => "true_max_context_length",
            _ => "config",
        }
    }

    /// The id it serves `model` under: KoboldCpp names every model
    /// `koboldcpp/<name>` (koboldcpp.py:11456 at 1.116.1).
    pub fn served(self, model: &str) -> String {
        match self {
            Kind::KoboldCpp => format!("koboldcpp/{model}"),
            _ => model.to_string(),
        }
    }

    /// Whether it checks no window and runs a longer prompt, counting all
    /// of it (exo: docs/servers/exo.md §c; vllm-mlx issue #795; mlx_lm,
    /// mlx-examples#1170); a plain OpenAI server is taken to do the same.
    /// The others cut it (the rest of this file's header says why).
    pub fn runs_over(self) -> bool {
        matches!(self, Kind::Exo | Kind::VllmMlx | Kind::MlxLm | Kind::OpenAi)
    }

    /// Whether its stream counts no input, so that only the window can
    /// show a request too long.
    pub fn counts_no_input(self) -> bool {
        matches!(self, Kind::LocalAi | Kind::KoboldCpp)
    }

    /// Whether it serves Anthropic's `/v1/messages`.
    fn messages(self) -> bool {
        !matches!(self, Kind::MlxLm | Kind::TabbyApi | Kind::OpenAi)
    }

    /// What its `/v1/messages` stream counts.
    fn usage(self) -> Usage {
        match self {
            Kind::Sglang | Kind::DockerModelRunner | Kind::Llamafile | Kind::Jan => Usage::Read,
            // LocalAI: input_tokens 0 in a stream (core/http/endpoints/
            // anthropic/messages.go); exo (src/exo/api/adapters/
            // claude.py) and vllm-mlx (server.py:5956-5959, 6172-6177)
            // likewise; KoboldCpp fakes the stream of a request with tools
            // with usage 0 unless it runs with --jinja_tools
            // (koboldcpp.py:7192 at 1.116.1).
            Kind::LocalAi | Kind::Exo | Kind::VllmMlx | Kind::KoboldCpp => Usage::Zero,
            _ => Usage::NoCache,
        }
    }

    /// What its chat stream counts: `prompt_tokens`, and
    /// `prompt_tokens_details.cached_tokens` where it says them (exo
    /// batch_generate.py:440-442; mlx_lm server.py #849).
    fn chat_usage(self) -> Usage {
        match self {
            Kind::Exo
            | Kind::MlxLm
            | Kind::OpenAi
            | Kind::Sglang
            | Kind::DockerModelRunner
            | Kind::Llamafile
            | Kind::Jan => Usage::Read,
            _ => Usage::NoCache,
        }
    }

    /// The `Server` header it sends.
    fn server_header(self) -> Option<&'static str> {
        match self {
            // Python's http.server (mlx_lm/server.py: BaseHTTPRequestHandler,
            // server_version never set).
            Kind::MlxLm => Some("BaseHTTP/0.6 Python/3.12.7"),
            // koboldcpp.py:5062-5063 at 1.116.1.
            Kind::KoboldCpp => Some("KoboldCppServer 1"),
            Kind::Sglang | Kind::VllmMlx | Kind::TabbyApi | Kind::OpenAi => Some("uvicorn"),
            Kind::Exo => Some("hypercorn-h11"),
            _ => None,
        }
    }

    /// `GET /v1/models` for one model `m` with window `w`.
    fn models(self, m: &str, w: u64) -> Value {
        let entry = match self {
            // sglang 0.5.23 python/sglang/srt/entrypoints/openai/protocol.py:88-95,
            // http_server.py:1995-2010.
            Kind::Sglang => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "sglang", "root": m, "parent": null, "max_model_len": w})
            }
            // exo@b5375f8c src/exo/api/main.py:1770-1800, api.py:30-60.
            Kind::Exo => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "exo", "hugging_face_id": m, "name": "Qwen3 Coder 30B", "description": "", "context_length": w, "tags": [], "storage_size_megabytes": 17200, "supports_tensor": true, "tasks": ["TextGeneration"], "is_custom": false, "family": "qwen", "quantization": "4bit", "base_model": "Qwen3 Coder", "capabilities": ["text"], "reasoning_dialect": "none"})
            }
            // docker/model-runner@642c721 pkg/inference/models/api.go:32-116:
            // the packaged size, not the one it runs with.
            Kind::DockerModelRunner => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "docker", "dmr": {"context_window": 262144, "architecture": "qwen3moe", "parameters": "30.53 B", "quantization": "Q4_K_M", "size": "17.28 GiB"}})
            }
            // lemonade-sdk/lemonade src/cpp/server/server.cpp:2990-3010 (a
            // released build: no `context_length`, `max_context_window`
            // the GGUF's trained length).
            Kind::Lemonade => {
                json!({"id": m, "object": "model", "created": 1234567890, "owned_by": "lemonade", "checkpoint": "unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M", "recipe": "llamacpp", "downloaded": true, "update_available": false, "suggested": true, "labels": ["tool-calling"], "size": 17.3, "max_context_window": 262144})
            }
            // mudler/LocalAI core/http/endpoints/openai/list.go: no owned_by.
            Kind::LocalAi => json!({"id": m, "object": "model"}),
            // llamafile 0.10 is llama-server: owned_by llamacpp, meta.
            Kind::Llamafile => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "llamacpp", "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": 262144, "n_embd": 2048, "n_params": 30532122624u64, "size": 18556701140u64}})
            }
            // janhq/jan src-tauri/src/core/server/proxy.rs (2bf991d).
            Kind::Jan => json!({"id": m, "object": "model", "created": 1, "owned_by": "llama.cpp"}),
            // waybarrios/vllm-mlx@4b654c0 vllm_mlx/server.py.
            Kind::VllmMlx => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "vllm-mlx"})
            }
            // ml-explore/mlx-lm@d78bf58 mlx_lm/server.py:1019,1619-1631.
            Kind::MlxLm => json!({"id": m, "object": "model", "created": 1796049471}),
            // theroyallab/tabbyAPI@e632af4 endpoints/core/utils/model.py:35-60.
            Kind::TabbyApi => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "tabbyAPI", "logging": null, "parameters": null})
            }
            // koboldcpp.py:6177-6187 at 1.116.1.
            Kind::KoboldCpp => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "koboldcpp", "status": {"value": "loaded"}, "permission": [], "root": "koboldcpp"})
            }
            Kind::OpenAi => {
                json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "organization-owner"})
            }
        };
        json!({"object": "list", "data": [entry]})
    }

    /// Its own paths besides `/v1/models`, and the ones it imitates.
    fn paths(self, m: &str, w: u64) -> Vec<(&'static str, Value)> {
        match self {
            Kind::Sglang => vec![
                // http_server.py: the Ollama-style list.
                (
                    "/api/tags",
                    json!({"models": [{"name": m, "model": m, "modified_at": "2026-12-01T00:00:00Z", "size": 0, "digest": "", "details": {}}]}),
                ),
            ],
            Kind::DockerModelRunner => vec![
                // pkg/ollama/http_handler.go:72-79,183-186.
                ("/api/version", json!({"version": "0.1.0"})),
                (
                    "/api/ps",
                    json!({"models": [{"name": m, "model": m, "size": 0, "digest": "", "details": {}, "expires_at": "2026-12-06T00:00:00Z", "size_vram": 0}]}),
                ),
                // pkg/inference/scheduling/http_handler.go:306-320.
                (
                    "/engines/status",
                    json!({"llama.cpp": "Running: llama.cpp latest-cpu (sha256:0123) b7777", "vllm": "Not Installed"}),
                ),
                // http_handler.go:525-546, api.go:114-121: the size it runs with.
                (
                    "/engines/_configure",
                    json!([{"Backend": "llama.cpp", "Model": m, "ModelID": "sha256:4b1c9d2e", "Mode": "completion", "Config": {"context-size": w}}]),
                ),
            ],
            Kind::Lemonade => vec![
                // The Ollama imitation (server.cpp), and /api/v1/health.
                ("/api/version", json!({"version": "0.16.1"})),
                (
                    "/api/v1/health",
                    json!({"status": "ok", "version": "10.4.0", "model_loaded": m, "all_models_loaded": [{"model_name": m, "type": "llm"}]}),
                ),
                // server.cpp:4251-4269: llama-server's /slots of the loaded model.
                (
                    "/api/v1/slots",
                    json!([{"id": 0, "n_ctx": w, "is_processing": false}]),
                ),
            ],
            Kind::LocalAi => vec![
                // core/http/routes/ollama.go:80-85.
                ("/api/version", json!({"version": "0.9.0"})),
                (
                    "/api/ps",
                    json!({"models": [{"name": m, "model": m, "size": 0, "digest": "", "details": {}}]}),
                ),
                // core/http/routes/localai.go (v4.1.1+), no key needed.
                (
                    "/.well-known/localai.json",
                    json!({"version": "v4.2.1 (9f0c1a2)", "endpoints": {"models": "/v1/models", "chat_completions": "/v1/chat/completions", "messages": "/v1/messages"}, "endpoint_groups": {"openai_compatible": {}}, "capabilities": {}}),
                ),
            ],
            // llama-server's /props, built by llamafile 0.10 (b<unix time>).
            Kind::Llamafile => vec![(
                "/props",
                json!({"default_generation_settings": {"id": 0, "n_ctx": w, "is_processing": false}, "total_slots": 1, "model_path": "/zip/Qwen3-Coder-30B-A3B-Instruct-Q4_K_M.gguf", "chat_template_caps": {"supports_system_role": true, "supports_tool_calls": true}, "build_info": "b1764633600-3f9ab21"}),
            )],
            // vllm_mlx/server.py:3588-3644.
            Kind::VllmMlx => vec![(
                "/health",
                json!({"status": "healthy", "model_loaded": true, "model_name": m, "available_models": [m], "model_type": "llm", "engine_type": "batched", "mcp": null}),
            )],
            // mlx_lm/server.py.
            Kind::MlxLm => vec![("/health", json!({"status": "ok"}))],
            Kind::TabbyApi => vec![
                // endpoints/core/router.py:72-98.
                (
                    "/.well-known/serviceinfo",
                    json!({"version": 0.1, "software": {"name": "TabbyAPI", "repository": "https://github.com/theroyallab/tabbyAPI", "homepage": "https://github.com/theroyallab/tabbyAPI"}, "api": {"openai": {"name": "OpenAI API", "relative_url": "/v1", "documentation": "https://theroyallab.github.io/tabbyAPI", "version": 1}}}),
                ),
                // router.py:127-134, backends/exllamav3/model.py:581-607.
                (
                    "/v1/model",
                    json!({"id": m, "object": "model", "created": 1796049471, "owned_by": "tabbyAPI", "logging": null, "parameters": {"max_seq_len": w, "cache_size": w, "cache_mode": "FP16", "rope_scale": 1.0, "rope_alpha": 1.0, "max_batch_size": 4, "chunk_size": 2048, "prompt_template": "qwen3", "prompt_template_content": "", "use_vision": false, "draft": null}}),
                ),
                // router.py:137: llama.cpp's /props, imitated.
                (
                    "/props",
                    json!({"default_generation_settings": {"n_ctx": w}, "total_slots": 1, "chat_template": ""}),
                ),
                ("/health", json!({"status": "healthy", "issues": []})),
                // endpoints/Kobold/router.py with api_servers [OAI, kobold]:
                // "Impersonate Koboldcpp".
                (
                    "/api/extra/version",
                    json!({"result": "KoboldCpp", "version": "1.74"}),
                ),
            ],
            Kind::KoboldCpp => vec![
                // koboldcpp.py:1446-1464, 6099-6102 at 1.116.1.
                (
                    "/api/extra/version",
                    json!({"result": "KoboldCpp", "version": "1.116.1", "protected": false, "llm": true, "txt2img": false, "vision": false, "audio": false, "transcribe": false, "multiplayer": false, "websearch": false, "tts": false, "embeddings": false, "music": false, "savedata": false, "admin": 0, "router": false, "guidance": false, "jinja": true, "mcp": false}),
                ),
                ("/api/extra/true_max_context_length", json!({"value": w})),
                // 6316-6340: llama.cpp's /props, imitated; 6252-6258 Ollama's.
                (
                    "/props",
                    json!({"chat_template": "", "id": 0, "id_task": -1, "total_slots": 1, "modalities": {"vision": false, "audio": false}, "model_path": m, "n_ctx": w, "default_generation_settings": {"n_ctx": w}}),
                ),
                ("/api/version", json!({"version": "0.7.0"})),
                (
                    "/api/ps",
                    json!({"models": [{"name": m, "model": m, "size": 0, "digest": "", "details": {}}]}),
                ),
            ],
            _ => vec![],
        }
    }
}

pub struct OthersState {
    kind: Kind,
    model: String,
    window: u64,
    script: Mutex<Script>,
    seen: Mutex<Seen>,
}

/// What a stand-in was asked, in order.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Every request, `METHOD /path`.
    pub hits: Vec<String>,
    /// The Anthropic form of every job request (a chat one read back).
    pub requests: Vec<Value>,
    /// The chat-completions bodies as they came.
    pub chat_bodies: Vec<Value>,
    /// Each request's bytes, its tokens, and the tokens reported as read.
    pub truncations: Vec<(u64, u64, u64)>,
}

pub struct FakeOther {
    pub server: Running,
    pub state: Arc<OthersState>,
}

impl FakeOther {
    pub fn url(&self) -> &str {
        &self.server.url
    }
    pub fn set_script(&self, s: Script) {
        *self.state.script.lock().unwrap() = s;
    }
    /// What it was asked so far.
    pub fn seen(&self) -> Seen {
        self.state.seen.lock().unwrap().clone()
    }
}

/// A body that is not JSON: a 400 in OpenAI's shape.
fn bad_json() -> Response {
    let body = json!({"error": {"message": "invalid JSON", "type": "invalid_request_error"}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// An error as a FastAPI or Go server writes a 404: plain text.
fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

/// The Anthropic answer to `req`: the scripted model's, the prompt cut
/// past the window and counted as the server counts it.
fn answer(st: &OthersState, req: &Value, bytes: usize, usage: Usage) -> Response {
    st.seen.lock().unwrap().requests.push(req.clone());
    let reply = (st.script.lock().unwrap().clone())(req);
    if let Reply::Error { status, body } = &reply {
        return (
            StatusCode::from_u16(*status).unwrap(),
            axum::Json(body.clone()),
        )
            .into_response();
    }
    let whole = super::tokens::count(req);
    let input = if st.kind.runs_over() {
        whole
    } else {
        super::tokens::silently_cut(req, whole, st.window)
    };
    st.seen
        .lock()
        .unwrap()
        .truncations
        .push((bytes as u64, whole, input));
    let model = req["model"].as_str().unwrap_or(&st.model).to_string();
    if req["stream"] != true {
        let mut msg = script::message_json(&model, &reply, input, 0);
        if usage != Usage::Read
            && let Some(u) = msg["usage"].as_object_mut()
        {
            u.remove("cache_read_input_tokens");
        }
        return axum::Json(msg).into_response();
    }
    let text = match usage {
        Usage::Read => script::message_sse(&model, &reply, input, 0),
        Usage::NoCache => script::message_sse_estimated(&model, &reply, input, input),
        Usage::Zero => script::message_sse_estimated(&model, &reply, 0, 0),
    };
    (
        StatusCode::OK,
        [("content-type", "text/event-stream")],
        text,
    )
        .into_response()
}

async fn messages(State(st): State<Arc<OthersState>>, body: axum::body::Bytes) -> Response {
    if !st.kind.messages() {
        return not_found();
    }
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad_json();
    };
    answer(&st, &req, body.len(), st.kind.usage())
}

/// `POST /v1/chat/completions`: read back into the Anthropic request it
/// came from, answered by the same model, written as chat chunks.
async fn chat(State(st): State<Arc<OthersState>>, body: axum::body::Bytes) -> Response {
    let Ok(chat) = serde_json::from_slice::<Value>(&body) else {
        return bad_json();
    };
    st.seen.lock().unwrap().chat_bodies.push(chat.clone());
    let req = super::fake_chat::to_anthropic(&chat);
    let asked = super::fake_chat::Asked::of(&chat);
    let model = chat["model"].as_str().unwrap_or(&st.model).to_string();
    let resp = answer(&st, &req, body.len(), st.kind.chat_usage());
    super::fake_chat::as_chat(resp, &model, asked).await
}

async fn record(
    State(st): State<Arc<OthersState>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    st.seen
        .lock()
        .unwrap()
        .hits
        .push(format!("{} {}", req.method(), req.uri().path()));
    let mut resp = next.run(req).await;
    if let Some(h) = st.kind.server_header() {
        resp.headers_mut()
            .insert("server", axum::http::HeaderValue::from_static(h));
    }
    resp
}

/// A stand-in for `kind` serving `model` with a `window` (the one it
/// says, where it says one; the one it cuts at).
pub async fn spawn(kind: Kind, model: &str, window: u64) -> FakeOther {
    let model = &kind.served(model);
    let state = Arc::new(OthersState {
        kind,
        model: model.to_string(),
        window,
        script: Mutex::new(script::text("ok")),
        seen: Mutex::new(Seen::default()),
    });
    let list = kind.models(model, window);
    let mut app = Router::new();
    // Docker Model Runner serves its API under /engines too
    // (pkg/middleware/alias.go:14-19).
    for prefix in ["", "/engines"] {
        if prefix == "/engines" && kind != Kind::DockerModelRunner {
            continue;
        }
        let l = list.clone();
        app = app
            .route(
                &format!("{prefix}/v1/models"),
                get(move || async move { axum::Json(l) }),
            )
            .route(&format!("{prefix}/v1/messages"), post(messages))
            .route(&format!("{prefix}/v1/chat/completions"), post(chat));
    }
    for (path, body) in kind.paths(model, window) {
        app = app.route(path, get(move || async move { axum::Json(body) }));
    }
    if kind == Kind::KoboldCpp {
        // koboldcpp.py:6342-6346.
        app = app.route("/slots", get(|| async {
            (StatusCode::NOT_IMPLEMENTED, axum::Json(json!({"error": {"code": 501, "message": "This server does not support slots endpoint.", "type": "not_supported_error"}})))
        }));
    }
    let app = app
        .fallback(|| async { not_found() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), record))
        .with_state(state.clone());
    let server = Running::serve(app).await;
    FakeOther { server, state }
}
