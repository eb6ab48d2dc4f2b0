//! A real Claude Code 2.1.328 session recorded against the scripted fake,
//! for the benchmarks that replay its requests on a real llama-server.

use std::time::Duration;

use serde_json::{Value, json};

/// Record a real Claude Code session on the scripted fake: 6 tool calls
/// (Bash, Write, Read, Edit, Bash, Glob), then a final answer, for `task`.
/// Returns the bodies of its requests that offered tools, in order. `lean`: with
/// the delegate's lean flags (`--tools`, no auto-memory, no MCP servers).
pub async fn record(lean: bool, task: &str) -> Vec<Value> {
    let fake = super::fake_llama::spawn(super::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    fake.set_script(super::script::tools_then_text(
        vec![
            (
                "Bash",
                json!({"command": "ls", "description": "list files"}),
            ),
            (
                "Write",
                json!({"file_path": "notes.txt", "content": "one\n"}),
            ),
            ("Read", json!({"file_path": "notes.txt"})),
            (
                "Edit",
                json!({"file_path": "notes.txt", "old_string": "one", "new_string": "two"}),
            ),
            (
                "Bash",
                json!({"command": "cat notes.txt", "description": "show notes"}),
            ),
            ("Glob", json!({"pattern": "*.txt"})),
        ],
        "Done: notes.txt says two.",
    ));
    let tmp = tempfile::tempdir().unwrap();
    let (home, work) = (tmp.path().join("home"), tmp.path().join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut env = localagents::session_env::session_env(
        fake.url(),
        "gemma3-270m",
        Some(32768),
        localagents::session_env::WindowRule::Budget,
    );
    let mut args = vec![
        "--model",
        "gemma3-270m",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Bash,Read,Write,Edit,Glob",
        "--max-turns",
        "10",
    ];
    if lean {
        args.extend([
            "--tools",
            "Bash,Read,Write,Edit,Glob",
            "--strict-mcp-config",
        ]);
        env.push(("CLAUDE_CODE_DISABLE_AUTO_MEMORY".into(), "1".into()));
        env.push(("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS".into(), "1".into()));
    }
    let cmd = super::claude::command(&home, &work, &env, &args, task);
    let run = super::claude::run(cmd, Duration::from_secs(120)).await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    fake.bodies()
        .into_iter()
        .filter(|b| b.get("tools").is_some())
        .collect()
}

/// One request replayed on a real server: what its `usage` and its
/// `/metrics` counters said, and how long it took.
pub struct Turn {
    pub processed: u64,
    pub cached: u64,
    pub metrics_processed: f64,
    pub metrics_cached: f64,
    pub secs: f64,
}

impl Turn {
    /// Cached share of the prompt.
    pub fn ratio(&self) -> f64 {
        let all = self.processed + self.cached;
        if all == 0 {
            0.0
        } else {
            self.cached as f64 / all as f64
        }
    }
}

/// Send `body` to the real server at `url` as a replay does: not streamed,
/// one output token, temperature 0.
pub async fn send(url: &str, body: &Value) -> Turn {
    send_on(url, body, None).await
}

/// [`send`], on the chat wire pinned to `slot` when one is given: the body
/// translated as the shim translates it (`localagents::shim::chat`) and
/// sent to `/v1/chat/completions` with `id_slot`.
pub async fn send_on(url: &str, body: &Value, slot: Option<u64>) -> Turn {
    let client = localagents::probe::http_client();
    let mut b = body.clone();
    b["stream"] = json!(false);
    b["max_tokens"] = json!(1);
    b["temperature"] = json!(0);
    let scrape = || async {
        let t = client
            .get(format!("{url}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        localagents::probe::metrics::parse(&t)
    };
    let before = scrape().await;
    let t = std::time::Instant::now();
    let (path, sent) = match slot {
        Some(slot) => {
            let pin = localagents::shim::chat::request::Pin {
                slot: Some(slot),
                timings: true,
                plain: false,
            };
            let chat =
                localagents::shim::chat::request::to_chat(b.to_string().as_bytes(), pin).unwrap();
            (
                "/v1/chat/completions",
                serde_json::from_slice::<Value>(&chat).unwrap(),
            )
        }
        None => ("/v1/messages", b),
    };
    let r = client
        .post(format!("{url}{path}"))
        .json(&sent)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let v: Value = r.json().await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert!(status.is_success(), "{status}: {v}");
    let after = scrape().await;
    let d = |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
    let (processed, cached) = match slot {
        Some(_) => {
            let c = v["usage"]["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0);
            (
                v["usage"]["prompt_tokens"]
                    .as_u64()
                    .unwrap_or(0)
                    .saturating_sub(c),
                c,
            )
        }
        None => (
            v["usage"]["input_tokens"].as_u64().unwrap_or(0),
            v["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0),
        ),
    };
    Turn {
        processed,
        cached,
        metrics_processed: d("llamacpp:prompt_tokens_total"),
        metrics_cached: d("llamacpp:prompt_tokens_cached_total"),
        secs,
    }
}
