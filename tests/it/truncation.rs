//! Never a silently truncated request (issue 44): a job whose conversation
//! passes the server's window stops at that turn with the sentence and
//! the server's fix, through the real Claude Code CLI, against each
//! server's own way of overflowing:
//!
//! - llama.cpp with a window smaller than it says (`--context-shift`):
//!   the fake cuts silently past 25,000 tokens;
//! - Ollama: the stand-in cuts silently past the window `/api/ps` shows,
//!   the oldest messages first, then the middle, and counts what it kept
//!   (`fake_ollama`, with Ollama's `message_start` estimate);
//! - LM Studio: its three observed answers (`fake_lmstudio::Overflow`):
//!   a 400 and a 200 carrying `n_keep >= n_ctx`, an empty stream.
//!
//! Each test fails on the code before the guard: the job succeeded, or
//! ended on Claude Code's own "Autocompact is thrashing" after five
//! requests the model never saw whole. The Ollama one also fails with the
//! bound counted in words instead of runs (`shim::truncation::words`):
//! the middle cut of a Read of dense code left more tokens than words.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::faults::requests;
use crate::jobs::strict_fake_opts;
use crate::support::fake_llama;
use crate::support::fake_lmstudio::{self, LModel, Overflow};
use crate::support::fake_ollama;
use crate::support::harness::{Harness, localagents_json};
use crate::support::script::{self, Reply};

pub(crate) const TASK: &str = "Read every file under big/, one at a time.";

/// Twelve files of about 7,800 tokens each under `big/`.
pub(crate) fn big_files(e: &Harness) -> Vec<PathBuf> {
    let dir = e.work().join("big");
    std::fs::create_dir_all(&dir).unwrap();
    (0..12)
        .map(|i| {
            let p = dir.join(format!("part{i}.txt"));
            let text: String = (0..600)
                .map(|l| format!("line {l} of part {i}: the quick brown fox jumps over it\n"))
                .collect();
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

/// A model that Reads each of `paths` in turn (real tool calls), then
/// reports.
pub(crate) fn reading(paths: Vec<PathBuf>) -> script::Script {
    Arc::new(
        move |req: &Value| match paths.get(script::tool_results(req)) {
            Some(p) => Reply::Tool {
                name: "Read".into(),
                input: json!({"file_path": p}),
            },
            None => Reply::Text("Read them all.".into()),
        },
    )
}

/// One file of dense code under `dense/`: about 90 KB, which Claude Code
/// estimates at a quarter of its bytes (about 22,500 tokens, under its
/// Read cap of 25,000) while it holds about twice that many tokens
/// (`a[1] = b[2] + c[3];` is 19 bytes and 14 pre-tokens). A model's
/// tokenizer splits such code as finely.
pub(crate) fn dense_file(e: &Harness) -> PathBuf {
    let dir = e.work().join("dense");
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("table.c");
    let text: String = (0..4700)
        .map(|l| format!("a[{l}] = b[{}] + c[{}];\n", l % 97, l % 89))
        .collect();
    std::fs::write(&p, text).unwrap();
    p
}

/// One endpoint at `url`, the backend found by the probe, turns enough
/// to read every file. Without the window budget: it would cap one Read
/// at an eighth of the window (issue 45), and the guard is tested on a
/// request over the window, as a job without the budget sends one (or a
/// result no cap holds: an MCP tool's, a pasted brief).
fn env(url: &str) -> Harness {
    Harness::new().config(&format!(
        "endpoints:\n  local:\n    base_url: {url}\ndefaults:\n  max_turns: 30\n  setting_sources: []\n  prewarm: false\n  window_budget: false\n"
    ))
}

/// A job on `model` at `url` (a 32,768 window) whose model Reads
/// [`dense_file`] (`script` sets the fake's script): its environment
/// (which holds its logs) and its record.
async fn read_dense(
    url: &str,
    model: &str,
    script: impl FnOnce(script::Script),
) -> (Harness, Value) {
    let e = env(url);
    script(reading(vec![dense_file(&e)]));
    let rec = localagents_json(
        &e,
        &["run", "--model", model, "--json", "Read dense/table.c."],
    )
    .await;
    assert_eq!(rec["context"], 32768, "{rec}");
    (e, rec)
}

/// The job failed with the truncation sentence and `fix`; it was caught
/// at the first request the server cut, or the one after it, and nothing
/// reached the server after the caught one. `cuts` is the server's
/// (bytes, tokens, tokens reported) for each request it got. Prints the
/// figure the issue asks for.
pub(crate) fn caught_at_the_first_cut(
    server: &str,
    rec: &Value,
    cuts: &[(u64, u64, u64)],
    fix: &str,
) {
    assert_eq!(rec["status"], "failed", "{rec}");
    let why = rec["error"].as_str().unwrap_or_default();
    assert!(
        why.contains("dropped part of the conversation") && why.contains(fix),
        "{fix}: {rec}"
    );
    let t = &rec["model_faults"]["truncated"];
    let turn = t["turn"].as_u64().expect("the turn it was caught at");
    let first_cut = cuts
        .iter()
        .position(|(_, whole, kept)| kept < whole)
        .expect("the server cut a request");
    eprintln!(
        "{server}: silent truncation caught at turn {turn} ({} sign): {} bytes sent, at least {} tokens, the server reported {}; its requests (bytes, tokens, reported): {cuts:?}",
        t["sign"], t["bytes_sent"], t["lower_bound"], t["read"]
    );
    let logged = requests(rec);
    let caught = logged
        .iter()
        .position(|r| r["truncated"].is_object())
        .unwrap_or_else(|| panic!("a request record has it: {logged:#?}"));
    assert!(
        logged[caught]["translated"]
            .as_str()
            .unwrap_or_default()
            .contains("truncated"),
        "{}",
        logged[caught]
    );
    assert!(
        caught <= first_cut + 1,
        "caught at request {caught}, the server first cut request {first_cut}: {cuts:?}"
    );
    assert_eq!(
        cuts.len(),
        caught + 1,
        "nothing after the caught one: {cuts:?}"
    );
    for r in &logged {
        let lb = r["lower_bound"].as_u64().unwrap_or(0);
        assert!(lb > 0 || r["status"] != 200, "{r}");
    }
}

/// llama.cpp that cuts silently past 25,000 tokens while it says 65,536
/// (what `--context-shift` does): the job stops at the turn the shim
/// catches it, and the fake gets no request after it but Claude Code's
/// re-sends, which the shim answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_truncation_stops_the_job_at_that_turn_with_the_sentence() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        truncate_past: Some(25_000),
        ..strict_fake_opts()
    })
    .await;
    let e = Harness::with_fake(fake.url());
    fake.set_script(reading(big_files(&e)));
    let rec = localagents_json(&e, &["run", "--model", "gemma-3-270m", "--json", TASK]).await;
    let cuts = fake.state.truncations.lock().unwrap().clone();
    caught_at_the_first_cut("llama.cpp", &rec, &cuts, "without `--context-shift`");
}

/// Ollama with a 32,768 window (`/api/ps`), recognised from `base_url`
/// alone, and a Read of a large file of dense code, which Claude Code
/// estimates at under its window: Ollama keeps the system prompt and the
/// last message, cuts the middle to about half the window
/// (`llm/llama_server.go:279-318`), and reports what it kept in
/// `message_delta` after an estimate in `message_start`. The job stops at
/// that turn with Ollama's own fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ollama_cutting_past_its_window_stops_the_job_with_its_fix() {
    let fake = fake_ollama::spawn(vec![crate::ollama::model(
        "qwen3-coder:latest",
        32768,
        true,
    )])
    .await;
    let (_e, rec) = read_dense(fake.url(), "qwen3-coder:latest", |s| fake.set_script(s)).await;
    caught_at_the_first_cut(
        "Ollama",
        &rec,
        &fake.truncations(),
        "OLLAMA_CONTEXT_LENGTH=65536 ollama serve",
    );
}

fn lms_model() -> LModel {
    LModel {
        key: "qwen/qwen3-coder-30b".into(),
        context: 32768,
        parallel: 4,
        loaded: true,
        load: std::time::Duration::ZERO,
    }
}

/// LM Studio with a 32,768 window (`loaded_instances`), each of its
/// observed overflow answers once a Read of dense code passes it: a 400
/// and a 200 carrying the `n_keep >= n_ctx` error (Gitlawb/openclaude#353,
/// BT#2322), an empty stream with usage 0 (BT#2339). Each ends the job
/// at that turn with LM Studio's fix, and nothing reaches it after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmstudio_overflow_answers_each_end_the_job_with_its_fix() {
    for overflow in [
        Overflow::Error400,
        Overflow::Error200,
        Overflow::EmptyStream,
    ] {
        let fake = fake_lmstudio::spawn(vec![lms_model()]).await;
        fake.set_overflow(overflow);
        let (_e, rec) =
            read_dense(fake.url(), "qwen/qwen3-coder-30b", |s| fake.set_script(s)).await;
        let fix = "lms load qwen/qwen3-coder-30b --context-length 65536";
        let cuts = fake.truncations();
        if overflow == Overflow::EmptyStream {
            caught_at_the_first_cut(&format!("LM Studio {overflow:?}"), &rec, &cuts, fix);
        } else {
            // Not hidden: it said so, in a 400 or a 200.
            assert_eq!(rec["status"], "failed", "{overflow:?}: {rec}");
            let why = rec["error"].as_str().unwrap_or_default();
            assert!(
                why.contains(fix) && why.contains("n_keep"),
                "{overflow:?}: {rec}"
            );
            let over = cuts.iter().position(|(_, whole, _)| *whole > 32768);
            assert_eq!(over, Some(cuts.len() - 1), "nothing after it: {cuts:?}");
        }
    }
}
