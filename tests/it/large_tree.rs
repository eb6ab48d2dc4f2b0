//! Jobs on a large tree (issue 34): a worktree job's checkout is a phase
//! of the job on the blocking pool, so `serve` keeps answering and other
//! jobs keep relaying while git writes 20,000 files. Every check is an
//! order of events (the record's own timestamps against what the test
//! saw), never a time threshold.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rmcp::model::ClientRequest;
use serde_json::{Value, json};

use crate::support::harness::{Harness, Served};
use crate::support::script::{self, Reply};
use crate::support::{fake_llama, git, until};

/// Files in the test repository: a checkout takes seconds here, an MCP
/// round trip a millisecond.
const FILES: usize = 20_000;

/// A copy of the cached large repository for one test (its history only;
/// a worktree job checks out from HEAD).
async fn large_copy(dir: &Path) -> PathBuf {
    let dst = dir.join("monorepo");
    let d = dst.clone();
    tokio::task::spawn_blocking(move || {
        let src = git::large_repo(FILES);
        git::clone_no_checkout(&src, &d);
    })
    .await
    .unwrap();
    dst
}

/// The fake as the endpoint; jobs may also run under `root` (the test's
/// temp dir), beside the project.
fn config(url: &str, root: &Path) -> String {
    format!(
        "endpoints:\n  box:\n    base_url: {url}\n    backend: llama.cpp\nmodels:\n  gemma-3-270m:\n    notes: tiny test model\ndefaults:\n  max_turns: 80\n  setting_sources: []\n  prewarm: false\n  queue: false\n  allowed_roots: [{}]\n",
        serde_json::to_string(&root.display().to_string()).unwrap()
    )
}

/// The fake answering with `script`, and `serve` in a copy of the large
/// repository (its project); jobs may run anywhere under the test's temp
/// dir.
async fn serve_on_large_tree(script: script::Script) -> (fake_llama::FakeLlama, Served, PathBuf) {
    serve_on_large_tree_with(script, None).await
}

/// [`serve_on_large_tree`], every checkout held at its start until the
/// file `hold` exists, when one is given.
async fn serve_on_large_tree_with(
    script: script::Script,
    hold: Option<&Path>,
) -> (fake_llama::FakeLlama, Served, PathBuf) {
    let fake = fake_llama::spawn(crate::jobs::strict_fake_opts()).await;
    fake.set_script(script);
    let mut h = Harness::new();
    let cfg = config(fake.url(), h.dir());
    h = h.config(&cfg);
    if let Some(hold) = hold {
        h = h.env("LOCALAGENTS_TEST_HOLD_CHECKOUT", hold);
    }
    let repo = large_copy(h.dir()).await;
    let s = h.cwd(&repo).serve().await;
    (fake, s, repo)
}

fn parse(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

fn ts(v: &Value) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a timestamp: {v}")))
        .unwrap_or_else(|e| panic!("{v}: {e}"))
        .with_timezone(&Utc)
}

/// A job's record as its owner last wrote it.
fn record(state: &Path, id: &str) -> Value {
    let text = std::fs::read_to_string(state.join("jobs").join(id).join("job.json"))
        .unwrap_or_else(|e| panic!("job {id}'s record: {e}"));
    serde_json::from_str(&text).unwrap()
}

/// Wait until job `id` has ended; its record.
async fn ended(s: &Served, id: &str) -> Value {
    loop {
        let (_, text) = s
            .call("wait_job", json!({"job_id": id, "timeout_s": 100}))
            .await;
        let v = parse(&text);
        if v["still_running"] == false {
            return record(s.state_dir(), id);
        }
    }
}

/// When a job's worktree existed, from its record: the end of its
/// checkout phase, or, for a record with no such phase (a build that made
/// the worktree inside the `run_agent` call, before the record), the
/// record's creation.
fn checkout_end(rec: &Value) -> DateTime<Utc> {
    match rec["prepare"]["finished"].as_str() {
        Some(_) => ts(&rec["prepare"]["finished"]),
        None => ts(&rec["created"]),
    }
}

async fn ping(s: &Served) -> DateTime<Utc> {
    s.client
        .peer()
        .send_request(ClientRequest::PingRequest(Default::default()))
        .await
        .expect("ping");
    Utc::now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_answers_while_three_worktree_jobs_check_out_a_large_tree() {
    let (_fake, s, _repo) =
        serve_on_large_tree(script::text("Looked around; nothing to change.")).await;

    // Three worktree jobs at once, and pings sent after them.
    let start = |n: usize| {
        s.call(
            "run_agent",
            json!({"task": format!("Look around ({n})."), "model": "gemma-3-270m", "isolation": "worktree"}),
        )
    };
    let (a, b, c, pinged) = tokio::join!(start(1), start(2), start(3), async {
        tokio::task::yield_now().await;
        let mut at = Vec::new();
        for _ in 0..5 {
            at.push(ping(&s).await);
        }
        at
    });
    let answered = Utc::now();
    let mut ids = Vec::new();
    for (err, text) in [a, b, c] {
        assert!(!err, "{text}");
        let v = parse(&text);
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        let rec = ended(&s, id).await;
        let done = checkout_end(&rec);
        // Every ping was answered, and every run_agent call too, before
        // this job's worktree existed.
        for (i, p) in pinged.iter().enumerate() {
            assert!(
                *p < done,
                "ping {i} was answered at {p}, after job {id}'s checkout ended at {done}"
            );
        }
        assert!(
            answered < done,
            "run_agent answered at {answered}, after job {id}'s checkout ended at {done}: {rec}"
        );
        assert_eq!(rec["status"], "succeeded", "{rec}");
        assert_eq!(rec["prepare"]["files"], FILES, "{rec}");
    }
    s.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_in_its_checkout_says_so_and_cancel_leaves_no_worktree_or_branch() {
    // The checkout waits for `gate` at its start: the calls below land
    // during it however fast the machine is.
    let gate_dir = Harness::new();
    let gate = gate_dir.dir().join("go");
    let (fake, s, repo) = serve_on_large_tree_with(script::text("done"), Some(&gate)).await;

    let (err, text) = s
        .call(
            "run_agent",
            json!({"task": "Look around.", "model": "gemma-3-270m", "isolation": "worktree"}),
        )
        .await;
    assert!(!err, "{text}");
    let v = parse(&text);
    let id = v["id"].as_str().unwrap().to_string();
    let phase = "preparing: creating the worktree (20,000 files)";
    // The answer, and job_status while git writes, name the phase.
    assert_eq!(v["last_activity"], phase, "{v}");
    let (_, text) = s.call("job_status", json!({"job_id": id})).await;
    let st = parse(&text);
    let (_, text) = s.call("list_jobs", json!({})).await;
    let list = parse(&text);
    let (_, text) = s.call("cancel_job", json!({"job_id": id})).await;
    let cancelled = parse(&text);
    let rec = record(s.state_dir(), &id);
    // Order: job_status and list_jobs answered, then the cancel, all
    // while the checkout was held.
    assert_eq!(st["last_activity"], phase, "{st}");
    assert_eq!(st["status"], "queued", "{st}");
    let item = list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["id"] == id.as_str())
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(item["waiting"], phase, "{item}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(rec["status"], "cancelled", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("cancelled while git checked out its worktree (20,000 files)"),
        "{rec}"
    );
    // Git's checkout cannot be interrupted while it writes: once it
    // returns, what it made goes, branch included.
    std::fs::write(&gate, "").unwrap();
    let wt = s.state_dir().join("worktrees").join(&id);
    let branch = format!("local-agent/{id}");
    let meta = repo.join(".git/worktrees").join(&id);
    until(
        "the cancelled job's worktree and branch removed",
        Duration::from_secs(120),
        || !wt.exists() && !meta.exists() && !git::has_branch(&repo, &branch),
    )
    .await;
    // No request reached the model.
    assert!(fake.bodies().is_empty(), "{:?}", fake.hits());
    s.cancel().await;
}

/// Does this request come from job A (its cwd is the small repository)?
fn from_small(req: &Value) -> bool {
    req.to_string().contains("small-repo")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_relay_goes_on_while_two_others_check_out_a_large_tree() {
    // Job A (in the small repository) runs `echo` turn after turn until the
    // test opens the gate; the others answer at once.
    let gate = Arc::new(AtomicBool::new(false));
    let g = gate.clone();
    let script: script::Script = Arc::new(move |req: &Value| {
        if !from_small(req) || req.get("tools").is_none() {
            return Reply::Text("done".into());
        }
        if g.load(Ordering::SeqCst) {
            Reply::Text("Ran echo until told to stop.".into())
        } else {
            // A new command each turn: the same call again is a loop.
            let n = script::tool_results(req);
            Reply::Tool {
                name: "Bash".into(),
                input: json!({"command": format!("sleep 0.2; echo turn {n}"), "description": "wait"}),
            }
        }
    });
    let (_fake, s, _repo) = serve_on_large_tree(script).await;
    let small = s.dir().join("small-repo");
    git::repo(&small);

    let (err, text) = s
        .call(
            "run_agent",
            json!({"task": "Run echo until told to stop.", "model": "gemma-3-270m", "cwd": small, "allowed_tools": ["Bash"], "max_turns": 2000}),
        )
        .await;
    assert!(!err, "{text}");
    let a = parse(&text)["id"].as_str().unwrap().to_string();
    let a_log = s.state_dir().join("jobs").join(&a).join("requests.jsonl");
    // A is relaying before B and C start.
    until("job A's first requests", Duration::from_secs(120), || {
        std::fs::read_to_string(&a_log).is_ok_and(|t| t.lines().count() >= 2)
    })
    .await;
    let mut others = Vec::new();
    for n in 0..2 {
        let (err, text) = s
            .call(
                "run_agent",
                json!({"task": format!("Look around ({n})."), "model": "gemma-3-270m", "isolation": "worktree"}),
            )
            .await;
        assert!(!err, "{text}");
        others.push(parse(&text)["id"].as_str().unwrap().to_string());
    }
    let mut windows = Vec::new();
    for id in &others {
        let rec = ended(&s, id).await;
        windows.push((ts(&rec["prepare"]["started"]), checkout_end(&rec)));
    }
    gate.store(true, Ordering::SeqCst);
    let rec_a = ended(&s, &a).await;
    assert_eq!(rec_a["status"], "succeeded", "{rec_a}");
    // Job A's requests that began and ended inside both checkouts.
    let (from, to) = (
        windows.iter().map(|w| w.0).max().unwrap(),
        windows.iter().map(|w| w.1).min().unwrap(),
    );
    let log = std::fs::read_to_string(&a_log).unwrap();
    let inside: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["path"] == "/v1/messages" && r["status"] == 200)
        .filter(|r| {
            let start = ts(&r["ts"]);
            let end = start + chrono::Duration::milliseconds(r["ms"].as_i64().unwrap());
            start > from && end < to
        })
        .collect();
    assert!(
        !inside.is_empty(),
        "job A relayed no whole request while B and C checked out ({from} to {to}): {log}"
    );
    s.cancel().await;
}
