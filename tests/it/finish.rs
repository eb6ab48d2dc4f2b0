//! A delegate that finishes what it starts (issue 46), through the real
//! Claude Code CLI and `localagents run`, against the fake llama.cpp
//! server scripted as a small model that stops early: it announces a step
//! and ends its turn without the tool call, once or every time, or it needs
//! more turns than it has. The nudge resumes it once; a delegate that
//! stops again, or runs out of turns, ends `failed` with `incomplete` and
//! the step that was pending; the last three turns carry the turn budget's
//! note inside the tool result, and the prompt stays append-only.

use serde_json::{Value, json};

use crate::faults::requests;
use crate::jobs::strict_fake_opts;
use crate::support::harness::{Harness, hook_line, localagents_json};
use crate::support::script;
use crate::support::{early_stops, fake_llama};

use early_stops::NUDGE;

/// `localagents run --json ARGS…`: the job record.
async fn run_json(e: &Harness, args: &[&str]) -> Value {
    let mut all = vec!["run", "--model", "gemma-3-270m", "--json"];
    all.extend_from_slice(args);
    localagents_json(e, &all).await
}

/// Does the request's last user message hold the nudge?
fn nudged(req: &Value) -> bool {
    req["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .is_some_and(|m| m.to_string().contains(NUDGE))
}

/// The conversation requests (with tools) the fake answered.
fn turns(fake: &fake_llama::FakeLlama) -> Vec<Value> {
    fake.bodies()
        .into_iter()
        .filter(|b| b.get("tools").is_some())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_that_announces_and_stops_is_nudged_once_and_finishes() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let file = e.work().join("notes.txt");
    fake.set_script(early_stops::announcer(
        "I'll now write notes.txt.",
        file.display().to_string(),
        true,
    ));
    let rec = run_json(&e, &["Write notes.txt."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert!(file.exists(), "the step was taken after the nudge");
    assert_eq!(
        rec["ending"],
        json!({"nudges": [{"after": "I'll now write notes.txt.", "resumed": true}]}),
        "{rec}"
    );
    let t = turns(&fake);
    assert_eq!(
        t.iter().filter(|b| nudged(b)).count(),
        1,
        "one request answers the nudge ({} turns in all)",
        t.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delegate_that_stops_again_after_its_nudge_ends_incomplete_with_the_step() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let file = e.work().join("notes.txt");
    fake.set_script(early_stops::announcer(
        "Next, I will write notes.txt.",
        file.display().to_string(),
        false,
    ));
    let rec = run_json(&e, &["Write notes.txt."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap();
    assert!(
        err.starts_with("incomplete: the delegate stopped after announcing a step it did not take, again after a nudge: \"Next, I will write notes.txt.\""),
        "{err}"
    );
    assert_eq!(rec["ending"]["nudges"].as_array().map(Vec::len), Some(1));
    assert_eq!(rec["ending"]["nudges"][0]["resumed"], false);
    assert_eq!(rec["ending"]["incomplete"]["why"], "announced");
    let t = turns(&fake);
    assert_eq!(t.len(), 2, "the first turn and exactly one nudge");
    assert!(!nudged(&t[0]) && nudged(&t[1]));
    // The summary and the hook line say it is incomplete, not a crash.
    let line = hook_line(&e).await;
    assert!(line.contains("incomplete"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nudges_0_ends_incomplete_without_asking() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let cfg = std::fs::read_to_string(e.config_path()).unwrap();
    let e = e.config(&cfg.replace("defaults:\n", "defaults:\n  nudges: 0\n"));
    fake.set_script(script::text("Let me check the file:"));
    let rec = run_json(&e, &["Check the file."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap()
            .contains("(defaults.nudges is 0: it was not asked to go on)"),
        "{rec}"
    );
    assert!(rec["ending"].get("nudges").is_none(), "{rec}");
    assert_eq!(turns(&fake).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_turns_the_last_three_turns_carry_the_note_and_the_job_ends_incomplete() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        prefix_cache: true,
        ..strict_fake_opts()
    })
    .await;
    let e = Harness::with_fake(fake.url());
    fake.set_script(early_stops::eight_writes(e.work().to_path_buf()));
    let rec = run_json(&e, &["--max-turns", "5", "Write f0.txt to f7.txt."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap();
    assert!(
        err.starts_with(
            "incomplete: the delegate used all 5 turns (max_turns) with work pending: "
        ),
        "{err}"
    );
    assert!(
        err.contains("f4.txt"),
        "the last turn's call is named: {err}"
    );
    assert_eq!(rec["ending"]["incomplete"]["why"], "max_turns", "{rec}");
    assert!(
        rec["ending"].get("nudges").is_none(),
        "no nudge on a turn limit"
    );
    // The delegate knew its budget from the start.
    let t = turns(&fake);
    assert!(
        t[0].to_string().contains("Turn budget: 5 turns"),
        "{}",
        t[0]["messages"]
    );
    // Turns 3, 4 and 5 carry the note, inside the tool result they answer.
    let note_of = |b: &Value| -> Vec<u32> {
        (1..=5)
            .filter(|k| {
                b.to_string().contains(&format!("turn {k} of 5"))
                    || (*k == 5 && b.to_string().contains("last turn (5 of 5)"))
            })
            .collect()
    };
    for b in &t {
        let k = script::tool_results(b) + 1;
        let want: Vec<u32> = (3..=k as u32).collect();
        assert_eq!(note_of(b), want, "turn {k}: {}", b["messages"]);
    }
    let third = &t[2];
    let last_user = third["messages"].as_array().unwrap().last().unwrap();
    let result = last_user["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap();
    assert!(result.to_string().contains("turn 3 of 5"), "{last_user}");
    let logged: Vec<String> = requests(&rec)
        .iter()
        .filter_map(|r| r["turn_note"].as_str().map(String::from))
        .collect();
    assert_eq!(logged.len(), 3, "{logged:?}");
    // The note keeps the prefix: each request after it begins with all of
    // the one before (Claude Code's moving cache marks aside), and the
    // fake's cache served all of the previous prompt.
    for w in t.windows(2).skip(1) {
        assert!(
            localagents::shim::fold::is_content_prefix(&w[0], &w[1]),
            "not append-only: {} then {}",
            w[0]["messages"],
            w[1]["messages"]
        );
    }
    let prompts = fake.state.prompts.lock().unwrap().clone();
    for k in 3..prompts.len() {
        let (prev_total, _) = prompts[k - 1];
        let (_, cached) = prompts[k];
        assert!(
            cached + 2 >= prev_total,
            "request {} found {cached} of the previous {prev_total} tokens cached: {prompts:?}",
            k + 1
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_with_an_acceptance_command_gets_fix_rounds_not_a_nudge() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    fake.set_script(script::text("I'll now write notes.txt."));
    let rec = run_json(
        &e,
        &[
            "--accept",
            "test -f notes.txt",
            "--fix-rounds",
            "1",
            "Write notes.txt.",
        ],
    )
    .await;
    assert_eq!(rec["status"], "failed", "{rec}");
    assert_eq!(rec["acceptance"]["rounds"], 2, "{rec}");
    assert!(rec.get("ending").is_none(), "{rec}");
    let t = turns(&fake);
    assert!(t.iter().all(|b| !nudged(b)), "no nudge");
    assert!(
        t.last().unwrap().to_string().contains("test -f notes.txt"),
        "the fix round resumed the session with the command"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_models_early_stops_are_nudged_and_resumed() {
    for stop in early_stops::STOPS {
        let fake = fake_llama::spawn(strict_fake_opts()).await;
        let e = Harness::with_fake(fake.url());
        let file = e.work().join("out.txt");
        fake.set_script(early_stops::replay(stop, file.display().to_string()));
        let rec = run_json(&e, &["Write out.txt."]).await;
        assert_eq!(rec["status"], "succeeded", "{}: {rec}", stop.source);
        assert_eq!(
            rec["ending"]["nudges"][0]["resumed"], true,
            "{}: {rec}",
            stop.source
        );
        assert!(file.exists(), "{}", stop.source);
    }
}
