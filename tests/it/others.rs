//! Every server users run (issue 54), against the stand-ins in
//! tests/support/src/fake_others.rs: each recognised from `base_url`
//! alone with its real window, a job through the real CLI, a window too
//! small refused with that server's own fix, and a silent cut caught by
//! the truncation guard. `backend: openai` is the same through the chat
//! wire, its window from `window:`.

use serde_json::{Value, json};

use crate::ollama::{a_64k_job, by_id, refused_with_the_fix, status};
use crate::support::fake_others::{self, FakeOther, Kind};
use crate::support::harness::{Harness, call, localagents, localagents_json, serve};

const MODEL: &str = "qwen3-coder-30b";

/// One endpoint at `url`: declared only for `openai` (the others are
/// recognised), `window:` set where the server says none.
fn env(kind: Kind, url: &str, window: u64, extra: &str) -> Harness {
    let backend = if kind.recognised() {
        String::new()
    } else {
        format!("    backend: {}\n", kind.backend())
    };
    let window = if kind.says_window() {
        String::new()
    } else {
        format!("    window: {window}\n")
    };
    Harness::new().config(&format!(
        "endpoints:\n  local:\n    base_url: {url}\n{backend}{window}defaults:\n  max_turns: 30\n  setting_sources: []\n  prewarm: false\n{extra}"
    ))
}

/// That server's own fix for a window too small, as the sentence says it.
fn fix(kind: Kind) -> &'static str {
    match kind {
        Kind::Sglang => "restart SGLang with a larger `--context-length`",
        Kind::Exo => "serve a model whose card allows 65536 tokens",
        Kind::DockerModelRunner => "`docker model configure --context-size 65536 qwen3-coder-30b`",
        Kind::Lemonade => "`lemonade load qwen3-coder-30b --ctx-size 65536 --save-options`",
        Kind::LocalAi => "set `context_size: 65536` in the model's YAML",
        Kind::Llamafile => "restart llamafile with a larger `-c`",
        Kind::Jan => "raise the model's Context Size in Jan's model settings",
        Kind::VllmMlx => "vllm-mlx checks no window",
        Kind::MlxLm => "mlx_lm.server checks no window",
        Kind::TabbyApi => "raise `max_seq_len` and `cache_size` in TabbyAPI's config.yml",
        Kind::KoboldCpp => "restart KoboldCpp with a larger `--contextsize`",
        // (the fixes name the served id, `koboldcpp/…` on KoboldCpp)
        Kind::OpenAi => "give the model a larger window on its server",
    }
}

/// Whether the job's requests took the chat wire there.
fn on_chat(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::Exo | Kind::VllmMlx | Kind::MlxLm | Kind::TabbyApi | Kind::OpenAi
    )
}

/// Recognised from `base_url` alone, its window in `status --json`, not
/// taken for the servers it imitates.
async fn recognised(kind: Kind, fake: &FakeOther, base_url: &str) {
    let e = env(kind, base_url, 65536, "");
    let (ep, took) = status(&e).await;
    assert_eq!(ep["up"], true, "{kind:?}: {ep}");
    assert_eq!(ep["backend"], kind.backend(), "{kind:?}: {ep}");
    assert_eq!(ep["backend_detected"], kind.recognised(), "{kind:?}: {ep}");
    assert!(ep["kind"].is_null(), "{kind:?}: {ep}");
    let m = by_id(&ep, &kind.served(MODEL));
    assert_eq!(m["context"], 65536, "{kind:?}: {ep}");
    assert_eq!(m["context_source"], kind.context_source(), "{kind:?}: {ep}");
    eprintln!(
        "probe figures: {}: status --json took {} ms; the server was asked {:?}",
        kind.backend(),
        took.as_millis(),
        fake.seen().hits
    );
}

/// A 64k job through the real CLI, on the wire the server takes.
async fn a_job(kind: Kind) {
    let fake = fake_others::spawn(kind, MODEL, 65536).await;
    let e = env(kind, fake.url(), 65536, "");
    a_64k_job(&e, &kind.served(MODEL), || {
        fake.seen().requests.into_iter().next()
    })
    .await;
    assert_eq!(
        !fake.seen().chat_bodies.is_empty(),
        on_chat(kind),
        "{kind:?}: {:?}",
        fake.seen().hits
    );
    if on_chat(kind) {
        let first = &fake.seen().chat_bodies[0];
        assert!(
            first.get("id_slot").is_none(),
            "{kind:?}: never pinned: {first}"
        );
        assert_eq!(first["stream_options"]["include_usage"], true, "{first}");
    }
}

/// A silent cut past a 32,768 window ends the job at that turn with the
/// truncation sentence and the server's fix. Where a stream counts no
/// input, or the server runs a longer prompt whole and counts it all
/// (exo, vllm-mlx, mlx_lm.server), only the window sign can see it: the
/// window is 16,384, under the request's bound.
async fn a_silent_cut(kind: Kind) {
    let window = if kind.counts_no_input() || kind.runs_over() {
        16384
    } else {
        32768
    };
    let model = kind.served(MODEL);
    let fake = fake_others::spawn(kind, MODEL, window).await;
    let e = env(kind, fake.url(), window, "  window_budget: false\n");
    let file = crate::truncation::dense_file(&e);
    fake.set_script(crate::truncation::reading(vec![file]));
    let rec = localagents_json(
        &e,
        &["run", "--model", &model, "--json", "Read dense/table.c."],
    )
    .await;
    assert_eq!(rec["context"], window, "{kind:?}: {rec}");
    let seen = fake.seen().truncations;
    if !kind.runs_over() {
        crate::truncation::caught_at_the_first_cut(kind.backend(), &rec, &seen, fix(kind));
        return;
    }
    // Run whole: caught at the first request over the window, by the
    // window sign, and nothing after it.
    assert_eq!(rec["status"], "failed", "{kind:?}: {rec}");
    assert!(
        rec["error"]
            .as_str()
            .unwrap_or_default()
            .contains(fix(kind)),
        "{rec}"
    );
    assert_eq!(rec["model_faults"]["truncated"]["sign"], "window", "{rec}");
    let over = seen.iter().position(|(_, whole, _)| *whole > window);
    assert_eq!(
        over,
        Some(seen.len() - 1),
        "{kind:?}: nothing after it: {seen:?}"
    );
}

async fn every_check(kind: Kind) {
    let fake = fake_others::spawn(kind, MODEL, 65536).await;
    recognised(kind, &fake, fake.url()).await;
    if kind == Kind::DockerModelRunner {
        // Docker's own docs give the base URL with its /engines prefix.
        recognised(kind, &fake, &format!("{}/engines", fake.url())).await;
    }
    let small = fake_others::spawn(kind, MODEL, 4096).await;
    let e = env(kind, small.url(), 4096, "");
    refused_with_the_fix(&e, &kind.served(MODEL), fix(kind)).await;
    assert!(
        small.seen().requests.is_empty(),
        "{kind:?}: a job started: {:?}",
        small.seen().hits
    );
    a_job(kind).await;
    a_silent_cut(kind).await;
}

macro_rules! every_server {
    ($($name:ident: $kind:expr,)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            every_check($kind).await;
        }
    )*};
}

every_server! {
    sglang_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::Sglang,
    exo_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::Exo,
    docker_model_runner_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::DockerModelRunner,
    lemonade_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::Lemonade,
    localai_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::LocalAi,
    llamafile_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::Llamafile,
    jan_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::Jan,
    vllm_mlx_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::VllmMlx,
    mlx_lm_server_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::MlxLm,
    tabbyapi_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::TabbyApi,
    koboldcpp_is_recognised_runs_a_job_refuses_a_small_window_and_a_cut_is_caught: Kind::KoboldCpp,
    openai_runs_a_job_on_the_chat_wire_refuses_a_small_window_and_a_cut_is_caught: Kind::OpenAi,
}

/// An OpenAI-only server that says no window, with no `window:`: every
/// job is refused with the sentence that names the key, and nothing is
/// sent; with `window:` set, the job runs (`a_job` above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_server_with_no_window_anywhere_is_refused_naming_window() {
    for kind in [Kind::OpenAi, Kind::MlxLm, Kind::Jan] {
        let fake = fake_others::spawn(kind, MODEL, 65536).await;
        let backend = if kind.recognised() {
            String::new()
        } else {
            "    backend: openai\n".into()
        };
        let e = Harness::new().config(&format!(
            "endpoints:\n  local:\n    base_url: {}\n{backend}defaults:\n  setting_sources: []\n  prewarm: false\n",
            fake.url()
        ));
        let (ep, _) = status(&e).await;
        assert!(by_id(&ep, MODEL)["context"].is_null(), "{ep}");
        let w = ep["warnings"].to_string();
        assert!(
            w.contains("set `window:` on endpoint `local`"),
            "{kind:?}: {w}"
        );
        let doctor =
            String::from_utf8_lossy(&localagents(&e, &["doctor"]).await.stdout).to_string();
        assert!(
            doctor.contains("set `window:` on endpoint `local` in models.yaml"),
            "{kind:?}: {doctor}"
        );
        let c = serve(&e, None).await;
        let (err, v) = call(&c, "run_agent", json!({"task": "Say hi.", "model": MODEL})).await;
        assert!(err, "{kind:?}: {v}");
        let v: Value = v;
        assert!(
            v.to_string()
                .contains("set `window:` on endpoint `local` in models.yaml"),
            "{kind:?}: {v}"
        );
        assert!(
            fake.seen().requests.is_empty(),
            "{kind:?}: {:?}",
            fake.seen().hits
        );
    }
}

/// Every place that names the servers names them all: what Claude reads
/// to decide whether to delegate (the skill's description, the MCP
/// instructions and `list_models`' description), the CLI's about line,
/// the crate's and the plugin's descriptions.
#[test]
fn every_place_that_names_the_servers_names_them_all() {
    use localagents::config::Backend;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap();
    let skill = read("skills/local-agents/SKILL.md");
    let description = skill
        .lines()
        .find(|l| l.starts_with("description:"))
        .expect("the skill's description");
    let mcp = read("src/mcp.rs");
    let places = [
        ("the skill's description", description.to_string()),
        (
            "the MCP instructions",
            mcp.lines()
                .find(|l| l.contains("pub const INSTRUCTIONS"))
                .unwrap_or_default()
                .to_string(),
        ),
        (
            "list_models' description",
            mcp.lines()
                .find(|l| l.contains("/// Live view of every configured endpoint"))
                .unwrap_or_default()
                .to_string(),
        ),
        (
            "the CLI's about line",
            read("src/cli/mod.rs")
                .lines()
                .find(|l| l.contains("/// Hand Claude Code's grunt work"))
                .unwrap_or_default()
                .to_string(),
        ),
        (
            "the crate's description",
            env!("CARGO_PKG_DESCRIPTION").to_string(),
        ),
        (
            "the plugin's description",
            read(".claude-plugin/plugin.json"),
        ),
        (
            "the marketplace's description",
            read(".claude-plugin/marketplace.json"),
        ),
    ];
    for (place, text) in places {
        for b in Backend::ALL {
            let name = match b {
                Backend::OpenAi => "any OpenAI-compatible server",
                Backend::Other => continue,
                b => b.title(),
            };
            assert!(text.contains(name), "{place} does not name {name}: {text}");
        }
    }
}

/// What the truncation guard can still check where a server counts less
/// than everything, said in `status` and in `doctor` (issue 54): LocalAI
/// counts no input in a stream, so only the window; vllm-mlx (on the chat
/// wire) and TabbyAPI count no cached tokens, so a job's cache is
/// unknown. A server that counts everything gets no such line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_what_the_truncation_guard_can_check_on_each_server() {
    for (kind, line) in [
        (
            Kind::LocalAi,
            Some(
                "truncation: LocalAI reports no token counts in a stream, so the guard can check only that a request fits the window",
            ),
        ),
        (
            Kind::VllmMlx,
            Some(
                "figures: vllm-mlx reports no cached tokens, so a job's prompt cache is unknown (not zero)",
            ),
        ),
        (
            Kind::TabbyApi,
            Some("figures: TabbyAPI reports no cached tokens"),
        ),
        (Kind::Sglang, None),
    ] {
        let fake = fake_others::spawn(kind, MODEL, 65536).await;
        let e = env(kind, fake.url(), 65536, "");
        let (ep, _) = status(&e).await;
        let w = ep["warnings"].to_string();
        let doctor =
            String::from_utf8_lossy(&localagents(&e, &["doctor"]).await.stdout).to_string();
        match line {
            Some(l) => {
                assert!(w.contains(l), "{kind:?}: {w}");
                assert!(doctor.contains(l), "{kind:?}: {doctor}");
            }
            None => assert!(
                !w.contains("truncation:") && !doctor.contains("reports no"),
                "{kind:?}: {w} {doctor}"
            ),
        }
    }
}
