//! Endpoints other than one plain server: with the llama-swap fake, a job
//! loads its model first (and waits out a slow load), and nothing loads a
//! model that would swap out the model of a running job unless forced; a
//! gateway that only relays works as `backend: other`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fake_swap::{self, SwapModel};
use crate::support::harness::{Harness, call, localagents, serve};
use crate::support::script;

fn models(qwen_load: Duration, gemma_load: Duration) -> Vec<SwapModel> {
    vec![
        SwapModel {
            id: "qwen-coder".into(),
            context: Some(32768),
            load: qwen_load,
        },
        SwapModel {
            id: "gemma".into(),
            context: None,
            load: gemma_load,
        },
    ]
}

/// An environment whose one endpoint is the fake llama-swap.
fn env(url: &str) -> Harness {
    let e = Harness::with_fake(url);
    std::fs::write(
        e.config_path(),
        format!("endpoints:\n  swap:\n    base_url: {url}\nmodels:\n  gemma:\n    context: 16384\ndefaults:\n  max_turns: 6\n  setting_sources: []\n  prewarm: false\n"),
    )
    .unwrap();
    e
}

fn requests(e: &Harness, id: &str) -> Vec<Value> {
    std::fs::read_to_string(e.state_dir().join("jobs").join(id).join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_llama_swap_loads_its_model_first_and_waits_out_a_slow_start() {
    let fake = fake_swap::spawn(models(Duration::from_secs(3), Duration::from_secs(8))).await;
    let e = env(fake.url());

    // States and windows without loading anything; never a window of 0.
    let out = localagents(&e, &["status", "--json"]).await;
    let st: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ep = &st["endpoints"][0];
    assert_eq!(ep["kind"], "llama-swap", "{ep}");
    let by_id = |id: &str| {
        ep["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(by_id("qwen-coder")["state"], "unloaded");
    assert_eq!(by_id("qwen-coder")["context"], 32768);
    assert_eq!(by_id("gemma")["state"], "unloaded");
    assert_ne!(by_id("gemma")["context"], 0, "{ep}");
    assert!(fake.starts().is_empty(), "status loaded a model");

    // A job on the unloaded model loads it (3 s) before the delegate starts.
    let out = localagents(&e, &["run", "--model", "qwen-coder", "--json", "Say hi."]).await;
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let note = rec["load_note"].as_str().unwrap_or_default().to_string();
    let secs: f64 = note
        .strip_prefix("loaded qwen-coder in ")
        .and_then(|s| s.strip_suffix(" s"))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("load note: {rec}"));
    assert!(secs >= 2.9, "{note}");
    assert_eq!(rec["context"], 32768, "{rec}");
    let reqs = requests(&e, rec["id"].as_str().unwrap());
    assert!(reqs.iter().all(|r| r["status"] == 200), "{reqs:?}");
    assert_eq!(fake.running(), vec!["qwen-coder".to_string()]);

    // A model that is starting is listed as loaded: the job's first request
    // blocks until it is ready (8 s) and the shim waits it out.
    fake.begin_start("gemma");
    let t = Instant::now();
    let out = localagents(&e, &["run", "--model", "gemma", "--json", "Say hi."]).await;
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert!(rec["load_note"].is_null(), "{rec}");
    assert!(t.elapsed() >= Duration::from_secs(7), "{:?}", t.elapsed());
    let reqs = requests(&e, rec["id"].as_str().unwrap());
    let first = reqs
        .iter()
        .find(|r| r["path"] == "/v1/messages")
        .expect("a request");
    assert_eq!(first["status"], 200, "{first}");
    assert_eq!(fake.starts(), vec!["qwen-coder", "gemma"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swap_that_would_unload_a_running_jobs_model_is_refused_without_force() {
    let fake = fake_swap::spawn(models(Duration::ZERO, Duration::ZERO)).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait for input"}),
        )],
        "done",
    ));
    let e = env(fake.url());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Wait.", "model": "gemma", "allowed_tools": ["Bash"]}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let job = e.state_dir().join("jobs").join(&id).join("job.json");
    crate::support::until("the job's tool call", Duration::from_secs(30), || {
        let rec: Value = serde_json::from_slice(&std::fs::read(&job).unwrap()).unwrap();
        rec["tool_calls"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert_eq!(fake.running(), vec!["gemma".to_string()]);

    // Another job on the other model: refused, naming the job.
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Say hi.", "model": "qwen-coder"}),
    )
    .await;
    assert!(err, "{v}");
    let text = v.to_string();
    assert!(text.contains(&id) && text.contains("force"), "{text}");
    let out = localagents(&e, &["run", "--model", "qwen-coder", "Say hi."]).await;
    assert_ne!(out.status.code(), Some(0));
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&id), "{text}");

    // A one-shot completion or batch would load it too: refused alike.
    let (err, v) = call(
        &c,
        "local_complete",
        json!({"prompt": "Say hi.", "model": "qwen-coder"}),
    )
    .await;
    assert!(err && v.to_string().contains(&id), "{v}");
    let (err, v) = call(
        &c,
        "local_batch",
        json!({"items": [{"prompt": "Say hi."}], "model": "qwen-coder"}),
    )
    .await;
    assert!(err && v.to_string().contains(&id), "{v}");

    // bringup --run and --unload: the same refusal.
    let out = localagents(&e, &["bringup", "qwen-coder", "--run"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&id) && text.contains("llama-swap"), "{text}");
    let out = localagents(&e, &["bringup", "gemma", "--unload"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&id), "{text}");
    assert_eq!(fake.running(), vec!["gemma".to_string()], "nothing swapped");
    assert_eq!(fake.starts(), vec!["gemma"]);

    // With --force it loads through the endpoint (no command runs).
    let out = localagents(&e, &["bringup", "qwen-coder", "--run", "--force"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("loaded qwen-coder on `swap`"), "{text}");
    assert_eq!(fake.running(), vec!["qwen-coder".to_string()]);

    let (_, v) = call(&c, "cancel_job", json!({"job_id": id})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    // Nothing uses it now: unload goes through.
    let out = localagents(&e, &["bringup", "qwen-coder", "--unload"]).await;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("unloaded qwen-coder"), "{text}");
    assert!(fake.running().is_empty());

    // A fuzzy name matches an unloaded model; the answer says it loads.
    fake.set_script(script::text("hi"));
    let (err, v) = call(&c, "run_agent", json!({"task": "Say hi.", "model": "qwen"})).await;
    assert!(!err, "{v}");
    assert!(
        v.to_string()
            .contains("qwen-coder is not loaded on `swap`: the job loads it first"),
        "{v}"
    );
    let (_, v) = call(&c, "wait_job", json!({"job_id": v["id"], "timeout_s": 60})).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(v.to_string().contains("loaded qwen-coder in "), "{v}");
    c.cancel().await.unwrap();
}

/// A gateway that only relays (LiteLLM) lists models without windows or
/// slots; with `backend: other` a job runs through it as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_gateway_works_as_backend_other() {
    let fake = crate::support::fake_llama::spawn(crate::jobs::strict_fake_opts()).await;
    fake.set_script(script::write_then_report("relay.txt", "via relay\n"));
    let e = Harness::with_fake(fake.url());
    std::fs::write(
        e.config_path(),
        format!("endpoints:\n  gateway:\n    base_url: {}\n    backend: other\ndefaults:\n  max_turns: 6\n  setting_sources: []\n", fake.url()),
    )
    .unwrap();
    let out = localagents(
        &e,
        &[
            "run",
            "--model",
            "gemma3-270m",
            "--json",
            "Create relay.txt",
        ],
    )
    .await;
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(
        std::fs::read_to_string(e.work().join("relay.txt")).unwrap(),
        "via relay\n"
    );
    let hits = fake.hits();
    assert!(
        !hits.iter().any(|p| p == "/props" || p == "/slots"),
        "backend other asks no llama.cpp route: {hits:?}"
    );
}
