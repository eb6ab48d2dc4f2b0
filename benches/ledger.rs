//! The ledger (issue 12): `localagents savings` over 1,000 jobs.
//!
//! Run: `cargo bench --bench ledger`. Writes 1,000 job records (full
//! `job.json` files, 1,000 completions beside them) into a temporary state
//! dir, then times `ledger::savings` in process and the whole
//! `localagents savings --json` command (process start included), 30 runs
//! each. Target: under 100 ms.

#[path = "../tests/it/support/mod.rs"]
mod support;

use std::process::Command;
use std::time::Instant;

use serde_json::json;
use support::stats::pct;

const BIN: &str = env!("CARGO_BIN_EXE_localagents");
const JOBS: usize = 1000;
const RUNS: usize = 30;

fn main() {
    let _ = support::bench::mode("ledger", false);
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let now = chrono::Utc::now();
    for i in 0..JOBS {
        let t = now - chrono::Duration::minutes(i as i64 * 5);
        let id = format!("{}-{:08x}", t.format("%Y%m%d-%H%M%S"), i);
        let dir = state.join("jobs").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        // A record of the real shape and size.
        let rec = json!({
            "id": id, "task": "x".repeat(300), "model": "qwen3.8-27b", "served_id": "qwen3.8-27b",
            "endpoint": if i % 2 == 0 { "box" } else { "gpu" }, "base_url": "http://127.0.0.1:8080",
            "cwd": "/home/u/p", "origin_cwd": "/home/u/p", "isolation": "none", "status": "succeeded",
            "created": t.to_rfc3339(), "started": t.to_rfc3339(), "finished": t.to_rfc3339(), "elapsed_s": 61.0,
            "session_id": "s", "result": "y".repeat(900), "error": null, "num_turns": 9, "tool_calls": 14,
            "usage": {"input": 1200 + i, "cache_read": 40000, "output": 900},
            "files_touched": ["src/a.rs", "src/b.rs"], "files_changed": ["src/a.rs"], "worktree": null,
            "last_activity": "succeeded after 61s", "log_dir": dir, "context": 131072,
            "metrics": {"requests": 9, "usage": {"input": 1200, "cache_read": 40000, "output": 900}},
            "first_turn": null, "queued_note": null, "permission_mode": "acceptEdits", "max_turns": 60,
            "timeout_s": 1800, "allowed_tools": ["Read", "Edit", "Write", "Bash"], "disallowed_tools": ["Agent"],
            "system_prompt_append": null, "resumed_from": null, "pid": 1, "owner_pid": 1,
            "equivalent_usd": 0.02, "reference_model": "claude-sonnet-4.5"
        });
        std::fs::write(
            dir.join("job.json"),
            serde_json::to_vec_pretty(&rec).unwrap(),
        )
        .unwrap();
    }
    let mut lines = String::new();
    for i in 0..JOBS {
        let t = now - chrono::Duration::minutes(i as i64 * 5);
        lines.push_str(&json!({"ts": t.to_rfc3339(), "endpoint": "box", "model": "qwen3.8-27b", "files": [], "prompt_chars": 80,
            "result": {"text": "z".repeat(200), "usage": {"input": 80, "cache_read": 0, "output": 40}, "ms": 300, "model": "qwen3.8-27b", "endpoint": "box", "stop_reason": "end_turn"}}).to_string());
        lines.push('\n');
    }
    std::fs::create_dir_all(state.join("complete")).unwrap();
    std::fs::write(state.join("complete/completions.jsonl"), lines).unwrap();
    let cfg = tmp.path().join("models.yaml");
    std::fs::write(
        &cfg,
        "endpoints:\n  box:\n    base_url: http://127.0.0.1:9\n",
    )
    .unwrap();

    let config = localagents::config::Config::builtin();
    let mut inproc = Vec::new();
    let mut cmd = Vec::new();
    let mut jobs = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let s = localagents::ledger::savings(
            &state,
            &config,
            localagents::ledger::Since::All,
            &state.join("no-transcripts"),
        );
        inproc.push(t.elapsed().as_secs_f64() * 1000.0);
        jobs = s.jobs;
        let t = Instant::now();
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&cfg)
            .arg("--state-dir")
            .arg(&state)
            .args(["savings", "--since", "all", "--json"])
            .output()
            .unwrap();
        cmd.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success());
    }
    assert_eq!(jobs as usize, JOBS);
    println!("| `savings` over {JOBS} jobs + {JOBS} completions | p50 ms | p90 ms | target |");
    println!("|---|---|---|---|");
    println!(
        "| `ledger::savings` in process | {:.1} | {:.1} | |",
        pct(&mut inproc, 0.5),
        pct(&mut inproc, 0.9)
    );
    println!(
        "| `localagents savings --since all --json` (process start included) | {:.1} | {:.1} | < 100 |",
        pct(&mut cmd, 0.5),
        pct(&mut cmd, 0.9)
    );
}
