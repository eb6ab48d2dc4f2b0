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
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use localagents::probe::metrics;
use localagents::shim::fold;
use serde_json::{Value, json};

fn start_server() -> server::Server {
    // One slot: every request of a replay meets the same cache.
    server::start(&["-c", "32768", "--parallel", "1"])
}

/// Record a real session: 6 tool calls, then a final answer. `lean`: with
/// the delegate's lean flags (`--tools`, no auto-memory, no MCP servers).
async fn record(lean: bool) -> Vec<Value> {
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    fake.set_script(support::script::tools_then_text(
        vec![
            (
                "Bash",
                json!({"command": "ls", "description": "list files"}),
            ),
            (
                "Write",
                json!({"file_path": "notes.txt", "content": "one\n"}),
            ),
            ("Read", json!({"file_path": "notes.txt"})),
            (
                "Edit",
                json!({"file_path": "notes.txt", "old_string": "one", "new_string": "two"}),
            ),
            (
                "Bash",
                json!({"command": "cat notes.txt", "description": "show notes"}),
            ),
            ("Glob", json!({"pattern": "*.txt"})),
        ],
        "Done: notes.txt says two.",
    ));
    let tmp = tempfile::tempdir().unwrap();
    let (home, work) = (tmp.path().join("home"), tmp.path().join("work"));
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut env = localagents::session_env::session_env(fake.url(), "gemma3-270m", Some(32768));
    let mut args = vec![
        "--model",
        "gemma3-270m",
        "--permission-mode",
        "acceptEdits",
        "--allowedTools",
        "Bash,Read,Write,Edit,Glob",
        "--max-turns",
        "10",
    ];
    if lean {
        args.extend([
            "--tools",
            "Bash,Read,Write,Edit,Glob",
            "--strict-mcp-config",
        ]);
        env.push(("CLAUDE_CODE_DISABLE_AUTO_MEMORY".into(), "1".into()));
        env.push(("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS".into(), "1".into()));
    }
    let cmd = support::claude::command(
        &home,
        &work,
        &env,
        &args,
        "Create notes.txt, then change it.",
    );
    let run = support::claude::run(cmd, Duration::from_secs(120)).await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    fake.bodies()
        .into_iter()
        .filter(|b| b.get("tools").is_some())
        .collect()
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

struct Turn {
    processed: u64,
    cached: u64,
    metrics_processed: f64,
    metrics_cached: f64,
    secs: f64,
}

async fn replay(bodies: &[Value]) -> Vec<Turn> {
    let server = start_server();
    let client = localagents::probe::http_client();
    let mut turns = Vec::new();
    for b in bodies {
        let mut b = b.clone();
        b["stream"] = json!(false);
        b["max_tokens"] = json!(1);
        b["temperature"] = json!(0);
        let scrape = || async {
            let t = client
                .get(format!("{}/metrics", server.url))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            metrics::parse(&t)
        };
        let before = scrape().await;
        let t = Instant::now();
        let r = client
            .post(format!("{}/v1/messages", server.url))
            .json(&b)
            .send()
            .await
            .unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert!(status.is_success(), "{status}: {v}");
        let after = scrape().await;
        let d =
            |k: &str| after.get(k).copied().unwrap_or(0.0) - before.get(k).copied().unwrap_or(0.0);
        turns.push(Turn {
            processed: v["usage"]["input_tokens"].as_u64().unwrap_or(0),
            cached: v["usage"]["cache_read_input_tokens"].as_u64().unwrap_or(0),
            metrics_processed: d("llamacpp:prompt_tokens_total"),
            metrics_cached: d("llamacpp:prompt_tokens_cached_total"),
            secs,
        });
    }
    turns
}

fn ratio(t: &Turn) -> f64 {
    let all = t.processed + t.cached;
    if all == 0 {
        0.0
    } else {
        t.cached as f64 / all as f64
    }
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
            ratio(f),
            f.secs,
            h.processed,
            h.cached,
            h.metrics_processed,
            h.metrics_cached,
            ratio(h),
            h.secs
        );
    }
    let mean = |t: &[Turn]| t[1..].iter().map(ratio).sum::<f64>() / (t.len() - 1) as f64;
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
    let mean = |t: &[Turn]| t[1..].iter().map(ratio).sum::<f64>() / (t.len() - 1) as f64;
    let min = |t: &[Turn]| t[1..].iter().map(ratio).fold(1.0, f64::min);
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
