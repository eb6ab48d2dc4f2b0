//! Jobs behind vLLM's real router (`vllm-router` 0.1.17 from PyPI, with
//! `--policy consistent_hash`) in front of two fake llama-servers that
//! keep a prompt cache per slot (`LlamaOpts::prefix_cache`), the real
//! Claude Code CLI as the delegate (issue 37).
//!
//! - With the session header (the default), every request of a job
//!   carries `X-Session-ID: <job id>`, reaches one replica, and its later
//!   turns are served from that replica's cache.
//! - With `session_header: ""`, the router keys each request by its body:
//!   Claude Code's `metadata.user_id`, cut at its first escaped quote,
//!   the same for every session, so every job lands on one replica.
//! - The registry probes each replica: both are listed, the smallest
//!   window is the model's, the slots are summed, and a stopped replica is
//!   named as down with the fix.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};

use crate::jobs::git_init;
use crate::support::fake_llama::{self, FakeLlama, LlamaOpts};
use crate::support::harness::{Harness, call, serve};
use crate::support::script;
use crate::support::vllm_router::{self, Router};

fn fake_opts(n_ctx: u64, slots: u64) -> LlamaOpts {
    LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx,
        slots,
        strict_template: true,
        prefix_cache: true,
        ..Default::default()
    }
}

/// Every job reads the same three files, one a turn, then reports: four
/// requests a job.
fn reading_script(fake: &FakeLlama, e: &Harness) {
    let read = |f: &str| {
        (
            "Read",
            json!({"file_path": e.work().join(f).to_string_lossy()}),
        )
    };
    fake.set_script(script::tools_then_text(
        vec![read("a.txt"), read("b.txt"), read("c.txt")],
        "Read the three files; nothing else to do.",
    ));
}

fn config(router: &str, session_header: Option<&str>) -> String {
    let header = session_header
        .map(|h| format!("    session_header: \"{h}\"\n"))
        .unwrap_or_default();
    format!(
        "endpoints:\n  gpus:\n    base_url: {router}\n{header}models:\n  gemma-3-270m:\n    notes: tiny test model\ndefaults:\n  max_turns: 8\n  setting_sources: []\n  prewarm: false\n"
    )
}

fn project(e: &Harness) {
    git_init(e.work());
    for (f, text) in [
        ("a.txt", "alpha\n"),
        ("b.txt", "beta\n"),
        ("c.txt", "gamma\n"),
    ] {
        std::fs::write(e.work().join(f), text).unwrap();
    }
}

fn record(e: &Harness, id: &str) -> Value {
    let path = e.state_dir().join("jobs").join(id).join("job.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

type Client = rmcp::service::RunningService<rmcp::RoleClient, ()>;

/// Start jobs `from..from + n` at once, each with its own task (`Job
/// <k>:`), and wait for all.
async fn run_jobs(c: &Client, e: &Harness, from: usize, n: usize) -> Vec<Value> {
    let mut ids = Vec::new();
    for i in from..from + n {
        let (err, v) = call(
            c,
            "run_agent",
            json!({"task": format!("Job {i}: read a.txt, b.txt and c.txt, one at a time."), "model": "gemma-3-270m", "allowed_tools": ["Read"]}),
        )
        .await;
        assert!(!err, "{v}");
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    for id in &ids {
        crate::support::until(&format!("job {id} ends"), Duration::from_secs(600), || {
            !matches!(record(e, id)["status"].as_str(), Some("running" | "queued"))
        })
        .await;
        let r = record(e, id);
        assert_eq!(r["status"], "succeeded", "{r:#}");
    }
    ids.iter().map(|id| record(e, id)).collect()
}

/// Which replicas (0, 1) served requests of job `k`, from the bodies the
/// fakes saw (each names its job in its task; the router does not pass
/// the session header on to its workers).
fn replicas_of(fakes: &[&FakeLlama], k: usize) -> BTreeSet<usize> {
    let marker = format!("Job {k}:");
    fakes
        .iter()
        .enumerate()
        .filter(|(_, f)| f.bodies().iter().any(|b| b.to_string().contains(&marker)))
        .map(|(n, _)| n)
        .collect()
}

/// [`replicas_of`] for jobs `0..n`.
fn all_replicas(fakes: &[&FakeLlama], n: usize) -> BTreeMap<usize, BTreeSet<usize>> {
    (0..n).map(|k| (k, replicas_of(fakes, k))).collect()
}

/// Two fakes (eight slots each: six jobs never evict each other's
/// prompts) behind the real router, a project, and `serve` with the
/// endpoint's `session_header` as given (`None`: the default).
struct Stage {
    a: FakeLlama,
    b: FakeLlama,
    router: Router,
    e: Harness,
    c: Client,
    _dir: Harness,
}

async fn stage(test: &str, session_header: Option<&str>) -> Option<Stage> {
    let bin = vllm_router::router_or_skip(test)?;
    let a = fake_llama::spawn(fake_opts(65536, 8)).await;
    let b = fake_llama::spawn(fake_opts(65536, 8)).await;
    let dir = Harness::new();
    let router = Router::start(&bin, &[a.url(), b.url()], "consistent_hash", &[], dir.dir());
    let e = Harness::new().config(&config(&router.url, session_header));
    project(&e);
    reading_script(&a, &e);
    reading_script(&b, &e);
    let c = serve(&e, None).await;
    Some(Stage {
        a,
        b,
        router,
        e,
        c,
        _dir: dir,
    })
}

fn ratios(r: &Value) -> Vec<f64> {
    r["metrics"]["cache_ratio_per_turn"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_jobs_behind_the_real_router_each_keep_one_replica() {
    let Some(Stage {
        a,
        b,
        router,
        e,
        c,
        _dir,
    }) = stage(
        "six_jobs_behind_the_real_router_each_keep_one_replica",
        None,
    )
    .await
    else {
        return;
    };
    let mut recs = run_jobs(&c, &e, 0, 6).await;
    // The router's hash of six random job ids puts them all on one
    // replica once in 32 runs: run more jobs until both replicas have
    // served one (one more at a time, at most ten).
    for _ in 0..10 {
        let used: BTreeSet<usize> = all_replicas(&[&a, &b], recs.len())
            .values()
            .flatten()
            .copied()
            .collect();
        if used.len() == 2 {
            break;
        }
        recs.extend(run_jobs(&c, &e, recs.len(), 1).await);
    }
    let seen = all_replicas(&[&a, &b], recs.len());
    eprintln!("jobs → replicas: {seen:?}");
    for (k, r) in recs.iter().enumerate() {
        let id = r["id"].as_str().unwrap();
        let on = &seen[&k];
        assert_eq!(
            on.len(),
            1,
            "job {id}'s requests reached one replica: {seen:?}"
        );
        let m = &r["metrics"];
        assert!(m["requests"].as_u64().unwrap() >= 3, "{r:#}");
        let rs = ratios(r);
        eprintln!("job {id} on replica {on:?}: cache ratio per turn {rs:?}");
        // Each later turn found the whole previous prompt in the cache
        // (`context_lost`: at most 256 of its tokens processed again).
        assert_eq!(
            m["slot_losses"].as_u64().unwrap_or(0),
            0,
            "no turn lost its cache: {r:#}"
        );
        assert_eq!(m["router"]["replicas"], 2, "{r:#}");
        assert_eq!(m["router"]["session_header"], "X-Session-ID", "{r:#}");
        assert!(r["cache_note"].is_null(), "{r:#}");
    }
    let used: BTreeSet<usize> = seen.values().flatten().copied().collect();
    assert_eq!(used.len(), 2, "both replicas served jobs: {seen:?}");
    // Every request of a job reached the router with the job's id in the
    // header, and it hashed the job by it. (`request:null`: the probe's
    // GETs, which have no body.)
    let decisions = router.decisions();
    let ids: BTreeSet<String> = recs
        .iter()
        .map(|r| format!("header:x-session-id:{}", r["id"].as_str().unwrap()))
        .collect();
    let by_job = decisions.iter().filter(|(k, _)| ids.contains(k)).count();
    assert!(by_job >= 4 * recs.len(), "{decisions:?}");
    assert!(
        decisions
            .iter()
            .all(|(k, _)| ids.contains(k) || k == "request:null"),
        "{decisions:?}"
    );
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_session_header_the_router_piles_every_job_on_one_replica() {
    let Some(Stage {
        a,
        b,
        router,
        e,
        c,
        _dir,
    }) = stage(
        "without_the_session_header_the_router_piles_every_job_on_one_replica",
        Some(""),
    )
    .await
    else {
        return;
    };
    let recs = run_jobs(&c, &e, 0, 6).await;
    // Without the header the router looks in the body: Claude Code's
    // `metadata.user_id` is a JSON text, and the router takes the
    // characters up to its first escaped quote, `{\`, the same for every
    // session. So every job's conversation hashes to one replica.
    let decisions = router.decisions();
    let keys: BTreeMap<&str, BTreeSet<&str>> =
        decisions.iter().fold(BTreeMap::new(), |mut m, (k, w)| {
            m.entry(k.as_str()).or_default().insert(w.as_str());
            m
        });
    eprintln!("without the header, the router's hash keys → workers: {keys:?}");
    assert!(
        keys.keys().all(|k| !k.starts_with("header:")),
        "no session header: {keys:?}"
    );
    let user = keys.get("user:{\\").unwrap_or_else(|| {
        panic!("the router keyed Claude Code's requests by metadata.user_id: {keys:?}")
    });
    assert_eq!(user.len(), 1, "{keys:?}");
    let on: BTreeSet<usize> = (0..recs.len())
        .flat_map(|k| replicas_of(&[&a, &b], k))
        .collect();
    for (i, r) in recs.iter().enumerate() {
        eprintln!(
            "job {i} without the header: replicas {:?}, cache ratio per turn {:?}, slot_losses {}",
            replicas_of(&[&a, &b], i),
            ratios(r),
            r["metrics"]["slot_losses"]
        );
        assert_eq!(
            r["metrics"]["router"]["session_header"],
            Value::Null,
            "{r:#}"
        );
    }
    assert_eq!(on.len(), 1, "all six jobs piled on one replica: {on:?}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_registry_sees_every_replica_through_the_router() {
    let test = "the_registry_sees_every_replica_through_the_router";
    let Some(bin) = vllm_router::router_or_skip(test) else {
        return;
    };
    let a = fake_llama::spawn(fake_opts(65536, 2)).await;
    let b = fake_llama::spawn(fake_opts(32768, 4)).await;
    let (a_url, b_url) = (a.url().to_string(), b.url().to_string());
    let dir = Harness::new();
    let router = Router::start(&bin, &[&a_url, &b_url], "consistent_hash", &[], dir.dir());
    let e = Harness::new().config(&config(&router.url, None));

    let st = crate::support::harness::localagents_json(&e, &["status", "--json"]).await;
    let ep = &st["endpoints"][0];
    assert_eq!(ep["up"], true, "{ep:#}");
    assert_eq!(ep["kind"], "vllm-router", "{ep:#}");
    assert_eq!(ep["backend"], "llama.cpp", "{ep:#}");
    let reps = ep["replicas"].as_array().unwrap();
    let urls: Vec<&str> = reps.iter().map(|r| r["url"].as_str().unwrap()).collect();
    let mut both = [a_url.as_str(), b_url.as_str()];
    both.sort();
    assert_eq!(urls, both, "sorted by URL: {ep:#}");
    let rep = |url: &str| reps.iter().find(|r| r["url"] == url).unwrap().clone();
    assert_eq!(rep(&a_url)["models"][0]["context"], 65536, "{ep:#}");
    assert_eq!(rep(&b_url)["models"][0]["context"], 32768, "{ep:#}");
    assert!(reps.iter().all(|r| r["healthy"] == true), "{ep:#}");
    // The smallest window of the replicas, the slots summed.
    assert_eq!(ep["models"][0]["id"], "gemma3-270m", "{ep:#}");
    assert_eq!(ep["models"][0]["context"], 32768, "{ep:#}");
    assert_eq!(ep["slots"]["total"], 6, "{ep:#}");

    let out = crate::support::harness::localagents(&e, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("vllm-router, 2 replicas: gemma3-270m (32768/slot)  slots 0/6 busy"),
        "{text}"
    );
    assert!(
        text.contains(&format!("replica {a_url}: gemma3-270m (65536/slot)")),
        "{text}"
    );

    // One replica stopped: named as down, with the fix; the router and
    // the other replica stay up, with the other's window and slots.
    drop(b);
    let st = crate::support::harness::localagents_json(&e, &["status", "--json"]).await;
    let ep = &st["endpoints"][0];
    assert_eq!(ep["up"], true, "{ep:#}");
    let down = ep["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["url"] == b_url.as_str())
        .unwrap();
    assert_eq!(down["up"], false, "{ep:#}");
    assert_eq!(down["error_kind"], "refused", "{ep:#}");
    let why = down["error"].as_str().unwrap();
    assert!(
        why.starts_with(&format!("replica {b_url} is down: "))
            && why.contains("start the server or fix the port in the router's --worker-urls"),
        "{why}"
    );
    assert_eq!(ep["models"][0]["context"], 65536, "{ep:#}");
    assert_eq!(ep["slots"]["total"], 2, "{ep:#}");
    let out = crate::support::harness::localagents(&e, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("vllm-router, 2 replicas (1 down)"), "{text}");
    assert!(text.contains(why), "{text}");
}

/// `backend: vllm-router` on a server that is no router: down, with the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_router_that_lists_no_workers_is_down_with_the_fix() {
    let a = fake_llama::spawn(fake_opts(65536, 2)).await;
    let e = Harness::new().config(&format!(
        "endpoints:\n  gpus:\n    base_url: {}\n    backend: vllm-router\n",
        a.url()
    ));
    let st = crate::support::harness::localagents_json(&e, &["status", "--json"]).await;
    let ep = &st["endpoints"][0];
    assert_eq!(ep["up"], false, "{ep:#}");
    assert_eq!(
        ep["error"],
        "endpoint `gpus` is declared `backend: vllm-router`, but GET /list_workers answered 404 without a list of workers: point base_url at vllm-router's --port, or remove `backend: vllm-router`",
        "{ep:#}"
    );
}

/// A port found free can be bound by another process before the router
/// binds it; the router then says `Address already in use` and exits (CI,
/// stop 49). A stand-in launcher does that once, then serves
/// `/list_workers` on the port it is given: `Router::start` starts it
/// again on new ports instead of waiting out its 120 s for a dead process.
#[test]
fn a_router_that_lost_its_port_is_started_again_on_new_ports() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Harness::new();
    let d = dir.dir();
    std::fs::create_dir(d.join("www")).unwrap();
    std::fs::write(d.join("www/list_workers"), "[]").unwrap();
    let launcher = d.join("vllm-router");
    std::fs::write(
        &launcher,
        format!(
            r#"#!/bin/sh
d='{d}'
n=$(cat "$d/count" 2>/dev/null || echo 0); n=$((n+1)); echo "$n" > "$d/count"
if [ "$n" -eq 1 ]; then
  echo 'Router ready | workers: []'
  echo 'Error starting router: Address already in use (os error 98)' >&2
  exit 1
fi
while [ $# -gt 0 ]; do [ "$1" = --port ] && port=$2; shift; done
cd "$d/www" && exec python3 -m http.server --bind 127.0.0.1 "$port"
"#,
            d = d.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();

    let router = Router::start(
        &launcher,
        &["http://127.0.0.1:9"],
        "consistent_hash",
        &[],
        d,
    );
    let starts = std::fs::read_to_string(d.join("count")).unwrap();
    assert_eq!(
        starts.trim(),
        "2",
        "started once, lost its port, started again"
    );
    assert!(
        router.url.starts_with("http://127.0.0.1:"),
        "{}",
        router.url
    );
}
