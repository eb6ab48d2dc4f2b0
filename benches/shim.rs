//! Shim overhead (issue 2): latency added over a direct connection to the
//! same local fake, stream relay time to first byte and throughput, and
//! peak memory per in-flight request of a `localagents shim` process.
//!
//! Run: `cargo bench --bench shim`. Prints a Markdown table; `-- --markdown`
//! prints only the docs/benchmarks.md table (scripts/bench-readme.sh pastes it between
//! the `<!-- bench:shim -->` markers).
//!
//! The full run also prints the shim's added latency on each wire (issue
//! 53): the same requests through a shim on `/v1/messages` and through one
//! with `wire: chat` (translated to `/v1/chat/completions` and back), each
//! against a straight hop to the fake's endpoint of that wire, interleaved.
//!
//! `-- --smoke` (run by `.ci/run`): only the non-streaming request, 200 runs,
//! each one sent straight to the fake (a bare loopback hop) and through the
//! shim, interleaved; fails on a gross regression, the shim adding more than
//! [`SMOKE_ADDED_PER_HOP`] times the bare hop's p50. A ratio within one run,
//! so a busy machine slows both sides alike.

use localagents_testkit as support;

use std::io::BufRead;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use futures::StreamExt;
use serde_json::json;

use support::stats::{pct, rss_kb};

const EVENTS: usize = 2000;

/// Smoke limit: the shim's added p50, in multiples of a bare loopback hop
/// (the same request straight to the fake, p50, same run).
const SMOKE_ADDED_PER_HOP: f64 = 3.0;

use support::bench::Mode;

fn mode() -> Mode {
    support::bench::mode("shim", true)
}

thread_local! {
    /// (KB, ms per call) of the in-process fold_raw measurement.
    static FOLD_MS: std::cell::Cell<(usize, f64)> = const { std::cell::Cell::new((0, 0.0)) };
}

fn body_of(stream: bool, pairs: usize) -> Vec<u8> {
    // Shaped like Claude Code's later turns: a 20 KB system prompt, 23
    // tools with ~2 KB schemas, the environment as a system entry after the
    // first user message, then `pairs` tool calls with their results.
    let filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit. ";
    let tools: Vec<_> = (0..23)
        .map(|i| json!({"name": format!("Tool{i}"), "description": filler.repeat(20), "input_schema": {"type": "object", "properties": {"a": {"type": "string", "description": filler.repeat(12)}}}}))
        .collect();
    let mut messages = vec![
        json!({"role": "user", "content": [{"type": "text", "text": "<system-reminder>skills</system-reminder>"}, {"type": "text", "text": "add a --json flag"}]}),
        json!({"role": "system", "content": [{"type": "text", "text": format!("# Environment\n{}", filler.repeat(8)), "cache_control": {"type": "ephemeral"}}]}),
    ];
    for i in 0..pairs {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("toolu_{i}"), "name": "Read", "input": {"file_path": format!("src/f{i}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("toolu_{i}"), "content": filler.repeat(24)}]}));
    }
    serde_json::to_vec(&json!({
        "model": "bench", "max_tokens": 1, "stream": stream,
        "system": [{"type": "text", "text": filler.repeat(350), "cache_control": {"type": "ephemeral"}}],
        "messages": messages,
        "tools": tools,
        "thinking": {"type": "adaptive"},
        "metadata": {"user_id": "bench"}
    }))
    .unwrap()
}

fn main() {
    let mode = mode();
    let smoke = mode == Mode::Smoke;
    if !smoke {
        let b = body_of(true, 105);
        let t = Instant::now();
        for _ in 0..1000 {
            let out = localagents::shim::fold::fold_raw(&b, Some("bench"), Some(262144)).unwrap();
            std::hint::black_box(out);
        }
        FOLD_MS.with(|f| f.set((b.len() / 1024, t.elapsed().as_secs_f64())));
    }
    // The truncation guard's read of a request (issue 44), in process: the
    // borrowed read of a well-formed body, and the lenient `Value` read
    // that the same body takes with one block the borrowed read refuses
    // (a bare number in a message's content), in the same run.
    let (sent_ms, lenient_ms) = {
        let b = body_of(false, 105);
        let mut odd: serde_json::Value = serde_json::from_slice(&b).unwrap();
        odd["messages"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "content": [1]}));
        let odd = serde_json::to_vec(&odd).unwrap();
        let n = if smoke { 100 } else { 1000 };
        let per = |body: &[u8]| {
            let t = Instant::now();
            for _ in 0..n {
                std::hint::black_box(localagents::shim::truncation::Sent::of(body));
            }
            t.elapsed().as_secs_f64() * 1000.0 / n as f64
        };
        (per(&b), per(&odd))
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let fake = rt.block_on(support::fake_bare::spawn(EVENTS));
    let fake_url = fake.url.clone();
    // The standalone shim has no slot: `/v1/messages`, as the rule says.
    let (shim_url, mut shim, _h) = shim_on(&fake_url, "messages");
    let pid = shim.id();

    let client = localagents::probe::http_client().clone();
    // 200 KB for the request figures; 80 KB (what Claude Code 2.1.328 sends
    // on turn one) for the streaming ones.
    let body = body_of(false, 105);
    let sbody = Bytes::from(body_of(
        true,
        std::env::var("SB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    ));
    let body = Bytes::from(body);

    let (warmup, runs) = if smoke { (20, 200) } else { (100, 1000) };
    let (direct, via) = rt.block_on(async {
        let (mut d, mut s) = (Vec::new(), Vec::new());
        for i in 0..warmup + runs {
            for (target, out) in [(&fake_url, &mut d), (&shim_url, &mut s)] {
                let t = Instant::now();
                let r = client
                    .post(format!("{target}/v1/messages"))
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{target}: {}", r.status());
                let _ = r.bytes().await.unwrap();
                if i >= warmup {
                    out.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        (d, s)
    });
    let (mut d, mut s) = (direct, via);
    let body_kb = body.len() as f64 / 1024.0;
    if smoke {
        let _ = shim.kill();
        let _ = shim.wait();
        let (d50, s50) = (pct(&mut d, 0.5), pct(&mut s, 0.5));
        let (added, limit) = (s50 - d50, SMOKE_ADDED_PER_HOP * d50);
        println!(
            "smoke shim: {body_kb:.0} KB request, p50 of {runs} runs: a bare loopback hop (straight to the fake) {d50:.3} ms, through the shim {s50:.3} ms, added {added:.3} ms = {:.2}x the hop; limit {SMOKE_ADDED_PER_HOP}x ({limit:.3} ms); the truncation guard's read of the request, on the blocking pool while it is sent, {sent_ms:.3} ms in process (the lenient read of the same body {lenient_ms:.3} ms, {:.1}x)",
            added / d50,
            lenient_ms / sent_ms
        );
        if added > limit {
            eprintln!(
                "smoke shim FAILED: the shim added {added:.3} ms p50 to a {body_kb:.0} KB request, {:.2}x a bare loopback hop ({d50:.3} ms), over the {SMOKE_ADDED_PER_HOP}x limit.",
                added / d50
            );
            std::process::exit(1);
        }
        return;
    }
    let (mut gd, mut gs) = rt.block_on(async {
        let (mut d, mut s) = (Vec::new(), Vec::new());
        for i in 0..1100 {
            for (target, out) in [(&fake_url, &mut d), (&shim_url, &mut s)] {
                let t = Instant::now();
                let r = client
                    .get(format!("{target}/v1/models"))
                    .send()
                    .await
                    .unwrap();
                let _ = r.bytes().await.unwrap();
                if i >= 100 {
                    out.push(t.elapsed().as_secs_f64() * 1000.0);
                }
            }
        }
        (d, s)
    });
    let (gd50, gs50) = (pct(&mut gd, 0.5), pct(&mut gs, 0.5));
    let (d50, d99, s50, s99) = (
        pct(&mut d, 0.5),
        pct(&mut d, 0.99),
        pct(&mut s, 0.5),
        pct(&mut s, 0.99),
    );

    let stream_runs = rt.block_on(async {
        let mut res: Vec<(String, f64, f64, usize)> = Vec::new();
        for i in 0..60 {
            for target in [&fake_url, &shim_url] {
                let t = Instant::now();
                let r = client
                    .post(format!("{target}/v1/messages"))
                    .body(sbody.clone())
                    .send()
                    .await
                    .unwrap();
                let mut st = r.bytes_stream();
                let mut first = None;
                let mut n = 0;
                // A blank line split across two chunks counts too.
                let mut last = 0u8;
                while let Some(c) = st.next().await {
                    let c = c.unwrap();
                    if first.is_none() {
                        first = Some(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    n += memchr::memmem::find_iter(&c, b"\n\n").count();
                    n += usize::from(last == b'\n' && c.first() == Some(&b'\n'));
                    last = c.last().copied().unwrap_or(last);
                }
                if i >= 10 {
                    res.push((
                        target.to_string(),
                        first.unwrap_or(0.0),
                        t.elapsed().as_secs_f64() * 1000.0,
                        n,
                    ));
                }
            }
        }
        res
    });
    let pick = |who: &str, f: fn(&(String, f64, f64, usize)) -> f64| -> Vec<f64> {
        stream_runs.iter().filter(|r| r.0 == who).map(f).collect()
    };
    let mut dt = pick(&fake_url, |r| r.1);
    let mut st = pick(&shim_url, |r| r.1);
    let mut dtot = pick(&fake_url, |r| r.2);
    let mut stot = pick(&shim_url, |r| r.2);
    let events_seen = stream_runs
        .iter()
        .find(|r| r.0 == shim_url)
        .map(|r| r.3)
        .unwrap_or(0);
    assert_eq!(events_seen, EVENTS, "every event relayed");
    let stot50 = pct(&mut stot, 0.5);

    // Memory: 20 requests of 200 KB in flight at once, held 1.5 s by the fake.
    fake.delay_ms.store(1500, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    let base = rss_kb(pid);
    let peak = Arc::new(AtomicU64::new(base));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                peak.fetch_max(rss_kb(pid), Ordering::SeqCst);
                // harness-rules: a pace, not a wait (RSS sampled every 2 ms)
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    const INFLIGHT: u64 = 20;
    rt.block_on(async {
        let futs = (0..INFLIGHT).map(|_| {
            let c = client.clone();
            let b = body.clone();
            let u = shim_url.clone();
            async move {
                c.post(format!("{u}/v1/messages"))
                    .body(b)
                    .send()
                    .await
                    .unwrap()
                    .bytes()
                    .await
                    .unwrap()
            }
        });
        futures::future::join_all(futs).await;
    });
    stop.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let per_req_kb = (peak.load(Ordering::SeqCst).saturating_sub(base)) as f64 / INFLIGHT as f64;
    let _ = shim.kill();
    let _ = shim.wait();
    fake.delay_ms.store(0, Ordering::SeqCst);
    let wires = rt.block_on(each_wire(&fake_url, &body, &sbody));
    println!("| figure | direct | through the shim | added | target |");
    println!("|---|---|---|---|---|");
    println!(
        "| {:.0} KB non-streaming request, p50 ({runs} runs) | {d50:.3} ms | {s50:.3} ms | {:.3} ms | < 1 ms |",
        body_kb,
        s50 - d50
    );
    println!(
        "| {:.0} KB non-streaming request, p99 | {d99:.3} ms | {s99:.3} ms | {:.3} ms | |",
        body_kb,
        s99 - d99
    );
    println!(
        "| stream of {EVENTS} events ({:.0} KB request), time to first byte, p50 (50 runs) | {:.3} ms | {:.3} ms | {:.3} ms | < 1 ms |",
        sbody.len() as f64 / 1024.0,
        pct(&mut dt, 0.5),
        pct(&mut st, 0.5),
        pct(&mut st, 0.5) - pct(&mut dt, 0.5)
    );
    let dtot50 = pct(&mut dtot, 0.5);
    println!(
        "| stream of {EVENTS} events, total, p50 | {dtot50:.3} ms | {stot50:.3} ms | {:.3} ms ({:.1} µs/event) | |",
        stot50 - dtot50,
        (stot50 - dtot50) * 1000.0 / EVENTS as f64
    );
    println!(
        "| GET /v1/models (a bare extra hop), p50 | {gd50:.3} ms | {gs50:.3} ms | {:.3} ms | |",
        gs50 - gd50
    );
    let (fkb, fms) = FOLD_MS.with(|f| f.get());
    println!("| fold_raw of a {fkb} KB Claude-Code-shaped body, in process | | {fms:.3} ms | | |");
    println!(
        "| the truncation guard's read (`Sent::of`) of a {body_kb:.0} KB body, in process (the lenient read {lenient_ms:.3} ms) | | {sent_ms:.3} ms | | |"
    );
    println!(
        "| relay throughput | | {:.0} events/s | | |",
        EVENTS as f64 / (stot50 / 1000.0)
    );
    println!(
        "| peak RSS per in-flight {:.0} KB request ({INFLIGHT} at once) | | {per_req_kb:.0} KB ({:.2}x body) | | < 2x body |",
        body_kb,
        per_req_kb / body_kb
    );
    println!();
    println!(
        "| the shim's added latency, p50 | `/v1/messages` | chat wire (`/v1/chat/completions`, translated both ways) |"
    );
    println!("|---|---|---|");
    for (i, what) in [
        format!("{body_kb:.0} KB non-streaming request ({WIRE_RUNS} runs)"),
        format!("stream of {EVENTS} events, time to first byte ({WIRE_RUNS} runs)"),
        format!("stream of {EVENTS} events, total ({WIRE_RUNS} runs)"),
    ]
    .iter()
    .enumerate()
    {
        println!("| {what} | {:.3} ms | {:.3} ms |", wires[0][i], wires[1][i]);
    }
}

/// Runs of each figure in [`each_wire`].
const WIRE_RUNS: usize = 300;

/// A `localagents shim` on the bare fake at `fake_url`, with `wire:` as
/// given; its URL, the process and its harness (the dirs it uses).
fn shim_on(fake_url: &str, wire: &str) -> (String, std::process::Child, support::harness::Harness) {
    let h = support::harness::Harness::new().config(&format!(
        "endpoints:\n  bench:\n    base_url: {fake_url}\n    backend: llama.cpp\n    wire: {wire}\n"
    ));
    let mut shim = h
        .command(["shim", "--model", "bench"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut url = String::new();
    std::io::BufReader::new(shim.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    (url.trim().to_string(), shim, h)
}

/// One request: (time to the first byte, total) in ms.
async fn timed(client: &reqwest::Client, url: &str, body: &Bytes) -> (f64, f64) {
    let t = Instant::now();
    let r = client.post(url).body(body.clone()).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: {}", r.status());
    let mut st = r.bytes_stream();
    let mut first = None;
    while let Some(c) = st.next().await {
        c.unwrap();
        first.get_or_insert_with(|| t.elapsed().as_secs_f64() * 1000.0);
    }
    (first.unwrap_or(0.0), t.elapsed().as_secs_f64() * 1000.0)
}

/// The shim's added p50 on each wire, `[messages, chat]`, each as
/// `[request, stream's first byte, stream's total]`: through the shim
/// less a straight hop to the fake's endpoint of that wire (with the
/// body that wire sends), all interleaved.
async fn each_wire(fake_url: &str, body: &Bytes, sbody: &Bytes) -> [[f64; 3]; 2] {
    use localagents::shim::chat::request::{Pin, to_chat};
    let client = localagents::probe::http_client().clone();
    let (m_url, mut m, _mh) = shim_on(fake_url, "messages");
    let (c_url, mut c, _ch) = shim_on(fake_url, "chat");
    let pin = Pin {
        slot: None,
        timings: true,
        plain: false,
    };
    let chat = |b: &Bytes| Bytes::from(to_chat(b, pin).unwrap());
    let cases = [
        (
            format!("{fake_url}/v1/messages"),
            format!("{m_url}/v1/messages"),
            body.clone(),
            body.clone(),
        ),
        (
            format!("{fake_url}/v1/chat/completions"),
            format!("{c_url}/v1/messages"),
            chat(body),
            body.clone(),
        ),
        (
            format!("{fake_url}/v1/messages"),
            format!("{m_url}/v1/messages"),
            sbody.clone(),
            sbody.clone(),
        ),
        (
            format!("{fake_url}/v1/chat/completions"),
            format!("{c_url}/v1/messages"),
            chat(sbody),
            sbody.clone(),
        ),
    ];
    let mut samples: Vec<[Vec<f64>; 4]> = (0..4).map(|_| Default::default()).collect();
    for i in 0..WIRE_RUNS + 30 {
        for (k, (direct, via, dbody, vbody)) in cases.iter().enumerate() {
            let d = timed(&client, direct, dbody).await;
            let v = timed(&client, via, vbody).await;
            if i >= 30 {
                let s = &mut samples[k];
                s[0].push(d.0);
                s[1].push(v.0);
                s[2].push(d.1);
                s[3].push(v.1);
            }
        }
    }
    let _ = (m.kill(), c.kill(), m.wait(), c.wait());
    let mut added = |k: usize, ttfb: bool| -> f64 {
        let s = &mut samples[k];
        let (d, v) = if ttfb { (0, 1) } else { (2, 3) };
        let vv = pct(&mut s[v], 0.5);
        vv - pct(&mut s[d], 0.5)
    };
    [
        [added(0, false), added(2, true), added(2, false)],
        [added(1, false), added(3, true), added(3, false)],
    ]
}
