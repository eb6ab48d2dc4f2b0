//! Long jobs on small windows (issue 45): the reader job
//! ([`support::reader`]) through the real Claude Code CLI 2.1.328 and
//! `localagents run`, on a fake llama.cpp server whose window is 16k or
//! 32k, which refuses a prompt over its window with llama.cpp's 400 and
//! keeps a prompt cache like llama-server's.

use std::path::Path;

use serde_json::Value;

use crate::support::long_job::{CLEARING, Job, LongRun, PART_TOKENS, PARTS, long_job, read_lines};
use crate::support::reader;

/// The reader job at `window` succeeds: SUMMARY.md names every part's
/// END line, no request was over the window, and the record counts the
/// compactions the delegate's stream shows.
async fn the_reader_finishes_at(window: u64) {
    let run = long_job(Job::Reader, window, "", "").await;
    let r = &run.record;
    assert_eq!(r["status"], "succeeded", "{r:#}");
    assert_eq!(run.code, Some(0), "{r:#}");
    let summary = run.summary.as_deref().unwrap_or("");
    for n in 1..=PARTS {
        assert!(
            summary.contains(&reader::end_line(n)),
            "SUMMARY.md lacks {}: {summary}",
            reader::end_line(n)
        );
    }
    assert!(
        !run.fake.statuses().contains(&400),
        "a request was over the {window} window: {:?}",
        run.fake.statuses()
    );
    let (largest, at) = run.largest_request();
    assert!(
        largest <= window,
        "request {at} asked for {largest} tokens (prompt and output) of a {window} window"
    );
    let w = &r["window"];
    assert_eq!(
        w["compactions"].as_u64(),
        Some(run.compact_boundaries() as u64),
        "{w:#}"
    );
    assert!(
        w["compactions"].as_u64().unwrap_or(0) + w["clearings"].as_u64().unwrap_or(0) > 0,
        "a reader job of {PARTS} x {PART_TOKENS} tokens fits no {window} window without \
         compacting or clearing: {w:#}"
    );
    // Each batch of clearing is counted: the record says what the
    // request log shows.
    let batches = requests(&run)
        .iter()
        .filter(|q| q["clearing"].as_u64().unwrap_or(0) > 0)
        .count();
    assert_eq!(
        w["clearings"].as_u64().unwrap_or(0),
        batches as u64,
        "{w:#}"
    );
    assert!(
        w["largest_tool_result"]["tokens"].as_u64().unwrap_or(0) > 0,
        "{w:#}"
    );
}

/// The request log of a job's route.
fn requests(run: &LongRun) -> Vec<Value> {
    let dir = run.record["log_dir"].as_str().unwrap_or_default();
    read_lines(&Path::new(dir).join("requests.jsonl"))
        .into_iter()
        .filter(|r| r["path"] == "/v1/messages")
        .collect()
}

/// Clearing (`clear_tool_results: auto`) on the edit-heavy job at 32k:
/// each batch is one re-fill of the server's cache, from the first result
/// it clears; every other request extends the one before it, so the rest
/// of the job reads from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_refills_the_cache_once_a_batch() {
    let run = long_job(Job::Editor, 32_768, CLEARING, "").await;
    let r = &run.record;
    assert_eq!(r["status"], "succeeded", "{r:#}");
    assert_eq!(run.compact_boundaries(), 0, "{r:#}");
    let log = requests(&run);
    let bodies = run.fake.bodies();
    let prompts = run.fake.state.prompts.lock().unwrap().clone();
    assert_eq!((log.len(), bodies.len()), (prompts.len(), prompts.len()));
    let batches: Vec<usize> = (0..log.len())
        .filter(|&i| log[i]["clearing"].as_u64().unwrap_or(0) > 0)
        .collect();
    assert!(!batches.is_empty(), "the job was cleared: {r:#}");
    assert_eq!(r["window"]["clearings"], batches.len(), "{r:#}");
    // A re-fill: a request that found less than nine tenths of the one
    // before it in the cache.
    let refills: Vec<usize> = (1..prompts.len())
        .filter(|&i| prompts[i].1 * 10 < prompts[i - 1].0 * 9)
        .collect();
    eprintln!(
        "{} requests, batches at {batches:?}, re-fills at {refills:?}",
        prompts.len()
    );
    assert_eq!(refills, batches, "a re-fill at each batch and nowhere else");
    assert!(
        batches.len() * 5 < prompts.len(),
        "batches are rare: {} in {} requests",
        batches.len(),
        prompts.len()
    );
    // The request of a batch is the one before it up to the first result
    // it clears: every message before that result's is the same, and that
    // message differs only by a stub where the result was.
    for &i in &batches {
        let before = bodies[i - 1]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let now = bodies[i]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let j = (0..before.len())
            .find(|&j| before[j] != now[j])
            .unwrap_or_else(|| panic!("request {i} changed none of the messages before it"));
        let stubs = |m: &Value| m.to_string().matches("[localagents cleared").count();
        assert_eq!(
            stubs(&now[j]),
            stubs(&before[j]) + 1,
            "request {i}: message {j} changed by a new stub, nothing else: {} -> {}",
            before[j],
            now[j]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_job_finishes_on_a_32k_window() {
    the_reader_finishes_at(32_768).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_job_finishes_on_a_16k_window() {
    the_reader_finishes_at(16_384).await;
}
