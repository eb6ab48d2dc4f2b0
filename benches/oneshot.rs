//! One-shot work (issue 11): what `local_complete` adds over a bare
//! request to the same server, and batch throughput on the real
//! llama-server with one slot vs two.
//!
//! Run: `cargo bench --bench oneshot`. Part one always runs, against the
//! fake llama-server in process: the same small request sent straight to
//! the fake and through `api::local_complete` (config load, cached probe,
//! resolution, the window check's count_tokens round trip, the shim's
//! request path and log), interleaved, 300 each. Part two runs when the
//! real tier's env is set (`scripts/e2e-real.sh bench` sets it): two
//! llama-servers with the same 4,096-token slots, `-c 4096 --parallel 1`
//! and `-c 8192 --parallel 2`, and the same batch of 8 items on each, in
//! one run; it prints items/s for both and the ratio.

#[path = "../tests/e2e/server.rs"]
#[allow(dead_code)]
mod server;
use localagents_testkit as support;

use std::time::{Duration, Instant};

use localagents::api::{self, Context};
use localagents::complete::{Ask, Options};
use localagents::jobs::batch::BatchArgs;
use localagents::jobs::limits::Caller;
use localagents::jobs::manager::Manager;
use serde_json::json;
use support::stats::pct;

const RUNS: usize = 300;

fn ctx_for(url: &str, dir: &std::path::Path) -> Context {
    let cfg = dir.join("models.yaml");
    std::fs::write(
        &cfg,
        format!("endpoints:\n  box:\n    base_url: {url}\n    backend: llama.cpp\n"),
    )
    .unwrap();
    Context {
        explicit_config: Some(cfg),
        state_dir: dir.join("state"),
    }
}

async fn overhead() {
    let fake = support::fake_llama::spawn(support::fake_llama::LlamaOpts::default()).await;
    let tmp = support::harness::Harness::new();
    let ctx = ctx_for(fake.url(), tmp.dir());
    let client = localagents::probe::http_client().clone();
    let served = support::fake_llama::LlamaOpts::default().alias;
    let body = json!({"model": served, "max_tokens": 64, "stream": false,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Write a commit message for: fix the off-by-one in the pager."}]}]});
    let ask = Ask {
        prompt: "Write a commit message for: fix the off-by-one in the pager.".into(),
        system: None,
        files: Vec::new(),
    };
    let opts = Options {
        max_tokens: Some(64),
        temperature: None,
    };
    let (mut bare, mut ours) = (Vec::new(), Vec::new());
    for i in 0..RUNS + 20 {
        let t = Instant::now();
        let r = client
            .post(format!("{}/v1/messages", fake.url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
        let _ = r.bytes().await.unwrap();
        let b = t.elapsed().as_secs_f64() * 1000.0;
        let t = Instant::now();
        api::local_complete(&ctx, ask.clone(), None, None, opts, &Caller::User)
            .await
            .unwrap();
        let o = t.elapsed().as_secs_f64() * 1000.0;
        if i >= 20 {
            bare.push(b);
            ours.push(o);
        }
    }
    let (b50, o50) = (pct(&mut bare, 0.5), pct(&mut ours, 0.5));
    println!("| measure | bare request | local_complete | added |");
    println!("|---|---|---|---|");
    println!(
        "| p50, ms ({RUNS} each, interleaved) | {b50:.3} | {o50:.3} | {:.3} |",
        o50 - b50
    );
    println!(
        "| p90, ms | {:.3} | {:.3} | {:.3} |",
        pct(&mut bare, 0.9),
        pct(&mut ours, 0.9),
        pct(&mut ours, 0.9) - pct(&mut bare, 0.9)
    );
}

async fn throughput(slots: u32, items: usize) -> (f64, f64) {
    let ctxsize = (4096 * slots).to_string();
    let srv = server::start(&["-c", &ctxsize, "--parallel", &slots.to_string()]);
    let tmp = support::harness::Harness::new();
    let m = Manager::new(ctx_for(&srv.url, tmp.dir()));
    let args = BatchArgs {
        items: (0..items)
            .map(|i| Ask {
                prompt: format!("Count from 1 to 30 ({i})."),
                system: None,
                files: Vec::new(),
            })
            .collect(),
        model: None,
        endpoint: None,
        options: Options {
            max_tokens: Some(48),
            temperature: Some(0.0),
        },
        base: tmp.dir().to_path_buf(),
    };
    let rec = api::start_batch(&m, args, &Caller::User).await.unwrap();
    let (rec, still) = m.wait(rec.id(), Duration::from_secs(110)).await.unwrap();
    let mut rec = rec;
    if still {
        loop {
            let (r, s) = m.wait(rec.id(), Duration::from_secs(110)).await.unwrap();
            rec = r;
            if !s {
                break;
            }
        }
    }
    let r = rec.summary().batch.expect("batch report");
    assert_eq!(r.succeeded, items, "{:?}", r.results);
    (r.items_per_s, r.elapsed_s)
}

fn main() {
    let _ = support::bench::mode("oneshot", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(overhead());
    if std::env::var_os("LOCALAGENTS_E2E_SERVER").is_none() {
        eprintln!(
            "oneshot: batch throughput skipped (the real tier's env is not set: run scripts/e2e-real.sh bench)"
        );
        return;
    }
    let items = 8;
    let (one, t1) = rt.block_on(throughput(1, items));
    let (two, t2) = rt.block_on(throughput(2, items));
    println!();
    println!(
        "| batch of {items} on the real llama-server (4,096 per slot, 48 tokens out) | items/s | s |"
    );
    println!("|---|---|---|");
    println!("| 1 slot (`-c 4096 --parallel 1`) | {one:.2} | {t1:.1} |");
    println!("| 2 slots (`-c 8192 --parallel 2`) | {two:.2} | {t2:.1} |");
    println!("| ratio 2 slots / 1 slot | {:.2}× | |", two / one);
}
