//! A fake llama.cpp `llama-server`: `/health`, `/props`, `/slots`,
//! `/metrics`, `/v1/models`, with the field names and error bodies of the
//! real server (every error is `{"error":{"code","message","type"}}`).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::script::{self, Reply, Script};
use serde_json::{Value, json};

/// How the fake is started: the flags a real `llama-server` would get.
#[derive(Debug, Clone)]
pub struct LlamaOpts {
    /// `--alias`: the served id.
    pub alias: String,
    /// Per-slot window (`-c / --parallel`).
    pub n_ctx: u64,
    /// `--parallel`.
    pub slots: u64,
    /// `--slots` (on by default in new builds).
    pub slots_endpoint: bool,
    /// `--metrics`.
    pub metrics: bool,
    /// `--api-key`.
    pub api_key: Option<String>,
    /// Whether the chat template accepts a system role at all.
    pub supports_system_role: bool,
    /// A strict template (like Qwen's): any `role:"system"` entry inside
    /// `messages` gets llama.cpp's 500 Jinja error.
    pub strict_template: bool,
    /// Prompt tokens to report; None: the body's pre-tokens ([`super::tokens`]).
    pub prompt_tokens: Option<u64>,
    /// Serve /v1/messages/count_tokens.
    pub count_tokens: bool,
    /// A prompt cache like llama-server's with `-sps 0.9`: each slot keeps
    /// the last prompt it processed; a request that continues one (nine
    /// tenths of it in common) takes that slot, else the least recently
    /// used one. Either way its cached tokens are the common prefix with
    /// what the slot held (llama-server's `cache_prompt` starts prompt
    /// processing at the first token that differs; the real tier checks
    /// it, e2e t24). Off: every request after the first is nine tenths
    /// cached.
    pub prefix_cache: bool,
    /// Serve `/v1/chat/completions` (every llama-server build here does;
    /// off: an older or stripped build, answered 404 like any unknown
    /// path).
    pub chat: bool,
    /// `/v1/chat/completions` answers 400 to a request with `id_slot`, as
    /// a strict OpenAI-compatible front does to a field it does not know
    /// (OpenAI's own wording: "Unrecognized request argument supplied").
    pub chat_refuses_id_slot: bool,
    /// `--slot-save-path`: `POST /slots/{id}?action=save|restore|erase`
    /// work (a slot's prompt kept by file name); off, they answer 501 as
    /// llama-server 11434 does without the flag.
    pub slot_save_path: bool,
    /// A server that truncates silently, like Ollama past its window
    /// (server/prompt.go: the oldest messages go, the system prompt and
    /// the last message stay) with `usage.input_tokens` the count after
    /// the cut: a prompt over this many tokens is answered 200 all the
    /// same. Each request's (bytes, count before, count reported) is kept
    /// in [`LlamaState::truncations`].
    pub truncate_past: Option<u64>,
}

impl Default for LlamaOpts {
    fn default() -> Self {
        LlamaOpts {
            alias: "unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_XL".into(),
            n_ctx: 131072,
            slots: 2,
            slots_endpoint: true,
            metrics: true,
            api_key: None,
            supports_system_role: true,
            strict_template: false,
            prompt_tokens: None,
            count_tokens: true,
            prefix_cache: false,
            truncate_past: None,
            chat: true,
            chat_refuses_id_slot: false,
            slot_save_path: false,
        }
    }
}

/// Shared, mutable state of a running fake.
pub struct LlamaState {
    pub opts: LlamaOpts,
    /// While true every endpoint but `/health` answers 503 "Loading model".
    pub loading: AtomicBool,
    /// Slots currently processing.
    pub busy: AtomicU64,
    /// Paths requested, in order.
    pub hits: Mutex<Vec<String>>,
    /// Counters behind `/metrics`.
    pub prompt_tokens: AtomicU64,
    pub prompt_tokens_cached: AtomicU64,
    /// The scripted model.
    pub script: Mutex<Script>,
    /// Every /v1/messages body received.
    pub bodies: Mutex<Vec<Value>>,
    /// Requests to /v1/messages that held an in-`messages` system entry.
    pub system_entries_seen: AtomicU64,
    /// Status codes answered on /v1/messages, in order.
    pub statuses: Mutex<Vec<u16>>,
    /// Authorization headers seen on /v1/messages.
    pub auth_seen: Mutex<Vec<String>>,
    /// `X-Session-ID` of each /v1/messages request, in order (None: the
    /// request had none).
    pub sessions: Mutex<Vec<Option<String>>>,
    /// `traceparent` of each /v1/messages request, in order (vLLM reads
    /// it; llama-server ignores it).
    pub traceparents: Mutex<Vec<Option<String>>>,
    /// The prompts the slots hold ([`LlamaOpts::prefix_cache`]), most
    /// recent last.
    pub cached_prompts: Mutex<Vec<String>>,
    /// `/props` `model_path` (None: `/models/<alias>.gguf`); a test swaps
    /// the model file by setting it.
    pub model_path: Mutex<Option<String>>,
    /// Streamed runaway answers ([`Reply::Runaway`]), in order: the events
    /// sent, of how many, and whether the client went away before the end.
    pub runaways: Mutex<Vec<Arc<RunawaySend>>>,
    /// With [`LlamaOpts::truncate_past`]: each /v1/messages request's
    /// bytes, its count, and the count reported after the silent cut.
    pub truncations: Mutex<Vec<(u64, u64, u64)>>,
    /// Each answered /v1/messages request's prompt tokens and how many of
    /// them were cached, in order.
    pub prompts: Mutex<Vec<(u64, u64)>>,
    /// Every /v1/chat/completions body received, as sent.
    pub chat_bodies: Mutex<Vec<Value>>,
    /// The prompt each slot holds after a request pinned to it by
    /// `id_slot` ([`LlamaOpts::prefix_cache`]).
    pub pinned_prompts: Mutex<std::collections::HashMap<u64, String>>,
    /// Saved slots by file name ([`LlamaOpts::slot_save_path`]), and each
    /// slot action answered: (action, slot, file name, status).
    pub saved: Mutex<std::collections::HashMap<String, String>>,
    pub slot_actions: Mutex<Vec<(String, u64, String, u16)>>,
}

/// One streamed runaway answer, as the fake saw it go out.
#[derive(Debug, Default)]
pub struct RunawaySend {
    pub total: u64,
    pub sent: AtomicU64,
    /// The body was dropped before its last event: the client closed.
    pub closed_early: AtomicBool,
}

/// The body of a runaway answer: one event per poll; counts what it sent
/// and sees a close (hyper drops a body whose connection went away). After
/// `hold_after` events (the model's real output, once) it stands for a
/// server still generating: it sends the rest only after [`HOLD`], so a
/// client that closes on what it has seen closes before the fake has sent
/// all of the text, however fast the socket took the first part.
struct RunawayBody {
    events: std::vec::IntoIter<String>,
    send: Arc<RunawaySend>,
    hold_after: u64,
    hold: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

/// How long a runaway answer pauses after the model's real output.
const HOLD: std::time::Duration = std::time::Duration::from_secs(60);

impl futures::Stream for RunawayBody {
    type Item = Result<axum::body::Bytes, std::convert::Infallible>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.send.sent.load(Ordering::SeqCst) == self.hold_after {
            let hold = self
                .hold
                .get_or_insert_with(|| Box::pin(tokio::time::sleep(HOLD)));
            if std::future::Future::poll(hold.as_mut(), cx).is_pending() {
                return std::task::Poll::Pending;
            }
        }
        let next = self.events.next();
        if next.is_some() {
            self.send.sent.fetch_add(1, Ordering::SeqCst);
        }
        std::task::Poll::Ready(next.map(|e| Ok(axum::body::Bytes::from(e))))
    }
}

impl Drop for RunawayBody {
    fn drop(&mut self) {
        if self.send.sent.load(Ordering::SeqCst) < self.send.total {
            self.send.closed_early.store(true, Ordering::SeqCst);
        }
    }
}

/// The events of a runaway answer: `text` cut in deltas of 4 characters,
/// repeated until `max_tokens` deltas, then a `max_tokens` stop.
fn runaway_events(model: &str, text: &str, max_tokens: u64, input: u64) -> Vec<String> {
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut out = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {
            "id": script::msg_id(), "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": input, "cache_read_input_tokens": 0, "output_tokens": 0}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    let chars: Vec<char> = text.chars().collect();
    let pieces: Vec<String> = chars.chunks(4).map(|c| c.iter().collect()).collect();
    for t in pieces.iter().cycle().take(max_tokens as usize) {
        out.push(ev("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}})));
    }
    out.push(ev(
        "content_block_stop",
        json!({"type": "content_block_stop", "index": 0}),
    ));
    out.push(ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": null}, "usage": {"output_tokens": max_tokens}})));
    out.push(ev("message_stop", json!({"type": "message_stop"})));
    out
}

/// A server running on a loopback port; stops when dropped.
pub struct Running {
    pub addr: SocketAddr,
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn serve(app: Router) -> Running {
        Running::serve_on(app, 0).await.expect("bind")
    }

    /// Serve `app` on loopback `port` (0: any free one); `None` when the
    /// port is taken.
    pub async fn serve_on(app: Router, port: u16) -> Option<Running> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .ok()?;
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Some(Running {
            addr,
            url: format!("http://{addr}"),
            task,
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

pub struct FakeLlama {
    pub server: Running,
    pub state: Arc<LlamaState>,
}

impl FakeLlama {
    pub fn url(&self) -> &str {
        &self.server.url
    }
    pub fn hits(&self) -> Vec<String> {
        self.state
            .hits
            .lock()
            .map(|h| h.clone())
            .unwrap_or_default()
    }
    pub fn set_script(&self, s: Script) {
        *self.state.script.lock().unwrap() = s;
    }
    pub fn bodies(&self) -> Vec<Value> {
        self.state.bodies.lock().unwrap().clone()
    }
    /// Every /v1/chat/completions body, as sent.
    pub fn chat_bodies(&self) -> Vec<Value> {
        self.state.chat_bodies.lock().unwrap().clone()
    }
    pub fn statuses(&self) -> Vec<u16> {
        self.state.statuses.lock().unwrap().clone()
    }
    /// `X-Session-ID` of each /v1/messages request, in order.
    pub fn sessions(&self) -> Vec<Option<String>> {
        self.state.sessions.lock().unwrap().clone()
    }

    /// The `traceparent` of each /v1/messages request, in order.
    pub fn traceparents(&self) -> Vec<Option<String>> {
        self.state.traceparents.lock().unwrap().clone()
    }
}

pub fn err_body(code: u16, typ: &str, message: &str) -> Value {
    json!({"error": {"code": code, "message": message, "type": typ}})
}

fn err(code: u16, typ: &str, message: &str) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(err_body(code, typ, message)),
    )
        .into_response()
}

async fn gate(
    State(st): State<Arc<LlamaState>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_string();
    if let Ok(mut h) = st.hits.lock() {
        h.push(path.clone());
    }
    if path == "/health" {
        return next.run(req).await;
    }
    if let Some(key) = &st.opts.api_key {
        let bearer = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let x_key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        if bearer != Some(key.as_str()) && x_key != Some(key.as_str()) {
            return err(401, "authentication_error", "Invalid API Key");
        }
    }
    if st.loading.load(Ordering::SeqCst) {
        return err(503, "unavailable_error", "Loading model");
    }
    next.run(req).await
}

async fn health(State(st): State<Arc<LlamaState>>) -> Response {
    if st.loading.load(Ordering::SeqCst) {
        return err(503, "unavailable_error", "Loading model");
    }
    axum::Json(json!({"status": "ok"})).into_response()
}

async fn props(State(st): State<Arc<LlamaState>>) -> Response {
    let o = &st.opts;
    axum::Json(json!({
        "default_generation_settings": {
            "id": 0, "id_task": -1, "n_ctx": o.n_ctx, "speculative": false, "is_processing": false,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40, "top_p": 0.95},
            "prompt": "", "next_token": {"has_next_token": true}
        },
        "total_slots": o.slots,
        "model_alias": o.alias,
        "model_path": st
            .model_path
            .lock()
            .ok()
            .and_then(|p| p.clone())
            .unwrap_or_else(|| format!("/models/{}.gguf", o.alias.replace('/', "_"))),
        "modalities": {"vision": false, "audio": false},
        "endpoint_slots": o.slots_endpoint,
        "endpoint_props": false,
        "endpoint_metrics": o.metrics,
        "webui": true,
        "chat_template": "{% for message in messages %}...{% endfor %}",
        "chat_template_caps": {
            "supports_object_arguments": true,
            "supports_parallel_tool_calls": true,
            "supports_preserve_reasoning": false,
            "supports_string_content": true,
            "supports_system_role": o.supports_system_role,
            "supports_tool_calls": true,
            "supports_tools": true,
            "supports_typed_content": false
        },
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "build_info": "b7777-fake",
        "is_sleeping": false
    }))
    .into_response()
}

/// `POST /slots/{id}?action=…` as llama-server 11434 answers it
/// (tools/server/server-context.cpp `post_slots`, its save, restore and
/// erase handlers; the bodies as measured, ../shared/reference/
/// llama-slots.md): 501 without `--slot-save-path`, 400 for a bad file
/// name or a file that is not there.
async fn slot_action(
    State(st): State<Arc<LlamaState>>,
    axum::extract::Path(id): axum::extract::Path<u64>,
    axum::extract::Query(q): axum::extract::Query<std::collections::HashMap<String, String>>,
    body: axum::body::Bytes,
) -> Response {
    let action = q.get("action").cloned().unwrap_or_default();
    let file = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["filename"].as_str().map(str::to_string))
        .unwrap_or_default();
    let note = |code: u16| {
        if let Ok(mut a) = st.slot_actions.lock() {
            a.push((action.clone(), id, file.clone(), code));
        }
    };
    if !st.opts.slot_save_path {
        note(501);
        return err(
            501,
            "not_supported_error",
            "This server does not support slots action. Start it with `--slot-save-path`",
        );
    }
    if action != "erase" && (file.is_empty() || file.contains('/')) {
        note(400);
        return err(400, "invalid_request_error", "Invalid filename");
    }
    let count = |p: &str| super::tokens::count_str(p);
    let (Ok(mut slots), Ok(mut saved)) = (st.pinned_prompts.lock(), st.saved.lock()) else {
        return err(500, "server_error", "lock");
    };
    let answer = match action.as_str() {
        "save" => {
            let p = slots.get(&id).cloned().unwrap_or_default();
            let n = count(&p);
            saved.insert(file.clone(), p);
            json!({"id_slot": id, "filename": file, "n_saved": n, "n_written": n * 4})
        }
        "restore" => match saved.get(&file) {
            Some(p) => {
                slots.insert(id, p.clone());
                json!({"id_slot": id, "filename": file, "n_restored": count(p), "n_read": count(p) * 4})
            }
            None => {
                note(400);
                return err(
                    400,
                    "invalid_request_error",
                    "Unable to restore slot: No available space in KV cache or invalid slot save file",
                );
            }
        },
        "erase" => {
            slots.remove(&id);
            json!({"id_slot": id, "n_erased": 0})
        }
        _ => {
            note(400);
            return err(400, "invalid_request_error", "Invalid action");
        }
    };
    note(200);
    axum::Json(answer).into_response()
}

async fn slots(State(st): State<Arc<LlamaState>>) -> Response {
    let o = &st.opts;
    if !o.slots_endpoint {
        return err(
            501,
            "not_supported_error",
            "This server does not support slots endpoint. Start it with `--slots`",
        );
    }
    let busy = st.busy.load(Ordering::SeqCst);
    // As llama-server 11434 answers (measured): a slot that has served
    // nothing since the start has no `id_task` and no prompt counts; one
    // that has keeps its last task's. The first slots count as the ones
    // that served the requests answered so far.
    let served = st.bodies.lock().map(|b| b.len() as u64).unwrap_or(0);
    let arr: Vec<Value> = (0..o.slots)
        .map(|i| {
            let mut slot = json!({
                "id": i, "n_ctx": o.n_ctx, "speculative": false, "is_processing": i < busy,
                "params": {"n_predict": -1}, "next_token": {"has_next_token": true, "n_decoded": 0}
            });
            if i < busy.max(served) {
                slot["id_task"] = json!(7 + i);
                slot["n_prompt_tokens"] = json!(29);
                slot["n_prompt_tokens_processed"] = json!(29);
                slot["n_prompt_tokens_cache"] = json!(0);
            }
            slot
        })
        .collect();
    axum::Json(Value::Array(arr)).into_response()
}

async fn metrics(State(st): State<Arc<LlamaState>>) -> Response {
    if !st.opts.metrics {
        return err(
            501,
            "not_supported_error",
            "This server does not support metrics endpoint. Start it with `--metrics`",
        );
    }
    let busy = st.busy.load(Ordering::SeqCst);
    let text = format!(
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n\
# TYPE llamacpp:prompt_tokens_total counter\n\
llamacpp:prompt_tokens_total {}\n\
# HELP llamacpp:prompt_seconds_total Prompt process time\n\
# TYPE llamacpp:prompt_seconds_total counter\n\
llamacpp:prompt_seconds_total 1.5\n\
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n\
# TYPE llamacpp:tokens_predicted_total counter\n\
llamacpp:tokens_predicted_total 42\n\
# HELP llamacpp:tokens_predicted_seconds_total Predict process time\n\
# TYPE llamacpp:tokens_predicted_seconds_total counter\n\
llamacpp:tokens_predicted_seconds_total 0.7\n\
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens served from cache.\n\
# TYPE llamacpp:prompt_tokens_cached_total counter\n\
llamacpp:prompt_tokens_cached_total {}\n\
# HELP llamacpp:n_decode_total Total number of llama_decode() calls\n\
# TYPE llamacpp:n_decode_total counter\n\
llamacpp:n_decode_total 12\n\
# HELP llamacpp:requests_processing Number of requests processing.\n\
# TYPE llamacpp:requests_processing gauge\n\
llamacpp:requests_processing {busy}\n\
# HELP llamacpp:requests_deferred Number of requests deferred.\n\
# TYPE llamacpp:requests_deferred gauge\n\
llamacpp:requests_deferred 0\n",
        st.prompt_tokens.load(Ordering::SeqCst),
        st.prompt_tokens_cached.load(Ordering::SeqCst),
    );
    (
        StatusCode::OK,
        [("content-type", "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}

async fn models(State(st): State<Arc<LlamaState>>) -> Response {
    let o = &st.opts;
    axum::Json(json!({
        "models": [{
            "name": o.alias, "model": o.alias, "modified_at": "", "size": "", "digest": "",
            "type": "model", "description": "", "tags": [""], "capabilities": ["completion"],
            "parameters": "", "details": {"parent_model": "", "format": "gguf", "family": "", "families": [""], "parameter_size": "", "quantization_level": ""}
        }],
        "object": "list",
        "data": [{
            "id": o.alias,
            "object": "model",
            "created": 1764460800,
            "owned_by": "llamacpp",
            "meta": {
                "vocab_type": 2, "n_vocab": 151936, "n_ctx_train": 262144, "n_ctx": o.n_ctx,
                "n_embd": 5120, "n_params": 27000000000u64, "size": 16000000000u64
            }
        }]
    }))
    .into_response()
}

/// The llama.cpp template error body for a non-leading system message.
pub fn jinja_error() -> Value {
    err_body(
        500,
        "server_error",
        "Jinja Exception: System message must be at the beginning.",
    )
}

/// The key a chat request's `id_slot` reaches [`messages`] under.
const PIN: &str = "__fake_id_slot";
/// The key a chat request itself reaches [`messages`] under.
const CHAT: &str = "__fake_chat";

/// What the fake counts and caches of a request: the chat request it is
/// on the model's side (llama-server renders both endpoints from the one
/// llama.cpp converts a Messages request to), without what only pins it.
/// So a conversation costs the same tokens on either wire, as on the
/// real server.
fn canonical(req: &Value, chat: Option<&Value>) -> Value {
    let mut c = match chat {
        Some(c) => c.clone(),
        None => localagents::shim::chat::request::to_chat(
            req.to_string().as_bytes(),
            localagents::shim::chat::request::Pin::default(),
        )
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_else(|| req.clone()),
    };
    if let Some(m) = c.as_object_mut() {
        for k in ["id_slot", "timings_per_token", "stream_options"] {
            m.remove(k);
        }
    }
    c
}

/// The prompt tokens the fake answers a chat request `chat` with (read
/// and cached together): what it counts of it ([`canonical`]).
pub fn chat_tokens(chat: &Value) -> u64 {
    super::tokens::count(&canonical(&Value::Null, Some(chat)))
}

/// The prompt a slot holds after `c` ([`canonical`]): its messages and
/// tools as a template renders them (no `cache_control` marks: Claude Code
/// moves them to the newest message every turn).
fn rendered(c: &Value) -> String {
    let mut parts = json!([c["tools"], c["messages"]]);
    strip_cache_control(&mut parts);
    serde_json::to_string(&parts).unwrap_or_default()
}

/// `POST /v1/chat/completions`: the request read back into the Anthropic
/// one it came from, answered as `/v1/messages` answers it, and written
/// as llama-server's chat answer ([`super::fake_chat`]).
async fn chat_completions(
    State(st): State<Arc<LlamaState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    if !st.opts.chat {
        return err(404, "not_found_error", "File Not Found");
    }
    let chat: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return err(
                400,
                "invalid_request_error",
                &format!("Failed to parse JSON: {e}"),
            );
        }
    };
    if let Ok(mut b) = st.chat_bodies.lock() {
        b.push(chat.clone());
    }
    if st.opts.chat_refuses_id_slot && chat.get("id_slot").is_some() {
        return err(
            400,
            "invalid_request_error",
            "Unrecognized request argument supplied: id_slot",
        );
    }
    let mut req = super::fake_chat::to_anthropic(&chat);
    if let Some(slot) = chat["id_slot"].as_u64() {
        req[PIN] = slot.into();
    }
    req[CHAT] = chat.clone();
    let asked = super::fake_chat::Asked::of(&chat);
    let model = chat["model"].as_str().unwrap_or(&st.opts.alias).to_string();
    let resp = messages(State(st), headers, axum::body::Bytes::from(req.to_string())).await;
    super::fake_chat::as_chat(resp, &model, asked).await
}

async fn messages(
    State(st): State<Arc<LlamaState>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let mut req: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return err(
                400,
                "invalid_request_error",
                &format!("Failed to parse JSON: {e}"),
            );
        }
    };
    if let Ok(mut a) = st.auth_seen.lock() {
        a.push(
            headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string(),
        );
    }
    for (list, name) in [
        (&st.sessions, "x-session-id"),
        (&st.traceparents, "traceparent"),
    ] {
        if let Ok(mut s) = list.lock() {
            s.push(
                headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            );
        }
    }
    let pin = req
        .as_object_mut()
        .and_then(|m| m.remove(PIN))
        .and_then(|v| v.as_u64());
    let chat = req.as_object_mut().and_then(|m| m.remove(CHAT));
    let canon = canonical(&req, chat.as_ref());
    if let Ok(mut b) = st.bodies.lock() {
        b.push(req.clone());
    }
    let has_system = req["messages"]
        .as_array()
        .is_some_and(|ms| ms.iter().any(|m| m["role"] == "system"));
    if has_system {
        st.system_entries_seen.fetch_add(1, Ordering::SeqCst);
    }
    let record = |code: u16| {
        if let Ok(mut s) = st.statuses.lock() {
            s.push(code);
        }
    };
    if has_system && st.opts.strict_template {
        record(500);
        return (StatusCode::INTERNAL_SERVER_ERROR, axum::Json(jinja_error())).into_response();
    }
    let input = st
        .opts
        .prompt_tokens
        .unwrap_or_else(|| super::tokens::count(&canon));
    if input > st.opts.n_ctx {
        record(400);
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": {
                "code": 400, "type": "exceed_context_size_error",
                "message": format!("request ({input} tokens) exceeds the available context size ({} tokens), try increasing it", st.opts.n_ctx),
                "n_prompt_tokens": input, "n_ctx": st.opts.n_ctx
            }})),
        )
            .into_response();
    }
    let input = match st.opts.truncate_past {
        Some(w) => silently_cut(&st, &req, body.len() as u64, input, w),
        None => input,
    };
    let script = st.script.lock().map(|s| s.clone()).ok();
    let reply = match script {
        Some(f) => f(&req),
        None => Reply::Text("ok".into()),
    };
    let (input, cached) = if let (true, Some(slot)) = (st.opts.prefix_cache, pin) {
        pinned_cached(&st, &canon, slot)
    } else if st.opts.prefix_cache {
        prefix_cached(&st, &canon)
    } else if st.bodies.lock().map(|b| b.len()).unwrap_or(0) > 1 {
        // A second request with the same prefix is mostly cached.
        (input, input * 9 / 10)
    } else {
        (input, 0)
    };
    st.prompt_tokens.fetch_add(input - cached, Ordering::SeqCst);
    if let Ok(mut p) = st.prompts.lock() {
        p.push((input, cached));
    }
    st.prompt_tokens_cached.fetch_add(cached, Ordering::SeqCst);
    let model = req["model"].as_str().unwrap_or(&st.opts.alias).to_string();
    if matches!(reply, Reply::Hang) {
        std::future::pending::<()>().await;
    }
    if let Reply::Error { status, body } = &reply {
        record(*status);
        return (
            StatusCode::from_u16(*status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(body.clone()),
        )
            .into_response();
    }
    record(200);
    if let Reply::Raw { content_type, body } = reply {
        return (StatusCode::OK, [("content-type", content_type)], body).into_response();
    }
    if let (Reply::Runaway(text), true) = (&reply, req["stream"] == true) {
        let max = req["max_tokens"].as_u64().unwrap_or(4096);
        let events = runaway_events(&model, text, max, input - cached);
        let send = Arc::new(RunawaySend {
            total: events.len() as u64,
            ..Default::default()
        });
        if let Ok(mut r) = st.runaways.lock() {
            r.push(send.clone());
        }
        // The message start, the block start and the text once.
        let hold_after = 2 + text.chars().count().div_ceil(4) as u64;
        let body = RunawayBody {
            events: events.into_iter(),
            send,
            hold_after,
            hold: None,
        };
        return (
            StatusCode::OK,
            [("content-type", "text/event-stream")],
            axum::body::Body::from_stream(body),
        )
            .into_response();
    }
    if req["stream"] == true || matches!(reply, Reply::RawSse(_)) {
        let text = script::message_sse(&model, &reply, input - cached, cached);
        return (
            StatusCode::OK,
            [("content-type", "text/event-stream")],
            text,
        )
            .into_response();
    }
    axum::Json(script::message_json(&model, &reply, input - cached, cached)).into_response()
}

/// The prompt's tokens (the pre-tokens of its system, tools and
/// messages, [`super::tokens`]), and those already in a slot (of the longest common prefix
/// with a slot's last prompt); the prompt then takes the slot it matched,
/// else the least recently used one.
fn prefix_cached(st: &LlamaState, canon: &Value) -> (u64, u64) {
    let prompt = rendered(canon);
    let total = super::tokens::count_str(&prompt);
    let Ok(mut slots) = st.cached_prompts.lock() else {
        return (total, 0);
    };
    let common = |p: &String| common_bytes(p, &prompt);
    // Like llama-server with `-sps 0.9`: a slot whose prompt this one
    // continues (nine tenths of it in common) is reused; else an idle
    // slot, else the least recently used one, from their common prefix.
    let best = slots
        .iter()
        .enumerate()
        .map(|(i, p)| (i, common(p), p.len()))
        .filter(|(_, n, len)| *n * 10 >= *len * 9)
        .max_by_key(|(_, n, _)| *n);
    let cached = match best {
        Some((i, n, _)) => {
            slots.remove(i);
            n
        }
        // The least recently used slot, if every slot holds a prompt: its
        // common prefix is kept; an empty slot has none.
        None if slots.len() >= st.opts.slots.max(1) as usize => common(&slots.remove(0)),
        None => 0,
    };
    let cached = super::tokens::count_prefix(&prompt, cached);
    slots.push(prompt);
    (total, cached)
}

/// The bytes `a` and `b` share from their start.
fn common_bytes(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// [`prefix_cached`] for a request pinned to `slot`: the common prefix
/// with what that slot holds, whatever the others hold.
fn pinned_cached(st: &LlamaState, canon: &Value, slot: u64) -> (u64, u64) {
    let prompt = rendered(canon);
    let total = super::tokens::count_str(&prompt);
    let Ok(mut slots) = st.pinned_prompts.lock() else {
        return (total, 0);
    };
    let common = slots.get(&slot).map_or(0, |p| common_bytes(p, &prompt));
    let cached = super::tokens::count_prefix(&prompt, common);
    slots.insert(slot, prompt);
    (total, cached)
}

/// The count after Ollama's silent cut to `window`
/// ([`super::tokens::silently_cut`]). Kept in `st.truncations`.
fn silently_cut(st: &LlamaState, req: &Value, bytes: u64, whole: u64, window: u64) -> u64 {
    let kept = super::tokens::silently_cut(req, whole, window);
    if let Ok(mut t) = st.truncations.lock() {
        t.push((bytes, whole, kept));
    }
    kept
}

fn strip_cache_control(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.remove("cache_control");
            m.values_mut().for_each(strip_cache_control);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_cache_control),
        _ => {}
    }
}

async fn count_tokens(State(st): State<Arc<LlamaState>>, body: axum::body::Bytes) -> Response {
    if !st.opts.count_tokens {
        return err(404, "not_found_error", "File Not Found");
    }
    axum::Json(json!({"input_tokens": body.len() / 4})).into_response()
}

async fn not_found() -> Response {
    err(404, "not_found_error", "File Not Found")
}

/// The router, for tests that want to extend it.
pub fn router(state: Arc<LlamaState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/props", get(props))
        .route("/slots", get(slots))
        .route("/slots/{id}", post(slot_action))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), gate))
        .with_state(state)
}

pub fn state(opts: LlamaOpts) -> Arc<LlamaState> {
    Arc::new(LlamaState {
        opts,
        loading: AtomicBool::new(false),
        busy: AtomicU64::new(0),
        hits: Mutex::new(Vec::new()),
        prompt_tokens: AtomicU64::new(0),
        prompt_tokens_cached: AtomicU64::new(0),
        script: Mutex::new(script::text("ok")),
        bodies: Mutex::new(Vec::new()),
        system_entries_seen: AtomicU64::new(0),
        statuses: Mutex::new(Vec::new()),
        auth_seen: Mutex::new(Vec::new()),
        sessions: Mutex::new(Vec::new()),
        traceparents: Mutex::new(Vec::new()),
        cached_prompts: Mutex::new(Vec::new()),
        model_path: Mutex::new(None),
        runaways: Mutex::new(Vec::new()),
        truncations: Mutex::new(Vec::new()),
        prompts: Mutex::new(Vec::new()),
        chat_bodies: Mutex::new(Vec::new()),
        pinned_prompts: Mutex::new(std::collections::HashMap::new()),
        saved: Mutex::new(std::collections::HashMap::new()),
        slot_actions: Mutex::new(Vec::new()),
    })
}

/// Start a fake llama-server on a free loopback port.
pub async fn spawn(opts: LlamaOpts) -> FakeLlama {
    let state = state(opts);
    let server = Running::serve(router(state.clone())).await;
    FakeLlama { server, state }
}
