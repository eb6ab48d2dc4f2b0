//! Many jobs on one server (issue 24): what a user sees when jobs lost
//! their slot's cache.

use serde_json::json;

use crate::support::fake_llama;
use crate::support::harness::Harness;

/// A finished job's record on `endpoint` whose turns lost the cache.
fn lost_job(state: &std::path::Path, endpoint: &str, n: u8, losses: u64, tokens: u64) {
    let id = format!(
        "{}-0badca{n:02x}",
        chrono::Utc::now().format("%Y%m%d-%H%M%S")
    );
    let dir = state.join("jobs").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let rec = json!({
        "id": id, "task": "t", "model": "gemma3-270m", "served_id": "gemma3-270m",
        "endpoint": endpoint, "base_url": "http://127.0.0.1:1", "cwd": "/tmp", "origin_cwd": "/tmp",
        "isolation": "none", "status": "succeeded", "created": "2026-12-01T00:00:00.000Z",
        "started": null, "finished": "2026-12-01T00:01:00.000Z", "elapsed_s": 60.0,
        "session_id": "s", "result": "done", "error": null, "num_turns": 7, "tool_calls": 6,
        "usage": {"input": 100, "cache_read": 100, "output": 10}, "files_touched": [],
        "files_changed": [], "worktree": null, "last_activity": null,
        "log_dir": dir, "context": 32768, "queued_note": null,
        "metrics": {"requests": 7, "usage": {"input": 100, "cache_read": 100, "output": 10},
            "cache_ratio_per_turn": [0.9, 0.6, 0.6], "mean_ttft_ms": null, "server": null,
            "slots_at_start": null, "slot_losses": losses, "reprocessed_tokens": tokens},
        "permission_mode": "acceptEdits", "max_turns": 10, "timeout_s": 60,
        "allowed_tools": [], "disallowed_tools": [], "system_prompt_append": null,
        "resumed_from": null, "pid": null, "owner_pid": 1
    });
    std::fs::write(dir.join("job.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
}

/// A fake llama.cpp endpoint `box` and a harness configured with it.
async fn box_endpoint() -> (fake_llama::FakeLlama, Harness) {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    let h = Harness::new().config(&format!(
        "endpoints:\n  box:\n    base_url: {}\n",
        fake.url()
    ));
    std::fs::create_dir_all(h.state_dir()).unwrap();
    (fake, h)
}

// Multi-threaded: the fake answers while a blocking command waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_doctor_and_list_models_name_the_fix_when_jobs_lost_their_slot() {
    let (_fake, h) = box_endpoint().await;
    lost_job(h.state_dir(), "box", 1, 5, 12_000);
    lost_job(h.state_dir(), "box", 2, 1, 900);
    let line = "jobs on `box` lost their slot's cache on 6 turns in the last 7 days (2 jobs, 12,900 tokens re-processed): another request took their slot; for llama-server, start it with --slot-prompt-similarity 0.5 (or higher) and --parallel at least the number of jobs you run at once";

    let out = h.command(["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.lines().any(|l| l == line), "{text}");

    let out = h.command(["doctor"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(line), "{text}");

    let served = h.serve().await;
    let (err, text) = served.call("list_models", json!({})).await;
    assert!(!err, "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["slot_losses"], json!([line]), "{text}");
    served.cancel().await;
}

// Multi-threaded: the fake answers while a blocking command waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_lost_slots_nothing_is_said() {
    let (_fake, h) = box_endpoint().await;
    lost_job(h.state_dir(), "box", 1, 0, 0);
    let out = h.command(["status"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(!text.contains("lost their slot"), "{text}");
    let served = h.serve().await;
    let (_, text) = served.call("list_models", json!({})).await;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(v.get("slot_losses").is_none(), "{text}");
    served.cancel().await;
}
