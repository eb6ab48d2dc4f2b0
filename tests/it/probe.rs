//! Probing real-shaped fakes, and every failure class.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use localagents::config::{Backend, Endpoint};
use localagents::probe::{self, FailureKind};

use crate::support::harness::Harness;
use crate::support::{fake_llama, fake_vllm, net};

fn ep(name: &str, url: &str, backend: Option<Backend>) -> Endpoint {
    Endpoint {
        backend,
        ..Endpoint::at(name, url)
    }
}

const BUDGET: Duration = Duration::from_millis(2500);

#[tokio::test]
async fn llama_cpp_window_slots_metrics_and_template_caps() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        n_ctx: 65536,
        slots: 2,
        supports_system_role: false,
        ..Default::default()
    })
    .await;
    fake.state.busy.store(1, Ordering::SeqCst);
    let st = probe::probe(&ep("l", fake.url(), Some(Backend::LlamaCpp)), BUDGET).await;
    assert!(st.up, "{:?}", st.error);
    assert_eq!(st.backend, "llama.cpp");
    assert_eq!(st.models.len(), 1);
    assert_eq!(st.models[0].id, "unsloth/Qwen3.8-27B-GGUF:UD-Q4_K_XL");
    assert_eq!(st.models[0].context, Some(65536));
    assert_eq!(
        st.models[0].context_source.map(|c| c.as_str()),
        Some("props.n_ctx")
    );
    let slots = st.slots.expect("slots");
    assert_eq!((slots.total, slots.busy, slots.free), (2, 1, 1));
    assert!(st.metrics);
    let caps = st.chat_template.expect("caps");
    assert_eq!(caps.supports_system_role, Some(false));
    assert!(st.latency_ms.is_some());
    // 64k per slot is enough for a lean delegate: no window warning.
    assert!(
        !st.warnings.iter().any(|w| w.contains("per slot is under")),
        "{:?}",
        st.warnings
    );
    let hits = fake.hits();
    for p in ["/v1/models", "/props", "/slots", "/metrics"] {
        assert!(hits.iter().any(|h| h == p), "{p} not probed: {hits:?}");
    }
}

#[tokio::test]
async fn llama_cpp_without_slots_endpoint_uses_metrics_gauge() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        slots_endpoint: false,
        slots: 4,
        ..Default::default()
    })
    .await;
    fake.state.busy.store(3, Ordering::SeqCst);
    let st = probe::probe(&ep("l", fake.url(), None), BUDGET).await;
    assert!(st.up);
    assert_eq!(st.backend, "llama.cpp", "detected from owned_by");
    assert!(st.backend_detected);
    let s = st.slots.expect("slots from /props + /metrics");
    assert_eq!((s.total, s.busy, s.free), (4, 3, 1));
    assert!(st.warnings.is_empty(), "{:?}", st.warnings);
}

#[tokio::test]
async fn window_warning_follows_the_measured_minimum() {
    // Issue 45 (`cargo bench --bench long_jobs`): with the window budget
    // a delegate works through a long job on 16k; under it, `status` warns.
    for (n_ctx, warns) in [(12288, true), (16383, true), (16384, false), (32768, false)] {
        let fake = fake_llama::spawn(fake_llama::LlamaOpts {
            n_ctx,
            ..Default::default()
        })
        .await;
        let st = probe::probe(&ep("l", fake.url(), None), BUDGET).await;
        let w = st.warnings.iter().find(|w| w.contains("per slot is under"));
        assert_eq!(w.is_some(), warns, "{n_ctx}: {:?}", st.warnings);
        if let Some(w) = w {
            assert!(
                w.contains("under the 16,384 a delegate needs") && w.contains("16,384 or more"),
                "{w}"
            );
        }
    }
}

#[tokio::test]
async fn llama_cpp_without_metrics_reports_metrics_false() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        metrics: false,
        ..Default::default()
    })
    .await;
    let st = probe::probe(&ep("l", fake.url(), Some(Backend::LlamaCpp)), BUDGET).await;
    assert!(st.up);
    assert!(!st.metrics);
    assert!(st.counters.is_none());
}

#[tokio::test]
async fn vllm_is_detected_with_window_and_load() {
    let fake = fake_vllm::spawn(fake_vllm::VllmOpts::default()).await;
    fake.state.running.store(2, Ordering::SeqCst);
    fake.state.waiting.store(5, Ordering::SeqCst);
    let st = probe::probe(&ep("v", fake.url(), None), BUDGET).await;
    assert!(st.up, "{:?}", st.error);
    assert_eq!(st.backend, "vllm");
    assert_eq!(st.models[0].id, "deepseek-v4-flash");
    assert_eq!(st.models[0].context, Some(163840));
    assert_eq!(
        st.models[0].context_source.map(|c| c.as_str()),
        Some("max_model_len")
    );
    let load = st.load.expect("load");
    assert_eq!((load.running, load.waiting), (2.0, 5.0));
    assert_eq!(load.kv_cache_usage, Some(0.25));
    assert!(st.slots.is_none());
    assert!(st.metrics);
}

#[tokio::test]
async fn refused_says_nothing_listens_on_the_port() {
    let addr = net::refused_addr();
    let st = probe::probe(&ep("r", &format!("http://{addr}"), None), BUDGET).await;
    assert!(!st.up);
    assert_eq!(st.error_kind, Some(FailureKind::Refused));
    let e = st.error.unwrap();
    assert!(
        e.contains(&format!("nothing listens on port {}", addr.port())),
        "{e}"
    );
    assert!(e.contains("start the server or fix the port"), "{e}");
}

#[tokio::test]
async fn silent_listener_times_out_within_the_budget() {
    let silent = net::silent_listener().await;
    let budget = Duration::from_millis(600);
    let started = Instant::now();
    let st = probe::probe(&ep("s", &format!("http://{}", silent.addr), None), budget).await;
    let took = started.elapsed();
    assert!(!st.up);
    assert_eq!(st.error_kind, Some(FailureKind::Timeout));
    assert!(st.error.unwrap().contains("no answer within 0.6s"));
    // Not a speed test: it must end, bounded by the budget, not hang.
    assert!(took < budget + Duration::from_millis(1000), "took {took:?}");
}

#[tokio::test]
async fn api_key_missing_then_given() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        api_key: Some("sekrit-123".into()),
        ..Default::default()
    })
    .await;
    let mut e = ep("k", fake.url(), Some(Backend::LlamaCpp));
    let st = probe::probe(&e, BUDGET).await;
    assert_eq!(st.error_kind, Some(FailureKind::Unauthorized));
    assert!(
        st.error
            .as_deref()
            .unwrap()
            .contains("the server wants an API key: set api_key_env")
    );

    e.api_key_env = Some("LOCALAGENTS_TEST_PROBE_KEY_UNSET".into());
    let st = probe::probe(&e, BUDGET).await;
    assert!(
        st.error
            .as_deref()
            .unwrap()
            .contains("LOCALAGENTS_TEST_PROBE_KEY_UNSET")
    );

    // With the key in the environment: set on a child `localagents status`,
    // so the test process's environment is never changed.
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  k:\n    base_url: {}\n    backend: llama.cpp\n    api_key_env: LOCALAGENTS_TEST_PROBE_KEY\n",
            fake.url()
        ))
        .env("LOCALAGENTS_TEST_PROBE_KEY", "sekrit-123");
    let out = tokio::process::Command::from(h.command(["status", "--json"]))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let st = &v["endpoints"][0];
    assert_eq!(st["up"], true, "{st}");
    assert_eq!(st["slots"]["total"], 2, "probes of /slots send the key too");
    assert!(
        !text.contains("sekrit-123")
            && !String::from_utf8_lossy(&out.stderr).contains("sekrit-123"),
        "the key never appears in output"
    );
}

#[tokio::test]
async fn loading_model_is_classified() {
    let fake = fake_llama::spawn(Default::default()).await;
    fake.state.loading.store(true, Ordering::SeqCst);
    let st = probe::probe(&ep("l", fake.url(), None), BUDGET).await;
    assert!(!st.up);
    assert_eq!(st.error_kind, Some(FailureKind::Loading));
    assert!(st.error.unwrap().contains("model still loading"));
}

#[tokio::test]
async fn garbage_bodies_are_bad_body_not_panics() {
    for body in [
        "<html><body>router login</body></html>",
        "{\"data\": 5}",
        "{\"data\":[{\"name\":1}]}",
        "",
    ] {
        let srv = net::fixed_response(200, "text/html", body).await;
        let st = probe::probe(&ep("g", &srv.url, Some(Backend::LlamaCpp)), BUDGET).await;
        assert!(!st.up, "{body}");
        assert_eq!(st.error_kind, Some(FailureKind::BadBody), "{body}");
        assert!(st.error.unwrap().contains("not with a model list"));
    }
}

#[tokio::test]
async fn http_errors_are_named_with_status_and_message() {
    let srv = net::fixed_response(
        500,
        "application/json",
        r#"{"error":{"code":500,"message":"CUDA out of memory","type":"server_error"}}"#,
    )
    .await;
    let st = probe::probe(&ep("h", &srv.url, None), BUDGET).await;
    assert_eq!(st.error_kind, Some(FailureKind::Http));
    let e = st.error.unwrap();
    assert!(
        e.contains("HTTP 500") && e.contains("CUDA out of memory"),
        "{e}"
    );

    let srv = net::fixed_response(404, "application/json", r#"{"detail":"Not Found"}"#).await;
    let st = probe::probe(&ep("h", &format!("{}/v1", srv.url), None), BUDGET).await;
    assert!(st.error.unwrap().contains("drop the /v1"));
}

#[tokio::test]
async fn probe_all_is_concurrent_and_cached() {
    let fake = fake_llama::spawn(Default::default()).await;
    // Two endpoints that never answer: probed one after the other they
    // would take two budgets.
    let (hung1, hung2) = (net::silent_listener().await, net::silent_listener().await);
    let budget = Duration::from_millis(1000);
    let mut cfg = localagents::config::Config::builtin();
    cfg.defaults.probe_timeout_s = budget.as_secs_f64();
    cfg.endpoints = vec![
        ep("live", fake.url(), None),
        ep("dead", &format!("http://{}", net::refused_addr()), None),
        ep("hung1", &format!("http://{}", hung1.addr), None),
        ep("hung2", &format!("http://{}", hung2.addr), None),
    ];
    let started = Instant::now();
    let all = probe::probe_all(&cfg).await;
    let took = started.elapsed();
    assert_eq!(
        all.iter().map(|s| s.up).collect::<Vec<_>>(),
        [true, false, false, false]
    );
    assert_eq!(
        all.iter().map(|s| s.error_kind).collect::<Vec<_>>(),
        [
            None,
            Some(FailureKind::Refused),
            Some(FailureKind::Timeout),
            Some(FailureKind::Timeout)
        ]
    );
    // Concurrent: about one budget in all, not one per hung endpoint.
    assert!(
        took < budget + budget / 2,
        "took {took:?} for two hung endpoints with a {budget:?} budget"
    );
    // A burst is served from the cache. (Asked right after a fresh probe:
    // after waiting out the hung endpoints above, the live entry would be
    // about one budget, i.e. one TTL, old, and the check a race.)
    cfg.endpoints.truncate(1);
    probe::invalidate();
    let first = probe::probe_all(&cfg).await;
    assert!(first[0].up);
    let before = fake.hits().len();
    let again = probe::probe_all(&cfg).await;
    assert!(again[0].up);
    assert_eq!(
        fake.hits().len(),
        before,
        "a burst within the TTL is served from cache"
    );
}

/// A fake whose bodies are the ones the real llama-server (router mode,
/// `--sleep-idle-seconds`) and llama-swap sent (captured 2026-11-30, see the
/// README's backend notes). It counts `/slots` requests: on a sleeping
/// server `/slots` wakes it, and a router answers it 400.
async fn on_demand_server(
    props: serde_json::Value,
    models: serde_json::Value,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use axum::routing::get;
    let slots = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let hits = slots.clone();
    let app = axum::Router::new()
        .route("/props", get(move || { let p = props.clone(); async move { axum::Json(p) } }))
        .route("/v1/models", get(move || { let m = models.clone(); async move { axum::Json(m) } }))
        .route(
            "/slots",
            get(move || {
                hits.fetch_add(1, Ordering::SeqCst);
                async { (axum::http::StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": {"code": 400, "message": "model name is missing from the request", "type": "invalid_request_error"}}))) }
            }),
        )
        .route(
            "/metrics",
            get(|| async { (axum::http::StatusCode::BAD_REQUEST, axum::Json(serde_json::json!({"error": {"code": 400, "message": "model name is missing from the request", "type": "invalid_request_error"}}))) }),
        );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    (url, slots)
}

fn router_model(id: &str, state: &str, args: &[&str], meta_ctx: Option<u64>) -> serde_json::Value {
    let mut m = serde_json::json!({"id": id, "aliases": [], "tags": [], "object": "model", "owned_by": "llamacpp",
        "created": 1796049471u64, "status": {"value": state, "args": args, "preset": "[x]\nctx-size = 32768\n"},
        "source": "models_dir", "can_remove": false});
    if let Some(c) = meta_ctx {
        m["meta"] = serde_json::json!({"n_ctx": c, "n_ctx_train": 32768});
    }
    m
}

#[tokio::test]
async fn a_router_shows_each_models_state_and_the_window_from_its_preset() {
    let props = serde_json::json!({"role": "router", "max_instances": 4, "models_autoload": true, "model_alias": "llama-server",
        "model_path": "none", "default_generation_settings": {"params": null, "n_ctx": 0}, "build_info": "b0-unknown"});
    let args = [
        "/bin/llama-server",
        "--jinja",
        "--port",
        "0",
        "--alias",
        "gemma-3-270m-q4_k_m",
        "--ctx-size",
        "32768",
        "--model",
        "/m/gemma.gguf",
        "--parallel",
        "1",
    ];
    let two = [
        "/bin/llama-server",
        "--ctx-size",
        "65536",
        "--parallel",
        "2",
    ];
    let models = serde_json::json!({"object": "list", "data": [
        router_model("gemma-3-270m-q4_k_m", "unloaded", &args, None),
        router_model("qwen", "loaded", &two, Some(32768)),
        router_model("auto-slots", "loading", &["x", "-c", "16384"], None),
    ]});
    let (url, slots) = on_demand_server(props, models).await;
    let st = probe::probe(&ep("router", &url, None), BUDGET).await;
    assert!(st.up, "{:?}", st.error);
    assert_eq!(st.kind.map(|k| k.as_str()), Some("router"));
    assert_eq!(st.backend, "llama.cpp");
    let by = |id: &str| st.models.iter().find(|m| m.id == id).unwrap().clone();
    let g = by("gemma-3-270m-q4_k_m");
    assert_eq!(
        (
            g.state.as_ref().map(|s| s.as_str()),
            g.context,
            g.context_source.map(|c| c.as_str())
        ),
        (Some("unloaded"), Some(32768), Some("preset"))
    );
    let q = by("qwen");
    assert_eq!(
        (
            q.state.as_ref().map(|s| s.as_str()),
            q.context,
            q.context_source.map(|c| c.as_str())
        ),
        (Some("loaded"), Some(32768), Some("v1/models meta.n_ctx"))
    );
    let a = by("auto-slots");
    assert_eq!(
        (a.state.as_ref().map(|s| s.as_str()), a.context),
        (Some("loading"), Some(16384))
    );
    assert!(
        st.models.iter().all(|m| m.context != Some(0)),
        "never a window of 0"
    );
    assert_eq!(
        slots.load(Ordering::SeqCst),
        0,
        "a router's /slots is not asked"
    );
}

#[tokio::test]
async fn a_sleeping_server_is_reported_and_not_woken() {
    let props = serde_json::json!({"default_generation_settings": {"n_ctx": 32768}, "total_slots": 1, "is_sleeping": true,
        "model_alias": "gemma3-270m"});
    let models = serde_json::json!({"object": "list", "data": [{"id": "gemma3-270m", "object": "model", "owned_by": "llamacpp", "meta": {"n_ctx": 32768}}]});
    let (url, slots) = on_demand_server(props, models).await;
    let st = probe::probe(&ep("sleepy", &url, Some(Backend::LlamaCpp)), BUDGET).await;
    assert!(st.up, "{:?}", st.error);
    assert_eq!(st.kind.map(|k| k.as_str()), Some("sleeping"));
    assert_eq!(
        st.models[0].state.as_ref().map(|s| s.as_str()),
        Some("sleeping")
    );
    assert_eq!(st.models[0].context, Some(32768));
    assert_eq!(slots.load(Ordering::SeqCst), 0, "/slots would wake it");
    assert!(
        st.warnings.iter().any(|w| w.contains("sleeping")),
        "{:?}",
        st.warnings
    );
}

#[tokio::test]
async fn llama_swap_models_show_their_state_and_no_zero_window() {
    let models = serde_json::json!({"object": "list", "data": [
        {"id": "qwen-coder", "object": "model", "created": 1, "owned_by": "llama-swap", "status": {"value": "unloaded"}},
        {"id": "gemma", "object": "model", "created": 1, "owned_by": "llama-swap", "status": {"value": "loaded"},
         "context_length": 32000, "meta": {"llamaswap": {}, "n_ctx": 32000}},
    ]});
    // llama-swap does not route /props without a model.
    let (url, _) = on_demand_server(serde_json::json!({"error": "no model"}), models).await;
    let st = probe::probe(&ep("swap", &url, None), BUDGET).await;
    assert!(st.up, "{:?}", st.error);
    assert_eq!(st.kind.map(|k| k.as_str()), Some("llama-swap"));
    assert_eq!(st.backend, "llama.cpp");
    assert_eq!(
        (
            st.models[0].state.as_ref().map(|s| s.as_str()),
            st.models[0].context
        ),
        (Some("unloaded"), None)
    );
    assert_eq!(
        (
            st.models[1].state.as_ref().map(|s| s.as_str()),
            st.models[1].context
        ),
        (Some("loaded"), Some(32000))
    );
}
