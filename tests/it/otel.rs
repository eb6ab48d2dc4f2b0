//! Jobs in the user's OpenTelemetry stack (issue 47), through the real
//! Claude Code CLI and `localagents run` against the fake llama.cpp
//! server, with an OTLP receiver in the test that decodes what arrives
//! with the official protobuf definitions (`support::otlp`).
//!
//! Off by default (nothing connects to the default port 4318); on by the
//! standard variables: a job span carrying the job's id, a `chat` CLIENT
//! span per backend request with the GenAI attributes, the token usage
//! metric without the job's id; the delegate's own telemetry tagged with
//! the job's id and in the same trace; a collector that never answers
//! costs the job nothing and `run` its flush bound; header credentials
//! never reach a log or a record.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::faults::requests;
use crate::jobs::strict_fake_opts;
use crate::support::fake_llama;
use crate::support::harness::{Harness, localagents};
use crate::support::otlp::{self, Otlp};
use crate::support::script;

/// A harness on `fake` whose `localagents` exports to `otlp_url` by the
/// standard variables.
fn exporting(fake: &fake_llama::FakeLlama, otlp_url: &str) -> Harness {
    Harness::with_fake(fake.url())
        .env("OTEL_TRACES_EXPORTER", "otlp")
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", otlp_url)
}

/// A job that writes a file and reports: two requests.
fn two_turns(e: &Harness, fake: &fake_llama::FakeLlama) {
    let file = e.work().join("notes.txt");
    fake.set_script(script::write_then_report(
        &file.display().to_string(),
        "x\n",
    ));
}

/// `localagents run --json` of the two-turn job: its output.
async fn run_out(e: &Harness) -> std::process::Output {
    localagents(
        e,
        &[
            "run",
            "--model",
            "gemma-3-270m",
            "--json",
            "Write notes.txt.",
        ],
    )
    .await
}

/// [`run_out`]'s job record.
async fn run_json(e: &Harness) -> Value {
    let out = run_out(e).await;
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_exports_its_span_a_chat_span_per_request_and_the_token_usage_metric() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let rx = Otlp::spawn().await;
    let e = exporting(&fake, rx.url());
    two_turns(&e, &fake);
    let rec = run_json(&e).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let id = rec["id"].as_str().unwrap();
    // `run` has exited: its telemetry was flushed at exit.
    let spans = rx.spans();
    let jobs: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("invoke_agent"))
        .collect();
    assert_eq!(jobs.len(), 1, "{spans:#?}");
    let job = jobs[0];
    assert_eq!(job.name, "invoke_agent localagents");
    assert_eq!(job.kind, 1, "internal");
    assert_eq!(job.parent_span_id, "", "a root");
    for (k, v) in [
        ("localagents.job.id", id),
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.provider.name", "llama.cpp"),
        ("gen_ai.agent.name", "localagents"),
        ("localagents.job.status", "succeeded"),
        (
            "gen_ai.conversation.id",
            rec["session_id"].as_str().unwrap(),
        ),
    ] {
        assert_eq!(
            job.attrs.get(k).map(String::as_str),
            Some(v),
            "{k}: {job:#?}"
        );
    }
    assert_eq!(job.attrs["localagents.job.tool_calls"], "1", "{job:#?}");
    assert!(!job.attrs.contains_key("error.type"));
    assert_eq!(job.resource["service.name"], "localagents");
    // One chat span per request, in the job's trace, under the job's span
    // (the delegate's own telemetry is off: it sends no traceparent).
    let logged = requests(&rec);
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), logged.len(), "{spans:#?}");
    assert_eq!(chats.len(), 2);
    let sent = fake.traceparents();
    for (c, r) in chats.iter().zip(&logged) {
        assert_eq!(
            c.name,
            format!("chat {}", rec["served_id"].as_str().unwrap())
        );
        assert_eq!(c.kind, 3, "client");
        assert_eq!(c.trace_id, job.trace_id);
        assert_eq!(c.parent_span_id, job.span_id);
        let u = &r["usage"];
        let input = u["input"].as_u64().unwrap() + u["cache_read"].as_u64().unwrap();
        assert_eq!(
            c.attrs["gen_ai.usage.input_tokens"],
            input.to_string(),
            "cached tokens counted in: {c:#?}"
        );
        assert_eq!(
            c.attrs["gen_ai.usage.cache_read.input_tokens"],
            u["cache_read"].to_string()
        );
        assert_eq!(
            c.attrs["gen_ai.usage.output_tokens"],
            u["output"].to_string()
        );
        assert_eq!(
            c.attrs["gen_ai.response.finish_reasons"],
            format!("[{}]", r["stop_reason"].as_str().unwrap())
        );
        assert_eq!(c.attrs["server.address"], "127.0.0.1");
        assert_eq!(c.attrs["http.response.status_code"], "200");
        assert!(
            c.attrs.contains_key("gen_ai.response.time_to_first_chunk"),
            "{c:#?}"
        );
        // The backend got this span's traceparent; the log has its ids.
        let tp = format!("00-{}-{}-01", c.trace_id, c.span_id);
        assert!(sent.contains(&Some(tp)), "{sent:?} vs {c:#?}");
        assert_eq!(r["span"]["span_id"], c.span_id.as_str());
    }
    // Metrics: the token usage by type, and no job id on any of them.
    let points = rx.points();
    for kind in ["input", "output"] {
        assert!(
            points
                .iter()
                .any(|p| p.metric == "gen_ai.client.token.usage"
                    && p.attrs.get("gen_ai.token.type").map(String::as_str) == Some(kind)
                    && p.count == 2),
            "{kind}: {points:#?}"
        );
    }
    let jobs_counted: f64 = points
        .iter()
        .filter(|p| {
            p.metric == "localagents.jobs" && p.attrs["localagents.job.status"] == "succeeded"
        })
        .map(|p| p.sum)
        .sum();
    assert_eq!(jobs_counted, 1.0, "{points:#?}");
    assert!(
        points
            .iter()
            .any(|p| p.metric == "gen_ai.client.operation.duration")
    );
    assert!(
        points
            .iter()
            .all(|p| !p.attrs.contains_key("localagents.job.id")),
        "{points:#?}"
    );
    // Protobuf unless told otherwise.
    assert!(rx.received().iter().all(|r| {
        r.headers
            .iter()
            .any(|(k, v)| k == "content-type" && v == "application/x-protobuf")
    }));
}

/// The delegate's own Claude Code telemetry, turned on by the user
/// (`CLAUDE_CODE_ENABLE_TELEMETRY`, traces by its beta switch), carries the
/// job's id on its resource and joins the job's trace: its interaction
/// span is the job span's child (`TRACEPARENT`), and each `chat` span ours
/// is the child of its `claude_code.llm_request` span (the `traceparent` it
/// sends). Over OTLP JSON this time. Claude Code 2.1.328 strips `OTEL_*`
/// from a Bash step's environment (measured), so the Bash step dumps its
/// parent's, the delegate's own (`/proc/$PPID/environ`), and the tag is
/// also read where it matters: on what the delegate exports.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delegates_own_telemetry_is_tagged_with_the_job_and_joins_its_trace() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let rx = Otlp::spawn().await;
    let e = exporting(&fake, rx.url())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_RESOURCE_ATTRIBUTES", "team=infra")
        .env("CLAUDE_CODE_ENABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_ENHANCED_TELEMETRY_BETA", "1");
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            serde_json::json!({"command": "tr '\\0' '\\n' < /proc/$PPID/environ | grep -E '^(OTEL_RESOURCE_ATTRIBUTES|TRACEPARENT|CLAUDE_CODE_PROPAGATE_TRACEPARENT)='"}),
        )],
        "Done.",
    ));
    let rec = run_json(&e).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let id = rec["id"].as_str().unwrap();
    if crate::support::linux_only(
        "the_delegates_own_telemetry_is_tagged_with_the_job_and_joins_its_trace (its Bash step)",
        "/proc/$PPID/environ is Linux's",
    ) {
        let last = fake
            .bodies()
            .last()
            .cloned()
            .unwrap_or_default()
            .to_string();
        assert!(
            last.contains(&format!(
                "OTEL_RESOURCE_ATTRIBUTES=team=infra,localagents.job.id={id}"
            )),
            "the delegate's environment, dumped by its Bash step: {last}"
        );
        assert!(
            last.contains("CLAUDE_CODE_PROPAGATE_TRACEPARENT=1"),
            "{last}"
        );
    }
    let spans = rx.spans();
    let job = spans
        .iter()
        .find(|s| s.name.starts_with("invoke_agent"))
        .unwrap_or_else(|| panic!("{spans:#?}"));
    assert_eq!(job.resource["team"], "infra", "the user's own attributes");
    let theirs: Vec<_> = spans
        .iter()
        .filter(|s| s.resource.get("service.name").map(String::as_str) == Some("claude-code"))
        .collect();
    assert!(
        !theirs.is_empty(),
        "the delegate exported spans: {spans:#?}"
    );
    for s in &theirs {
        assert_eq!(s.resource["localagents.job.id"], id, "{s:#?}");
        assert_eq!(s.resource["team"], "infra", "{s:#?}");
        assert_eq!(s.trace_id, job.trace_id, "one trace: {s:#?}");
    }
    let interaction = theirs
        .iter()
        .find(|s| s.name == "claude_code.interaction")
        .unwrap_or_else(|| panic!("{theirs:#?}"));
    assert_eq!(interaction.parent_span_id, job.span_id);
    let llm: Vec<&str> = theirs
        .iter()
        .filter(|s| s.name == "claude_code.llm_request")
        .map(|s| s.span_id.as_str())
        .collect();
    let chats: Vec<_> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .collect();
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for c in chats {
        assert!(
            llm.contains(&c.parent_span_id.as_str()),
            "{c:#?} under {llm:?}"
        );
        assert_eq!(c.trace_id, job.trace_id);
    }
    // Its metrics carry the tag too.
    assert!(
        rx.points()
            .iter()
            .any(
                |p| p.resource.get("localagents.job.id").map(String::as_str) == Some(id)
                    && p.resource["service.name"] == "claude-code"
            ),
        "{:#?}",
        rx.points()
    );
}

/// A listener on the default OTLP/HTTP port of 127.0.0.1 that counts the
/// connections it accepts.
async fn count_connections_on_4318() -> Option<std::sync::Arc<std::sync::atomic::AtomicUsize>> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:4318").await.ok()?;
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = n.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(s);
        }
    });
    Some(n)
}

/// Off by default: with no OTEL setting, a job connects to nothing on the
/// default port. With only `OTEL_TRACES_EXPORTER=otlp`, the same job does
/// (so the listener would have seen it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_otel_settings_nothing_connects_to_the_default_port() {
    let test = "with_no_otel_settings_nothing_connects_to_the_default_port";
    let Some(n) = count_connections_on_4318().await else {
        return crate::support::skip(test, "port 4318 is taken (a collector running here?)");
    };
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    two_turns(&e, &fake);
    let rec = run_json(&e).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert_eq!(n.load(std::sync::atomic::Ordering::SeqCst), 0);
    let e = Harness::with_fake(fake.url())
        .env("OTEL_TRACES_EXPORTER", "otlp")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318");
    two_turns(&e, &fake);
    let rec = run_json(&e).await;
    assert_eq!(rec["status"], "succeeded", "{rec}");
    assert!(
        n.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "turned on, it exports"
    );
}

/// A collector that accepts connections and never answers: the job
/// succeeds, and `run` exits within its flush bound (2 s) although the
/// exporter's own timeout is a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_never_answers_costs_the_job_nothing_and_run_its_flush_bound() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let (url, _hold) = otlp::hang().await;
    let e = exporting(&fake, &url).env("OTEL_EXPORTER_OTLP_TIMEOUT", "60000");
    two_turns(&e, &fake);
    let t = Instant::now();
    let out = run_out(&e).await;
    let wall = t.elapsed();
    let rec: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let job = Duration::from_secs_f64(rec["elapsed_s"].as_f64().unwrap());
    let after = wall.saturating_sub(job);
    eprintln!("run: {wall:?} in all, the job {job:?}, the rest {after:?}");
    // Start, probe and exit with a 2 s flush bound: well under the
    // exporter's 60 s, which an unbounded flush would wait.
    assert!(after < Duration::from_secs(20), "{after:?}");
}

/// Header credentials, from `OTEL_EXPORTER_OTLP_HEADERS` and from
/// `defaults.otel.headers_env`, reach the collector and nothing else: not
/// the log at debug level, not a record or any file of the state dir. The
/// delegate's telemetry is on, so they went to it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_tokens_reach_the_collector_and_never_a_log_or_a_record() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let rx = Otlp::spawn().await;
    let e = Harness::with_fake(fake.url());
    let cfg = std::fs::read_to_string(e.config_path()).unwrap();
    let e = e
        .config(&cfg.replace(
            "defaults:\n",
            &format!(
                "defaults:\n  otel:\n    endpoint: {}\n    traces: true\n    delegate: true\n    headers_env:\n      x-team-token: MY_OTEL_TOKEN\n",
                rx.url()
            ),
        ))
        .env("MY_OTEL_TOKEN", "team-sekrit-7f3a")
        .env("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20env-sekrit-91c2")
        .env("LOCALAGENTS_LOG", "debug");
    two_turns(&e, &fake);
    let out = run_out(&e).await;
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["status"], "succeeded", "{rec}");
    let got = rx.received();
    assert!(!got.is_empty());
    let ours = got
        .iter()
        .find(|r| {
            r.headers
                .iter()
                .any(|(k, v)| k == "x-team-token" && v == "team-sekrit-7f3a")
        })
        .expect("the config's header reached the collector");
    assert!(
        ours.headers
            .iter()
            .any(|(k, v)| k == "authorization" && v == "Bearer env-sekrit-91c2")
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("DEBUG"), "the log at debug level: {stderr}");
    for secret in ["team-sekrit-7f3a", "env-sekrit-91c2"] {
        assert!(!stderr.contains(secret), "stderr: {stderr}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
        for f in walk(e.state_dir()) {
            let text = std::fs::read(&f).unwrap_or_default();
            assert!(
                !String::from_utf8_lossy(&text).contains(secret),
                "{secret} in {}",
                f.display()
            );
        }
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `doctor` says whether telemetry is on, where it goes, and whether the
/// collector answers; off, it says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_whether_telemetry_is_on_and_the_collector_answers() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let doctor = |e: Harness| async move {
        let out = localagents(&e, &["doctor"]).await;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .filter(|l| l.contains("telemetry:"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    let off = doctor(Harness::with_fake(fake.url())).await;
    assert_eq!(off.len(), 1, "{off:?}");
    assert!(
        off[0].contains("telemetry: off (no switch is on"),
        "{off:?}"
    );
    let rx = Otlp::spawn().await;
    let on = doctor(exporting(&fake, rx.url())).await;
    assert_eq!(on.len(), 2, "{on:?}");
    assert!(
        on[0].contains(&format!(
            "telemetry: traces to {}/v1/traces (http/protobuf); the collector answers (HTTP 200)",
            rx.url()
        )),
        "{on:?}"
    );
    assert!(on[1].contains("telemetry: metrics to"), "{on:?}");
    let (url, _hold) = otlp::hang().await;
    let hung = doctor(exporting(&fake, &url)).await;
    assert!(
        hung[0].starts_with("warn")
            && hung[0].contains("the collector does not answer (no answer within 2 s)"),
        "{hung:?}"
    );
    let grpc = doctor(exporting(&fake, rx.url()).env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")).await;
    assert!(
        grpc.iter()
            .any(|l| l.contains("use http/protobuf on port 4318")),
        "{grpc:?}"
    );
}
