//! The prefix-cache benchmark behind the seeds' headline figure: folding
//! system messages in place keeps llama-server's KV-cache prefix; hoisting
//! them to the top throws it away.
//!
//! 1. Record a real multi-turn Claude Code 2.1.328 session (7 requests,
//!    its default tool set), driven by the scripted fake model calling tools.
//! 2. Replay the bodies in order against a real llama-server (fresh for each
//!    run, one slot), `max_tokens` 1 and temperature 0, folded by the shim
//!    or with every in-`messages` system entry hoisted into `system`.
//! 3. Do it for today's traffic, for a variant with one new system entry
//!    after each tool result, as older Claude Code versions sent, and for
//!    the same session recorded with the lean delegate's flags (the in-job
//!    cache ratio must not regress).
//!
//! Run: `scripts/e2e-real.sh bench` (it provisions llama-server and the
//! model and sets LOCALAGENTS_E2E_*). Prints Markdown tables.

#[path = "../tests/e2e/server.rs"]
mod server;
use localagents_testkit as support;

use localagents::shim::fold;
use serde_json::{Value, json};

fn start_server() -> server::Server {
    // One slot: every request of a replay meets the same cache.
    server::start(&["-c", "32768", "--parallel", "1"])
}

/// Record a real session: 6 tool calls, then a final answer. `lean`: with
/// the delegate's lean flags (`--tools`, no auto-memory, no MCP servers).
async fn record(lean: bool) -> Vec<Value> {
    support::session::record(lean, "Create notes.txt, then change it.").await
}

/// Older Claude Code: one new system entry after each tool-result turn.
fn with_reminders(bodies: &[Value]) -> Vec<Value> {
    bodies
        .iter()
        .map(|b| {
            let mut b = b.clone();
            let msgs = b["messages"].as_array().cloned().unwrap_or_default();
            let mut out = Vec::new();
            let mut n = 0;
            for m in msgs {
                let is_result = m["role"] == "user" && m["content"].as_array().is_some_and(|c| c.iter().any(|x| x["type"] == "tool_result"));
                out.push(m);
                if is_result {
                    n += 1;
                    out.push(json!({"role": "system", "content": format!("<system-reminder>Turn {n}: token budget {} remaining; skills available: none.</system-reminder>", 100_000 - n * 1000)}));
                }
            }
            b["messages"] = Value::Array(out);
            b
        })
        .collect()
}

fn hoist(body: &Value) -> Value {
    let mut b = body.clone();
    let msgs = b["messages"].as_array().cloned().unwrap_or_default();
    let (sys, rest): (Vec<Value>, Vec<Value>) =
        msgs.into_iter().partition(|m| m["role"] == "system");
    let mut system = match &b["system"] {
        Value::Array(a) => a.clone(),
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        _ => vec![],
    };
    system.retain(|x| {
        !x["text"]
            .as_str()
            .unwrap_or("")
            .starts_with(fold::BILLING_PREFIX)
    });
    for s in sys {
        system.push(json!({"type": "text", "text": fold::system_text(&s["content"])}));
    }
    b["system"] = Value::Array(system);
    b["messages"] = Value::Array(rest);
    b
}

fn folded(body: &Value) -> Value {
    let raw = serde_json::to_vec(body).unwrap();
    let (out, _) = fold::fold_raw(&raw, Some("gemma3-270m"), Some(32768)).unwrap();
    serde_json::from_slice(&out).unwrap()
}

use support::session::Turn;

async fn replay(bodies: &[Value]) -> Vec<Turn> {
    let server = start_server();
    let mut turns = Vec::new();
    for b in bodies {
        turns.push(support::session::send(&server.url, b).await);
    }
    turns
}

fn report(name: &str, folded: &[Turn], hoisted: &[Turn]) {
    println!("\n#### {name}\n");
    println!(
        "| turn | folded: processed / cached (usage) | /metrics processed / cached | ratio | s | hoisted: processed / cached (usage) | /metrics processed / cached | ratio | s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (i, (f, h)) in folded.iter().zip(hoisted).enumerate() {
        println!(
            "| {} | {} / {} | {:.0} / {:.0} | {:.3} | {:.2} | {} / {} | {:.0} / {:.0} | {:.3} | {:.2} |",
            i + 1,
            f.processed,
            f.cached,
            f.metrics_processed,
            f.metrics_cached,
            f.ratio(),
            f.secs,
            h.processed,
            h.cached,
            h.metrics_processed,
            h.metrics_cached,
            h.ratio(),
            h.secs
        );
    }
    let mean = |t: &[Turn]| t[1..].iter().map(Turn::ratio).sum::<f64>() / (t.len() - 1) as f64;
    let total = |t: &[Turn]| t.iter().map(|x| x.secs).sum::<f64>();
    let later = |t: &[Turn]| t[1..].iter().map(|x| x.secs).sum::<f64>();
    println!(
        "\n| mode | mean cache ratio, turns 2..{} | total prompt time | turns 2..{} |",
        folded.len(),
        folded.len()
    );
    println!("|---|---|---|---|");
    println!(
        "| folded (the shim) | {:.3} | {:.1} s | {:.1} s |",
        mean(folded),
        total(folded),
        later(folded)
    );
    println!(
        "| hoisted into `system` | {:.3} | {:.1} s | {:.1} s |",
        mean(hoisted),
        total(hoisted),
        later(hoisted)
    );
}

/// `--in-job`: the in-job cache ratio of the same session recorded with the
/// previous delegate flags and with the lean ones, folded, in one run.
async fn in_job() {
    let before = record(false).await;
    let after = record(true).await;
    let bf: Vec<Value> = before.iter().map(folded).collect();
    let af: Vec<Value> = after.iter().map(folded).collect();
    let bt = replay(&bf).await;
    let at = replay(&af).await;
    let mean = |t: &[Turn]| t[1..].iter().map(Turn::ratio).sum::<f64>() / (t.len() - 1) as f64;
    let min = |t: &[Turn]| t[1..].iter().map(Turn::ratio).fold(1.0, f64::min);
    let prompt = |t: &[Turn]| t[0].processed + t[0].cached;
    println!(
        "#### In-job cache ratio, previous delegate flags vs lean (`cargo bench --bench prefix_cache -- --in-job`)\n"
    );
    println!(
        "The same scripted 9-request session of the real Claude Code 2.1.328, folded by the shim, replayed on a fresh one-slot llama-server.\n"
    );
    println!(
        "| delegate | requests | first prompt (tokens) | mean cache ratio, turns 2.. | lowest | turns 2.. s |"
    );
    println!("|---|---|---|---|---|---|");
    for (name, t) in [("previous flags", &bt), ("lean", &at)] {
        println!(
            "| {name} | {} | {} | {:.3} | {:.3} | {:.1} |",
            t.len(),
            prompt(t),
            mean(t),
            min(t),
            t[1..].iter().map(|x| x.secs).sum::<f64>()
        );
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        if std::env::args().any(|a| a == "--in-job") {
            return in_job().await;
        }
        let bodies = record(false).await;
        let lean = record(true).await;
        let in_msgs: Vec<usize> = bodies.iter().map(|b| b["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "system").count()).collect();
        println!("recorded {} requests of a real Claude Code 2.1.328 session; system entries inside messages per request: {in_msgs:?}", bodies.len());
        let variant = with_reminders(&bodies);
        for (name, set) in [("today's traffic (2.1.328: one constant system entry)", &bodies), ("older Claude Code: a new system entry after each tool result", &variant), ("the lean delegate (`--tools`, no auto-memory, `--strict-mcp-config`), today's traffic", &lean)] {
            let f: Vec<Value> = set.iter().map(folded).collect();
            let h: Vec<Value> = set.iter().map(hoist).collect();
            let ft = replay(&f).await;
            let ht = replay(&h).await;
            report(name, &ft, &ht);
        }
    });
}
