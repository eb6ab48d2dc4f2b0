//! Long jobs on small windows (issue 45): the reader job (20 files of
//! 4,500 tokens, each read to its last line, then SUMMARY.md) and the
//! edit-heavy job (30 Edits, each followed by a test run whose output
//! lists every function) through `localagents run` with the real Claude
//! Code CLI, on the fake llama.cpp server at each window, `--parallel 1`,
//! with llama-server's prompt cache. Each row runs four ways in the same
//! run:
//!
//! - `before`: what localagents did before issue 45 (`window_budget:
//!   false`, `clear_tool_results: off`): Claude Code told the real window
//!   and an output of window/8;
//! - `default`: as it ships: the window budget, nothing cleared;
//! - `clearing`: the budget and the shim's clearing of old tool results
//!   (`clear_tool_results: auto`);
//! - `default, lean profile`: `default` run as a subagent profile with a
//!   short delegate prompt in place of Claude Code's (issue 45, item 2).
//!
//! Per run: the outcome, requests, compactions (`compact_boundary`
//! events), clearings, prompt tokens re-processed (not found in the
//! cache; the fake counts pre-tokens of the body), the largest request
//! (prompt + max_tokens) against the window, and wall time.
//!
//! Run: `cargo bench --bench long_jobs` (about 8 minutes on 2 cores);
//! `-- --markdown` prints the table only. docs/benchmarks.md quotes it.

use localagents_testkit as support;

use std::sync::atomic::Ordering;

use support::long_job::{BEFORE, CLEARING, Job, long_job_as};

const WINDOWS: &[u64] = &[16_384, 32_768, 65_536, 131_072];

/// Each way: its name, its `defaults:` lines, and whether the job runs as
/// the lean subagent profile ([`support::long_job::LEAN_PROFILE`]).
const WAYS: &[(&str, &str, bool)] = &[
    ("before", BEFORE, false),
    ("default", "", false),
    ("clearing", CLEARING, false),
    ("default, lean profile", "", true),
];

fn main() {
    let mode = support::bench::mode("long_jobs", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        if mode == support::bench::Mode::Full {
            eprintln!(
                "long_jobs: {} runs of up to a few hundred requests each",
                2 * WINDOWS.len() * WAYS.len()
            );
        }
        println!("### Long jobs on small windows (`cargo bench --bench long_jobs`)\n");
        println!(
            "| job | window/slot | way | outcome | requests | compactions | clearings | tokens re-processed | largest request | s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for (job, name) in [(Job::Reader, "reader"), (Job::Editor, "edit-heavy")] {
            for &w in WINDOWS {
                for (way, defaults, lean) in WAYS {
                    let run = long_job_as(job, w, defaults, "", *lean).await;
                    let status = run.record["status"].as_str().unwrap_or("?").to_string();
                    let error = run.record["error"]
                        .as_str()
                        .map(|e| format!(": {}", e.chars().take(60).collect::<String>()))
                        .unwrap_or_default();
                    let (largest, _) = run.largest_request();
                    println!(
                        "| {name} | {w} | {way} | {status}{} | {} | {} | {} | {} | {largest} | {:.0} |",
                        error.replace('|', "/"),
                        run.fake.bodies().len(),
                        run.compact_boundaries(),
                        run.record["window"]["clearings"].as_u64().unwrap_or(0),
                        run.fake.state.prompt_tokens.load(Ordering::SeqCst),
                        run.elapsed.as_secs_f64()
                    );
                }
            }
        }
    });
}
