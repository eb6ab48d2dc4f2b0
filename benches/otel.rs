//! What telemetry costs a backend request (issue 47): the same
//! non-streaming `/v1/messages` request to the fake llama.cpp server, sent
//! straight to it (a bare loopback hop), through the shim on a route with
//! telemetry off (before issue 47 as far as the request goes), and through
//! the shim on a route whose job exports spans and metrics (a `chat` span
//! and four metric points per request) to an OTLP receiver in this process,
//! interleaved in one run. p50 and p90 of each, and the added p50.
//!
//! Run: `cargo bench --bench otel` (about a minute); `-- --markdown` prints
//! the table only. docs/benchmarks.md quotes it.

use localagents_testkit as support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use localagents::otel::settings::{Delegate, Protocol, Settings, Signal};
use localagents::otel::{JobStart, Telemetry};
use localagents::shim::Shim;
use localagents::shim::log::RequestLog;
use support::stats::pct;

const RUNS: usize = 2000;
const WARMUP: usize = 200;

fn signal(url: String) -> Signal {
    Signal {
        url,
        protocol: Protocol::HttpProtobuf,
        headers: Vec::new(),
        timeout_ms: 10_000,
    }
}

fn main() {
    let mode = support::bench::mode("otel", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (fake, rx) = rt.block_on(async {
        (
            support::fake_llama::spawn(support::fake_llama::LlamaOpts::default()).await,
            support::otlp::Otlp::spawn().await,
        )
    });
    let settings = Settings {
        traces: Some(signal(format!("{}/v1/traces", rx.url()))),
        metrics: Some(signal(format!("{}/v1/metrics", rx.url()))),
        service_name: "localagents-bench".into(),
        resource: Vec::new(),
        delegate: Delegate::default(),
    };
    let telemetry = Arc::new(
        std::thread::spawn(move || Telemetry::new(settings))
            .join()
            .unwrap()
            .unwrap(),
    );
    let trace = telemetry.job(JobStart {
        job_id: "bench".into(),
        agent: "localagents".into(),
        provider: "llama.cpp".into(),
        model: "m".into(),
        base_url: fake.url().to_string(),
    });
    let (shim, plain, traced) = rt.block_on(async {
        let shim = Shim::start(0).await.unwrap();
        let plain = shim
            .register(support::route::llama(
                fake.url(),
                "m",
                32768,
                &dir.path().join("plain"),
                false,
            ))
            .unwrap();
        let mut r =
            support::route::llama(fake.url(), "m", 32768, &dir.path().join("traced"), false);
        r.log = RequestLog::new(dir.path().join("traced"), false).traced(Some(trace));
        let traced = shim.register(r).unwrap();
        (shim, plain, traced)
    });
    let body = serde_json::json!({
        "model": "m", "max_tokens": 16, "stream": false,
        "messages": [{"role": "user", "content": "Say hi."}],
    })
    .to_string();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let targets = [
        fake.url().to_string(),
        plain.base_url.clone(),
        traced.base_url.clone(),
    ];
    let mut times: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    rt.block_on(async {
        for i in 0..RUNS + WARMUP {
            for (t, out) in targets.iter().zip(times.iter_mut()) {
                let start = Instant::now();
                let r = client
                    .post(format!("{t}/v1/messages"))
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success());
                let _ = r.bytes().await.unwrap();
                if i >= WARMUP {
                    out.push(start.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
    });
    telemetry.shutdown(Duration::from_secs(10));
    let spans = rx.spans().len();
    let points = rx.points().len();
    drop(shim);
    let [mut bare, mut off, mut on] = times;
    let (b50, off50, on50) = (pct(&mut bare, 0.5), pct(&mut off, 0.5), pct(&mut on, 0.5));
    let (b90, off90, on90) = (pct(&mut bare, 0.9), pct(&mut off, 0.9), pct(&mut on, 0.9));
    let added = on50 - off50;
    if mode != support::bench::Mode::Markdown {
        println!(
            "otel: {RUNS} requests each way, interleaved; the receiver got {spans} spans and {points} metric points"
        );
    }
    println!("| a non-streaming request, {RUNS} runs each | p50 | p90 |");
    println!("|---|---|---|");
    println!("| straight to the fake (a bare loopback hop) | {b50:.3} ms | {b90:.3} ms |");
    println!("| through the shim, telemetry off (before) | {off50:.3} ms | {off90:.3} ms |");
    println!(
        "| through the shim, spans and metrics exported (after) | {on50:.3} ms | {on90:.3} ms |"
    );
    println!(
        "| added by telemetry, p50 | {added:.3} ms ({:.2}x the shim's p50 with it off) | |",
        on50 / off50
    );
}
