//! One-shot work without a session (issue 11): `complete`, `batch` and
//! `local_review`, against the fake llama-server, through the CLI and
//! through rmcp's client.
#![allow(clippy::disallowed_methods)] // signals the command it started on purpose

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::jobs::{git_init, strict_fake_opts};
use crate::support::fake_llama;
use crate::support::harness::{Harness, call, localagents, serve};
use crate::support::script::{self, Reply};

fn small() -> fake_llama::LlamaOpts {
    fake_llama::LlamaOpts {
        n_ctx: 4096,
        ..strict_fake_opts()
    }
}

/// The text of the last user message's last block.
fn prompt_of(req: &Value) -> String {
    req["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_array())
        .and_then(|c| c.last())
        .and_then(|b| b["text"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_answers_once_with_usage_and_refuses_a_prompt_that_cannot_fit() {
    let fake = fake_llama::spawn(small()).await;
    fake.set_script(Arc::new(|req| {
        Reply::Text(format!("echo: {}", prompt_of(req)))
    }));
    let e = Harness::with_fake(fake.url());
    std::fs::write(e.work().join("notes.txt"), "the file body\n").unwrap();
    let out = localagents(
        &e,
        &[
            "complete",
            "--model",
            "gemma3",
            "--system",
            "Be brief.",
            "--file",
            "notes.txt",
            "--json",
            "Summarise",
            "it.",
        ],
    )
    .await;
    let c: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(c["text"], "echo: Summarise it.", "{c}");
    assert!(c["usage"]["input"].as_u64().unwrap() > 0, "{c}");
    assert!(c["usage"]["output"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["model"], "gemma3-270m");
    assert_eq!(c["endpoint"], "box");
    assert_eq!(c["stop_reason"], "end_turn");
    let body = fake.bodies().pop().unwrap();
    assert!(body.get("tools").is_none(), "no tools: {body}");
    assert_eq!(body["system"], "Be brief.");
    assert!(
        body["messages"][0]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("<file path=\"notes.txt\">\nthe file body"),
        "{body}"
    );
    // Logged under <state>/complete/.
    let log = std::fs::read_to_string(e.state_dir().join("complete/requests.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    let done = std::fs::read_to_string(e.state_dir().join("complete/completions.jsonl")).unwrap();
    assert!(done.contains("echo: Summarise it."), "{done}");

    // Too big for 4,096 per slot: a sentence with both numbers, nothing sent.
    let sent = fake.bodies().len();
    let long = "word ".repeat(8000);
    let out = localagents(&e, &["complete", &long]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tokens; gemma3-270m has 4,096 per slot"),
        "{err}"
    );
    assert_eq!(fake.bodies().len(), sent, "nothing was sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_uses_every_endpoint_of_the_model_and_a_failing_item_fails_alone() {
    let fail_on_three: script::Script = Arc::new(|req| {
        let p = prompt_of(req);
        if p.contains("item 3") {
            Reply::Error {
                status: 500,
                body: fake_llama::err_body(500, "server_error", "CUDA error: out of memory"),
            }
        } else {
            Reply::Text(format!("answer to {p}"))
        }
    });
    let a = fake_llama::spawn(small()).await;
    let b = fake_llama::spawn(small()).await;
    a.set_script(fail_on_three.clone());
    b.set_script(fail_on_three);
    let e = Harness::with_fake(a.url());
    std::fs::write(
        e.config_path(),
        format!(
            "endpoints:\n  one:\n    base_url: {}\n    backend: llama.cpp\n  two:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  prewarm: false\n",
            a.url(),
            b.url()
        ),
    )
    .unwrap();
    let lines: String = (1..=8)
        .map(|i| format!("{{\"prompt\": \"item {i}\"}}\n"))
        .collect();
    let file = e.work().join("items.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = localagents(
        &e,
        &["batch", "--model", "gemma3-270m", "--json", "items.jsonl"],
    )
    .await;
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    let r = &v["batch"];
    assert_eq!(r["total"], 8, "{v}");
    assert_eq!(r["succeeded"], 7, "{v}");
    assert_eq!(r["failed"], 1, "{v}");
    let results = r["results"].as_array().unwrap();
    for (i, item) in results.iter().enumerate() {
        assert_eq!(item["index"], i, "input order: {item}");
        if i == 2 {
            assert_eq!(item["ok"], false, "{item}");
            assert!(
                item["error"].as_str().unwrap().contains("out of memory"),
                "{item}"
            );
        } else {
            assert_eq!(item["text"], format!("answer to item {}", i + 1), "{item}");
            assert!(item["usage"]["input"].as_u64().unwrap() > 0, "{item}");
        }
    }
    let lanes = r["lanes"].to_string();
    assert!(
        lanes.contains("one×2") && lanes.contains("two×2"),
        "{lanes}"
    );
    let (na, nb) = (a.bodies().len(), b.bodies().len());
    assert!(na > 0 && nb > 0, "both endpoints answered: {na} + {nb}");
    assert_eq!(na + nb, 8);
    // The batch is a job: its record and requests are there.
    let id = v["job_id"].as_str().unwrap();
    let rec: Value = serde_json::from_slice(
        &std::fs::read(e.state_dir().join("jobs").join(id).join("job.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["kind"], "batch");
    assert_eq!(rec["status"], "succeeded");
    // A bad line is named, and nothing runs.
    std::fs::write(&file, "{\"prompt\": \"ok\"}\nnot json\n").unwrap();
    let out = localagents(&e, &["batch", "items.jsonl"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 2: "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(a.bodies().len() + b.bodies().len(), 8);
}

/// Issue 26 (#6): a backend that answers 200 with a body that is not the
/// API's JSON (a proxy's login page, a misrouted port) is an error quoting
/// the body's first bytes, for `complete` and for each item of a `batch`:
/// never an exit 0 with an empty answer and "0 in + 0 out tokens".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_that_is_not_the_apis_json_is_an_error_not_an_empty_answer() {
    let fake = fake_llama::spawn(small()).await;
    fake.set_script(Arc::new(|_| Reply::Raw {
        content_type: "text/html",
        body: "<html><body>Please log in to the proxy</body></html>".into(),
    }));
    let e = Harness::with_fake(fake.url());
    let want = format!(
        "the backend at {} answered 200 with a body that is not the API's JSON: \"<html><body>Please log in",
        fake.url()
    );
    let out = localagents(&e, &["complete", "Say", "hi."]).await;
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "stdout {} stderr {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.contains(&want), "{err}");
    assert!(out.stdout.is_empty(), "no answer printed");

    std::fs::write(
        e.work().join("items.jsonl"),
        "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n",
    )
    .unwrap();
    let out = localagents(&e, &["batch", "--json", "items.jsonl"]).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    let results = v["batch"]["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{v}");
    for item in results {
        assert_eq!(item["ok"], false, "{item}");
        assert!(item["error"].as_str().unwrap().contains(&want), "{item}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tools_answer_through_mcp_with_errors_as_sentences() {
    let fake = fake_llama::spawn(small()).await;
    fake.set_script(Arc::new(|req| {
        Reply::Text(format!("re: {}", prompt_of(req)))
    }));
    let e = Harness::with_fake(fake.url());
    std::fs::write(e.work().join("a.txt"), "alpha\n").unwrap();
    std::fs::write(e.work().join("big.txt"), vec![b'x'; 300 * 1024]).unwrap();
    let outside = e.home().join("secret.txt");
    std::fs::write(&outside, "key\n").unwrap();
    let c = serve(&e, None).await;

    let (err, v) = call(
        &c,
        "local_complete",
        json!({"prompt": "Name it.", "files": ["a.txt"]}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["text"], "re: Name it.");
    assert!(v["ms"].as_u64().is_some(), "{v}");

    let (err, v) = call(
        &c,
        "local_complete",
        json!({"prompt": "Read.", "files": ["big.txt"]}),
    )
    .await;
    assert!(err, "{v}");
    assert!(v.as_str().unwrap().contains("at most 256 KiB"), "{v}");
    let (err, v) = call(
        &c,
        "local_complete",
        json!({"prompt": "Read.", "files": [outside]}),
    )
    .await;
    assert!(err, "{v}");
    assert!(
        v.as_str()
            .unwrap()
            .contains("outside this session's project"),
        "{v}"
    );
    let (err, v) = call(&c, "local_complete", json!({"prompt": "x ".repeat(9000)})).await;
    assert!(err, "{v}");
    assert!(v.as_str().unwrap().contains("4,096 per slot"), "{v}");
    assert!(
        !fake.bodies().iter().any(|b| b.to_string().contains("key")),
        "the outside file was never sent"
    );

    let (err, v) = call(
        &c,
        "local_batch",
        json!({"items": [{"prompt": "one"}, {"prompt": "two"}, {"prompt": "y ".repeat(9000)}]}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["still_running"], false, "{v}");
    let results = v["batch"]["results"].as_array().unwrap();
    assert_eq!(results[0]["text"], "re: one");
    assert_eq!(results[1]["text"], "re: two");
    assert_eq!(results[2]["ok"], false);
    assert!(
        results[2]["error"]
            .as_str()
            .unwrap()
            .contains("4,096 per slot"),
        "the oversized item failed alone: {v}"
    );
    let (_, st) = call(&c, "job_status", json!({"job_id": v["job_id"]})).await;
    assert_eq!(st["kind"], "batch", "{st}");
    assert_eq!(st["batch"]["succeeded"], 2, "{st}");

    // A batch that outlasts the call goes on as a job; wait_job returns
    // its results. (The server is loading its model until the call has
    // returned: the batch cannot finish first, however slow the machine.)
    fake.state
        .loading
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (err, v) = call(
        &c,
        "local_batch",
        json!({"items": [{"prompt": "later"}], "wait_s": 0}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["still_running"], true, "{v}");
    assert!(v["next"].as_str().unwrap().contains("wait_job"), "{v}");
    fake.state
        .loading
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let (_, w) = call(
        &c,
        "wait_job",
        json!({"job_id": v["job_id"], "timeout_s": 30}),
    )
    .await;
    assert_eq!(w["status"], "succeeded", "{w}");
    assert_eq!(w["batch"]["results"][0]["text"], "re: later", "{w}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_review_returns_the_parsed_verdict_and_keeps_unparsed_answers() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::write_then_report("wt.txt", "in the worktree\n"));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Create wt.txt.", "model": "gemma-3-270m", "isolation": "worktree", "wait_s": 60}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    let id = v["id"].as_str().unwrap().to_string();

    fake.set_script(Arc::new(|req| {
        let p = prompt_of(req);
        assert!(p.contains("<brief>\nCreate wt.txt.") && p.contains("+in the worktree"), "{p}");
        Reply::Text("```json\n{\"verdict\": \"problems\", \"findings\": [{\"file\": \"wt.txt\", \"line\": 1, \"what\": \"no trailing test\"}], \"summary\": \"Missing a test.\"}\n```".into())
    }));
    let (err, r) = call(&c, "local_review", json!({"job_id": id, "focus": "tests"})).await;
    assert!(!err, "{r}");
    assert_eq!(r["verdict"], "problems", "{r}");
    assert_eq!(r["findings"][0]["file"], "wt.txt");
    assert_eq!(r["findings"][0]["line"], 1);
    assert_eq!(r["summary"], "Missing a test.");
    let (_, st) = call(&c, "job_status", json!({"job_id": id})).await;
    assert_eq!(st["review"]["verdict"], "problems", "{st}");

    fake.set_script(script::text("It looks fine, I think."));
    let (err, r) = call(&c, "local_review", json!({"job_id": id})).await;
    assert!(!err, "{r}");
    assert_eq!(r["verdict"], "unparsed", "{r}");
    assert_eq!(r["summary"], "It looks fine, I think.");
    let (err, r) = call(&c, "local_review", json!({})).await;
    assert!(err, "{r}");
    c.cancel().await.unwrap();
}

/// `localagents ARGS` in `e`, sent `sig` once its request reached `fake`
/// (which never answers it): how it ended.
async fn stopped_mid_request(
    e: &Harness,
    fake: &fake_llama::FakeLlama,
    args: &[&str],
    sig: i32,
) -> std::process::Output {
    let sent = fake.bodies().len();
    let mut cmd = tokio::process::Command::from(e.command(args));
    cmd.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = cmd.spawn().unwrap();
    crate::support::until(
        &format!("{args:?}: its request reached the server"),
        Duration::from_secs(30),
        || fake.bodies().len() > sent,
    )
    .await;
    // SAFETY: the `localagents` this test started.
    unsafe { libc::kill(child.id().unwrap() as i32, sig) };
    tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{args:?}: still runs 30 s after the signal"))
        .unwrap()
}

/// Issue 43: SIGINT, SIGTERM or SIGHUP ends `complete`, `review` and
/// `batch` mid-request with the signal's exit code (130, 143, 129); the
/// batch's job is cancelled and what it has is printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_review_and_batch_end_cleanly_on_each_signal() {
    let fake = fake_llama::spawn(small()).await;
    fake.set_script(Arc::new(|_| Reply::Hang));
    let e = Harness::with_fake(fake.url());
    std::fs::write(e.work().join("items.jsonl"), "{\"prompt\": \"one\"}\n").unwrap();
    std::fs::write(
        e.work().join("change.diff"),
        "--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n",
    )
    .unwrap();
    for (name, sig, code) in [
        ("SIGINT", libc::SIGINT, 130),
        ("SIGTERM", libc::SIGTERM, 143),
        ("SIGHUP", libc::SIGHUP, 129),
    ] {
        for args in [
            &["complete", "--model", "gemma3-270m", "Say", "hello."][..],
            &["review", "--model", "gemma3-270m", "--diff", "change.diff"],
        ] {
            let out = stopped_mid_request(&e, &fake, args, sig).await;
            assert_eq!(
                out.status.code(),
                Some(code),
                "{name} to {}: ended with {}; stderr: {}",
                args[0],
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let args = ["batch", "--model", "gemma3-270m", "--json", "items.jsonl"];
        let out = stopped_mid_request(&e, &fake, &args, sig).await;
        let id = serde_json::from_slice::<Value>(&out.stdout)
            .ok()
            .and_then(|v| v["job_id"].as_str().map(str::to_string));
        let status = id.as_ref().map(|id| {
            let rec: Value = serde_json::from_slice(
                &std::fs::read(e.state_dir().join("jobs").join(id).join("job.json")).unwrap(),
            )
            .unwrap();
            rec["status"].clone()
        });
        assert_eq!(
            (out.status.code(), status),
            (Some(code), Some(json!("cancelled"))),
            "{name} to batch: ended with {}; stdout: {}; stderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
