//! The reader job of issue 45 on a real llama-server (the tiny model,
//! `--parallel 1`), at 16k and 32k per slot, three ways in one run:
//! `before` (`window_budget: false`, `clear_tool_results: off`: what
//! localagents did before issue 45), `budget` (the window budget alone),
//! `default` (the budget and clearing as they ship). The relay answers as
//! the reader; the server processes every prompt, so the prompt tokens it
//! processed (re-processed: not found in its cache) and the wall time are
//! real; the server also writes each compaction's summary (to the
//! request's `max_tokens`), so what a compaction costs is in the time.
//! Three files of 4,500 tokens at 16k (more than it holds beside Claude
//! Code's fixed prompt), five at 32k; a run ends in minutes on 2 cores.
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

const WAYS: &[(&str, &str)] = &[
    (
        "before",
        "  window_budget: false\n  clear_tool_results: off\n",
    ),
    ("budget", "  clear_tool_results: off\n"),
    ("default", ""),
];

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
                let r = long_job::real_reader_with(ctx, parts, defaults, true).await;
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
