//! The verified loop (issue 13): acceptance commands we run ourselves, fix
//! rounds in the same session, cancel during acceptance, and progress
//! notifications while a caller waits. Real Claude Code CLI, the fake
//! llama.cpp server in strict mode.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProgressNotificationParam};
use rmcp::service::NotificationContext;
use rmcp::{ClientHandler, RoleClient};
use serde_json::{Value, json};

use crate::jobs::strict_fake_opts;
use crate::support::harness::Harness;
use crate::support::harness::{call, serve};
use crate::support::{claude, fake_llama, job_processes, script, wait_job_gone};

/// The acceptance command of the fix-round test: it passes only when
/// impl.txt says "right", and says what it found otherwise.
const CHECK: &str =
    "grep -q right impl.txt || { echo \"ACCEPT-FAIL: impl.txt says $(cat impl.txt)\"; exit 1; }";

/// The scripted delegate: writes a wrong impl.txt in its first session;
/// once the fix brief (with the command's output) is in the conversation,
/// writes the right one.
fn wrong_then_right() -> script::Script {
    Arc::new(|req: &Value| {
        let fixing = req.to_string().contains("ACCEPT-FAIL");
        let n = script::tool_results(req);
        match (fixing, n) {
            (false, 0) => script::Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": "impl.txt", "content": "wrong\n"}),
            },
            (false, _) => script::Reply::Text("Done: wrote impl.txt.".into()),
            (true, 1) => script::Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": "impl.txt", "content": "right\n"}),
            },
            (true, _) => script::Reply::Text("Fixed impl.txt.".into()),
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acceptance_resumes_the_same_session_until_it_passes() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(wrong_then_right());
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let t = Instant::now();
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Write impl.txt.", "model": "gemma-3-270m", "acceptance": CHECK, "wait_s": 100}),
    )
    .await;
    let took = t.elapsed();
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    // The summary line cuts a long command at 80 characters.
    let line = v["acceptance"].as_str().unwrap();
    assert!(
        line.starts_with("acceptance passed (grep -q right impl.txt ||")
            && line.ends_with("…, 2 rounds)"),
        "{v}"
    );
    assert_eq!(
        std::fs::read_to_string(e.work().join("impl.txt")).unwrap(),
        "right\n"
    );
    let id = v["id"].as_str().unwrap();
    let rec: Value = serde_json::from_slice(
        &std::fs::read(e.state_dir().join("jobs").join(id).join("job.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(rec["acceptance"]["rounds"], 2, "{rec}");
    assert_eq!(rec["acceptance"]["passed"], true);
    assert_eq!(rec["acceptance"]["exit_code"], 0);
    // The fix round resumed the same session: its request carries the first
    // session's history and the failed command's output.
    let bodies = fake.bodies();
    let fix = bodies
        .iter()
        .find(|b| b.to_string().contains("ACCEPT-FAIL: impl.txt says wrong"))
        .expect("the fix brief reached the model with the command's output");
    let text = fix.to_string();
    assert!(
        text.contains("Write impl.txt."),
        "the resumed request keeps the task"
    );
    assert!(
        text.contains("wrong\\n"),
        "and the first session's tool call"
    );
    assert!(
        text.contains("do not weaken, skip or delete tests"),
        "{text}"
    );
    let log = std::fs::read_to_string(e.state_dir().join("jobs").join(id).join("acceptance.txt"))
        .unwrap();
    assert!(
        log.contains("== round 1") && log.contains("== round 2"),
        "{log}"
    );
    // Figures: the whole job to the second pass; the prompt of the resumed
    // turn against the job's first request (the fake counts pre-tokens).
    let reqs: Vec<Value> =
        std::fs::read_to_string(e.state_dir().join("jobs").join(id).join("requests.jsonl"))
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|r: &Value| r["path"] == "/v1/messages")
            .collect();
    eprintln!(
        "fix round: second pass after {:.1} s; {} requests; first request {} prompt tokens, the resumed turn {}",
        took.as_secs_f64(),
        reqs.len(),
        reqs[0]["usage"]["input"],
        reqs[2]["usage"]["input"]
    );
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_never_passes_fails_the_job_after_all_rounds() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text("All done, tests pass."));
    let e = Harness::with_fake(fake.url());
    let out = tokio::process::Command::from(e.cmd())
        .args([
            "run",
            "--model",
            "gemma-3-270m",
            "--json",
            "--accept",
            "echo NOPE-15; exit 3",
            "--fix-rounds",
            "1",
            "Make the tests pass.",
        ])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap();
    assert!(
        err.starts_with("acceptance failed after 2 rounds: exit 3 (`echo NOPE-15; exit 3`)"),
        "{err}"
    );
    assert_eq!(rec["acceptance"]["rounds"], 2);
    assert!(
        rec["acceptance"]["output_tail"]
            .as_str()
            .unwrap()
            .contains("NOPE-15")
    );
    // The delegate's own report is kept.
    assert_eq!(rec["result"], "All done, tests pass.", "{rec}");
    // Two sessions: the first and one fix round.
    let briefs = fake
        .bodies()
        .iter()
        .filter(|b| b.to_string().contains("NOPE-15"))
        .count();
    assert!(briefs >= 1, "the fix round got the output");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_acceptance_stops_the_command() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text("done"));
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Nothing.", "model": "gemma-3-270m", "acceptance": "tail -f /dev/null"}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    crate::support::until(
        "the acceptance command starts",
        Duration::from_secs(30),
        || {
            job_processes(&id)
                .iter()
                .any(|(_, c)| c.contains("tail -f /dev/null"))
        },
    )
    .await;
    let (_, v) = call(&c, "cancel_job", json!({"job_id": id})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    let gone = wait_job_gone(&id, Duration::from_secs(5));
    assert!(
        gone.is_ok(),
        "the acceptance command outlived the cancel: {gone:?}"
    );
    c.cancel().await.unwrap();
}

/// A client that keeps the progress notifications it gets.
#[derive(Clone, Default)]
struct Progress(Arc<Mutex<Vec<ProgressNotificationParam>>>);

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.0.lock().unwrap().push(params);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_with_a_progress_token_gets_progress() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![
            ("Bash", json!({"command": "sleep 3", "description": "wait"})),
            (
                "Bash",
                json!({"command": "sleep 3", "description": "wait again"}),
            ),
        ],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let seen = Progress::default();
    let h = e
        .clone()
        .claude(claude::binary())
        .serve_with(seen.clone())
        .await;
    let c = &h.client;
    let params = CallToolRequestParams::new("run_agent").with_arguments(
        json!({"task": "Wait twice.", "model": "gemma-3-270m", "allowed_tools": ["Bash"], "wait_s": 100})
            .as_object()
            .cloned()
            .unwrap(),
    );
    // rmcp's client, like Claude Code, puts a progress token on every request.
    let r = c.call_tool(params).await.unwrap();
    let text = r.content[0].as_text().unwrap().text.clone();
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["status"], "succeeded", "{v}");
    let got = seen.0.lock().unwrap().clone();
    assert!(!got.is_empty(), "no progress notification");
    assert!(
        got.iter()
            .all(|p| p.progress_token == got[0].progress_token),
        "one token for the call"
    );
    let messages: Vec<String> = got.iter().filter_map(|p| p.message.clone()).collect();
    assert!(
        messages
            .iter()
            .any(|m| m.contains("turn ") && m.contains("tool calls")),
        "{messages:?}"
    );
    assert!(
        got.windows(2).all(|w| w[1].progress > w[0].progress),
        "progress increases"
    );
    h.cancel().await;
}
