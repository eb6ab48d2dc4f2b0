//! The real Claude Code CLI (2.1.328) through `localagents shim`, against
//! the fake llama.cpp server in strict-template mode.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use localagents::shim::fold;
use serde_json::Value;

use crate::support::harness::Harness;
use crate::support::script;
use crate::support::{claude, fake_llama, until};

/// A child process, killed and reaped on drop: at a failed assertion too.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `localagents shim` process; killed on drop.
struct ShimProc {
    _child: Killed,
    url: String,
    // Drains the pipe so the shim never blocks on a full stderr.
    _stderr: std::thread::JoinHandle<String>,
}

fn start_shim(h: &Harness, model: &str) -> ShimProc {
    let mut child = h
        .command(["shim", "--model", model])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shim");
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let url = first.trim().to_string();
    assert!(
        url.starts_with("http://127.0.0.1:") && url.contains("/j/"),
        "first line is the URL: {url:?}"
    );
    ShimProc {
        _child: Killed(child),
        url,
        _stderr: stderr,
    }
}

fn config_for(dir: &Path, url: &str) -> std::path::PathBuf {
    crate::support::plugin_install::endpoint_config(dir, url)
}

fn session_env(url: &str, served: &str, window: u64) -> Vec<(String, String)> {
    localagents::session_env::session_env(
        url,
        served,
        Some(window),
        localagents::session_env::WindowRule::Budget,
    )
}

fn requests_log(state: &Path) -> Vec<Value> {
    let shim_dir = state.join("shim");
    let run = std::fs::read_dir(&shim_dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_to_string(run.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A harness and its home, work and state dirs.
fn dirs() -> (
    Harness,
    std::path::PathBuf,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let h = Harness::new();
    let (home, work, state) = (
        h.home().to_path_buf(),
        h.work().to_path_buf(),
        h.state_dir().to_path_buf(),
    );
    (h, home, work, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_succeeds_through_the_shim_and_fails_straight_at_a_strict_template() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        strict_template: true,
        ..Default::default()
    })
    .await;
    fake.set_script(script::write_then_report(
        "hello.txt",
        "hi from the delegate\n",
    ));
    let (h, home, work, state) = dirs();
    let cfg = config_for(h.dir(), fake.url());
    let shim = start_shim(&h.clone().config_file(&cfg), "gemma-3-270m");

    let cmd = claude::command(
        &home,
        &work,
        &session_env(&shim.url, "gemma3-270m", 131072),
        &[
            "--model",
            "gemma3-270m",
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Write",
            "--max-turns",
            "4",
        ],
        "Create hello.txt.",
    );
    let run = claude::run(cmd, Duration::from_secs(90)).await;
    let result = run
        .result()
        .unwrap_or_else(|| panic!("no result event; stderr: {}", run.stderr));
    assert_eq!(result["subtype"], "success", "{result}\n{}", run.stderr);
    assert_eq!(run.status, Some(0));
    // CLAUDE_CODE_MAX_CONTEXT_TOKENS is the window Claude Code assumes.
    assert_eq!(
        result["modelUsage"]["gemma3-270m"]["contextWindow"], 131072,
        "{result}"
    );
    assert_eq!(
        std::fs::read_to_string(work.join("hello.txt")).unwrap(),
        "hi from the delegate\n"
    );
    assert_eq!(
        fake.state
            .system_entries_seen
            .load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the fake never saw an in-messages system entry"
    );
    let statuses = fake.statuses();
    assert!(
        statuses.len() >= 2 && statuses.iter().all(|s| *s == 200),
        "{statuses:?}"
    );

    let log = requests_log(&state);
    let msgs: Vec<&Value> = log.iter().filter(|l| l["path"] == "/v1/messages").collect();
    assert!(msgs.len() >= 2, "{log:?}");
    assert!(
        msgs.iter()
            .all(|l| l["status"] == 200 && l["upstream_status"] == 200),
        "{log:?}"
    );
    assert!(
        msgs.iter()
            .any(|l| l["folded_system"].as_u64().unwrap_or(0) > 0),
        "{log:?}"
    );
    assert!(
        msgs.iter()
            .all(|l| l["stream"] == true && l["ttft_ms"].is_u64())
    );
    drop(shim);

    // The contrast: the same session straight at the strict server gets the
    // template's 500 on its first request. Claude Code would retry for
    // minutes; the test stops at the first 500.
    let direct = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        strict_template: true,
        ..Default::default()
    })
    .await;
    let work2 = h.dir().join("work2");
    std::fs::create_dir_all(&work2).unwrap();
    let mut cmd = claude::command(
        &home,
        &work2,
        &session_env(direct.url(), "gemma3-270m", 131072),
        &[
            "--model",
            "gemma3-270m",
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Write",
            "--max-turns",
            "4",
        ],
        "Create hello.txt.",
    );
    let mut child = cmd.spawn().unwrap();
    until(
        "a request straight at the strict fake",
        Duration::from_secs(60),
        || !direct.statuses().is_empty(),
    )
    .await;
    let _ = child.kill().await;
    assert_eq!(
        direct.statuses().first(),
        Some(&500),
        "straight at the strict template: {:?}",
        direct.statuses()
    );
    assert!(
        direct
            .state
            .system_entries_seen
            .load(std::sync::atomic::Ordering::SeqCst)
            >= 1
    );
    assert!(!work2.join("hello.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_request_bodies_fold_append_only() {
    // A permissive fake records what Claude Code really sends, unfolded.
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    fake.set_script(script::tools_then_text(
        vec![
            (
                "Write",
                serde_json::json!({"file_path": "a.txt", "content": "one\n"}),
            ),
            (
                "Bash",
                serde_json::json!({"command": "cat a.txt", "description": "show a.txt"}),
            ),
            (
                "Write",
                serde_json::json!({"file_path": "b.txt", "content": "two\n"}),
            ),
        ],
        "done",
    ));
    let (_h, home, work, _state) = dirs();
    let cmd = claude::command(
        &home,
        &work,
        &session_env(fake.url(), "gemma3-270m", 131072),
        &[
            "--model",
            "gemma3-270m",
            "--permission-mode",
            "acceptEdits",
            "--allowedTools",
            "Write,Bash",
            "--max-turns",
            "6",
        ],
        "Write a.txt, show it, write b.txt.",
    );
    let run = claude::run(cmd, Duration::from_secs(90)).await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    let mut bodies = fake.bodies();
    bodies.retain(|b| b.get("tools").is_some());
    assert!(bodies.len() >= 4, "{} requests", bodies.len());
    // What 2.1.328 sends: a system entry inside messages, as blocks first
    // and as a string afterwards.
    let sys_entry = |b: &Value| {
        b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["role"] == "system")
            .cloned()
    };
    let first = sys_entry(&bodies[0]).expect("a system entry in messages on turn one");
    assert!(first["content"].is_array(), "{first}");
    let later = sys_entry(&bodies[1]).expect("still there on turn two");
    assert!(later["content"].is_string(), "{later}");
    assert_eq!(
        fold::system_text(&first["content"]),
        fold::system_text(&later["content"])
    );
    // What the session env does, checked on the real bodies:
    for b in &bodies {
        // every alias is the served id;
        assert_eq!(b["model"], "gemma3-270m");
        // ENABLE_TOOL_SEARCH=false: no deferred tools;
        assert!(
            b["tools"]
                .as_array()
                .unwrap()
                .iter()
                .all(|t| t.get("defer_loading").is_none()),
            "deferred tool in {}",
            b["tools"]
        );
        // CLAUDE_CODE_ATTRIBUTION_HEADER=0: no per-request billing block;
        assert!(!b["system"].to_string().contains(fold::BILLING_PREFIX));
        // a 128k window keeps Claude Code's own output budget.
        assert_eq!(b["max_tokens"], 32000);
    }
    let mut folded: Vec<Value> = bodies.clone();
    for b in &mut folded {
        fold::fold(b);
    }
    for k in 0..folded.len() - 1 {
        assert!(
            fold::is_content_prefix(&folded[k], &folded[k + 1]),
            "turn {k} is not a prefix of turn {}",
            k + 1
        );
    }
    // Folded, no system entry is left inside `messages` (what strict
    // templates reject). No claim about hoisting: 2.1.328 sends one system
    // entry that never moves, so hoisting it would keep the prefix too.
    for b in &folded {
        assert!(
            b["messages"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["role"] != "system"),
            "{b}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overflow_reaches_the_real_cli_as_prompt_is_too_long() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 16384,
        prompt_tokens: Some(40123),
        strict_template: true,
        ..Default::default()
    })
    .await;
    let (h, home, work, state) = dirs();
    let cfg = config_for(h.dir(), fake.url());
    let shim = start_shim(&h.clone().config_file(&cfg), "gemma3-270m");
    let cmd = claude::command(
        &home,
        &work,
        &session_env(&shim.url, "gemma3-270m", 16384),
        &["--model", "gemma3-270m", "--max-turns", "2"],
        "Say hello.",
    );
    let started = Instant::now();
    let run = claude::run(cmd, Duration::from_secs(120)).await;
    let took = started.elapsed();
    let log = requests_log(&state);
    let msgs: Vec<&Value> = log.iter().filter(|l| l["path"] == "/v1/messages").collect();
    assert!(!msgs.is_empty());
    for l in &msgs {
        assert_eq!(l["upstream_status"], 400, "{l}");
        assert_eq!(l["status"], 400, "{l}");
        assert!(
            l["translated"]
                .as_str()
                .unwrap()
                .contains("context_overflow 40123>16384"),
            "{l}"
        );
    }
    let result = run.result().expect("a result event");
    assert_eq!(result["is_error"], true, "{result}");
    let text = result.to_string();
    assert!(
        text.to_lowercase().contains("prompt is too long") || text.contains("too long"),
        "{text}"
    );
    assert!(fake.statuses().iter().all(|s| *s == 400));
    // Under 128k, CLAUDE_CODE_MAX_OUTPUT_TOKENS = window/8 sets max_tokens.
    assert_eq!(fake.bodies()[0]["max_tokens"], 2048);
    eprintln!("overflow run: {} requests, {:?}", msgs.len(), took);
    drop(shim);
}

#[test]
fn print_settings_needs_a_fixed_url() {
    let out = Harness::new()
        .no_config()
        .command(["shim", "--print-settings"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--port PORT --no-token"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_settings_and_no_token_mode() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    let h = Harness::new();
    let cfg = config_for(h.dir(), fake.url());
    let out = h
        .config_file(&cfg)
        .command([
            "shim",
            "--model",
            "gemma3",
            "--port",
            "18099",
            "--no-token",
            "--print-settings",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let env = &v["env"];
    assert_eq!(env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:18099");
    assert_eq!(env["ANTHROPIC_MODEL"], "gemma3-270m");
    assert_eq!(env["ANTHROPIC_DEFAULT_HAIKU_MODEL"], "gemma3-270m");
    // The window budget of 32k (issue 45): Claude Code told the window
    // that puts its compaction where the compaction request fits.
    let b = localagents::budget::Budget::of(32768).unwrap();
    assert_eq!(
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"],
        b.claude_window.to_string()
    );
    assert_eq!(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"], "4096");
    assert_eq!(env["CLAUDE_CODE_FILE_READ_MAX_OUTPUT_TOKENS"], "4096");
    assert_eq!(env["CLAUDE_CODE_ATTRIBUTION_HEADER"], "0");
}

/// The test kit looks for the CLI where scripts/install-claude.sh puts it
/// on this machine (`claude::find` without `LOCALAGENTS_CLAUDE`): the path
/// the script printed, which scripts/test.sh passes on as
/// `LOCALAGENTS_CLAUDE`, is `claude::cached()`'s.
#[test]
fn the_kit_finds_the_cli_where_install_claude_puts_it() {
    const TEST: &str = "real_claude::the_kit_finds_the_cli_where_install_claude_puts_it";
    let Some(printed) = std::env::var_os("LOCALAGENTS_CLAUDE").map(std::path::PathBuf::from) else {
        crate::support::skip(
            TEST,
            "LOCALAGENTS_CLAUDE is not set: no path from scripts/install-claude.sh to compare",
        );
        return;
    };
    let pinned = std::env::var("CLAUDE_CODE_VERSION")
        .ok()
        .is_none_or(|v| v == claude::PINNED);
    if !pinned || !printed.to_string_lossy().contains("/localagents-claude/") {
        crate::support::skip(
            TEST,
            &format!(
                "LOCALAGENTS_CLAUDE ({}) is not scripts/install-claude.sh's install of {}",
                printed.display(),
                claude::PINNED
            ),
        );
        return;
    }
    assert_eq!(claude::cached(), Some(printed));
}

/// `  export K=V` lines of the shim's stderr, up to its "serving" line;
/// the rest is drained by a thread, so the shim never blocks on it.
fn printed_env(stderr: impl std::io::Read + Send + 'static) -> Vec<(String, String)> {
    let mut env = Vec::new();
    let mut lines = std::io::BufReader::new(stderr).lines();
    while let Some(line) = lines.next() {
        let line = line.unwrap();
        if line.starts_with("serving until interrupted") {
            std::thread::spawn(move || lines.for_each(drop));
            return env;
        }
        if let Some((k, v)) = line
            .trim()
            .strip_prefix("export ")
            .and_then(|kv| kv.split_once('='))
        {
            let v = match v.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(q) => q.replace("'\\''", "'"),
                None => v.to_string(),
            };
            env.push((k.to_string(), v));
        }
    }
    panic!("the shim ended before it served: {env:?}");
}

/// Issue 56: `localagents shim` for a user with no Anthropic login. The
/// env it prints runs the real CLI under a HOME that has no login and no
/// key (without its `ANTHROPIC_AUTH_TOKEN`, claude says "Not logged in"),
/// and so does its `--settings` JSON, each through the shim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_printed_env_and_settings_run_claude_without_a_login() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    fake.set_script(script::text("hello from the local model"));
    let (h, home, work, _state) = dirs();
    let cfg = config_for(h.dir(), fake.url());
    let h = h.config_file(&cfg);
    let args = ["--model", "gemma3-270m", "--max-turns", "2"];

    // The printed env.
    let mut child = h
        .command(["shim", "--model", "gemma3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shim");
    let (_stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let shim = Killed(child);
    let env = printed_env(stderr);
    assert!(
        env.iter()
            .any(|(k, v)| k == "ANTHROPIC_AUTH_TOKEN" && !v.is_empty()),
        "{env:?}"
    );
    let without: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k != "ANTHROPIC_AUTH_TOKEN")
        .cloned()
        .collect();
    let run = claude::run(
        claude::command_without_key(&home, &work, &without, &args, "Say hello."),
        Duration::from_secs(90),
    )
    .await;
    let said = serde_json::to_string(&run.events).unwrap() + &run.stderr;
    assert!(said.contains("Not logged in"), "the control: {said}");
    let run = claude::run(
        claude::command_without_key(&home, &work, &env, &args, "Say hello."),
        Duration::from_secs(90),
    )
    .await;
    let result = run
        .result()
        .unwrap_or_else(|| panic!("no result event; stderr: {}", run.stderr));
    assert_eq!(result["subtype"], "success", "{result}\n{}", run.stderr);
    assert!(
        result["result"]
            .as_str()
            .unwrap()
            .contains("hello from the local model"),
        "{result}"
    );
    drop(shim);

    // The --settings JSON, for a shim on a fixed port without a token.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
    let fixed = ["--port", port.as_str(), "--no-token"];
    let out = h
        .command(
            ["shim", "--model", "gemma3", "--print-settings"]
                .iter()
                .chain(&fixed),
        )
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let settings = String::from_utf8(out.stdout).unwrap();
    let mut child = h
        .command(["shim", "--model", "gemma3"].iter().chain(&fixed))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shim");
    let (_stdout, stderr) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let _shim = Killed(child);
    printed_env(stderr);
    let before = fake.bodies().len();
    let mut with_settings = vec!["--settings", settings.trim()];
    with_settings.extend(args);
    let run = claude::run(
        claude::command_without_key(&home, &work, &[], &with_settings, "Say hello."),
        Duration::from_secs(90),
    )
    .await;
    let result = run
        .result()
        .unwrap_or_else(|| panic!("no result event; stderr: {}", run.stderr));
    assert_eq!(result["subtype"], "success", "{result}\n{}", run.stderr);
    assert!(
        fake.bodies().len() > before,
        "the session went through the shim"
    );
}
