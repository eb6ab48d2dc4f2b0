//! The reader job of issue 45 on a real llama-server (the tiny model,
//! `--parallel 1`), at 16k and 32k per slot, three ways in one run:
//! `before` (`window_budget: false`, `clear_tool_results: off`: what
//! localagents did before issue 45), `default` (as it ships: the window
//! budget) and `clearing` (the budget
//! and the shim's clearing of old tool results). The relay answers as
//! the reader; the server processes every prompt, so the prompt tokens it
//! processed (re-processed: not found in its cache) and the wall time are
//! real. A compaction's summary is the script's: what the model would
//! spend writing it is not in the time (on this CPU the tiny model took
//! 180 s for one compaction request when it wrote its 2,048-token summary,
//! against 4 s for a turn). Three files of 4,500 tokens at 16k (more than
//! it holds beside Claude Code's fixed prompt), five at 32k.
//!
//! Run: `scripts/e2e-real.sh bench` (or with its environment,
//! `cargo bench --bench long_jobs_real`). Prints a Markdown table.

#[path = "../tests/e2e/long_job.rs"]
mod long_job;
#[path = "../tests/e2e/relay.rs"]
mod relay;
#[path = "../tests/e2e/server.rs"]
mod server;
use localagents_testkit as support;

use support::long_job::{BEFORE, CLEARING};

const WAYS: &[(&str, &str)] = &[("before", BEFORE), ("default", ""), ("clearing", CLEARING)];

fn main() {
    support::bench::mode("long_jobs_real", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        println!(
            "### The reader job on the real llama-server (`cargo bench --bench long_jobs_real`)\n"
        );
        println!(
            "| window/slot | files | way | outcome | requests | compactions | clearings | prompt tokens processed | from cache | s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for (ctx, parts) in [(16_384u64, 3usize), (32_768, 5)] {
            for (way, defaults) in WAYS {
                let r = long_job::real_reader(ctx, parts, defaults).await;
                let rec = &r.record;
                let error = rec["error"]
                    .as_str()
                    .map(|e| format!(": {}", e.chars().take(60).collect::<String>()))
                    .unwrap_or_default();
                println!(
                    "| {ctx} | {parts} | {way} | {}{} | {} | {} | {} | {} | {} | {:.0} |",
                    rec["status"].as_str().unwrap_or("?"),
                    error.replace('|', "/"),
                    r.requests.len(),
                    rec["window"]["compactions"].as_u64().unwrap_or(0),
                    rec["window"]["clearings"].as_u64().unwrap_or(0),
                    r.processed,
                    r.cached,
                    r.secs
                );
            }
        }
    });
}
