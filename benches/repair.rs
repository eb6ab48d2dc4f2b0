//! What the model-fault handling (issue 20) costs a normal request, side by
//! side in one run:
//!
//! - the answer: a streamed `tool_use` answer (a short text preamble in
//!   token-sized deltas, then the call) relayed with and without the
//!   text-form repair, one event per upstream chunk as llama-server sends
//!   them, p50 per answer;
//! - the request: folding a Claude-Code-shaped body of 40 tool calls with
//!   and without the loop guard's scan, p50 per body;
//! - the runaway guard (issue 35): the same streamed answer relayed with
//!   the repair, with and without the guard, p50 per event.
//!
//! Run: `cargo bench --bench repair` (`-- --markdown`: only the table).
//! The two sides alternate, so a busy machine slows both alike.

use std::time::{Duration, Instant};

use bytes::Bytes;
use localagents::config::Backend;
use localagents::shim::fold::{self, Extras};
use localagents::shim::loops::Marks;
use localagents::shim::repair::LazyTools;
use localagents::shim::sse::Relay;
use serde_json::json;

use localagents_testkit::{bench, stats};

fn sse(name: &str, v: serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {v}\n\n"))
}

/// A streamed answer as llama-server sends it: one event per chunk.
fn answer() -> Vec<Bytes> {
    let mut ev = vec![sse(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":212,"cache_read_input_tokens":18000,"output_tokens":0}}}),
    )];
    ev.push(sse(
        "content_block_start",
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
    ));
    for t in ["I'll", " read", " the", " failing", " test", " first", "."] {
        ev.push(sse(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":t}}),
        ));
    }
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    ev.push(sse("content_block_start", json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"Read","input":{}}})));
    for p in ["{\"file_", "path\": \"tests/", "test_cli.py\"}"] {
        ev.push(sse("content_block_delta", json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":p}})));
    }
    ev.push(sse(
        "content_block_stop",
        json!({"type":"content_block_stop","index":1}),
    ));
    ev.push(sse("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":31}})));
    ev.push(sse("message_stop", json!({"type":"message_stop"})));
    ev
}

/// Claude Code's seven lean tools, schema-sized.
fn tools_raw() -> Bytes {
    let filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
    let tools: Vec<_> = ["Read", "Edit", "Write", "Glob", "Grep", "Bash", "WebFetch"]
        .iter()
        .map(|n| json!({"name": n, "description": filler.repeat(30), "input_schema": {"type": "object", "properties": {"file_path": {"type": "string", "description": filler.repeat(4)}}, "required": ["file_path"]}}))
        .collect();
    Bytes::from(serde_json::to_vec(&tools).unwrap())
}

fn relay_once(chunks: &[Bytes], tools: Option<&Bytes>) -> Duration {
    relay_guarded(chunks, tools, false)
}

fn relay_guarded(chunks: &[Bytes], tools: Option<&Bytes>, guard: bool) -> Duration {
    let t = Instant::now();
    let mut r = Relay::new(Instant::now(), Backend::LlamaCpp, Some(131072));
    if let Some(raw) = tools {
        r = r.with_repair(LazyTools::new(raw.clone()));
    }
    if guard {
        r = r.with_runaway(Box::new(|_| ("api_error", String::new())));
    }
    let mut n = 0;
    for c in chunks {
        n += r.push(c.clone()).len();
    }
    assert!(n > 0);
    std::hint::black_box(n);
    t.elapsed()
}

fn body(pairs: usize) -> Vec<u8> {
    let filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
    let mut messages = vec![json!({"role": "user", "content": "add a --json flag"})];
    for i in 0..pairs {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("toolu_{i}"), "name": "Read", "input": {"file_path": format!("src/f{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": filler.repeat(24)}]}));
    }
    serde_json::to_vec(&json!({"model": "m", "max_tokens": 4096, "stream": true,
        "system": [{"type": "text", "text": filler.repeat(350)}], "messages": messages}))
    .unwrap()
}

fn fold_once(b: &[u8], marks: Option<&Marks>) -> Duration {
    let t = Instant::now();
    let extras = Extras {
        loops: marks.map(|m| (m, 3)),
        drop_thinking: false,
        turns: None,
        lift_images: false,
    };
    let (out, _) = fold::fold_raw_with(b, Some("m"), Some(131072), extras).unwrap();
    std::hint::black_box(out.len());
    t.elapsed()
}

fn ms(d: &[Duration]) -> Vec<f64> {
    d.iter().map(|x| x.as_secs_f64() * 1000.0).collect()
}

fn main() {
    let mode = bench::mode("repair", false);
    let chunks = answer();
    let tools = tools_raw();
    let (warm, runs) = (500, 5000);
    let (mut plain, mut repaired) = (Vec::new(), Vec::new());
    for i in 0..warm + runs {
        let a = relay_once(&chunks, None);
        let b = relay_once(&chunks, Some(&tools));
        if i >= warm {
            plain.push(a);
            repaired.push(b);
        }
    }
    let mut guarded = Vec::new();
    let mut unguarded = Vec::new();
    for i in 0..warm + runs {
        let a = relay_guarded(&chunks, Some(&tools), false);
        let b = relay_guarded(&chunks, Some(&tools), true);
        if i >= warm {
            unguarded.push(a);
            guarded.push(b);
        }
    }
    let per_event = chunks.len() as f64;
    let (mut u, mut g) = (ms(&unguarded), ms(&guarded));
    let (u50, g50r) = (
        stats::pct(&mut u, 0.5) / per_event,
        stats::pct(&mut g, 0.5) / per_event,
    );
    let (mut p, mut r) = (ms(&plain), ms(&repaired));
    let (p50, r50) = (stats::pct(&mut p, 0.5), stats::pct(&mut r, 0.5));
    let (p90, r90) = (stats::pct(&mut p, 0.9), stats::pct(&mut r, 0.9));

    let b = body(40);
    let marks = Marks::default();
    let (mut without, mut with) = (Vec::new(), Vec::new());
    for i in 0..100 + 1000 {
        let a = fold_once(&b, None);
        let c = fold_once(&b, Some(&marks));
        if i >= 100 {
            without.push(a);
            with.push(c);
        }
    }
    let (mut w0, mut w1) = (ms(&without), ms(&with));
    let (f50, g50) = (stats::pct(&mut w0, 0.5), stats::pct(&mut w1, 0.5));

    let table = format!(
        "| what | without | with | added (p50) |\n|---|---|---|---|\n\
| relaying a streamed tool_use answer ({} events), repair check | {p50:.4} ms | {r50:.4} ms | **{:.4} ms** (p90 {:.4} → {:.4}) |\n\
| folding a {} KB body of 40 tool calls, loop guard | {f50:.3} ms | {g50:.3} ms | **{:.3} ms** |\n\
| the same streamed answer, runaway guard, per event | {u50:.5} ms | {g50r:.5} ms | **{:.5} ms** |",
        chunks.len(),
        r50 - p50,
        p90,
        r90,
        b.len() / 1024,
        g50 - f50,
        g50r - u50
    );
    if mode == bench::Mode::Markdown {
        println!("{table}");
        return;
    }
    println!("repair bench: {runs} answers and 1,000 bodies each way, interleaved, in process\n");
    println!("{table}");
    println!(
        "\ntarget: the repair check adds < 0.05 ms p50 to a normal streamed answer: {}",
        if r50 - p50 < 0.05 { "met" } else { "NOT met" }
    );
    println!(
        "target: the runaway guard adds < 0.01 ms p50 per streamed event: {}",
        if g50r - u50 < 0.01 { "met" } else { "NOT met" }
    );
}
