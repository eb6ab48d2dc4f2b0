//! A job's first request on a real llama-server, before and after lean
//! delegates (issue 9).
//!
//! 1. Capture the first request of two jobs with the real Claude Code
//!    CLI 2.1.328 (`prefix::capture_first_request`, the job's own command
//!    line and environment): job 1 in-tree in one repository, job 2 in a
//!    worktree of another repository. "before" is the command line of the
//!    previous release (`--allowedTools` only, auto-memory on, project MCP
//!    servers allowed, git-status snapshot); "after" is today's (`--tools`,
//!    no auto-memory, `--strict-mcp-config`, no git-status snapshot).
//! 2. Fold each as the shim does, and send job 1's then job 2's to a fresh
//!    llama-server (one slot, `-c 32768`, the strict template), with
//!    `max_tokens` 1 and temperature 0: processed and cached tokens from
//!    the answer's usage and from the `/metrics` delta, and the time.
//!
//! Run: `scripts/e2e-real.sh bench`. Prints Markdown tables.

#[path = "../tests/e2e/server.rs"]
mod server;
use localagents_testkit as support;

use support::git::{git, repo};

use std::path::Path;
use std::time::Duration;

use localagents::prefix::{self, FixedPrompt};
use localagents::runner::Launch;
use localagents::shim::fold;
use serde_json::{Value, json};

/// The previous release's command line: no `--tools`, no
/// `--strict-mcp-config`, auto-memory and the git-status snapshot on.
fn before(mut l: Launch) -> Launch {
    if let Some(i) = l.args.iter().position(|a| a == "--tools") {
        l.args.drain(i..i + 2);
    }
    l.args.retain(|a| a != "--strict-mcp-config");
    l.env
        .retain(|(k, _)| k != "CLAUDE_CODE_DISABLE_AUTO_MEMORY");
    l
}

async fn capture(claude: &Path, home: &Path, cwd: &Path, legacy: bool) -> Value {
    let config = localagents::config::Config::builtin();
    let body = prefix::capture_first_request(
        |url| {
            let mut l = prefix::job_launch(&config, claude, cwd, url);
            l.env.push(("HOME".into(), home.display().to_string()));
            if legacy { before(l) } else { l }
        },
        Duration::from_secs(90),
    )
    .await
    .unwrap();
    let raw = serde_json::to_vec(&body).unwrap();
    let (out, _) = fold::fold_raw(&raw, Some("gemma3-270m"), Some(32768)).unwrap();
    serde_json::from_slice(&out).unwrap()
}

use support::session::send;

/// Tokens of `system` + `tools` by the server's own count.
async fn fixed_tokens(url: &str, body: &Value) -> Option<u64> {
    let b = json!({
        "model": body["model"], "system": body["system"], "tools": body["tools"],
        "messages": [{"role": "user", "content": "x"}],
    });
    let r = localagents::probe::http_client()
        .post(format!("{url}/v1/messages/count_tokens"))
        .json(&b)
        .send()
        .await
        .ok()?;
    let v: Value = r.json().await.ok()?;
    v["input_tokens"].as_u64()
}

fn thousands(n: u64) -> String {
    localagents::jobs::metrics::thousands(n)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let claude = std::path::PathBuf::from(server::need("LOCALAGENTS_CLAUDE"));
        let tmp = support::harness::Harness::new();
        let home = tmp.home().to_path_buf();
        let a = tmp.dir().join("repo-a");
        let b = tmp.dir().join("elsewhere/repo-b");
        repo(&a);
        repo(&b);
        let wt = tmp.dir().join("state/worktrees/job2");
        git(
            &b,
            &[
                "worktree",
                "add",
                "-q",
                "-b",
                "local-agent/job2",
                wt.to_str().unwrap(),
            ],
        );

        println!(
            "### A job's first request on the real llama-server (`scripts/e2e-real.sh bench`)\n"
        );
        println!(
            "gemma-3-270m Q4_K_M, llama-server 11434 (`-c 32768 --parallel 1`, strict template), 2 cores; Claude Code 2.1.328; default tools; job 1 in-tree in one repository, job 2 in a worktree of another. Tokens from the answer's usage; /metrics delta in brackets.\n"
        );
        println!(
            "| delegate | first request | job 1: processed / cached | job 1 s | job 2: processed / cached | job 2 s |"
        );
        println!("|---|---|---|---|---|---|");
        let mut rows = Vec::new();
        for (name, legacy) in [
            ("before (`--allowedTools` only, auto-memory on)", true),
            (
                "after (`--tools`, no auto-memory, no git snapshot, `--strict-mcp-config`)",
                false,
            ),
        ] {
            let j1 = capture(&claude, &home, &a, legacy).await;
            let j2 = capture(&claude, &home, &wt, legacy).await;
            let srv = server::start(&["-c", "32768", "--parallel", "1"]);
            let s1 = send(&srv.url, &j1).await;
            let s2 = send(&srv.url, &j2).await;
            let fixed = fixed_tokens(&srv.url, &j1).await;
            drop(srv);
            let bytes = serde_json::to_vec(&j1).unwrap().len();
            println!(
                "| {name} | {:.1} KB | {} / {} [{:.0} / {:.0}] | {:.1} | {} / {} [{:.0} / {:.0}] | {:.2} |",
                bytes as f64 / 1000.0,
                thousands(s1.processed),
                thousands(s1.cached),
                s1.metrics_processed,
                s1.metrics_cached,
                s1.secs,
                thousands(s2.processed),
                thousands(s2.cached),
                s2.metrics_processed,
                s2.metrics_cached,
                s2.secs
            );
            rows.push((FixedPrompt::from_body(&j1), fixed, s1, s2));
        }
        let (b, a) = (&rows[0], &rows[1]);
        let r = |x: f64, y: f64| if y > 0.0 { x / y } else { f64::NAN };
        println!(
            "\nbefore / after: job 1 tokens {:.1}x, time {:.1}x; job 2 tokens processed {:.1}x, time {:.1}x. Job 2 cached share after: {:.3}.\n",
            r(
                (b.2.processed + b.2.cached) as f64,
                (a.2.processed + a.2.cached) as f64
            ),
            r(b.2.secs, a.2.secs),
            r(b.3.processed as f64, a.3.processed.max(1) as f64),
            r(b.3.secs, a.3.secs),
            a.3.cached as f64 / (a.3.processed + a.3.cached).max(1) as f64
        );
        println!("| fixed prompt (`system` + `tools`) | tools | bytes | tokens (server count) |");
        println!("|---|---|---|---|");
        for (name, row) in [("before", b), ("after", a)] {
            println!(
                "| {name} | {} | {} | {} |",
                row.0.tools.len(),
                thousands(row.0.bytes() as u64),
                row.1.map(thousands).unwrap_or_else(|| "n/a".into())
            );
        }
    });
}
