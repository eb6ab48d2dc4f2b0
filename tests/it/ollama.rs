//! Ollama (issue 44), against the stand-in in tests/support/src/fake_ollama.rs:
//! recognised from `base_url` alone with its real per-model window.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::fake_ollama::{self, OModel};
use crate::support::harness::{Harness, call, localagents, localagents_json, serve};

pub(crate) fn model(name: &str, context: u64, loaded: bool) -> OModel {
    OModel {
        name: name.into(),
        context,
        loaded,
        load: Duration::ZERO,
    }
}

/// An environment whose one endpoint is `url`, `backend` declared or not.
pub(crate) fn env(url: &str, backend: Option<&str>) -> Harness {
    let backend = backend
        .map(|b| format!("    backend: {b}\n"))
        .unwrap_or_default();
    Harness::new().config(&format!(
        "endpoints:\n  local:\n    base_url: {url}\n{backend}defaults:\n  max_turns: 6\n  setting_sources: []\n  prewarm: false\n"
    ))
}

/// `status --json`'s one endpoint, and how long the command took.
pub(crate) async fn status(e: &Harness) -> (Value, Duration) {
    let t = Instant::now();
    let st = localagents_json(e, &["status", "--json"]).await;
    (st["endpoints"][0].clone(), t.elapsed())
}

pub(crate) fn by_id(ep: &Value, id: &str) -> Value {
    ep["models"]
        .as_array()
        .and_then(|ms| ms.iter().find(|m| m["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("no {id} in {ep}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_is_recognised_from_base_url_alone_with_its_window() {
    let fake = fake_ollama::spawn(vec![
        model("qwen3-coder:latest", 65536, true),
        model("gemma3:4b", 4096, false),
    ])
    .await;
    for backend in [None, Some("ollama")] {
        let e = env(fake.url(), backend);
        let (ep, took) = status(&e).await;
        assert_eq!(ep["up"], true, "{ep}");
        assert_eq!(ep["backend"], "ollama", "{ep}");
        assert_eq!(ep["backend_detected"], backend.is_none(), "{ep}");
        assert_eq!(ep["kind"], "ollama", "{ep}");
        let q = by_id(&ep, "qwen3-coder:latest");
        assert_eq!(q["context"], 65536, "{ep}");
        assert_eq!(q["context_source"], "api/ps context_length", "{ep}");
        assert_eq!(q["state"], "loaded", "{ep}");
        let g = by_id(&ep, "gemma3:4b");
        assert_eq!(g["state"], "unloaded", "{ep}");
        assert!(g["context"].is_null(), "{ep}");
        assert_eq!(ep["slots"]["total"], 1, "{ep}");
        let w = ep["warnings"].to_string();
        assert!(
            w.contains("gemma3:4b: loads on first use; its window is known only once it is loaded"),
            "{w}"
        );
        assert!(w.contains("OLLAMA_NUM_PARALLEL"), "{w}");
        eprintln!(
            "probe figures: ollama, backend {}: status --json took {} ms (latency_ms {})",
            backend.unwrap_or("undeclared"),
            took.as_millis(),
            ep["latency_ms"]
        );
    }
    // Nothing was loaded by a probe, and no settings were sent.
    assert!(fake.loads().is_empty(), "{:?}", fake.loads());
    assert!(fake.messages().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_with_no_model_is_up_and_says_so() {
    // `"data": null` (Ollama's empty store) is an empty list, not a bad body.
    let fake = fake_ollama::spawn(Vec::new()).await;
    let e = env(fake.url(), None);
    let (ep, _) = status(&e).await;
    assert_eq!(ep["up"], true, "{ep}");
    assert_eq!(ep["backend"], "ollama", "{ep}");
    assert!(
        ep["warnings"].to_string().contains("serves no model yet"),
        "{ep}"
    );
}

/// The job record `localagents run --json` printed.
pub(crate) fn record(out: &std::process::Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `model`'s 4,096 window on the server behind `e` is refused with `fix`
/// in `status`, `doctor`, `run_agent` and `list_models`.
pub(crate) async fn refused_with_the_fix(e: &Harness, model: &str, fix: &str) {
    let (ep, _) = status(e).await;
    assert_eq!(by_id(&ep, model)["context"], 4096, "{ep}");
    let w = ep["warnings"].to_string();
    assert!(w.contains(fix) && w.contains("no job starts on it"), "{w}");

    let out = localagents(e, &["doctor"]).await;
    let doctor = String::from_utf8_lossy(&out.stdout);
    assert!(doctor.contains(fix), "{doctor}");

    let c = serve(e, None).await;
    let (err, v) = call(&c, "run_agent", json!({"task": "Say hi.", "model": model})).await;
    assert!(err, "{v}");
    let v = v.to_string();
    assert!(v.contains(fix) && v.contains("window 4,096 tokens"), "{v}");
    let (err, v) = call(&c, "list_models", json!({})).await;
    assert!(!err, "{v}");
    assert!(v.to_string().contains(fix), "{v}");
}

/// A job on `model` (a 65,536 window) succeeds, and the delegate is told
/// the window: `CLAUDE_CODE_MAX_OUTPUT_TOKENS` = 65536/8 is set only
/// beside `CLAUDE_CODE_MAX_CONTEXT_TOKENS=65536` (session_env.rs), so the
/// first request's `max_tokens` is 8192. `first` is the server's first
/// request.
pub(crate) async fn a_64k_job(e: &Harness, model: &str, first: impl FnOnce() -> Option<Value>) {
    let out = localagents(e, &["run", "--model", model, "--json", "Say hi."]).await;
    let rec = record(&out);
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["context"], 65536, "{rec}");
    let first = first().expect("a request");
    assert_eq!(first["max_tokens"], 8192, "{first}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4096_window_is_refused_with_the_fix() {
    let fake = fake_ollama::spawn(vec![model("gemma3:4b", 4096, true)]).await;
    let e = env(fake.url(), None);
    refused_with_the_fix(&e, "gemma3:4b", "OLLAMA_CONTEXT_LENGTH=65536 ollama serve").await;
    assert!(
        fake.messages().is_empty(),
        "a job started: {:?}",
        fake.hits()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64k_job_succeeds_and_the_delegate_is_told_65536() {
    let fake = fake_ollama::spawn(vec![model("qwen3-coder:latest", 65536, true)]).await;
    let e = env(fake.url(), None);
    a_64k_job(&e, "qwen3-coder:latest", || {
        fake.messages().into_iter().next()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_not_loaded_loads_on_first_use() {
    let fake = fake_ollama::spawn(vec![
        model("qwen3-coder:latest", 65536, false),
        model("gemma3:4b", 4096, false),
    ])
    .await;
    let e = env(fake.url(), None);
    let (ep, _) = status(&e).await;
    assert_eq!(
        by_id(&ep, "qwen3-coder:latest")["state"],
        "unloaded",
        "{ep}"
    );

    let out = localagents(
        &e,
        &["run", "--model", "qwen3-coder:latest", "--json", "Say hi."],
    )
    .await;
    let rec = record(&out);
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert!(
        rec["load_note"]
            .as_str()
            .is_some_and(|n| n.starts_with("loaded qwen3-coder:latest in ")),
        "{rec}"
    );
    assert_eq!(rec["context"], 65536, "{rec}");
    // The load carried the model and nothing else: no options, no num_ctx.
    assert_eq!(fake.loads(), vec![json!({"model": "qwen3-coder:latest"})]);
    let first = fake.messages().into_iter().next().expect("a request");
    assert_eq!(first["max_tokens"], 8192, "{first}");

    // Loaded with a window too small: the job ends before the delegate.
    let out = localagents(&e, &["run", "--model", "gemma3:4b", "--json", "Say hi."]).await;
    let rec = record(&out);
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(
        rec.to_string()
            .contains("OLLAMA_CONTEXT_LENGTH=65536 ollama serve"),
        "{rec}"
    );
    assert_eq!(fake.messages().len(), 1, "{:?}", fake.hits());
}

/// Ollama's thinking models think by default (routes.go:2613-2631 at
/// v0.33.0-rc2) and stream a thinking block with no signature
/// (anthropic.go:749-980): the job goes on through a tool call, and the
/// next request carries the thinking back to Ollama (the round trip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_with_no_signature_round_trips() {
    use crate::support::script::{self, Reply};
    let fake = fake_ollama::spawn(vec![model("qwen3:latest", 65536, true)]).await;
    let e = env(fake.url(), None);
    let path = e.work().join("notes.txt");
    std::fs::write(&path, "the answer is 42\n").unwrap();
    let thought = "I should read notes.txt before I answer.";
    fake.set_script(std::sync::Arc::new(
        move |req: &Value| match script::tool_results(req) {
            0 => Reply::ThinkThen {
                thinking: thought.into(),
                then: Box::new(Reply::Tool {
                    name: "Read".into(),
                    input: json!({"file_path": path}),
                }),
            },
            _ => Reply::Text("It says 42.".into()),
        },
    ));
    let out = localagents(
        &e,
        &[
            "run",
            "--model",
            "qwen3:latest",
            "--json",
            "What does notes.txt say?",
        ],
    )
    .await;
    let rec = record(&out);
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["result"], "It says 42.", "{rec}");
    let sent = fake.messages();
    let last = sent.last().expect("requests");
    let thinking: Vec<Value> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "thinking")
        .cloned()
        .collect();
    assert_eq!(thinking.len(), 1, "{last}");
    assert_eq!(thinking[0]["thinking"], thought, "{last}");
}

/// With no config at all, Ollama and LM Studio on their default ports
/// (11434, 1234) are found beside llama.cpp's (8080, 9931), in the one
/// probe round, each with its window; the ports that do not answer are
/// not reported. The stand-ins take the real ports: when either is taken
/// on this machine (a real server), the skip is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_config_finds_both_on_their_default_ports() {
    let test = "zero_config_finds_both_on_their_default_ports";
    let Some(ollama) =
        fake_ollama::spawn_on(vec![model("qwen3-coder:latest", 65536, true)], 11434).await
    else {
        return crate::support::skip(test, "port 11434 is taken (an Ollama running here?)");
    };
    let Some(lms) = crate::support::fake_lmstudio::spawn_on(
        vec![crate::lmstudio::model("qwen/qwen3-coder-30b", 32768, true)],
        1234,
    )
    .await
    else {
        return crate::support::skip(test, "port 1234 is taken (an LM Studio running here?)");
    };
    let e = Harness::new().no_config();
    let t = Instant::now();
    let st = localagents_json(&e, &["status", "--json"]).await;
    let took = t.elapsed();
    let eps = st["endpoints"].as_array().unwrap();
    let names: Vec<&str> = eps.iter().filter_map(|e| e["name"].as_str()).collect();
    assert_eq!(names, ["ollama", "lmstudio"], "{st}");
    assert_eq!(
        by_id(&eps[0], "qwen3-coder:latest")["context"],
        65536,
        "{st}"
    );
    assert_eq!(
        by_id(&eps[1], "qwen/qwen3-coder-30b")["context"],
        32768,
        "{st}"
    );
    assert!(!ollama.hits().is_empty() && !lms.hits().is_empty());
    eprintln!("zero config, status --json with Ollama and LM Studio on their ports: {took:?}");
}
