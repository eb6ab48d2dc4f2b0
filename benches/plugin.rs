//! Plugin figures (issue 4): the prompt hook's run time with 200 finished
//! jobs in the state dir, and `claude plugin install` time.
//!
//! Run: `cargo bench --bench plugin`. Prints a Markdown table; `-- --markdown`
//! prints only the README's table (scripts/bench-readme.sh pastes it between
//! the `<!-- bench:plugin -->` markers).
//!
//! `-- --smoke` (run by `.ci/run`): only the hook, 20 runs, no Claude Code
//! and no network; fails on a gross regression, a p50 over
//! [`SMOKE_HOOK_MS`].

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;

use support::stats::pct;

const BIN: &str = env!("CARGO_BIN_EXE_localagents");

/// Smoke limit: the prompt hook's run time, p50.
const SMOKE_HOOK_MS: f64 = 50.0;

use support::bench::Mode;

fn mode() -> Mode {
    support::bench::mode("plugin", true)
}

fn main() {
    let mode = mode();
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let proj = tmp.path().join("proj");
    let other = tmp.path().join("other");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    for i in 0..200u32 {
        let created = chrono::Utc::now() - chrono::Duration::seconds(i as i64 * 300 + 600);
        let id = format!(
            "{}-{:08x}",
            created.format("%Y%m%d-%H%M%S"),
            0xb0000000u32 + i
        );
        let dir = state.join("jobs").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let cwd = if i % 2 == 0 { &proj } else { &other };
        let rec = json!({
            "id": id, "task": "a task ".repeat(40), "model": "m", "served_id": "qwen3.8-27b", "endpoint": "box", "base_url": "http://x",
            "cwd": cwd, "origin_cwd": cwd, "isolation": "none", "status": "succeeded", "created": created.to_rfc3339(),
            "started": created.to_rfc3339(), "finished": (created + chrono::Duration::seconds(200)).to_rfc3339(), "elapsed_s": 200.0,
            "session_id": "s", "result": "done ".repeat(100), "error": null, "num_turns": 4, "tool_calls": 6,
            "usage": {"input": 1, "cache_read": 2, "output": 3}, "files_touched": ["a"], "files_changed": ["a", "b"],
            "worktree": null, "last_activity": null, "log_dir": dir, "context": 131072, "metrics": null, "queued_note": null,
            "permission_mode": "acceptEdits", "max_turns": 60, "timeout_s": 1800, "allowed_tools": [], "disallowed_tools": [],
            "system_prompt_append": null, "resumed_from": null, "pid": null, "owner_pid": 1
        });
        std::fs::write(
            dir.join("job.json"),
            serde_json::to_vec_pretty(&rec).unwrap(),
        )
        .unwrap();
    }
    let input = json!({"session_id": "bench-session", "cwd": proj, "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).to_string();
    let mut ms = Vec::new();
    let mut reported = 0;
    let runs = if mode == Mode::Smoke { 20 } else { 100 };
    for _ in 0..runs {
        let t = Instant::now();
        let mut c = Command::new(BIN)
            .arg("--state-dir")
            .arg(&state)
            .args(["hook", "prompt-submit"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "hook failed: {}", o.status);
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        reported += String::from_utf8_lossy(&o.stdout)
            .matches("localagents job ")
            .count();
    }
    let first = ms[0];
    let (p50, p95) = (pct(&mut ms, 0.5), pct(&mut ms, 0.95));
    if mode == Mode::Smoke {
        println!(
            "smoke plugin: prompt hook, 200 finished jobs in the state dir, p50 of {runs} runs: {p50:.1} ms (first run {first:.1} ms, max {:.1} ms); limit {SMOKE_HOOK_MS} ms",
            ms[ms.len() - 1]
        );
        if p50 > SMOKE_HOOK_MS {
            eprintln!(
                "smoke plugin FAILED: the prompt hook took {p50:.1} ms (p50 of {runs} runs), over the {SMOKE_HOOK_MS} ms limit."
            );
            std::process::exit(1);
        }
        return;
    }

    // Plugin install from a clean directory holding only the plugin files.
    let plug = tmp.path().join("plugin");
    localagents::setup::write_plugin_files(&plug).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let claude = support::claude::binary();
    let cl = |args: &[&str]| {
        Command::new(&claude)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("DISABLE_AUTOUPDATER", "1")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .output()
            .unwrap()
    };
    let t = Instant::now();
    assert!(
        cl(&["plugin", "marketplace", "add", plug.to_str().unwrap()])
            .status
            .success()
    );
    let add_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    assert!(
        cl(&["plugin", "install", "localagents@localagents"])
            .status
            .success()
    );
    let install_s = t.elapsed().as_secs_f64();

    println!("| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| hook run time, 200 finished jobs in the state dir (100 for this project), {runs} runs | p50 {p50:.1} ms, p95 {p95:.1} ms, first run {first:.1} ms | p50 < 20 ms |"
    );
    println!(
        "| `claude plugin marketplace add` (clean plugin dir) | {:.2} s | |",
        add_s
    );
    println!(
        "| `claude plugin install localagents@localagents` | {:.2} s | |",
        install_s
    );
    if mode == Mode::Full {
        println!("\n{reported} jobs reported by the hook in all, 5 a prompt at most");
    }
}
