//! The shim in process, against the fake backends.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use indexmap::IndexMap;
use localagents::config::{Backend, Endpoint};
use localagents::shim::log::RequestLog;
use localagents::shim::{Registration, Route, Shim};
use serde_json::{Value, json};

use crate::support::harness::Harness;
use crate::support::script::{self, Reply};
use crate::support::{fake_llama, fake_vllm, net, until};

fn endpoint(url: &str) -> Endpoint {
    Endpoint {
        name: "fake".into(),
        base_url: url.into(),
        backend: None,
        host: None,
        notes: None,
        env: IndexMap::new(),
        api_key_env: None,
        allow_insecure_key: false,
        session_header: None,
        vllm_router: false,
        wire: None,
        window: None,
    }
}

/// An in-process shim with one route to the backend at a URL, built up
/// from what most tests want (llama.cpp, serving `gemma3-270m` with a
/// 32768-token window; no API key: a key reaches a shim through the
/// environment of `localagents shim`, which a test runs through its
/// [`Harness`]) by what a test changes; it logs into
/// the directory [`ShimFor::start`] is given.
struct ShimFor<'a> {
    url: &'a str,
    backend: Backend,
    served: &'a str,
    window: Option<u64>,
}

impl<'a> ShimFor<'a> {
    fn new(url: &'a str) -> Self {
        ShimFor {
            url,
            backend: Backend::LlamaCpp,
            served: "gemma3-270m",
            window: Some(32768),
        }
    }

    fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// The model id the backend serves.
    fn served(mut self, served: &'a str) -> Self {
        self.served = served;
        self
    }

    /// The route's context window, in tokens.
    fn window(mut self, tokens: u64) -> Self {
        self.window = Some(tokens);
        self
    }

    /// No known context window.
    fn no_window(mut self) -> Self {
        self.window = None;
        self
    }

    /// Start the shim and register the route, logging into `log_dir`.
    async fn start(self, log_dir: &Path) -> (Shim, Registration) {
        let shim = Shim::start(0).await.unwrap();
        let reg = shim
            .register(Route {
                label: "test".into(),
                session: None,
                endpoint: endpoint(self.url),
                backend: self.backend,
                served_id: self.served.into(),
                window: self.window,
                log: RequestLog::new(log_dir, true),
                idle_timeout: Duration::from_secs(10),
                first_byte_timeout: Duration::from_secs(300),
                guard: Default::default(),
                wire: Default::default(),
            })
            .unwrap();
        (shim, reg)
    }
}

fn log_lines(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The log once it has `n` lines: a streamed request's line is written
/// when its relay ends, which a client can see after its last event.
async fn log_lines_when(dir: &Path, n: usize) -> Vec<Value> {
    until("the request log's lines", Duration::from_secs(10), || {
        log_lines(dir).len() >= n
    })
    .await;
    log_lines(dir)
}

fn client() -> reqwest::Client {
    crate::support::http_client()
}

/// What headless Claude Code 2.1.328 sends on turn one (trimmed).
fn cc_body(stream: bool) -> Value {
    json!({
        "model": "gemma3-270m",
        "max_tokens": 32000,
        "stream": stream,
        "system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are a Claude agent.", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x</system-reminder>"}, {"type": "text", "text": "create hello.txt"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment\ncwd: /tmp/x", "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [{"name": "Write", "description": "write", "input_schema": {"type": "object"}}],
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "u"}
    })
}

fn strict() -> fake_llama::LlamaOpts {
    fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        strict_template: true,
        ..Default::default()
    }
}

#[tokio::test]
async fn unknown_token_and_other_paths_are_404_and_never_reach_the_backend() {
    let fake = fake_llama::spawn(strict()).await;
    let h = Harness::new();
    let (shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    assert_eq!(reg.token.len(), 32, "128 bits in hex");
    assert!(reg.base_url.starts_with("http://127.0.0.1:"));
    let root = format!("http://{}", shim.addr());
    let c = client();
    let cases = [
        (
            reqwest::Method::POST,
            format!("{root}/j/{}/v1/messages", "0".repeat(32)),
        ),
        (reqwest::Method::POST, format!("{root}/j/nope/v1/messages")),
        (reqwest::Method::GET, format!("{}/props", reg.base_url)),
        (reqwest::Method::GET, format!("{}/slots", reg.base_url)),
        (
            reqwest::Method::GET,
            format!("{}/v1/messages", reg.base_url),
        ),
        (
            reqwest::Method::POST,
            format!("{}/v1/chat/completions", reg.base_url),
        ),
        (
            reqwest::Method::POST,
            format!("{}/completion", reg.base_url),
        ),
        (reqwest::Method::POST, format!("{root}/v1/messages")),
        (reqwest::Method::GET, format!("{root}/metrics")),
        (
            reqwest::Method::GET,
            format!("{root}/j/{}/%2e%2e/props", reg.token),
        ),
    ];
    for (m, url) in cases {
        let r = c
            .request(m.clone(), &url)
            .body(cc_body(false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 404, "{m} {url}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "not_found_error");
    }
    assert!(
        fake.hits().is_empty(),
        "nothing was relayed: {:?}",
        fake.hits()
    );
    drop(reg);
    assert_eq!(
        shim.routes(),
        0,
        "dropping the registration removes the route"
    );
}

#[tokio::test]
async fn folds_for_a_strict_template_and_logs_the_request() {
    let fake = fake_llama::spawn(strict()).await;
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).window(16384).start(h.dir()).await;
    // Straight at the strict fake: the template's 500.
    let direct = client()
        .post(format!("{}/v1/messages", fake.url()))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(direct.status().as_u16(), 500);
    // Through the shim: 200.
    let r = client()
        .post(format!("{}/v1/messages?beta=true", reg.base_url))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "message");
    let bodies = fake.bodies();
    let sent = bodies.last().unwrap();
    assert!(
        sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["role"] != "system")
    );
    assert_eq!(
        sent["messages"][0]["content"][2]["text"],
        "<system>\n# Environment\ncwd: /tmp/x\n</system>"
    );
    assert_eq!(
        sent["system"].as_array().unwrap().len(),
        1,
        "billing header dropped"
    );
    assert_eq!(
        sent["max_tokens"], 16384,
        "max_tokens clamped to the window"
    );
    assert_eq!(
        sent["thinking"],
        json!({"type": "adaptive"}),
        "other fields untouched"
    );
    let log = log_lines(h.dir());
    assert_eq!(log.len(), 1);
    let l = &log[0];
    assert_eq!(
        (l["status"].as_u64(), l["upstream_status"].as_u64()),
        (Some(200), Some(200))
    );
    assert_eq!(l["folded_system"], 1);
    assert_eq!(l["messages"], 1);
    assert_eq!(l["tools"], 1);
    assert_eq!(l["stream"], false);
    assert_eq!(l["model"], "gemma3-270m");
    assert!(l["usage"]["input"].as_u64().unwrap() > 0);
    assert_eq!(l["stop_reason"], "end_turn");
    let tr = l["translated"].as_str().unwrap();
    assert!(
        tr.contains("billing_header_dropped") && tr.contains("max_tokens 32000->16384"),
        "{tr}"
    );
    let full = std::fs::read_to_string(h.dir().join("requests_full.jsonl")).unwrap();
    assert!(full.contains("<system>\\n# Environment"));
}

#[tokio::test]
async fn stream_is_relayed_with_ttft_usage_and_stop_reason() {
    let fake = fake_llama::spawn(strict()).await;
    fake.set_script(script::write_then_report("a.txt", "x"));
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    let r = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .body(cc_body(true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().await.unwrap();
    assert!(text.starts_with("event: message_start\n"));
    assert!(text.contains("\"name\":\"Write\""));
    assert!(text.ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    // The log line is written when the stream ends.
    let l = &log_lines_when(h.dir(), 1).await[0];
    assert_eq!(l["stream"], true);
    assert_eq!(l["stop_reason"], "tool_use");
    assert_eq!(l["usage"]["output"], 9);
    assert!(l["ttft_ms"].is_u64());
    assert_eq!(l["bytes_out"].as_u64().unwrap() as usize, text.len());
}

#[tokio::test]
async fn overflow_becomes_prompt_is_too_long_stream_or_not() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        prompt_tokens: Some(40123),
        n_ctx: 32768,
        ..strict()
    })
    .await;
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    for stream in [false, true] {
        let r = client()
            .post(format!("{}/v1/messages", reg.base_url))
            .body(cc_body(stream).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(
            v["error"]["message"],
            "prompt is too long: 40123 tokens > 32768 maximum"
        );
    }
    let log = log_lines(h.dir());
    assert_eq!(log[0]["upstream_status"], 400);
    assert!(
        log[0]["translated"]
            .as_str()
            .unwrap()
            .contains("context_overflow 40123>32768")
    );
    assert!(
        log[0]["error"]
            .as_str()
            .unwrap()
            .contains("exceed_context_size_error")
    );
}

#[tokio::test]
async fn mid_stream_errors_template_errors_and_oom() {
    let fake = fake_llama::spawn(strict()).await;
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    let c = client();

    fake.set_script(std::sync::Arc::new(|_| Reply::RawSse("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"code\":500,\"message\":\"Context size has been exceeded.\",\"type\":\"server_error\"}\n\n".into())));
    let text = c
        .post(format!("{}/v1/messages", reg.base_url))
        .body(cc_body(true).to_string())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("{\"type\":\"error\",\"error\":{\"type\":\"invalid_request_error\",\"message\":\"prompt is too long: 32769 tokens > 32768 maximum\"}}"), "{text}");

    fake.set_script(std::sync::Arc::new(|_| Reply::Error {
        status: 500,
        body: fake_llama::jinja_error(),
    }));
    let r = c
        .post(format!("{}/v1/messages", reg.base_url))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status().as_u16(),
        400,
        "a template error must not look retryable"
    );
    let v: Value = r.json().await.unwrap();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rejected the request in its chat template")
    );

    fake.set_script(std::sync::Arc::new(|_| Reply::Error {
        status: 500,
        body: fake_llama::err_body(500, "server_error", "CUDA out of memory"),
    }));
    let r = c
        .post(format!("{}/v1/messages", reg.base_url))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 500);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "api_error");
}

#[tokio::test]
async fn unreachable_backend_is_529_naming_the_url() {
    let h = Harness::new();
    let url = format!("http://{}", net::refused_addr());
    let (_shim, reg) = ShimFor::new(&url)
        .served("m")
        .no_window()
        .start(h.dir())
        .await;
    let r = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .body(cc_body(true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 529);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "overloaded_error");
    assert!(v["error"]["message"].as_str().unwrap().contains(&url));
}

#[tokio::test]
async fn api_key_is_added_upstream_and_never_logged() {
    use tokio::io::AsyncBufReadExt;
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        api_key: Some("k3y-very-secret".into()),
        ..strict()
    })
    .await;
    let h = Harness::new();
    let h = h
        .config(&format!(
            "endpoints:\n  fake:\n    base_url: {}\n    backend: llama.cpp\n    api_key_env: LOCALAGENTS_TEST_SHIM_KEY\n",
            fake.url()
        ))
        // The key reaches the shim through a child's environment: the test
        // process's own environment is never changed.
        .env("LOCALAGENTS_TEST_SHIM_KEY", "k3y-very-secret")
        .env("LOCALAGENTS_DUMP_REQUESTS", "1");
    let state = h.state_dir().to_path_buf();
    let mut child = tokio::process::Command::from(h.command(["shim", "--model", "gemma3-270m"]))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut base_url = String::new();
    tokio::time::timeout(Duration::from_secs(20), stdout.read_line(&mut base_url))
        .await
        .expect("the shim prints its URL")
        .unwrap();
    let base_url = base_url.trim().to_string();
    assert!(base_url.starts_with("http://127.0.0.1:"), "{base_url:?}");
    let r = client()
        .post(format!("{base_url}/v1/messages"))
        .header("x-api-key", "placeholder-from-claude")
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        fake.state.auth_seen.lock().unwrap().last().unwrap(),
        "Bearer k3y-very-secret"
    );
    // The request is logged (both files, the body dump on) without the key.
    let run_dir = || {
        std::fs::read_dir(state.join("shim"))
            .ok()?
            .flatten()
            .next()
            .map(|e| e.path())
    };
    let logged = |d: &Path| {
        ["requests.jsonl", "requests_full.jsonl"]
            .iter()
            .all(|f| std::fs::read_to_string(d.join(f)).is_ok_and(|t| t.contains("/v1/messages")))
    };
    until("the request log", Duration::from_secs(10), || {
        run_dir().is_some_and(|d| logged(&d))
    })
    .await;
    let dir = run_dir().expect("the shim's run dir");
    for f in ["requests.jsonl", "requests_full.jsonl"] {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(!text.contains("k3y-very-secret"), "{f}");
    }
    child.kill().await.unwrap();
    let mut err = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut child.stderr.take().unwrap(), &mut err)
        .await
        .unwrap();
    assert!(!err.contains("k3y-very-secret"), "{err}");
}

#[tokio::test]
async fn count_tokens_is_folded_or_estimated() {
    let fake = fake_llama::spawn(strict()).await;
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    let r = client()
        .post(format!("{}/v1/messages/count_tokens", reg.base_url))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(
        r.json::<Value>().await.unwrap()["input_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );
    let l = &log_lines(h.dir())[0];
    assert_eq!(l["folded_system"], 1);
    assert!(l.get("estimated").is_none());

    let fake2 = fake_llama::spawn(fake_llama::LlamaOpts {
        count_tokens: false,
        ..strict()
    })
    .await;
    let (n, l) = count_through(fake2.url()).await;
    assert!(n > 50, "{n}");
    assert_eq!(l["estimated"], true);
    assert_eq!(l["upstream_status"], 404);
}

/// A count_tokens of Claude Code's body through a shim to `url`: the
/// count answered and the request log's line.
async fn count_through(url: &str) -> (u64, Value) {
    let h = Harness::new();
    let (_s, reg) = ShimFor::new(url).start(h.dir()).await;
    let r = client()
        .post(format!("{}/v1/messages/count_tokens", reg.base_url))
        .body(cc_body(false).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let n = r.json::<Value>().await.unwrap()["input_tokens"]
        .as_u64()
        .unwrap();
    (n, log_lines(h.dir())[0].clone())
}

/// Neither Ollama nor LM Studio serves count_tokens: the stand-ins answer
/// it as the servers do, and the shim estimates. Ollama: gin's default 404,
/// text/plain (server/routes.go:1870-1926 at v0.33.0-rc2, no such route);
/// LM Studio: 200 with an error (lmstudio-bug-tracker#2055).
#[tokio::test]
async fn count_tokens_falls_back_on_each_servers_real_answer() {
    let ollama =
        crate::support::fake_ollama::spawn(vec![crate::ollama::model("m", 65536, true)]).await;
    let lms =
        crate::support::fake_lmstudio::spawn(vec![crate::lmstudio::model("m", 65536, true)]).await;
    for (url, status) in [(ollama.url(), 404), (lms.url(), 200)] {
        let (n, l) = count_through(url).await;
        assert!(n > 50, "{status}: {n}");
        assert_eq!(l["estimated"], true, "{l}");
        assert_eq!(l["upstream_status"], status, "{l}");
    }
}

/// Ollama's errors through the shim, each with its sentence: the 404 of
/// an unknown model (routes.go:2485,2500) names `ollama pull`; the 503
/// `server busy` (sched.go:88,207) is overloaded; `does not support
/// tools` is a 400 no retry mends.
#[tokio::test]
async fn ollama_errors_get_one_sentence_each() {
    let rid = "req_0123456789abcdef01234567";
    for (status, message, want_status, want) in [
        (
            404,
            "model 'qwen3:8b' not found",
            404,
            "`ollama pull qwen3:8b`",
        ),
        (
            503,
            "server busy, please try again.  maximum pending requests exceeded",
            529,
            "OLLAMA_MAX_QUEUE",
        ),
        (
            400,
            "registry.ollama.ai/library/gemma3:270m does not support tools",
            400,
            "the `tools` capability",
        ),
    ] {
        let fake = fake_llama::spawn(strict()).await;
        let body = json!({"type": "error", "error": {"type": "api_error", "message": message}, "request_id": rid});
        fake.set_script(std::sync::Arc::new(move |_: &Value| Reply::Error {
            status,
            body: body.clone(),
        }));
        let h = Harness::new();
        let (_s, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
        let r = client()
            .post(format!("{}/v1/messages", reg.base_url))
            .body(cc_body(false).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), want_status, "{message}");
        let v: Value = r.json().await.unwrap();
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains(want), "{m}");
    }
}

#[tokio::test]
async fn vllm_max_tokens_is_lowered_once_when_only_it_overflows() {
    let fake = fake_vllm::spawn(fake_vllm::VllmOpts {
        served: "qwen".into(),
        max_model_len: 32768,
        ..Default::default()
    })
    .await;
    fake.state.prompt_tokens.store(20000, Ordering::SeqCst);
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url())
        .backend(Backend::Vllm)
        .served("qwen")
        .start(h.dir())
        .await;
    let mut body = cc_body(false);
    body["model"] = json!("qwen");
    let r = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(*fake.state.max_tokens_seen.lock().unwrap(), [32000, 12768]);
    let l = &log_lines(h.dir())[0];
    assert!(
        l["translated"]
            .as_str()
            .unwrap()
            .contains("max_tokens_retry 32000->12768")
    );

    // Too little room left: no retry, Claude Code is told to compact.
    fake.state.prompt_tokens.store(32000, Ordering::SeqCst);
    let r = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["error"]["message"],
        "prompt is too long: 64000 tokens > 32768 maximum"
    );
}

#[tokio::test]
async fn models_and_bad_json() {
    let fake = fake_llama::spawn(strict()).await;
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    let v: Value = client()
        .get(format!("{}/v1/models", reg.base_url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(v["data"][0]["id"], "gemma3-270m");
    let r = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(fake.bodies().is_empty());
}

/// Issue 10: a server loading the model answers 503 "Loading model"; the
/// shim waits and asks again instead of passing a failure to Claude Code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_being_loaded_is_waited_for_not_failed() {
    let fake = fake_llama::spawn(strict()).await;
    fake.state.loading.store(true, Ordering::SeqCst);
    let h = Harness::new();
    let (_shim, reg) = ShimFor::new(fake.url()).start(h.dir()).await;
    // The model finishes loading once the shim has asked three times (a
    // condition, not a clock: a busy machine only makes it slower).
    let asked =
        |f: &fake_llama::FakeLlama| f.hits().iter().filter(|p| *p == "/v1/messages").count();
    let send = client()
        .post(format!("{}/v1/messages", reg.base_url))
        .header("x-api-key", &reg.token)
        .json(&cc_body(false))
        .send();
    let release = async {
        until("the shim asked 3 times", Duration::from_secs(60), || {
            asked(&fake) >= 3
        })
        .await;
        fake.state.loading.store(false, Ordering::SeqCst);
    };
    let t = std::time::Instant::now();
    let (r, ()) = tokio::join!(send, release);
    let r = r.unwrap();
    let status = r.status().as_u16();
    let body: Value = r.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    // At least three asks, so at least two of the shim's 500 ms pauses.
    assert!(
        t.elapsed() >= Duration::from_millis(1000),
        "{:?}",
        t.elapsed()
    );
    let hits = asked(&fake);
    assert!(hits >= 3, "asked again while loading: {hits}");
    let log = log_lines(h.dir());
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0]["upstream_status"], 200, "{log:?}");
    assert!(
        log[0]["translated"]
            .as_str()
            .unwrap_or_default()
            .contains("for the model to load"),
        "{log:?}"
    );
}
