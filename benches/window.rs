//! The smallest per-slot window a lean delegate works in (issue 9, item 6).
//!
//! A scripted 6-turn job (Bash, Read of a 9 KB source file, Grep, Edit,
//! Bash, Write, then a report) runs through `localagents run` with the real
//! Claude Code CLI against the fake llama.cpp server in strict mode, once
//! per window. The fake enforces the window like llama-server (400
//! `exceed_context_size_error`) and counts body bytes / 4 as prompt tokens,
//! more than a real tokenizer gives for this JSON-heavy text, so the figure
//! errs on the safe side. A window "works" when the job succeeds, did the
//! edit and the write, and Claude Code never tried to compact (a
//! `system/status` event `compacting`, whether it failed or not).
//!
//! Run: `cargo bench --bench window`. Prints a Markdown table and the
//! smallest working window.

use localagents_testkit as support;

use std::path::Path;
use std::time::Instant;

use serde_json::{Value, json};

const WINDOWS: &[u64] = &[
    8192, 12288, 16384, 20480, 24576, 26624, 28672, 30720, 32768, 49152,
];

/// A small Rust-like project: one 9 KB source file.
fn project(dir: &Path) {
    let mut src = String::new();
    for i in 0..120 {
        src.push_str(&format!(
            "/// Adds {i} to x, saturating.\npub fn add_{i}(x: u32) -> u32 {{\n    x.saturating_add({i})\n}}\n\n"
        ));
    }
    support::git::repo_with(dir, &[("src/lib.rs", &src)]);
}

fn script() -> support::script::Script {
    support::script::tools_then_text(
        vec![
            (
                "Bash",
                json!({"command": "ls -R", "description": "list files"}),
            ),
            ("Read", json!({"file_path": "src/lib.rs"})),
            (
                "Grep",
                json!({"pattern": "pub fn add_1[0-9]\\b", "output_mode": "content"}),
            ),
            (
                "Edit",
                json!({"file_path": "src/lib.rs", "old_string": "pub fn add_7(x: u32) -> u32 {\n    x.saturating_add(7)", "new_string": "pub fn add_7(x: u32) -> u32 {\n    x.wrapping_add(7)"}),
            ),
            (
                "Bash",
                json!({"command": "grep -c wrapping_add src/lib.rs", "description": "check the edit"}),
            ),
            (
                "Write",
                json!({"file_path": "tests/add7.rs", "content": "#[test]\nfn wraps() {\n    assert_eq!(adders::add_7(u32::MAX), 6);\n}\n"}),
            ),
        ],
        "Changed add_7 to wrap (src/lib.rs) and added tests/add7.rs; grep shows one wrapping_add.",
    )
}

struct Outcome {
    status: String,
    requests: usize,
    peak_prompt: u64,
    first_prompt: u64,
    compacted: bool,
    done: bool,
    error: String,
    secs: f64,
}

async fn one(w: u64, claude: &Path) -> Outcome {
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: w,
        slots: 1,
        strict_template: true,
        ..Default::default()
    })
    .await;
    fake.set_script(script());
    let h = support::harness::Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  max_turns: 12\n  timeout_s: 180\n",
            fake.url()
        ))
        .claude(claude);
    let work = h.work().to_path_buf();
    project(&work);
    let t = Instant::now();
    let out = tokio::process::Command::from(h.command([
        "run",
        "--model",
        "gemma3-270m",
        "--json",
        "Make add_7 wrap instead of saturate and add a test for it.",
    ]))
    .output()
    .await
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let dir = rec["log_dir"].as_str().map(std::path::PathBuf::from);
    let read = |f: &str| {
        dir.as_ref()
            .and_then(|d| std::fs::read_to_string(d.join(f)).ok())
            .unwrap_or_default()
    };
    let reqs: Vec<Value> = read("requests.jsonl")
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &Value| v["path"] == "/v1/messages")
        .collect();
    let prompt = |v: &Value| {
        v["usage"]["input"].as_u64().unwrap_or(0) + v["usage"]["cache_read"].as_u64().unwrap_or(0)
    };
    if std::env::var_os("WINDOW_BENCH_DEBUG").is_some() {
        for v in &reqs {
            eprintln!(
                "{w} req: msgs {} tools {} status {} usage {} stop {}",
                v["messages"], v["tools"], v["status"], v["usage"], v["stop_reason"]
            );
        }
        for l in read("events.jsonl").lines() {
            if l.contains("\"system\"") {
                eprintln!("{w} ev: {}", l.chars().take(300).collect::<String>());
            }
        }
    }
    let lib = std::fs::read_to_string(work.join("src/lib.rs")).unwrap_or_default();
    Outcome {
        status: rec["status"].as_str().unwrap_or("no record").to_string(),
        requests: reqs.len(),
        peak_prompt: reqs.iter().map(prompt).max().unwrap_or(0),
        first_prompt: reqs.first().map(prompt).unwrap_or(0),
        // Any compaction attempt counts, failed or not.
        compacted: read("events.jsonl").contains("\"status\":\"compacting\"")
            || read("events.jsonl").contains("compact_boundary"),
        done: lib.contains("x.wrapping_add(7)") && work.join("tests/add7.rs").is_file(),
        error: rec["error"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(90)
            .collect(),
        secs,
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let claude = support::claude::binary();
        println!("### Smallest per-slot window for a scripted 6-turn job (`cargo bench --bench window`)\n");
        println!(
            "| window/slot | status | requests | first prompt | peak prompt | compacted | edit+write done | s | error |"
        );
        println!("|---|---|---|---|---|---|---|---|---|");
        let mut smallest = None;
        for &w in WINDOWS {
            let o = one(w, &claude).await;
            let works = o.status == "succeeded" && o.done && !o.compacted;
            if works && smallest.is_none() {
                smallest = Some(w);
            }
            println!(
                "| {w} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
                o.status,
                o.requests,
                o.first_prompt,
                o.peak_prompt,
                if o.compacted { "yes" } else { "no" },
                if o.done { "yes" } else { "no" },
                o.secs,
                o.error.replace('|', "/")
            );
        }
        println!();
        match smallest {
            Some(w) => println!("smallest working window: {w} tokens per slot"),
            None => println!("smallest working window: none of {WINDOWS:?}"),
        }
    });
}
