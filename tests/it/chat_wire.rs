//! The chat wire (issue 53) through the real Claude Code CLI and
//! `localagents run`: a job on llama.cpp goes to `/v1/chat/completions`
//! pinned to its slot; two jobs at once keep one slot each; a server
//! without the endpoint, or one that refuses `id_slot`, gets the job's
//! requests on `/v1/messages` after one try, said once; a stream cut in
//! the middle of a call's arguments never runs half a call; two parallel
//! calls in one answer both run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::faults::requests;
use crate::jobs::strict_fake_opts;
use crate::support::fake_llama::{self, LlamaOpts};
use crate::support::harness::{Harness, call, localagents_json, serve};
use crate::support::script::{self, Reply};

async fn run_json(e: &Harness, args: &[&str]) -> Value {
    let mut all = vec!["run", "--model", "gemma3-270m", "--json"];
    all.extend_from_slice(args);
    localagents_json(e, &all).await
}

/// Whether a request log line's prompt came mostly from the cache (over
/// five in six of its tokens).
fn found_its_prefix(r: &Value) -> bool {
    let (input, cached) = (
        r["usage"]["input"].as_u64().unwrap(),
        r["usage"]["cache_read"].as_u64().unwrap(),
    );
    cached > 5 * input
}

/// Bash `echo <word>` `turns` times, then a report.
fn bash_turns(turns: usize) -> script::Script {
    Arc::new(move |req: &Value| {
        let n = script::tool_results(req);
        if n < turns {
            Reply::Tool {
                name: "Bash".into(),
                input: json!({"command": format!("echo step-{n}"), "description": "step"}),
            }
        } else {
            Reply::Text("Done: every step ran.".into())
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_on_llama_cpp_is_pinned_to_its_slot_and_its_turns_stay_cached() {
    let fake = fake_llama::spawn(LlamaOpts {
        prefix_cache: true,
        ..strict_fake_opts()
    })
    .await;
    fake.set_script(bash_turns(3));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Run the three steps."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let chat = fake.chat_bodies();
    assert_eq!(chat.len(), 4, "every turn on the chat wire: {chat:?}");
    assert!(
        fake.hits().iter().all(|h| h != "/v1/messages"),
        "{:?}",
        fake.hits()
    );
    for b in &chat {
        assert_eq!(b["id_slot"], 0, "the job's lease is slot 0: {b}");
        assert_eq!(b["timings_per_token"], true);
        // The strict template's rule holds on this wire too: one system
        // message, first.
        let roles: Vec<&str> = b["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect();
        assert_eq!(
            roles.iter().filter(|r| **r == "system").count(),
            1,
            "{roles:?}"
        );
        assert_eq!(roles[0], "system");
    }
    let reqs = requests(&rec);
    assert_eq!(reqs.len(), 4, "{reqs:?}");
    for r in &reqs {
        assert_eq!(r["slot"], 0, "the log says which slot: {r}");
    }
    for r in &reqs[1..] {
        assert!(
            found_its_prefix(r),
            "a later turn finds its prefix on its slot: {r}"
        );
    } // The record, and so job_status, the page's Cache row and the prompt
    // hook's line, say which slot and how many turns found their prefix.
    let said = "held slot 0: 3 of 3 later turns found their prefix in its cache";
    assert_eq!(rec["cache_note"], said, "{rec}");
    let line = crate::support::harness::hook_line(&e).await;
    assert!(line.contains(said), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_jobs_at_once_keep_one_slot_each() {
    let fake = fake_llama::spawn(LlamaOpts {
        prefix_cache: true,
        slots: 2,
        ..strict_fake_opts()
    })
    .await;
    fake.set_script(bash_turns(3));
    let e = Harness::with_fake(fake.url());
    let (a, b) = tokio::join!(
        run_json(&e, &["Run the three steps, alpha."]),
        run_json(&e, &["Run the three steps, beta."])
    );
    let mut slots = Vec::new();
    for rec in [&a, &b] {
        assert_eq!(rec["status"], "succeeded", "{rec}");
        let reqs = requests(rec);
        let mine: Vec<u64> = reqs.iter().map(|r| r["slot"].as_u64().unwrap()).collect();
        assert!(
            mine.iter().all(|s| *s == mine[0]),
            "one slot for the whole job: {mine:?}"
        );
        slots.push(mine[0]);
        for r in &reqs[1..] {
            assert!(
                found_its_prefix(r),
                "no turn lost its slot's cache to the other job: {r}"
            );
        }
    }
    slots.sort_unstable();
    assert_eq!(slots, [0, 1], "the two jobs hold the two slots");
}

/// A server without `/v1/chat/completions` (404), and one that refuses
/// `id_slot` (400 naming it): one try, then every request of the job on
/// `/v1/messages`, and the log says why once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_chat_wire_gets_the_job_on_messages_after_one_try() {
    for (opts, status) in [
        (
            LlamaOpts {
                chat: false,
                ..strict_fake_opts()
            },
            404,
        ),
        (
            LlamaOpts {
                chat_refuses_id_slot: true,
                ..strict_fake_opts()
            },
            400,
        ),
    ] {
        let fake = fake_llama::spawn(opts).await;
        fake.set_script(bash_turns(2));
        let e = Harness::with_fake(fake.url());
        let rec = run_json(&e, &["Run the two steps."]).await;
        assert_eq!(rec["status"], "succeeded", "{rec}");
        let hits = fake.hits();
        let tries = hits.iter().filter(|h| *h == "/v1/chat/completions").count();
        assert_eq!(tries, 1, "one try on the chat wire: {hits:?}");
        assert_eq!(fake.bodies().len(), 3, "then every turn on /v1/messages");
        let reqs = requests(&rec);
        let said: Vec<&Value> = reqs
            .iter()
            .filter(|r| {
                r["translated"]
                    .as_str()
                    .is_some_and(|t| t.contains("chat_refused"))
            })
            .collect();
        assert_eq!(said.len(), 1, "said once: {reqs:?}");
        assert!(
            said[0]["translated"]
                .as_str()
                .unwrap()
                .contains(&format!("chat_refused {status}"))
        );
        assert!(
            reqs.iter().all(|r| r["slot"].is_null()),
            "nothing was pinned: {reqs:?}"
        );
    }
}

/// A stream that ends in the middle of a call's arguments: the call never
/// reaches Claude Code whole, so nothing runs with half its input; the
/// request is logged as cut and the next answer finishes the job.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_in_a_calls_arguments_runs_no_half_call() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let tries = Arc::new(AtomicU64::new(0));
    let t = tries.clone();
    fake.set_script(Arc::new(move |_req: &Value| {
        if t.fetch_add(1, Ordering::SeqCst) == 0 {
            let start = json!({"type": "message_start", "message": {"id": script::msg_id(), "type": "message", "role": "assistant",
                "model": "gemma3-270m", "content": [], "usage": {"input_tokens": 900, "cache_read_input_tokens": 0, "output_tokens": 0}}});
            let block = json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_cut", "name": "Bash", "input": {}}});
            let half = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"touch HALF"}});
            Reply::RawSse(format!(
                "event: message_start\ndata: {start}\n\nevent: content_block_start\ndata: {block}\n\nevent: content_block_delta\ndata: {half}\n\n"
            ))
        } else {
            Reply::Text("Nothing to do.".into())
        }
    }));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Touch a file."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["tool_calls"], 0, "no call ran: {rec}");
    assert!(!e.work().join("HALF").exists());
    let reqs = requests(&rec);
    assert!(
        reqs[0]["translated"]
            .as_str()
            .is_some_and(|t| t.contains("stream_cut")),
        "the cut is in the log: {reqs:?}"
    );
    assert!(fake.chat_bodies().len() >= 2, "both on the chat wire");
}

/// Two calls in one answer: both reach Claude Code as `tool_use` blocks
/// of one message, both run, and both results go back in one turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_calls_in_one_answer_both_run() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(Arc::new(|req: &Value| match script::tool_results(req) {
        0 => Reply::Tools(vec![
            (
                "Bash".into(),
                json!({"command": "echo left > left.txt", "description": "left"}),
            ),
            (
                "Bash".into(),
                json!({"command": "echo right > right.txt", "description": "right"}),
            ),
        ]),
        _ => Reply::Text("Both files written.".into()),
    }));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Write two files."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(rec["tool_calls"], 2, "{rec}");
    for f in ["left.txt", "right.txt"] {
        assert!(e.work().join(f).exists(), "{f} was written");
    }
    let chat = fake.chat_bodies();
    let last = chat.last().unwrap()["messages"].as_array().unwrap().clone();
    let calls = last
        .iter()
        .rev()
        .find(|m| m["role"] == "assistant")
        .unwrap()["tool_calls"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        calls, 2,
        "the two calls went back as one assistant message: {last:?}"
    );
    assert_eq!(last.iter().filter(|m| m["role"] == "tool").count(), 2);
}

/// A resumed job starts warm: a job pinned to its slot has the slot saved
/// on the server when it ends (a server with `--slot-save-path`); another
/// job then takes the slot; the resumed job gets the saved file restored
/// into its slot before its session, so its first request finds its
/// conversation there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_job_has_its_saved_slot_restored() {
    let fake = fake_llama::spawn(LlamaOpts {
        prefix_cache: true,
        slot_save_path: true,
        slots: 1,
        ..strict_fake_opts()
    })
    .await;
    fake.set_script(bash_turns(2));
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let run = |task: &str, resume: Option<&str>| {
        let mut args = json!({"task": task, "model": "gemma3-270m", "wait_s": 120});
        if let Some(id) = resume {
            args["resume_job"] = json!(id);
        }
        args
    };
    let (err, a) = call(&c, "run_agent", run("Alpha: run the two steps.", None)).await;
    assert!(!err && a["status"] == "succeeded", "{a}");
    let a_id = a["id"].as_str().unwrap().to_string();
    let actions = || fake.state.slot_actions.lock().unwrap().clone();
    let saved_as = actions()
        .into_iter()
        .find(|(act, slot, _, code)| act == "save" && *slot == 0 && *code == 200)
        .map(|(_, _, file, _)| file)
        .unwrap_or_else(|| panic!("the job's slot was saved: {:?}", actions()));
    let (err, b) = call(
        &c,
        "run_agent",
        run("Beta: another job on the one slot.", None),
    )
    .await;
    assert!(!err && b["status"] == "succeeded", "{b}");
    let (err, r) = call(&c, "run_agent", run("Now say done.", Some(&a_id))).await;
    assert!(!err && r["status"] == "succeeded", "{r}");
    assert!(
        actions()
            .iter()
            .any(|(act, slot, file, code)| act == "restore"
                && *slot == 0
                && *file == saved_as
                && *code == 200),
        "A's file restored into the slot: {:?}",
        actions()
    );
    let dir = e.state_dir().join("jobs").join(r["id"].as_str().unwrap());
    let first: Value = std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["path"] == "/v1/messages")
        .unwrap();
    assert!(
        found_its_prefix(&first),
        "the resumed session's first request found its conversation: {first}"
    );
}

/// `doctor` says whether a llama-server saves slots for resumed jobs, and
/// names the flag where it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_whether_a_server_saves_slots_and_names_the_flag() {
    for (save, said) in [
        (false, "start llama-server with --slot-save-path DIR"),
        (
            true,
            "saves a job's slot when it ends and restores it when the job resumes",
        ),
    ] {
        let fake = fake_llama::spawn(LlamaOpts {
            slot_save_path: save,
            ..strict_fake_opts()
        })
        .await;
        let e = Harness::with_fake(fake.url());
        let out = crate::support::harness::localagents(&e, &["doctor"]).await;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(text.contains(said), "{text}");
        let asked = fake.state.slot_actions.lock().unwrap().clone();
        assert_eq!(asked.len(), 1, "one question, nothing saved: {asked:?}");
        assert_eq!(asked[0].2, "", "asked with an empty file name");
    }
}

/// What a guard's case runs on a fake and asserts of the job it ends.
struct GuardCase {
    name: &'static str,
    opts: fn() -> LlamaOpts,
    /// Sets the fake's script (and the files it needs); the job's args.
    setup: fn(&fake_llama::FakeLlama, &Harness) -> Vec<&'static str>,
    check: fn(&Value, &Harness, &fake_llama::FakeLlama),
}

/// Every guard of the shim acts the same on both wires: each case runs a
/// real Claude Code job once with `wire: messages` and once on the chat
/// wire (the rule's choice on llama.cpp), and the same checks hold, as
/// their own tests check them on one wire: the fold of system entries
/// (the strict template), the repair of a call written as text, the
/// runaway guard, the loop guard, the truncation guard and the turn notes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_acts_the_same_on_both_wires() {
    let cases = [
        GuardCase {
            name: "fold",
            opts: strict_fake_opts,
            setup: |f, _| {
                f.set_script(bash_turns(2));
                vec!["Run the two steps."]
            },
            check: |rec, _, f| {
                assert_eq!(rec["status"], "succeeded", "{rec}");
                assert!(
                    requests(rec)
                        .iter()
                        .any(|r| r["folded_system"].as_u64().unwrap_or(0) > 0),
                    "{rec}"
                );
                assert_eq!(
                    f.state
                        .system_entries_seen
                        .load(std::sync::atomic::Ordering::SeqCst),
                    0
                );
            },
        },
        GuardCase {
            name: "repair",
            opts: strict_fake_opts,
            setup: |f, e| {
                let file = crate::faults::calc_py(e);
                let xml = format!(
                    "<tool_call>\n<function=Edit>\n<parameter=file_path>\n{}\n</parameter>\n<parameter=old_string>\n    return n - 1\n</parameter>\n<parameter=new_string>\n    return n\n</parameter>\n</function>\n</tool_call>",
                    file.display()
                );
                f.set_script(crate::faults::read_then_text_edit(
                    file.to_str().unwrap(),
                    xml,
                ));
                vec!["--max-turns", "6", "Fix the off-by-one in calc.py."]
            },
            check: |rec, e, _| {
                assert_eq!(rec["status"], "succeeded", "{rec}");
                assert_eq!(rec["model_faults"]["repaired_tool_calls"], 1, "{rec}");
                let calc = std::fs::read_to_string(e.work().join("calc.py")).unwrap();
                assert_eq!(calc, "def last(n):\n    return n\n");
            },
        },
        GuardCase {
            name: "runaway",
            opts: strict_fake_opts,
            setup: |f, _| {
                let text = crate::faults::gemma_runaway();
                f.set_script(Arc::new(move |_: &Value| Reply::Runaway(text.clone())));
                vec!["Fix the failing test in calc.py."]
            },
            check: |rec, _, _| {
                assert_eq!(rec["status"], "failed", "{rec}");
                let why = rec["error"].as_str().unwrap_or_default();
                assert!(
                    why.starts_with("runaway output: the model repeated one line 20 times ("),
                    "{rec}"
                );
                assert_eq!(rec["model_faults"]["runaway_output"]["count"], 2, "{rec}");
            },
        },
        GuardCase {
            name: "loop",
            opts: strict_fake_opts,
            setup: |f, _| {
                f.set_script(Arc::new(|_: &Value| Reply::Tool {
                    name: "Bash".into(),
                    input: json!({"command": "echo same-result", "description": "Run it"}),
                }));
                vec!["--max-turns", "12", "Make the tests pass."]
            },
            check: |rec, _, _| {
                assert_eq!(rec["status"], "failed", "{rec}");
                let why = rec["error"].as_str().unwrap_or_default();
                assert!(why.starts_with("stuck: the model called Bash(`echo same-result`) 6 times in a row with the same result"), "{rec}");
            },
        },
        GuardCase {
            name: "truncation",
            opts: || LlamaOpts {
                truncate_past: Some(25_000),
                ..strict_fake_opts()
            },
            setup: |f, e| {
                f.set_script(crate::truncation::reading(crate::truncation::big_files(e)));
                vec![crate::truncation::TASK]
            },
            check: |rec, _, _| {
                assert_eq!(rec["status"], "failed", "{rec}");
                let why = rec["error"].as_str().unwrap_or_default();
                assert!(why.contains("dropped part of the conversation"), "{rec}");
                assert!(rec["model_faults"]["truncated"]["turn"].is_u64(), "{rec}");
            },
        },
        GuardCase {
            name: "turn notes",
            opts: strict_fake_opts,
            setup: |f, _| {
                f.set_script(bash_turns(10));
                vec!["--max-turns", "4", "Run the ten steps."]
            },
            check: |rec, _, _| {
                assert_eq!(rec["status"], "failed", "{rec}");
                assert!(
                    rec["error"]
                        .as_str()
                        .unwrap_or_default()
                        .starts_with("incomplete:"),
                    "{rec}"
                );
                let notes = requests(rec)
                    .iter()
                    .filter(|r| r["turn_note"].is_string())
                    .count();
                assert!(notes >= 1, "the last turns carry the note: {rec}");
            },
        },
    ];
    for case in &cases {
        for wire in ["messages", "chat"] {
            let fake = fake_llama::spawn((case.opts)()).await;
            let config = crate::support::harness::fake_config(fake.url()).replace(
                "    backend: llama.cpp\n",
                &format!("    backend: llama.cpp\n    wire: {wire}\n"),
            );
            let e = Harness::new().config(&config);
            let args = (case.setup)(&fake, &e);
            let rec = run_json(&e, &args).await;
            eprintln!(
                "{} on {wire}: {} {}",
                case.name, rec["status"], rec["error"]
            );
            (case.check)(&rec, &e, &fake);
            let (chat, messages) = (
                fake.chat_bodies().len(),
                fake.hits().iter().filter(|h| *h == "/v1/messages").count(),
            );
            if wire == "chat" {
                assert!(
                    chat > 0 && messages == 0,
                    "{}: on the chat wire: {chat} chat, {messages} messages",
                    case.name
                );
            } else {
                assert!(
                    chat == 0 && messages > 0,
                    "{}: on /v1/messages: {chat} chat, {messages} messages",
                    case.name
                );
            }
        }
    }
}
