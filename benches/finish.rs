//! The delegate finishes what it starts (issue 46): scripted early stops
//! through `localagents run` with the real Claude Code CLI, on the fake
//! llama.cpp server with llama-server's prompt cache. Each row runs two
//! ways in the same run:
//!
//! - `nudges: 0`: no nudge (what localagents did before issue 46 as far
//!   as the nudge goes; the turn budget's line and note are on either way);
//! - `default`: one nudge.
//!
//! The rows: a model that announces a step and stops, then acts when
//! nudged; one that announces every time; one that needs 8 turns of 5;
//! and five real models' early stops, replayed (`support::early_stops`,
//! each with its source). Per run: the status and the start of the error,
//! whether the file was written, requests, nudges, prompt tokens the
//! server processed anew (the fake counts pre-tokens), the tokens of the
//! nudge's rounds, the turn notes and their tokens, and wall time.
//!
//! Run: `cargo bench --bench finish` (about a minute); `-- --markdown`
//! prints the table only. docs/benchmarks.md quotes it.

use localagents_testkit as support;

use std::sync::atomic::Ordering;

use serde_json::Value;
use support::early_stops::{self, NUDGE};
use support::fake_llama;
use support::harness::Harness;

/// One scripted stop: its name, the script for a work dir, its brief,
/// the file it should write, and its `--max-turns`.
struct Row {
    name: String,
    script: Box<dyn Fn(&std::path::Path) -> support::script::Script>,
    file: &'static str,
    max_turns: u32,
}

fn rows() -> Vec<Row> {
    let mut rows = vec![
        Row {
            name: "announces once, acts when nudged".into(),
            script: Box::new(|d| {
                early_stops::announcer(
                    "I'll now write notes.txt.",
                    d.join("notes.txt").display().to_string(),
                    true,
                )
            }),
            file: "notes.txt",
            max_turns: 10,
        },
        Row {
            name: "announces every time".into(),
            script: Box::new(|d| {
                early_stops::announcer(
                    "Next, I will write notes.txt.",
                    d.join("notes.txt").display().to_string(),
                    false,
                )
            }),
            file: "notes.txt",
            max_turns: 10,
        },
        Row {
            name: "needs 8 turns of 5".into(),
            script: Box::new(|d| early_stops::eight_writes(d.to_path_buf())),
            file: "f7.txt",
            max_turns: 5,
        },
    ];
    for s in early_stops::STOPS {
        rows.push(Row {
            name: format!("replay: {}", s.model.split(" (").next().unwrap_or(s.model)),
            script: Box::new(move |d| {
                early_stops::replay(s, d.join("out.txt").display().to_string())
            }),
            file: "out.txt",
            max_turns: 10,
        });
    }
    rows
}

/// The prompt tokens processed anew, and those of the requests that
/// answer a nudge or follow one.
fn tokens(fake: &fake_llama::FakeLlama) -> (u64, u64) {
    let all = fake.state.prompt_tokens.load(Ordering::SeqCst);
    let prompts = fake
        .state
        .prompts
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    let bodies = fake.bodies();
    let nudge: u64 = bodies
        .iter()
        .zip(prompts.iter())
        .filter(|(b, _)| b.to_string().contains(NUDGE))
        .map(|(_, (total, cached))| total - cached)
        .sum();
    (all, nudge)
}

fn main() {
    let _mode = support::bench::mode("finish", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        println!("### The delegate finishes what it starts (`cargo bench --bench finish`)\n");
        println!(
            "| scripted stop | way | status | file written | requests | nudges | tokens processed | of them after a nudge | turn notes (tokens) | s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for row in rows() {
            for (way, extra) in [("nudges: 0", "  nudges: 0\n"), ("default", "")] {
                let fake = fake_llama::spawn(fake_llama::LlamaOpts {
                    alias: "gemma3-270m".into(),
                    slots: 1,
                    prefix_cache: true,
                    ..Default::default()
                })
                .await;
                let h = Harness::new().config(&format!(
                    "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n  prewarm: false\n{extra}",
                    fake.url()
                ));
                let dir = h.work().to_path_buf();
                fake.set_script((row.script)(&dir));
                let started = std::time::Instant::now();
                let out = tokio::process::Command::from(h.command([
                    "run",
                    "--model",
                    "gemma3-270m",
                    "--json",
                    "--max-turns",
                    &row.max_turns.to_string(),
                    &format!("Write {}.", row.file),
                ]))
                .output()
                .await
                .expect("localagents run");
                let elapsed = started.elapsed();
                let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
                let status = rec["status"].as_str().unwrap_or("?");
                let err = rec["error"]
                    .as_str()
                    .map(|e| format!(": {}", e.chars().take(70).collect::<String>()))
                    .unwrap_or_default()
                    .replace('|', "/");
                let (all, after_nudge) = tokens(&fake);
                let notes: Vec<String> = std::fs::read_to_string(
                    std::path::Path::new(rec["log_dir"].as_str().unwrap_or("")).join("requests.jsonl"),
                )
                .unwrap_or_default()
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .filter_map(|r| r["turn_note"].as_str().map(String::from))
                .collect();
                let note_tokens: u64 = notes.iter().map(|n| support::tokens::count_str(n)).sum();
                println!(
                    "| {} | {way} | {status}{err} | {} | {} | {} | {all} | {after_nudge} | {} ({note_tokens}) | {:.1} |",
                    row.name,
                    if dir.join(row.file).exists() { "yes" } else { "no" },
                    fake.bodies().len(),
                    rec["ending"]["nudges"].as_array().map_or(0, Vec::len),
                    notes.len(),
                    elapsed.as_secs_f64()
                );
            }
        }
    });
}
