//! What recognising every server costs a probe (issue 54): the probe of
//! today's four (a llama-server, vLLM, Ollama, LM Studio) against the
//! probe of those four and the eleven other servers and one plain OpenAI
//! server, all at once as `status` probes them, each a stand-in on
//! loopback (tests/support). Once with every backend declared (each
//! probe asks only its server's paths), once undeclared (each asks every
//! server's distinctive paths in its one round). 200 rounds each,
//! interleaved: p50 and p99.
//!
//! Run: `cargo bench --bench servers`. Prints a Markdown table
//! (docs/benchmarks.md quotes it).

use localagents_testkit as support;

use std::time::{Duration, Instant};

use localagents::config::{Backend, Endpoint};
use support::fake_others::{self, Kind};
use support::stats::pct;

const ROUNDS: usize = 200;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// All of `eps` probed at once, as `status` does: how long it took.
async fn round(eps: &[Endpoint]) -> f64 {
    let t = Instant::now();
    let all = futures::future::join_all(
        eps.iter()
            .map(|e| localagents::probe::probe(e, Duration::from_secs(5))),
    )
    .await;
    assert!(
        all.iter().all(|s| s.up),
        "{:?}",
        all.iter().map(|s| (&s.name, &s.error)).collect::<Vec<_>>()
    );
    ms(t.elapsed())
}

fn endpoint(name: &str, url: &str, backend: Option<Backend>) -> Endpoint {
    Endpoint {
        backend,
        window: Some(65536),
        ..Endpoint::at(name, url)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    support::bench::mode("servers", false);
    let llama = support::fake_llama::spawn(support::fake_llama::LlamaOpts::default()).await;
    let vllm = support::fake_vllm::spawn(support::fake_vllm::VllmOpts::default()).await;
    let ollama = support::fake_ollama::spawn(vec![support::fake_ollama::OModel {
        name: "qwen3-coder:latest".into(),
        context: 65536,
        loaded: true,
        load: Duration::ZERO,
    }])
    .await;
    let lms = support::fake_lmstudio::spawn(vec![support::fake_lmstudio::LModel {
        key: "qwen3-coder-30b".into(),
        context: 65536,
        parallel: 4,
        loaded: true,
        load: Duration::ZERO,
    }])
    .await;
    let mut others = Vec::new();
    for k in Kind::ALL {
        others.push((k, fake_others::spawn(k, "qwen3-coder-30b", 65536).await));
    }
    let four = |declared: bool| {
        let b = |x| declared.then_some(x);
        vec![
            endpoint("llama", llama.url(), b(Backend::LlamaCpp)),
            endpoint("vllm", vllm.url(), b(Backend::Vllm)),
            endpoint("ollama", ollama.url(), b(Backend::Ollama)),
            endpoint("lmstudio", lms.url(), b(Backend::LmStudio)),
        ]
    };
    let all = |declared: bool| {
        let mut eps = four(declared);
        for (k, f) in &others {
            let backend = Backend::parse(k.backend());
            let declared = declared || *k == Kind::OpenAi;
            eps.push(endpoint(k.backend(), f.url(), backend.filter(|_| declared)));
        }
        eps
    };
    let sets = [
        ("today's four, declared", four(true)),
        ("all sixteen, declared", all(true)),
        ("today's four, undeclared", four(false)),
        ("all sixteen, undeclared", all(false)),
    ];
    for (_, eps) in &sets {
        for _ in 0..10 {
            round(eps).await;
        }
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); sets.len()];
    for _ in 0..ROUNDS {
        for (i, (_, eps)) in sets.iter().enumerate() {
            times[i].push(round(eps).await);
        }
    }
    println!("| probed at once ({ROUNDS} rounds, interleaved) | endpoints | p50 | p99 |");
    println!("|---|---|---|---|");
    let mut p50 = Vec::new();
    for (i, (what, eps)) in sets.iter().enumerate() {
        let (a, b) = (pct(&mut times[i], 0.5), pct(&mut times[i], 0.99));
        p50.push(a);
        println!("| {what} | {} | {a:.2} ms | {b:.2} ms |", eps.len());
    }
    println!();
    println!(
        "all sixteen / today's four at p50: {:.2}x declared, {:.2}x undeclared",
        p50[1] / p50[0],
        p50[3] / p50[2]
    );
}
