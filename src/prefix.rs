//! The delegate's fixed prompt: what every job sends before its task.
//!
//! Every job's first request starts with Claude Code's `system` and
//! `tools`, and a local server processes them cold unless its prefix cache
//! still holds them. What they weigh depends on the Claude Code version and
//! on the delegate's flags, so it is measured, not guessed: the real CLI
//! is started with the job's own command line, pointed at a capture server
//! on 127.0.0.1 that records the first `/v1/messages` body and ends the
//! session with a one-word answer. `localagents doctor` reports the result;
//! the benchmarks use the same capture for their before/after figures.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use serde_json::Value;
use tokio::sync::watch;

use crate::config::{Config, Endpoint};
use crate::runner::{self, Launch, RunSettings};

/// The two fixed fields of a captured first request, as sent (`null` when
/// missing).
#[derive(Debug, Default, serde::Deserialize)]
struct FirstRequest {
    #[serde(default)]
    system: Value,
    #[serde(default)]
    tools: Value,
}

/// A tool offered: its name (a tool without one is left out).
#[derive(Debug, serde::Deserialize)]
struct Named {
    #[serde(default, deserialize_with = "crate::anthropic::lenient")]
    name: Option<String>,
}

/// The fixed part of a delegate's first request.
#[derive(Debug, Clone, PartialEq)]
pub struct FixedPrompt {
    /// Tool names offered, in the order sent.
    pub tools: Vec<String>,
    pub system_bytes: usize,
    pub tools_bytes: usize,
    /// The whole first request (with the task and the environment).
    pub request_bytes: usize,
}

impl FixedPrompt {
    pub fn from_body(body: &Value) -> FixedPrompt {
        let len = |v: &Value| serde_json::to_vec(v).map(|b| b.len()).unwrap_or(0);
        let first = crate::anthropic::read::<FirstRequest>(body.clone()).unwrap_or_default();
        FixedPrompt {
            tools: crate::anthropic::read::<Vec<Named>>(first.tools.clone())
                .unwrap_or_default()
                .into_iter()
                .filter_map(|t| t.name)
                .collect(),
            system_bytes: len(&first.system),
            tools_bytes: len(&first.tools),
            request_bytes: len(body),
        }
    }

    /// `system` + `tools` bytes.
    pub fn bytes(&self) -> usize {
        self.system_bytes + self.tools_bytes
    }

    /// A rough token count (4 bytes a token; a tokenizer gives ~10% less
    /// on this JSON-heavy text).
    pub fn est_tokens(&self) -> usize {
        self.bytes().div_ceil(4)
    }
}

#[derive(Clone)]
struct Capture {
    first: Arc<Mutex<Option<Value>>>,
    seen: watch::Sender<bool>,
    n: Arc<std::sync::atomic::AtomicU64>,
}

const DONE_SSE: &str = concat!(
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_capture_ID\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"capture\",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"done\"}}\n\n",
    "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":1}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
);

async fn messages(State(c): State<Capture>, body: Bytes) -> impl IntoResponse {
    let n = c.n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    if let Ok(v) = serde_json::from_slice::<Value>(&body)
        && let Ok(mut f) = c.first.lock()
        && f.is_none()
    {
        *f = Some(v);
        let _ = c.seen.send(true);
    }
    (
        [(header::CONTENT_TYPE, "text/event-stream")],
        DONE_SSE.replace("ID", &n.to_string()),
    )
}

async fn count_tokens(body: Bytes) -> impl IntoResponse {
    axum::Json(serde_json::json!({"input_tokens": crate::shim::tokens_of_bytes(body.len() as u64)}))
}

async fn models() -> impl IntoResponse {
    axum::Json(serde_json::json!({"data": [{"id": "capture", "type": "model"}]}))
}

/// Start `claude` as `make(base_url)` describes and return the body of its
/// first `/v1/messages` request. The process group is stopped afterwards.
pub async fn capture_first_request(
    make: impl FnOnce(&str) -> Launch,
    limit: Duration,
) -> Result<Value, String> {
    // The prompt file lives until the capture ends (the delegate's stdin).
    let prompt_dir = tempfile::tempdir().map_err(|e| format!("no temp dir ({e})"))?;
    let (tx, mut rx) = watch::channel(false);
    let cap = Capture {
        first: Arc::new(Mutex::new(None)),
        seen: tx,
        n: Arc::new(0.into()),
    };
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        .with_state(cap.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| format!("cannot listen on 127.0.0.1 ({e})"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("no local address ({e})"))?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let launch = make(&format!("http://{addr}"));
    let prompt = prompt_dir.path().join("prompt.txt");
    let spawned =
        runner::write_prompt(&launch, &prompt).and_then(|()| runner::spawn(&launch, &prompt));
    let result = match spawned {
        Err(e) => Err(format!("cannot start {} ({e})", launch.claude.display())),
        Ok(mut child) => {
            let pgid = child.id().unwrap_or(0);
            // Drain the pipes so claude never blocks on them, keeping the
            // first 64 KiB of each (their last lines are reported).
            let (out, err) = (kept(child.stdout().take()), kept(child.stderr().take()));
            // The first request, or claude's end if it comes first (a
            // wrapper that prints and exits, a broken install): a bool at
            // once, the watch guard must not live across an await.
            let ended = tokio::select! {
                _ = tokio::time::timeout(limit, rx.wait_for(|s| *s)) => None,
                status = child.inner_mut().wait() => Some(status),
            };
            // The handler records the body before it says so on `seen`.
            let first = cap.first.lock().ok().and_then(|f| f.clone());
            crate::process::stop_group(pgid, Duration::from_secs(2)).await;
            let _ = child.inner_mut().wait().await;
            let (stdout, stderr) = (out.await.unwrap_or_default(), err.await.unwrap_or_default());
            let last = |t: &str| t.lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string);
            let words = last(&stderr).or_else(|| last(&stdout));
            match (first, ended) {
                (Some(body), _) => Ok(body),
                (None, Some(status)) => Err(format!(
                    "{} exited ({}) before it sent a request{}: it is not a working Claude Code CLI; run `{} -p hi` to see why, then reinstall Claude Code (npm install -g @anthropic-ai/claude-code) or set defaults.claude_path to the real CLI",
                    launch.claude.display(),
                    status.map_or_else(|e| e.to_string(), |s| s.to_string()),
                    words.map(|w| format!(", saying: {w}")).unwrap_or_default(),
                    launch.claude.display(),
                )),
                (None, None) => Err(format!(
                    "claude sent no request within {} s{}",
                    limit.as_secs(),
                    words.map(|w| format!(": {w}")).unwrap_or_default()
                )),
            }
        }
    };
    server.abort();
    result
}

/// Read a pipe to its end, keeping its first 64 KiB as text.
fn kept<R>(pipe: Option<R>) -> tokio::task::JoinHandle<String>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        let mut kept = Vec::new();
        if let Some(mut p) = pipe {
            let _ = (&mut p).take(64 * 1024).read_to_end(&mut kept).await;
            let _ = tokio::io::copy(&mut p, &mut tokio::io::sink()).await;
        }
        String::from_utf8_lossy(&kept).into_owned()
    })
}

/// The launch of a delegate for `config`'s defaults in `cwd`, as a job
/// would start it (task "Reply with one word.").
pub fn job_launch(config: &Config, claude: &Path, cwd: &Path, base_url: &str) -> Launch {
    job_launch_with(config, claude, cwd, base_url, &Default::default())
}

/// [`job_launch`] with an endpoint's `env` (Claude Code reads some of it
/// into its tool descriptions, so it can change the prefix).
pub fn job_launch_with(
    config: &Config,
    claude: &Path,
    cwd: &Path,
    base_url: &str,
    env: &indexmap::IndexMap<String, String>,
) -> Launch {
    let d = &config.defaults;
    let endpoint = Endpoint {
        name: "capture".into(),
        base_url: base_url.into(),
        backend: None,
        host: None,
        notes: None,
        env: env.clone(),
        api_key_env: None,
        allow_insecure_key: false,
        session_header: None,
        vllm_router: false,
        wire: None,
        window: None,
    };
    let mcp = d
        .mcp_config
        .as_deref()
        .and_then(|p| runner::mcp_config_path(p).ok());
    let s = RunSettings {
        served_id: "capture",
        window: Some(131_072),
        window_rule: crate::session_env::WindowRule::Budget,
        permission_mode: &d.permission_mode,
        allowed_tools: &d.allowed_tools,
        disallowed_tools: &d.disallowed_tools,
        max_turns: 1,
        setting_sources: &d.setting_sources,
        system_prompt_append: &d.system_prompt_append,
        resume_session: None,
        mcp_config: mcp.as_deref(),
        sandbox: d.sandbox,
        shim_silence: None,
        agent: None,
    };
    let mut l = runner::launch(
        claude.to_path_buf(),
        cwd,
        base_url,
        &endpoint,
        &s,
        "Reply with one word.",
    );
    // Leave no session file behind.
    l.args.push("--no-session-persistence".into());
    l
}

/// Measure the fixed prompt of `config`'s delegates, in an empty temporary
/// directory (so no project's files are part of it).
pub async fn measure(config: &Config, claude: &Path) -> Result<FixedPrompt, String> {
    Ok(FixedPrompt::from_body(
        &capture(config, claude, &Default::default()).await?,
    ))
}

/// The first request of `config`'s delegates on an endpoint with `env`,
/// whole, captured in an empty temporary directory (what `measure` weighs
/// and the prewarm sends). A project's own settings are not part of it.
pub async fn capture(
    config: &Config,
    claude: &Path,
    env: &indexmap::IndexMap<String, String>,
) -> Result<Value, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("no temporary directory ({e})"))?;
    capture_first_request(
        |url| job_launch_with(config, claude, dir.path(), url, env),
        Duration::from_secs(60),
    )
    .await
}
