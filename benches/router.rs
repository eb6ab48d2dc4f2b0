//! Behind vLLM's router (issue 37): what the router adds to a request, and
//! what probing its replicas costs.
//!
//! - Latency: the same non-streamed `/v1/messages` (with `X-Session-ID`)
//!   sent straight to a fake llama-server and through the real
//!   `vllm-router` (PyPI 0.1.17, `--policy consistent_hash`) in front of
//!   it and a second fake, interleaved, 300 each: p50 and p99 of each and
//!   of the difference.
//! - Probe: `probe::probe` of the router endpoint (it lists two replicas,
//!   each then probed) against the same probe of one fake server, 50
//!   each, interleaved: p50 and p99.
//!
//! Run: `LOCALAGENTS_VLLM_ROUTER=$(scripts/install-vllm-router.sh) cargo
//! bench --bench router`. Prints a Markdown table (docs/benchmarks.md
//! quotes it).

use localagents_testkit as support;

use std::time::{Duration, Instant};

use localagents::config::Endpoint;
use serde_json::json;
use support::stats::pct;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let Some(bin) = std::env::var_os(support::vllm_router::VAR) else {
        eprintln!(
            "router bench: {} is unset; run scripts/install-vllm-router.sh and set it",
            support::vllm_router::VAR
        );
        std::process::exit(2);
    };
    let opts = support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    };
    let a = support::fake_llama::spawn(opts.clone()).await;
    let b = support::fake_llama::spawn(opts).await;
    let dir = support::harness::Harness::new();
    let router = support::vllm_router::Router::start(
        std::path::Path::new(&bin),
        &[a.url(), b.url()],
        "consistent_hash",
        &["--log-level", "warning"],
        dir.dir(),
    );
    let client = localagents::probe::http_client();
    let body = json!({"model": "gemma3-270m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
    // The session that maps to `a`, so both paths end at the same fake.
    let send = |base: String| {
        let body = body.clone();
        async move {
            let t = Instant::now();
            let r = client
                .post(format!("{base}/v1/messages"))
                .header("X-Session-ID", "bench-session")
                .json(&body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            let _ = r.bytes().await.unwrap();
            ms(t.elapsed())
        }
    };
    for _ in 0..20 {
        send(router.url.clone()).await;
        send(a.url().to_string()).await;
        send(b.url().to_string()).await;
    }
    let on_a = a.bodies().len() > 20;
    let direct_url = if on_a { a.url() } else { b.url() }.to_string();
    let (mut direct, mut routed, mut added) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..300 {
        let d = send(direct_url.clone()).await;
        let r = send(router.url.clone()).await;
        direct.push(d);
        routed.push(r);
        added.push(r - d);
    }
    let router_ep = Endpoint::at("gpus", &router.url);
    let single_ep = Endpoint::at("one", a.url());
    let budget = Duration::from_secs(5);
    let (mut probe_router, mut probe_single) = (Vec::new(), Vec::new());
    for _ in 0..50 {
        let t = Instant::now();
        let st = localagents::probe::probe(&router_ep, budget).await;
        probe_router.push(ms(t.elapsed()));
        assert_eq!(st.replicas.len(), 2);
        let t = Instant::now();
        let st = localagents::probe::probe(&single_ep, budget).await;
        probe_single.push(ms(t.elapsed()));
        assert!(st.up);
    }
    println!("| behind vllm-router 0.1.17 (two fakes, loopback) | p50 ms | p99 ms |");
    println!("|---|---|---|");
    for (name, v) in [
        ("`/v1/messages` straight to the server", &mut direct),
        ("`/v1/messages` through the router", &mut routed),
        ("added by the router (paired difference)", &mut added),
        (
            "probe of the router (lists 2 replicas, probes each)",
            &mut probe_router,
        ),
        ("probe of one server", &mut probe_single),
    ] {
        println!("| {name} | {:.2} | {:.2} |", pct(v, 0.5), pct(v, 0.99));
    }
}
