//! Job figures (issue 3): run_agent time to return, the overhead of a whole
//! job over the same `claude -p` run straight at the fake, and the memory
//! of the MCP server with 4 running jobs. Needs the pinned Claude Code CLI
//! (scripts/install-claude.sh, or LOCALAGENTS_CLAUDE).
//!
//! Run: `cargo bench --bench jobs`. Prints a Markdown table; `-- --markdown`
//! prints only the docs/benchmarks.md table (scripts/bench-readme.sh pastes it between
//! the `<!-- bench:jobs -->` markers). No smoke mode: it needs Claude Code.

use localagents_testkit as support;

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

use support::harness::Harness;
use support::stats::{pct, rss_kb};

/// A tool's answer, read as JSON (the harness's call, its error flag
/// dropped: the bench reads the fields it needs).
async fn call(
    c: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> Value {
    support::harness::call(c, tool, args).await.1
}

/// `cargo bench --bench jobs [-- --markdown]` (cargo adds `--bench` itself
/// for `harness = false` targets). The table is the same either way.
fn check_args() {
    for a in std::env::args().skip(1) {
        if a != "--bench" && a != "--markdown" {
            eprintln!(
                "jobs bench: unexpected argument {a:?}; usage: cargo bench --bench jobs [-- --markdown] (it has no smoke mode: it runs Claude Code)"
            );
            std::process::exit(2);
        }
    }
}

fn main() {
    check_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async_main());
}

async fn async_main() {
    let claude = support::claude::binary();
    let version = std::process::Command::new(&claude)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| "?".into());
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        slots: 4,
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!("endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n  prewarm: false\n", fake.url()))
        .claude(&claude);
    let (home, work, state) = (
        h.home().to_path_buf(),
        h.work().to_path_buf(),
        h.state_dir().to_path_buf(),
    );

    let transport = serve_transport(&h);
    let serve_pid = transport.id().unwrap();
    let client = ().serve(transport).await.unwrap();

    // 1. run_agent time to return (wait_s 0), 15 jobs one after another.
    fake.set_script(support::script::text("done"));
    let mut ret_ms = Vec::new();
    for _ in 0..15 {
        let t = Instant::now();
        let v = call(
            &client,
            "run_agent",
            json!({"task": "Say done.", "model": "gemma3-270m"}),
        )
        .await;
        ret_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        let id = v["id"].as_str().expect("job id").to_string();
        let w = call(&client, "wait_job", json!({"job_id": id})).await;
        assert_eq!(w["status"], "succeeded", "{w}");
    }
    let idle_rss = rss_kb(serve_pid);

    // 3. memory with 4 running jobs.
    fake.set_script(support::script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait"}),
        )],
        "done",
    ));
    let mut ids = Vec::new();
    for i in 0..4 {
        let v = call(&client, "run_agent", json!({"task": format!("Job {i}: wait."), "model": "gemma3-270m", "allowed_tools": ["Bash"]})).await;
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    support::until("4 jobs at their tool call", Duration::from_secs(60), || {
        ids.iter()
            .all(|id| record(&state, id)["tool_calls"].as_u64().unwrap_or(0) >= 1)
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss4 = rss_kb(serve_pid);
    for id in &ids {
        call(&client, "cancel_job", json!({"job_id": id})).await;
    }
    client.cancel().await.unwrap();

    // 2. Overhead of a whole job over the same claude run straight at the fake.
    fake.set_script(support::script::write_then_report("o.txt", "x\n"));
    let env = localagents::session_env::session_env(
        fake.url(),
        "gemma3-270m",
        Some(131072),
        localagents::session_env::WindowRule::Budget,
    );
    let (mut direct, mut via) = (Vec::new(), Vec::new());
    for i in 0..6 {
        let d = work.join(format!("d{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let cmd = support::claude::command(
            &home,
            &d,
            &env,
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
            "Create o.txt.",
        );
        let t = Instant::now();
        let r = support::claude::run(cmd, Duration::from_secs(60)).await;
        direct.push(t.elapsed().as_secs_f64());
        assert_eq!(
            r.result().map(|r| r["subtype"].clone()),
            Some("success".into())
        );
        let v = work.join(format!("v{i}"));
        std::fs::create_dir_all(&v).unwrap();
        let t = Instant::now();
        let out = tokio::process::Command::from(h.command([
            "run",
            "--model",
            "gemma3-270m",
            "--max-turns",
            "4",
            "Create o.txt.",
        ]))
        .current_dir(&v)
        .output()
        .await
        .unwrap();
        via.push(t.elapsed().as_secs_f64());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(Path::new(&v.join("o.txt")).is_file());
    }
    let (d50, v50) = (pct(&mut direct, 0.5), pct(&mut via, 0.5));

    // 4. A passing acceptance round: its recorded wall time against the
    // same command run straight (`sh -c 'sleep 0.2'`), 6 runs each.
    fake.set_script(support::script::text("done"));
    let (mut own, mut acc) = (Vec::new(), Vec::new());
    for _ in 0..6 {
        let t = Instant::now();
        let ok = std::process::Command::new("sh")
            .args(["-c", "sleep 0.2"])
            .status()
            .unwrap()
            .success();
        own.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(ok);
        let out = tokio::process::Command::from(h.command([
            "run",
            "--model",
            "gemma3-270m",
            "--json",
            "--accept",
            "sleep 0.2",
            "Say done.",
        ]))
        .output()
        .await
        .unwrap();
        let rec: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(rec["acceptance"]["passed"], true, "{rec}");
        acc.push(rec["acceptance"]["elapsed_s"].as_f64().unwrap() * 1000.0);
    }
    let (own50, acc50) = (pct(&mut own, 0.5), pct(&mut acc, 0.5));

    // 5. Queue admission: a one-slot server, a job holding the slot and a
    // second one queued behind it; the first is cancelled. From its
    // `finished` (its lease goes after that) to the queued job's `started`
    // (admitted) and to its first request, from the records, 6 runs.
    let (mut admit_ms, mut first_ms) = queue_admission(&h).await;
    let (a50, f50) = (pct(&mut admit_ms, 0.5), pct(&mut first_ms, 0.5));

    println!("| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| run_agent time to return (wait_s 0), 15 runs | p50 {:.1} ms, max {:.1} ms | p50 < 100 ms |",
        pct(&mut ret_ms, 0.5),
        ret_ms[ret_ms.len() - 1]
    );
    println!(
        "| whole job, 2 turns (Write, then report), 6 runs each: `claude -p` (Claude Code {version}) straight at the fake | median {d50:.3} s | |"
    );
    println!(
        "| the same through `localagents run` (probe, shim, job records) | median {v50:.3} s, overhead {:.1}% | < 5% |",
        (v50 / d50 - 1.0) * 100.0
    );
    println!(
        "| `serve` RSS, idle after 15 jobs | {:.1} MB | |",
        idle_rss as f64 / 1024.0
    );
    println!(
        "| `serve` RSS with 4 running jobs | {:.1} MB | |",
        rss4 as f64 / 1024.0
    );
    println!(
        "| a passing acceptance round (`sleep 0.2`) over the command run straight, 6 runs | p50 {acc50:.1} ms vs {own50:.1} ms: +{:.1} ms | < 100 ms |",
        acc50 - own50
    );
    println!(
        "| queue admission, 6 runs: a slot frees (the job holding it ends) → the queued job starts | p50 {a50:.0} ms, max {:.0} ms | < 200 ms |",
        admit_ms[admit_ms.len() - 1]
    );
    println!(
        "| → its first request (the above plus Claude Code {version} starting) | p50 {f50:.0} ms, max {:.0} ms | |",
        first_ms[first_ms.len() - 1]
    );
}

/// `localagents serve` in `h`, as the MCP client's transport (whose pid
/// the bench reads the memory of).
fn serve_transport(h: &Harness) -> TokioChildProcess {
    TokioChildProcess::new(tokio::process::Command::from(h.command(["serve"]))).unwrap()
}

fn record(state: &Path, id: &str) -> Value {
    serde_json::from_slice(&std::fs::read(state.join("jobs").join(id).join("job.json")).unwrap())
        .unwrap()
}

fn millis(ts: &Value) -> i64 {
    chrono::DateTime::parse_from_rfc3339(ts.as_str().unwrap_or_else(|| panic!("no time: {ts}")))
        .unwrap()
        .timestamp_millis()
}

async fn until_record(state: &Path, id: &str, cond: impl Fn(&Value) -> bool) -> Value {
    support::until(&format!("job {id}"), Duration::from_secs(60), || {
        cond(&record(state, id))
    })
    .await;
    record(state, id)
}

/// Step 5: (admitted − slot freed, first request − slot freed) in ms.
async fn queue_admission(main: &Harness) -> (Vec<f64>, Vec<f64>) {
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        slots: 1,
        ..Default::default()
    })
    .await;
    fake.set_script(support::script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait"}),
        )],
        "done",
    ));
    // A state and config of its own; the main run's HOME, project and CLI.
    let h = Harness::new()
        .home_dir(main.home())
        .cwd(main.work())
        .claude(support::claude::binary())
        .config(&format!("endpoints:\n  one:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n  prewarm: false\n", fake.url()));
    let state = h.state_dir().to_path_buf();
    let client = ().serve(serve_transport(&h)).await.unwrap();
    let start = |task: String| {
        let client = &client;
        async move {
            let v = call(
                client,
                "run_agent",
                json!({"task": task, "model": "gemma3-270m", "allowed_tools": ["Bash"]}),
            )
            .await;
            v["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{v}"))
                .to_string()
        }
    };
    let (mut admit, mut first) = (Vec::new(), Vec::new());
    let mut holder = start("Job 0: wait.".into()).await;
    until_record(&state, &holder, |r| {
        r["tool_calls"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    for i in 1..=6 {
        let queued = start(format!("Job {i}: wait.")).await;
        until_record(&state, &queued, |r| r["status"] == "queued").await;
        call(&client, "cancel_job", json!({"job_id": holder})).await;
        let freed = millis(&record(&state, &holder)["finished"]);
        let r = until_record(&state, &queued, |r| {
            r["tool_calls"].as_u64().unwrap_or(0) >= 1
        })
        .await;
        let reqs = std::fs::read_to_string(state.join("jobs").join(&queued).join("requests.jsonl"))
            .unwrap();
        let req: Value = serde_json::from_str(reqs.lines().next().unwrap()).unwrap();
        admit.push((millis(&r["started"]) - freed) as f64);
        first.push((millis(&req["ts"]) - freed) as f64);
        holder = queued;
    }
    call(&client, "cancel_job", json!({"job_id": holder})).await;
    client.cancel().await.unwrap();
    (admit, first)
}
