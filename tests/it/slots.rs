//! Many jobs on one server (issue 24): what a user sees when jobs lost
//! their slot's cache.

use std::time::Duration;

use serde_json::json;

use crate::support::harness::Harness;
use crate::support::harness::{call, serve};
use crate::support::{fake_llama, script};

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
    let line = "jobs on `box` lost their slot's cache on 6 turns in the last 7 days (2 jobs, 12,900 tokens re-processed): another request took their slot; for llama-server, start it with --slot-prompt-similarity 0.9 and --parallel at least the number of jobs you run at once";

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

/// A record of job `id` in `e`'s state dir.
fn record(e: &Harness, id: &str) -> serde_json::Value {
    let path = e.state_dir().join("jobs").join(id).join("job.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// Wait until `cond` holds of job `id`'s record (or panic after `limit`).
async fn wait_record(
    e: &Harness,
    id: &str,
    limit: Duration,
    what: &str,
    cond: impl Fn(&serde_json::Value) -> bool,
) -> Duration {
    crate::support::until(&format!("job {id}: {what}"), limit, || cond(&record(e, id))).await
}

/// The delegate's Bash command runs until its job is stopped.
fn waiting_fake_script(fake: &fake_llama::FakeLlama) {
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait"}),
        )],
        "done",
    ));
}

async fn start(c: &Client, task: &str) -> serde_json::Value {
    let (err, v) = call(
        c,
        "run_agent",
        json!({"task": task, "model": "gemma-3-270m", "allowed_tools": ["Bash"]}),
    )
    .await;
    assert!(!err, "{v}");
    v
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// [`start`], its id.
async fn start_id(c: &Client, task: &str) -> String {
    start(c, task).await["id"].as_str().unwrap().to_string()
}

/// A fake llama.cpp with `slots` slots whose delegate waits until stopped.
async fn waiting_fake(slots: u64) -> fake_llama::FakeLlama {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        slots,
        ..crate::jobs::strict_fake_opts()
    })
    .await;
    waiting_fake_script(&fake);
    fake
}

/// Cancel each job; each must end cancelled.
async fn cancel_all(c: &Client, ids: &[&String]) {
    for id in ids {
        let (_, v) = call(c, "cancel_job", json!({"job_id": id})).await;
        assert_eq!(v["status"], "cancelled", "{v}");
    }
}

fn running(r: &serde_json::Value) -> bool {
    r["status"] == "running"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_jobs_from_two_servers_take_two_slots_and_the_third_waits_its_turn() {
    let fake = waiting_fake(2).await;
    let e = Harness::with_fake(fake.url());
    let one = serve(&e, None).await;
    let two = serve(&e, None).await;
    let a = start_id(&one, "Job A.").await;
    let b = start_id(&two, "Job B.").await;
    for id in [&a, &b] {
        wait_record(&e, id, Duration::from_secs(30), "running", running).await;
    }
    // The third, from the first server: every slot is leased.
    let v = start(&one, "Job C.").await;
    let c = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["status"], "queued", "{v}");
    let line = v["last_activity"].as_str().unwrap();
    assert!(
        line.starts_with("queued: 1st for gemma3-270m on `box`, behind ")
            && line.contains(&a)
            && line.contains(&b),
        "{line}"
    );
    let (_, list) = call(&two, "list_jobs", json!({})).await;
    let item = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == c.as_str())
        .cloned()
        .unwrap();
    assert_eq!(item["status"], "queued", "{item}");
    assert_eq!(item["waiting"], line, "{item}");
    let out = crate::support::harness::localagents(&e, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("job {c} {line}")), "{text}");
    // Still waiting a while later: nothing freed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(record(&e, &c)["status"], "queued");

    // SIGKILL of the server that runs B frees B's slot: C starts.
    let owner = record(&e, &b)["owner_pid"].as_i64().unwrap() as i32;
    // SAFETY: the `localagents serve` this test started (its record says so).
    #[allow(clippy::disallowed_methods)] // the test kills on purpose
    unsafe {
        libc::kill(owner, libc::SIGKILL)
    };
    let took = wait_record(&e, &c, Duration::from_secs(30), "running", running).await;
    eprintln!("SIGKILL of B's server -> C running in {took:?}");
    assert_eq!(record(&e, &c)["endpoint"], "box");

    // A fourth waits behind A and C, and starts when A is cancelled.
    let d = start_id(&one, "Job D.").await;
    assert_eq!(record(&e, &d)["status"], "queued");
    let (_, v) = call(&one, "cancel_job", json!({"job_id": a})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    wait_record(&e, &d, Duration::from_secs(30), "running", running).await;
    cancel_all(&one, &[&c, &d]).await;
    let _ = two.cancel().await;
    one.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_goes_to_another_endpoint_with_a_free_slot() {
    let (f1, f2) = (waiting_fake(1).await, waiting_fake(1).await);
    let e = Harness::with_fake(f1.url());
    std::fs::write(
        e.config_path(),
        format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n  spare:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  max_turns: 6\n  setting_sources: []\n",
            f1.url(),
            f2.url()
        ),
    )
    .unwrap();
    let c = serve(&e, None).await;
    let a = start_id(&c, "Job A.").await;
    wait_record(&e, &a, Duration::from_secs(30), "running", running).await;
    let first = record(&e, &a)["endpoint"].as_str().unwrap().to_string();
    let b = start_id(&c, "Job B.").await;
    wait_record(&e, &b, Duration::from_secs(30), "running", running).await;
    let second = record(&e, &b)["endpoint"].as_str().unwrap().to_string();
    assert_ne!(first, second, "both jobs on `{first}`");
    cancel_all(&c, &[&a, &b]).await;
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_queue_off_every_job_starts_at_once() {
    let fake = waiting_fake(1).await;
    let e = Harness::with_fake(fake.url());
    let cfg = std::fs::read_to_string(e.config_path()).unwrap();
    std::fs::write(
        e.config_path(),
        cfg.replace("defaults:\n", "defaults:\n  queue: false\n"),
    )
    .unwrap();
    let c = serve(&e, None).await;
    let a = start_id(&c, "Job A.").await;
    let b = start_id(&c, "Job B.").await;
    for id in [&a, &b] {
        wait_record(&e, id, Duration::from_secs(30), "running", running).await;
    }
    cancel_all(&c, &[&a, &b]).await;
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_takes_only_the_slots_no_job_has_leased() {
    let fake = waiting_fake(2).await;
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let items = json!({"items": [{"prompt": "one"}, {"prompt": "two"}, {"prompt": "three"}]});
    // Nothing leased: the batch fans out over both slots.
    let (err, v) = call(&c, "local_batch", items.clone()).await;
    assert!(!err, "{v}");
    assert_eq!(v["batch"]["lanes"], json!(["box×2"]), "{v}");
    // A job holds one slot (the fake reports it free all the while: only
    // the lease says it is taken).
    let a = start_id(&c, "Job A.").await;
    wait_record(&e, &a, Duration::from_secs(30), "running", running).await;
    let (err, v) = call(&c, "local_batch", items).await;
    assert!(!err, "{v}");
    assert_eq!(v["batch"]["lanes"], json!(["box×1"]), "{v}");
    assert_eq!(v["batch"]["succeeded"], 3, "{v}");
    cancel_all(&c, &[&a]).await;
    c.cancel().await.unwrap();
}

/// Issue 24, part 4: `serve` prewarms a server nothing has used yet with
/// the delegate's fixed prefix: one 1-token request per slot, not
/// streamed, whose `system` and `tools` are byte for byte those of a job's
/// first request, logged under `<state>/prewarm/<endpoint>/`. A second
/// `serve` finds the slots used and sends nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prewarms_an_unused_server_with_the_jobs_own_prefix() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 32768,
        ..Default::default()
    })
    .await;
    fake.set_script(script::text("done"));
    let e = Harness::with_fake(fake.url());
    // The shared config turns it off; this one leaves the default (on).
    let cfg = std::fs::read_to_string(e.config_path()).unwrap();
    std::fs::write(e.config_path(), cfg.replace("  prewarm: false\n", "")).unwrap();
    let c = serve(&e, None).await;
    let log = e
        .state_dir()
        .join("prewarm")
        .join("box")
        .join("requests.jsonl");
    let logged = || std::fs::read_to_string(&log).unwrap_or_default();
    // The shim writes its log line once the answer is through.
    crate::support::until(
        "the prewarm's two requests",
        Duration::from_secs(60),
        || logged().lines().count() == 2,
    )
    .await;
    for line in logged().lines() {
        assert!(line.contains("\"status\":200"), "{}: {line}", log.display());
    }
    let one_token = |b: &serde_json::Value| b["max_tokens"] == 1 && b["stream"] == false;
    let warm: Vec<_> = fake.bodies().into_iter().filter(one_token).collect();
    assert_eq!(warm.len(), 2, "one a slot");
    // With the config's own tools, as the prewarm captured them.
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Say done.", "model": "gemma-3-270m"}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    wait_record(&e, &id, Duration::from_secs(60), "success", |r| {
        r["status"] == "succeeded"
    })
    .await;
    let job_first = fake
        .bodies()
        .into_iter()
        .find(|b| !one_token(b) && b.get("tools").is_some())
        .unwrap();
    let text = |v: &serde_json::Value| serde_json::to_string(v).unwrap();
    for w in &warm {
        assert_eq!(text(&w["system"]), text(&job_first["system"]));
        assert_eq!(text(&w["tools"]), text(&job_first["tools"]));
        assert_eq!(w["model"], job_first["model"]);
    }
    c.cancel().await.unwrap();
    // The slots have served requests now, so another session's serve
    // sends nothing (the rule is `jobs::prewarm`'s unit test): `/slots`
    // says so.
    let st = crate::support::harness::localagents_json(&e, &["status", "--json"]).await;
    assert_eq!(st["endpoints"][0]["slots"]["unused"], 0, "{st}");
}
