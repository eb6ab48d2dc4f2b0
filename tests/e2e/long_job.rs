//! The reader job of issue 45 on a real llama-server: the relay answers as
//! the reader ([`crate::support::reader`]), the server processes every
//! prompt as it came. Shared by e2e t24 and `cargo bench --bench
//! long_jobs_real`.

use std::time::Instant;

use serde_json::Value;

use crate::relay;
use crate::server::{need, start as start_server};
use crate::support;
use crate::support::git::repo;
use crate::support::harness::Harness;

/// What a reader job on the real server did ([`real_reader`]).
pub struct RealReader {
    pub record: Value,
    #[allow(dead_code)] // The bench reads the figures only.
    pub summary: String,
    pub requests: Vec<Value>,
    /// Prompt tokens the server processed, and found in its cache.
    pub processed: u64,
    pub cached: u64,
    pub secs: f64,
}

/// The reader job ([`support::reader`], `parts` files of 4,500 tokens)
/// through the relay on a real llama-server at `-c ctx --parallel 1`,
/// with `defaults` (YAML lines indented by 2). The relay answers as the
/// reader; the server processes every prompt as it came.
pub async fn real_reader(ctx: u64, parts: usize, defaults: &str) -> RealReader {
    let ctx_s = ctx.to_string();
    let srv = start_server(&["-c", &ctx_s, "--parallel", "1"]);
    let h = Harness::new()
        .config("endpoints: {}\n")
        .claude(need("LOCALAGENTS_CLAUDE"));
    let dir = h.work().join("reader");
    repo(&dir);
    support::reader::write_tree(&dir, parts, 4_500);
    let relay = relay::start(&srv.url, support::reader::script(&dir, parts), true).await;
    std::fs::write(
        h.config_path(),
        format!(
            "endpoints:\n  real:\n    base_url: {}\ndefaults:\n  max_turns: 300\n  timeout_s: 1800\n  setting_sources: []\n{defaults}",
            relay.url
        ),
    )
    .unwrap();
    let started = Instant::now();
    let out = tokio::process::Command::from(h.command([
        "run",
        "--model",
        "gemma3-270m",
        "--json",
        &support::reader::brief(parts),
    ]))
    .current_dir(&dir)
    .output()
    .await
    .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let record: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let id = record["id"].as_str().unwrap_or_default().to_string();
    let requests: Vec<Value> =
        std::fs::read_to_string(h.state_dir().join("jobs").join(&id).join("requests.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|r: &Value| r["path"] == "/v1/messages")
            .collect();
    let seen = relay.seen.lock().map(|s| s.clone()).unwrap_or_default();
    drop(relay);
    drop(srv);
    RealReader {
        summary: std::fs::read_to_string(dir.join("SUMMARY.md")).unwrap_or_default(),
        record,
        requests,
        processed: seen.iter().map(|(_, p, _)| p).sum(),
        cached: seen.iter().map(|(_, _, c)| c).sum(),
        secs,
    }
}
