//! The ledger (issue 12): `localagents savings` over 1,000 jobs.
//!
//! Run: `cargo bench --bench ledger`. Writes 1,000 job records (full
//! `job.json` files, 1,000 completions beside them) into a temporary state
//! dir, then times `ledger::savings` in process and the whole
//! `localagents savings --json` command (process start included), 30 runs
//! each. Target: under 100 ms. Then the net ledger: the same jobs, each
//! delegated by one of 100 sessions whose transcripts (in the shape of
//! Claude Code 2.1.328's, see `ledger::transcript`'s fixture) hold its
//! run_agent call and result among ten turns of other work. Target: under
//! 300 ms. Last, `localagents ui` over the same state (issue 25): the
//! savings page (the net ledger over 30 days, its chart and tables) and
//! the page of a job with 200 requests, timed from the request to the
//! last byte over loopback, 30 runs each. Target: under 200 ms.

use localagents_testkit as support;

use std::time::Instant;

use serde_json::json;
use support::harness::Harness;
use support::stats::pct;

const JOBS: usize = 1000;
const RUNS: usize = 30;
const SESSIONS: usize = 100;

fn main() {
    let _ = support::bench::mode("ledger", false);
    let h = Harness::new().config("endpoints:\n  box:\n    base_url: http://127.0.0.1:9\n");
    let state = h.state_dir().to_path_buf();
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
            "equivalent_usd": 0.02, "reference_model": "claude-sonnet-4.5",
            "tool_use_id": format!("toolu_bench_{i:06}")
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

    // The sessions' transcripts: per job a run_agent call and its result,
    // and ten turns of other work.
    let projects = h.dir().join("claude").join("projects").join("-home-u-p");
    std::fs::create_dir_all(&projects).unwrap();
    let mut bytes = 0;
    for sn in 0..SESSIONS {
        let mut t = String::new();
        let mut msg = 0;
        let mut assistant = |t: &mut String, content: serde_json::Value| {
            msg += 1;
            t.push_str(&json!({"type": "assistant", "message": {"id": format!("msg_{sn}_{msg}"), "model": "claude-sonnet-4-5-20250929",
                "role": "assistant", "content": [content], "usage": {"input_tokens": 3, "cache_read_input_tokens": 40000, "output_tokens": 120}}}).to_string());
            t.push('\n');
        };
        let user = |t: &mut String, content: serde_json::Value| {
            t.push_str(
                &json!({"type": "user", "message": {"role": "user", "content": [content]}})
                    .to_string(),
            );
            t.push('\n');
        };
        for i in (sn..JOBS).step_by(SESSIONS) {
            let call = format!("toolu_bench_{i:06}");
            assistant(
                &mut t,
                json!({"type": "tool_use", "id": call, "name": "mcp__plugin_localagents_localagents__run_agent", "input": {"task": "x".repeat(600)}}),
            );
            user(
                &mut t,
                json!({"type": "tool_result", "tool_use_id": call, "content": [{"type": "text", "text": "r".repeat(700)}]}),
            );
            for k in 0..10 {
                assistant(
                    &mut t,
                    json!({"type": "tool_use", "id": format!("toolu_other_{i}_{k}"), "name": "Read", "input": {"file_path": "src/a.rs"}}),
                );
                user(
                    &mut t,
                    json!({"type": "tool_result", "tool_use_id": format!("toolu_other_{i}_{k}"), "content": "f".repeat(2000)}),
                );
            }
        }
        bytes += t.len();
        std::fs::write(projects.join(format!("session-{sn}.jsonl")), t).unwrap();
    }
    let projects = h.dir().join("claude").join("projects");

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
        let out = h
            .command(["savings", "--since", "all", "--json"])
            .output()
            .unwrap();
        cmd.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(out.status.success());
    }
    assert_eq!(jobs as usize, JOBS);
    let mut net = Vec::new();
    let mut found = 0;
    for _ in 0..RUNS {
        let t = Instant::now();
        let s = localagents::ledger::savings(
            &state,
            &config,
            localagents::ledger::Since::All,
            &projects,
        );
        net.push(t.elapsed().as_secs_f64() * 1000.0);
        found = s.orchestration.jobs;
    }
    assert_eq!(found as usize, JOBS, "every job's session found");
    let (job_page, savings_page, overview) = pages(&h);
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
    println!(
        "| the net ledger in process: the same and {SESSIONS} session transcripts ({:.1} MB) | {:.1} | {:.1} | < 300 |",
        bytes as f64 / 1e6,
        pct(&mut net, 0.5),
        pct(&mut net, 0.9)
    );
    println!();
    println!("| `localagents ui`, request to last byte over loopback | p50 ms | p90 ms | target |");
    println!("|---|---|---|---|");
    for (name, mut ms) in [
        (
            "the page of a job with 200 requests and 400 transcript lines (chart, timeline; its tree is gone, so no diff)".to_string(),
            job_page,
        ),
        (
            format!(
                "the savings page: the net ledger over {JOBS} jobs + {JOBS} completions and {SESSIONS} transcripts, 30 days"
            ),
            savings_page,
        ),
        (format!("the overview ({JOBS} job records)"), overview),
    ] {
        println!(
            "| {name} | {:.1} | {:.1} | < 200 |",
            pct(&mut ms, 0.5),
            pct(&mut ms, 0.9)
        );
    }
}

/// Start `localagents ui` over the bench's state (the transcripts under
/// `root/claude`), add a job with 200 requests, and time its pages.
fn pages(h: &Harness) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (state, root) = (h.state_dir(), h.dir());
    use std::io::{BufRead, Read, Write};
    let now = chrono::Utc::now();
    let id = format!("{}-{:08x}", now.format("%Y%m%d-%H%M%S"), 0xfeed_u32);
    let dir = state.join("jobs").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rec: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            std::fs::read_dir(state.join("jobs"))
                .unwrap()
                .flatten()
                .find(|d| d.file_name() != id.as_str())
                .unwrap()
                .path()
                .join("job.json"),
        )
        .unwrap(),
    )
    .unwrap();
    rec["id"] = json!(id);
    // The ledger reads only part of a record; a page reads it whole.
    rec["metrics"] = json!(null);
    rec["log_dir"] = json!(dir);
    rec["created"] = json!(now.to_rfc3339());
    std::fs::write(dir.join("job.json"), rec.to_string()).unwrap();
    let (mut log, mut transcript) = (String::new(), String::new());
    for i in 0..200u64 {
        log.push_str(&json!({"ts": now.to_rfc3339(), "path": "/v1/messages", "upstream_status": 200, "status": 200,
            "ms": 2400 + i, "ttft_ms": 300 + i, "bytes_in": 90000, "bytes_out": 1500, "model": "qwen3.8-27b",
            "messages": 2 * i + 1, "tools": 14, "stream": true, "folded_system": 0,
            "usage": {"input": 180 + i, "cache_read": 20000 + 400 * i, "output": 90}, "stop_reason": "tool_use",
            "error": null, "translated": null}).to_string());
        log.push('\n');
        transcript.push_str(&format!(
            "[assistant] Step {i}: reading the next file.\n[tool] Read src/m{i}.rs\n"
        ));
    }
    std::fs::write(dir.join("requests.jsonl"), log).unwrap();
    std::fs::write(dir.join("transcript.txt"), transcript).unwrap();
    std::fs::write(dir.join("task.txt"), "x".repeat(2000)).unwrap();

    let mut child = h
        .command(["ui", "--port", "0"])
        .env("CLAUDE_CONFIG_DIR", root.join("claude"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    struct Kill(std::process::Child);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().unwrap();
    let _ui = Kill(child);
    let mut url = String::new();
    std::io::BufReader::new(stdout).read_line(&mut url).unwrap();
    let rest = url
        .trim()
        .strip_prefix("http://127.0.0.1:")
        .unwrap()
        .to_string();
    let (port, token) = rest.split_once("/?token=").unwrap();
    let (port, token) = (port.to_string(), token.to_string());
    let get = |path: &str| -> f64 {
        let t = Instant::now();
        let mut c = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        let sep = if path.contains('?') { '&' } else { '?' };
        write!(
            c,
            "GET {path}{sep}token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = Vec::new();
        c.read_to_end(&mut body).unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert!(
            body.starts_with(b"HTTP/1.1 200"),
            "{path}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        ms
    };
    let job_path = format!("/jobs/{id}");
    let page = {
        let mut c = std::net::TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
        write!(c, "GET {job_path}?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n").unwrap();
        let mut b = String::new();
        c.read_to_string(&mut b).unwrap();
        b
    };
    assert_eq!(
        page.matches(r#"<g class="group""#).count(),
        200,
        "a bar pair per request"
    );
    let runs = |path: &str| (0..RUNS).map(|_| get(path)).collect::<Vec<f64>>();
    (runs(&job_path), runs("/savings"), runs("/"))
}
