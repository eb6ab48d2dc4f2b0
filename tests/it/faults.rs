//! Real local models' known faults (issue 20), through the real Claude Code
//! CLI and `localagents run`, against the fake llama.cpp server scripted
//! with the model output those faults produce: tool calls written as text
//! (the forms are the servers' own parser-test strings), a model that
//! repeats one call, a grammar the server cannot build, thinking blocks in
//! the history, and a model that only talks.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::jobs::strict_fake_opts;
use crate::support::harness::{Harness, hook_line, localagents, localagents_json};
use crate::support::script::{self, Reply};
use crate::support::{fake_llama, fake_vllm};

/// `localagents run --json ARGS…`: the job record.
async fn run_json(e: &Harness, args: &[&str]) -> Value {
    let mut all = vec!["run", "--model", "gemma-3-270m", "--json"];
    all.extend_from_slice(args);
    localagents_json(e, &all).await
}

/// The job's `requests.jsonl`, the /v1/messages lines.
pub(crate) fn requests(rec: &Value) -> Vec<Value> {
    let dir = std::path::Path::new(rec["log_dir"].as_str().unwrap());
    std::fs::read_to_string(dir.join("requests.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["path"] == "/v1/messages")
        .collect()
}

/// Read `path` (a real tool call), then make `edit` as text, then report.
pub(crate) fn read_then_text_edit(path: &str, edit: String) -> script::Script {
    let path = path.to_string();
    Arc::new(move |req: &Value| match script::tool_results(req) {
        0 => Reply::Tool {
            name: "Read".into(),
            input: json!({"file_path": path}),
        },
        1 => Reply::TokenText(edit.clone()),
        _ => Reply::Text("Fixed the off-by-one in calc.py.".into()),
    })
}

pub(crate) fn calc_py(e: &Harness) -> std::path::PathBuf {
    let p = e.work().join("calc.py");
    std::fs::write(&p, "def last(n):\n    return n - 1\n").unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_written_as_qwen3_coder_xml_still_edits_the_file() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let file = calc_py(&e);
    // The Qwen3-Coder XML form, as in vLLM's qwen3coder parser tests
    // (tests/tool_parsers/test_qwen3coder_tool_parser.py), for Edit.
    let xml = format!(
        "<tool_call>\n<function=Edit>\n<parameter=file_path>\n{}\n</parameter>\n<parameter=old_string>\n    return n - 1\n</parameter>\n<parameter=new_string>\n    return n\n</parameter>\n</function>\n</tool_call>",
        file.display()
    );
    fake.set_script(read_then_text_edit(file.to_str().unwrap(), xml));
    let rec = run_json(&e, &["--max-turns", "6", "Fix the off-by-one in calc.py."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "def last(n):\n    return n\n",
        "the repaired Edit ran"
    );
    assert_eq!(rec["model_faults"]["repaired_tool_calls"], 1, "{rec}");
    assert_eq!(rec["outcome"]["text_only"], false);
    let logged: Vec<Value> = requests(&rec)
        .into_iter()
        .filter(|r| r["repaired_tool_call"].is_string())
        .collect();
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["repaired_tool_call"], "qwen3_coder_xml x1");
    assert_eq!(logged[0]["stop_reason"], "tool_use");
    // Claude Code took it as its own tool call: the next request answers it.
    let bodies = fake.bodies();
    let answered = bodies.iter().any(|b| {
        b["messages"].as_array().unwrap().iter().any(|m| {
            m["content"].as_array().is_some_and(|c| {
                c.iter().any(|blk| {
                    blk["type"] == "tool_use"
                        && blk["name"] == "Edit"
                        && blk["id"].as_str().unwrap_or("").starts_with("toolu_local_")
                })
            })
        })
    });
    assert!(answered, "the repaired call is in the history");
    assert!(
        rec["model_note"]
            .as_str()
            .unwrap()
            .contains("1 tool call written as text were repaired"),
        "{rec}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hermes_json_write_streamed_is_repaired() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let target = e.work().join("notes.txt");
    // The Hermes form of vLLM's hermes parser tests
    // (tests/tool_parsers/test_hermes_tool_parser.py, between_tags), for Write.
    let text = format!(
        "I will write the file now.\n<tool_call>\n{}\n</tool_call>",
        json!({"name": "Write", "arguments": {"file_path": target, "content": "written by a text call\n"}})
    );
    fake.set_script(Arc::new(move |req: &Value| {
        if script::tool_results(req) == 0 {
            Reply::TokenText(text.clone())
        } else {
            Reply::Text("Wrote notes.txt.".into())
        }
    }));
    let rec = run_json(&e, &["Write notes.txt."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "written by a text call\n"
    );
    assert_eq!(rec["model_faults"]["repaired_tool_calls"], 1, "{rec}");
    let r = requests(&rec);
    assert_eq!(r[0]["repaired_tool_call"], "hermes_json x1", "{:?}", r[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_of_a_tool_not_offered_and_prose_about_markers_stay_text() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let prose =
        "To call a tool, a Qwen model writes <tool_call> and then JSON; I did not need one.";
    let cases = [
        (
            "<tool_call>\n{\"name\": \"Deploy\", \"arguments\": {\"to\": \"prod\"}}\n</tool_call>",
            true,
        ),
        (prose, false),
    ];
    for (text, unparsed) in cases {
        fake.set_script(script::text(text));
        let n_before = fake.bodies().len();
        let rec = run_json(&e, &["Look at the project."]).await;
        assert_eq!(rec["status"], "succeeded", "{rec}");
        assert_eq!(
            rec["result"], text,
            "the text reached Claude Code as it was"
        );
        assert_eq!(rec["tool_calls"], 0);
        assert_eq!(rec["model_faults"]["repaired_tool_calls"], 0, "{rec}");
        assert_eq!(
            rec["model_faults"]["unparsed_tool_text"],
            if unparsed { 1 } else { 0 },
            "{rec}"
        );
        assert_eq!(rec["outcome"]["text_only"], true, "{rec}");
        assert!(fake.bodies().len() > n_before);
    }
    let r = requests(&run_json(&e, &["Once more."]).await);
    assert!(r[0]["repaired_tool_call"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_only_talks_is_said_in_the_summary_and_the_hook_line() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text(
        "I reviewed the code and it looks correct; nothing needs to change.",
    ));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Add a --json flag to the CLI."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(
        rec["outcome"],
        json!({"tool_calls": 0, "files_changed": 0, "text_only": true})
    );
    let sentence = "the model answered in text only: no tool called, no file changed";
    assert_eq!(rec["model_note"], sentence);
    let id = rec["id"].as_str().unwrap();
    let out = localagents(&e, &["jobs", "--json"]).await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let item = list["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(item["text_only"], true, "{item}");
    assert_eq!(item["model_note"], sentence);
    let line = hook_line(&e).await;
    assert!(line.contains(sentence), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_call_three_times_gets_a_note_and_six_times_stops_the_job() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(Arc::new(|_req: &Value| Reply::Tool {
        name: "Bash".into(),
        input: json!({"command": "echo same-result", "description": "Run it"}),
    }));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["--max-turns", "12", "Make the tests pass."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap();
    assert!(
        err.starts_with(
            "stuck: the model called Bash(`echo same-result`) 6 times in a row with the same result"
        ),
        "{err}"
    );
    assert_eq!(rec["model_faults"]["loop_notes"], 1, "{rec}");
    // The note went to the model with the third identical result, and it
    // stayed in place in every later request (the prompt is append-only).
    let note = "you have made this exact call 3 times with the same result; change approach or stop and report";
    let bodies = fake.bodies();
    let with_results: Vec<(usize, bool)> = bodies
        .iter()
        .map(|b| (script::tool_results(b), b.to_string().contains(note)))
        .collect();
    for (results, has_note) in &with_results {
        assert_eq!(*has_note, *results >= 3, "{with_results:?}");
    }
    assert!(
        with_results.iter().any(|(r, _)| *r == 5),
        "five results reached the model: {with_results:?}"
    );
    assert!(
        with_results.iter().all(|(r, _)| *r < 6),
        "the request with the sixth identical result was not sent: {with_results:?}"
    );
    let notes: Vec<String> = requests(&rec)
        .iter()
        .filter_map(|r| r["translated"].as_str().map(String::from))
        .collect();
    assert_eq!(
        notes.iter().filter(|t| t.contains("loop_stuck")).count(),
        1,
        "stuck once; Claude Code's retries were answered by the shim: {notes:?}"
    );
    assert!(
        notes.iter().any(|t| t == "fatal_repeat"),
        "Claude Code's retries were answered by the shim: {notes:?}"
    );
    // The prompt stayed append-only around the note: each request's
    // content (Claude Code's moving cache_control marks aside) begins with
    // all of the one before it.
    for w in bodies.windows(2) {
        assert!(
            localagents::shim::fold::is_content_prefix(&w[0], &w[1]),
            "not append-only: {} then {}",
            w[0]["messages"],
            w[1]["messages"]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grammar_the_server_cannot_build_ends_the_job_at_the_first_request() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    // llama.cpp's answer when the tools' grammar does not compile
    // (tools/server/server-context.cpp launch_slot_with_task, HTTP 400;
    // quoted in QwenLM/qwen-code#10065 and lidge-jun/opencodex#2135).
    fake.set_script(Arc::new(|_| Reply::Error {
        status: 400,
        body: json!({"error": {"code": 400, "message": "Failed to initialize samplers: failed to parse grammar", "type": "invalid_request_error"}}),
    }));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Do the task."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap();
    assert!(
        err.starts_with("the server could not build a grammar for the offered tools (`failed to parse grammar`): upgrade llama.cpp, or narrow allowed_tools"),
        "{err}"
    );
    assert_eq!(fake.statuses(), vec![400], "sent once, never retried");
    let r = requests(&rec);
    assert!(
        r.len() >= 2,
        "Claude Code sends a refused request again: {r:?}"
    );
    assert_eq!(
        rec["outcome"]["text_only"], false,
        "a server fault is not the model talking: {rec}"
    );
    assert!(
        r[1..]
            .iter()
            .all(|x| x["translated"] == "fatal_repeat" && x["upstream_status"].is_null()),
        "Claude Code's own retries were answered by the shim: {r:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_in_the_history_is_kept_for_llama_cpp_and_dropped_when_a_server_refuses_it() {
    // llama.cpp: the thinking block goes back to the server as it came.
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let target = e.work().join("t.txt");
    let think = |path: std::path::PathBuf| -> script::Script {
        Arc::new(move |req: &Value| {
            if script::tool_results(req) == 0 {
                Reply::ThinkThen {
                    thinking: "The user wants t.txt; I will write it.".into(),
                    then: Box::new(Reply::Tool {
                        name: "Write".into(),
                        input: json!({"file_path": path, "content": "t\n"}),
                    }),
                }
            } else {
                Reply::Text("Wrote t.txt.".into())
            }
        })
    };
    fake.set_script(think(target.clone()));
    let rec = run_json(&e, &["Write t.txt."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let second = fake.bodies().into_iter().nth(1).expect("a second request");
    assert!(
        second.to_string().contains("\"type\":\"thinking\""),
        "Claude Code sends the thinking back, and llama.cpp gets it: {second}"
    );

    // A vLLM that refuses thinking blocks (before 0.17): dropped, sent again.
    let vllm = fake_vllm::spawn(fake_vllm::VllmOpts {
        served: "gemma-3-270m".into(),
        max_model_len: 131072,
        refuse_thinking: true,
    })
    .await;
    let e2 = Harness::with_fake(vllm.url());
    vllm.set_script(think(e2.work().join("v.txt")));
    std::fs::write(
        e2.config_path(),
        std::fs::read_to_string(e2.config_path())
            .unwrap()
            .replace("backend: llama.cpp", "backend: vllm"),
    )
    .unwrap();
    let rec = run_json(&e2, &["Write v.txt."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let statuses = vllm.statuses();
    assert_eq!(
        statuses,
        vec![200, 400, 200],
        "refused once, then sent without thinking"
    );
    let r = requests(&rec);
    assert!(
        r[1]["translated"]
            .as_str()
            .unwrap()
            .contains("thinking_refused; dropped 1"),
        "{:?}",
        r[1]
    );
    assert_eq!(r[1]["status"], 200);
}

/// The Hermes form, non-streamed and streamed, through the shim itself (a
/// delegate always streams; a one-shot client may not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hermes_call_is_repaired_streamed_and_not_through_the_shim() {
    use localagents::shim::Shim;
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    // vLLM's tests/tool_parsers/test_hermes_tool_parser.py (between_tags),
    // with Claude Code's Write.
    fake.set_script(script::text(
        "<tool_call>\n{\"name\": \"Write\", \"arguments\": {\"file_path\": \"/w/a.txt\", \"content\": \"a\"}}\n</tool_call>",
    ));
    let h = Harness::new();
    let shim = Shim::start(0).await.unwrap();
    let reg = shim
        .register(crate::support::route::llama(
            fake.url(),
            "gemma3-270m",
            131072,
            h.dir(),
            false,
        ))
        .unwrap();
    let write = json!({"name": "Write", "description": "Write a file", "input_schema": {"type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}}, "required": ["file_path", "content"]}});
    for stream in [false, true] {
        let body = json!({"model": "m", "max_tokens": 256, "stream": stream, "tools": [write],
            "messages": [{"role": "user", "content": "Write a.txt."}]});
        let resp = localagents::probe::http_client()
            .post(format!("{}/v1/messages", reg.base_url))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let text = resp.text().await.unwrap();
        if stream {
            assert!(text.contains("\"type\":\"tool_use\""), "{text}");
            assert!(text.contains("\"stop_reason\":\"tool_use\""), "{text}");
            assert!(!text.contains("<tool_call>"), "{text}");
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["stop_reason"], "tool_use", "{v}");
            assert_eq!(v["content"][0]["type"], "tool_use", "{v}");
            assert_eq!(
                v["content"][0]["input"],
                json!({"file_path": "/w/a.txt", "content": "a"})
            );
        }
    }
    // A streamed request's line is written when its relay ends, on the
    // server's side: wait for it.
    let log_path = h.dir().join("requests.jsonl");
    let count = || {
        std::fs::read_to_string(&log_path)
            .unwrap_or_default()
            .matches("\"repaired_tool_call\":\"hermes_json x1\"")
            .count()
    };
    crate::support::until(
        "both requests logged as repaired",
        std::time::Duration::from_secs(10),
        || count() >= 2,
    )
    .await;
    assert_eq!(count(), 2);
}

/// A backend that fails every request (a 502 from a proxy, a server that
/// takes the request and never answers) ends the job after
/// `defaults.backend_fail_s`, well before `timeout_s`, with the shim's
/// sentence for the failure and its tries, not "timed out after 90 s";
/// with `backend_fail_s: 0` the job ends at `timeout_s` (or when Claude
/// Code gives up), and its error still carries the sentence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_backend_ends_the_job_early_with_the_reason() {
    let bad_gateway = Reply::Error {
        status: 502,
        body: fake_llama::err_body(502, "server_error", "upstream connect error"),
    };
    let cases = [
        (
            "502",
            bad_gateway.clone(),
            "10",
            "90",
            "upstream connect error",
        ),
        (
            "hung",
            Reply::Hang,
            "10",
            "90",
            "sent no response headers within 2 s",
        ),
        (
            "502, no early stop",
            bad_gateway,
            "0",
            "20",
            "upstream connect error",
        ),
    ];
    for (what, reply, fail_s, timeout_s, expect) in cases {
        let fake = fake_llama::spawn(strict_fake_opts()).await;
        fake.set_script(Arc::new(move |_: &Value| reply.clone()));
        let e = Harness::with_fake(fake.url());
        let mut cfg = std::fs::read_to_string(e.config_path()).unwrap();
        cfg.push_str(&format!(
            "  backend_fail_s: {fail_s}\n  first_byte_timeout_s: 2\n  stream_idle_timeout_s: 2\n"
        ));
        std::fs::write(e.config_path(), cfg).unwrap();
        let t = std::time::Instant::now();
        let out = crate::support::harness::localagents(
            &e,
            &[
                "run",
                "--model",
                "gemma-3-270m",
                "--json",
                "--timeout",
                timeout_s,
                "Say hi.",
            ],
        )
        .await;
        let took = t.elapsed();
        let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
            panic!(
                "{what}: {err} after {took:?}, {}: stdout {} stderr {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        eprintln!(
            "{what}: the job ended {} after {took:?}: {}",
            rec["status"], rec["error"]
        );
        if fail_s != "0" {
            assert!(
                took < std::time::Duration::from_secs(45),
                "{what}: the job took {took:?} (timeout_s 90, backend_fail_s 10): {rec}"
            );
            assert_eq!(rec["status"], "failed", "{what}: {rec}");
        }
        let err = rec["error"].as_str().unwrap_or_default();
        assert!(
            err.contains(expect) && err.contains(fake.url()) && err.contains("tries)"),
            "{what}: {err}"
        );
    }
}

/// Real runaway output: what the tiny Gemma wrote on the real llama-server
/// for the eval's first task (tests/fixtures/runaway/SOURCES.md).
pub(crate) fn gemma_runaway() -> String {
    std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runaway/gemma3-270m-loop.txt"),
    )
    .unwrap()
}

/// The fake streams the tiny Gemma's real runaway, over and over until
/// `max_tokens`, as llama-server does. Through the real Claude Code CLI:
/// the shim cuts each answer off at its first signs (the fake sees its
/// client close before it has sent the text: an order of events), Claude
/// Code asks again without streaming (streamed upstream all the same, and
/// cut off again), and at `defaults.runaway_limit` (2) the job fails with
/// the cause and the fix. No request carries the repeated text back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_answer_is_cut_off_its_request_closed_and_the_job_fails_with_the_fix() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let text = gemma_runaway();
    fake.set_script(Arc::new(move |_: &Value| Reply::Runaway(text.clone())));
    let e = Harness::with_fake(fake.url());
    let rec = run_json(&e, &["Fix the failing test in calc.py."]).await;
    assert_eq!(rec["status"], "failed", "{rec}");
    let fix = rec["error"].as_str().unwrap_or_default().to_string();
    assert!(
        fix.starts_with("runaway output: the model repeated one line 20 times (")
            && fix.ends_with("): try another model or quantisation"),
        "{rec}"
    );
    let r = &rec["model_faults"]["runaway_output"];
    assert_eq!(r["count"], 2, "{rec}");
    assert_eq!(r["cause"], "line");
    assert!(fix.contains(r["unit"].as_str().unwrap()), "{r}");
    assert!(r["bytes_dropped"].as_u64().unwrap() > 0, "{r}");
    // The fake saw each answer's client go away before its last event.
    let sends: Vec<(u64, u64, bool)> = fake
        .state
        .runaways
        .lock()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s.sent.load(std::sync::atomic::Ordering::SeqCst),
                s.total,
                s.closed_early.load(std::sync::atomic::Ordering::SeqCst),
            )
        })
        .collect();
    assert_eq!(
        sends.len(),
        2,
        "the answer and Claude Code's one more try: {sends:?}"
    );
    for (sent, total, closed) in &sends {
        assert!(
            *closed && sent < total,
            "the client closed before the fake sent all of the text: {sends:?}"
        );
    }
    // No request carried the answer back into the conversation.
    let bodies = fake.bodies();
    for b in &bodies {
        let s = b["messages"].to_string();
        assert!(
            !s.contains("a user or a user-agent-agent user"),
            "a request carried the runaway text: {s}"
        );
    }
    let logged = requests(&rec);
    let notes: Vec<&str> = logged
        .iter()
        .filter_map(|x| x["translated"].as_str())
        .collect();
    assert_eq!(
        logged.iter().filter(|x| x["runaway"].is_object()).count(),
        2,
        "{logged:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("runaway_output")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("runaway_stop")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("streamed_upstream")),
        "Claude Code's non-streamed try went upstream streamed: {notes:?}"
    );
    // The summary, list_jobs and the hook line say it.
    let note = rec["model_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("2 answers were cut off as runaway output"),
        "{rec}"
    );
    let id = rec["id"].as_str().unwrap();
    let out = localagents(&e, &["jobs", "--json"]).await;
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let item = list["jobs"]
        .as_array()
        .and_then(|a| a.iter().find(|j| j["id"] == id))
        .cloned()
        .unwrap_or_else(|| panic!("{list}"));
    assert!(
        item["model_note"]
            .as_str()
            .is_some_and(|n| n.contains("cut off as runaway output")),
        "{item}"
    );
    let line = hook_line(&e).await;
    assert!(line.contains("runaway output"), "{line}");
}

/// What must not trip the guard: a Write whose content repeats one line
/// (a CSV), prose that quotes a marker once, and a long normal answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csv_a_quoted_marker_and_a_long_answer_are_not_runaways() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let csv_path = e.work().join("zeros.csv");
    let csv = format!("a,b,c\n{}", "0,0,0,0,0,0,0,0\n".repeat(300));
    fake.set_script(script::write_then_report(csv_path.to_str().unwrap(), &csv));
    let rec = run_json(&e, &["Write zeros.csv with 300 rows of zeros."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(std::fs::read_to_string(&csv_path).unwrap(), csv);
    assert!(rec["model_faults"]["runaway_output"].is_null(), "{rec}");

    let long = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/runaway/normal-report.txt"),
    )
    .unwrap();
    let long = format!(
        "Each turn ends with `<|im_end|>`, which the server reads as the stop token.\n\n{}",
        &long[..long
            .char_indices()
            .nth(20_000)
            .map_or(long.len(), |(i, _)| i)]
    );
    fake.set_script(Arc::new(move |_: &Value| Reply::TokenText(long.clone())));
    let rec = run_json(&e, &["Explain the guide."]).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert!(rec["model_faults"]["runaway_output"].is_null(), "{rec}");
    assert!(
        requests(&rec).iter().all(|x| x["runaway"].is_null()),
        "{rec}"
    );
}
