//! Foundation figures (issue 1): `status` with a live, a refused and a hung
//! endpoint; MCP cold start to the `tools/list` answer; idle RSS of `serve`.
//!
//! Run: `cargo bench --bench foundation`. Prints a Markdown table;
//! `-- --markdown` prints only the docs/benchmarks.md table (scripts/bench-readme.sh
//! pastes it between the `<!-- bench:foundation -->` markers).
//!
//! `-- --smoke` (run by `.ci/run`): only the cold start, 10 runs; fails on a
//! gross regression, a p50 over [`SMOKE_COLD_START_MS`].

use localagents_testkit as support;

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::harness::Harness;
use support::stats::{pct, rss_kb};

/// Smoke limit: `serve` cold start to the `tools/list` answer, p50.
const SMOKE_COLD_START_MS: f64 = 100.0;

use support::bench::Mode;

fn mode() -> Mode {
    support::bench::mode("foundation", true)
}

fn main() {
    let mode = mode();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (fake, silent) = rt.block_on(async {
        (
            support::fake_llama::spawn(Default::default()).await,
            support::net::silent_listener().await,
        )
    });
    let refused = support::net::refused_addr();
    let h = Harness::new().config(&format!(
        "endpoints:\n  live:\n    base_url: {}\n  refused:\n    base_url: http://{refused}\n  hung:\n    base_url: http://{}\ndefaults:\n  probe_timeout_s: 2.5\n",
        fake.url(),
        silent.addr
    ));

    // 1. status with three endpoints (not in the smoke run: it waits out
    // the 2.5 s probe budget each time).
    let mut status_s = Vec::new();
    let status_runs = if mode == Mode::Smoke { 0 } else { 5 };
    for _ in 0..status_runs {
        let t = Instant::now();
        let out = h
            .command(["status", "--json"])
            .output()
            .expect("run status");
        status_s.push(t.elapsed().as_secs_f64());
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        let ups: Vec<bool> = v["endpoints"]
            .as_array()
            .expect("endpoints")
            .iter()
            .map(|e| e["up"].as_bool().unwrap_or(false))
            .collect();
        assert_eq!(ups, [true, false, false]);
    }
    status_s.sort_by(f64::total_cmp);

    // 2. cold start to tools/list, 3. idle RSS.
    let mut start_ms = Vec::new();
    let mut rss_init = Vec::new();
    let mut rss_after_list = 0;
    let smoke = mode == Mode::Smoke;
    let start_runs = if smoke { 10 } else { 30 };
    for i in 0..start_runs {
        let t = Instant::now();
        let mut child = h
            .command(["serve"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn serve");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let msgs = [
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        ];
        for m in msgs {
            writeln!(stdin, "{m}").expect("write");
        }
        stdin.flush().expect("flush");
        let mut line = String::new();
        loop {
            line.clear();
            if stdout.read_line(&mut line).expect("read") == 0 {
                panic!("serve exited early");
            }
            if line.contains("\"id\":2") {
                break;
            }
        }
        start_ms.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(line.contains("list_models"));
        if i < 5 && !smoke {
            // harness-rules: a pause, not a wait (the process settles before its RSS is read)
            std::thread::sleep(Duration::from_millis(500));
            rss_init.push(rss_kb(child.id()));
        }
        if i == 0 && !smoke {
            writeln!(
                stdin,
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"list_models","arguments":{{}}}}}}"#
            )
            .expect("write");
            stdin.flush().expect("flush");
            loop {
                line.clear();
                if stdout.read_line(&mut line).expect("read") == 0 || line.contains("\"id\":3") {
                    break;
                }
            }
            // harness-rules: a pause, not a wait (the process settles before its RSS is read)
            std::thread::sleep(Duration::from_millis(500));
            rss_after_list = rss_kb(child.id());
        }
        drop(stdin);
        let _ = child.wait();
    }
    start_ms.sort_by(f64::total_cmp);
    rss_init.sort();

    if smoke {
        let p50 = pct(&mut start_ms, 0.5);
        println!(
            "smoke foundation: `serve` cold start to `tools/list`, p50 of {start_runs} runs: {p50:.1} ms (max {:.1} ms); limit {SMOKE_COLD_START_MS} ms",
            start_ms[start_ms.len() - 1]
        );
        if p50 > SMOKE_COLD_START_MS {
            eprintln!(
                "smoke foundation FAILED: `serve` cold start to `tools/list` took {p50:.1} ms (p50 of {start_runs} runs), over the {SMOKE_COLD_START_MS} ms limit."
            );
            std::process::exit(1);
        }
        return;
    }

    println!("| figure | value | target |");
    println!("|---|---|---|");
    let status_med = pct(&mut status_s, 0.5);
    println!(
        "| `status` with live + refused + hung endpoint (budget 2.5 s), 5 runs | min {:.3} s, median {:.3} s, max {:.3} s | <= 2.8 s |",
        status_s[0],
        status_med,
        status_s[status_s.len() - 1]
    );
    println!(
        "| `serve` cold start to `tools/list` answer, {start_runs} runs | p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms | < 30 ms |",
        pct(&mut start_ms, 0.5),
        pct(&mut start_ms, 0.95),
        start_ms[start_ms.len() - 1]
    );
    println!(
        "| `serve` idle RSS after initialize | median {:.1} MB | < 20 MB |",
        pct(
            &mut rss_init.iter().map(|&k| k as f64).collect::<Vec<_>>(),
            0.5
        ) / 1024.0
    );
    println!(
        "| `serve` idle RSS after one `list_models` (3 endpoints probed) | {:.1} MB | < 20 MB |",
        rss_after_list as f64 / 1024.0
    );
    drop(fake);
}
