//! The sentences a user sees when something is wrong, snapshotted with
//! insta (tests/it/snapshots/). Each failure is one sentence that names the
//! fix: a change to one shows up here as a snapshot diff to review, not as a
//! `contains` check that still passes. Filters replace what changes from run
//! to run (temp paths, ports, job ids, timings) and nothing else.

use serde_json::{Value, json};

use crate::support::fake_llama;
use crate::support::harness::{Harness, Served};

/// The filters for a test whose harness dir is `dir`: that dir (as given
/// and resolved), loopback ports, job ids and timings.
///
/// Job ids are the ids of the jobs in the harness's state dir (`<dir>/state`),
/// not every string shaped like one (`\d{8}-\d{6}-[0-9a-f]{8}`): that would
/// also blank the example id a sentence gives ("they look like
/// 20261130-061500-1a2b3c4d") and the fixed unknown id a test asks for,
/// which are part of the sentence and never change.
fn filters(dir: &std::path::Path) -> Vec<(String, String)> {
    let mut dirs = vec![dir.display().to_string()];
    if let Ok(real) = dir.canonicalize() {
        dirs.push(real.display().to_string());
    }
    // The longer first, so a prefix does not leave half a path behind.
    dirs.sort_by_key(|d| std::cmp::Reverse(d.len()));
    dirs.dedup();
    let mut f: Vec<(String, String)> = dirs
        .into_iter()
        .map(|d| (regex::escape(&d), "[TMP]".to_string()))
        .collect();
    for job in std::fs::read_dir(dir.join("state/jobs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let id = job.file_name().to_string_lossy().into_owned();
        f.push((regex::escape(&id), "[JOB_ID]".to_string()));
    }
    f.extend(
        [
            (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
            (r"localhost:\d+", "localhost:[PORT]"),
            (r"\b\d+(\.\d+)? ?(ms|µs)\b", "[TIME]"),
            (r"\bin \d+(\.\d+)? ?s\b", "in [TIME]"),
            (r"\bafter \d+(\.\d+)? ?s\b", "after [TIME]"),
        ]
        .map(|(a, b)| (a.to_string(), b.to_string())),
    );
    f
}

/// Snapshot `value` as `name` under the filters for `dir`.
macro_rules! snap {
    ($dir:expr, $name:expr, $value:expr) => {{
        let filters = filters($dir);
        let filters: Vec<(&str, &str)> = filters
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        insta::with_settings!({filters => filters}, {
            insta::assert_snapshot!($name, $value);
        });
    }};
}

/// `localagents ARGS` through the harness: the exit status and what it
/// printed, stdout then stderr (each only when not empty).
fn cli(h: &Harness, args: &[&str]) -> String {
    let out = h.command(args).output().expect("run localagents");
    let mut s = format!("exit {}\n", out.status.code().unwrap_or(-1));
    for (name, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        if !bytes.is_empty() {
            s.push_str(&format!("--- {name}\n{}", String::from_utf8_lossy(bytes)));
        }
    }
    s
}

/// A refusal over MCP: asserts it is a tool error, the sentence.
async fn refused(h: &Served, tool: &'static str, args: Value) -> String {
    let (err, text) = h.call(tool, args.clone()).await;
    assert!(err, "{tool} {args} is not refused: {text}");
    assert!(!text.trim().is_empty(), "{tool} {args}: an empty refusal");
    text
}

#[test]
fn config_errors_as_config_check_and_status_print_them() {
    // YAML that does not parse.
    let h = Harness::new().config("endpoints:\n  a: {base_url: http://x\n");
    let dir = h.dir().to_path_buf();
    let check = cli(&h, &["config", "check"]);
    assert!(check.starts_with("exit 2\n"), "{check}");
    snap!(&dir, "config_yaml_syntax_config_check", check);
    let status = cli(&h, &["status"]);
    assert!(status.starts_with("exit 2\n"), "{status}");
    snap!(&dir, "config_yaml_syntax_status", status);

    // A value of the wrong type.
    let h = Harness::new().config("defaults:\n  max_turns: lots\n");
    let dir = h.dir().to_path_buf();
    let check = cli(&h, &["config", "check"]);
    assert!(check.starts_with("exit 2\n"), "{check}");
    snap!(&dir, "config_wrong_type_config_check", check);

    // A section that is not a mapping.
    let h = Harness::new().config("endpoints: [a, b]\n");
    let dir = h.dir().to_path_buf();
    let check = cli(&h, &["config", "check"]);
    assert!(check.starts_with("exit 2\n"), "{check}");
    snap!(&dir, "config_not_a_mapping_config_check", check);

    // --config names a file that is not there.
    let h = Harness::new();
    let dir = h.dir().to_path_buf();
    assert!(!h.config_path().exists());
    let status = cli(&h, &["status"]);
    assert!(status.starts_with("exit 2\n"), "{status}");
    snap!(&dir, "config_missing_file_status", status);
    let check = cli(&h, &["config", "check"]);
    snap!(&dir, "config_missing_file_config_check", check);
}

#[test]
fn an_endpoint_that_refuses_connections_as_status_prints_it() {
    let addr = crate::support::net::refused_addr();
    let h = Harness::new().config(&format!(
        "endpoints:\n  gone:\n    base_url: http://{addr}\n"
    ));
    let status = cli(&h, &["status"]);
    assert!(
        status.starts_with("exit 0\n") && status.contains("nothing listens"),
        "{status}"
    );
    snap!(h.dir(), "status_endpoint_refused", status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_agent_refusals_over_mcp() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n  allowed_tools: [Read, Edit, Write, Bash]\n",
            fake.url()
        ))
        .serve()
        .await;
    let dir = h.dir().to_path_buf();
    let outside = dir.join("home");
    let run = |extra: Value| {
        let mut args = json!({"task": "Say hello.", "model": "gemma3-270m"});
        for (k, v) in extra.as_object().unwrap() {
            args[k] = v.clone();
        }
        args
    };
    let cases: Vec<(&str, &'static str, Value)> = vec![
        (
            "run_agent_timeout_zero",
            "run_agent",
            run(json!({"timeout_s": 0})),
        ),
        (
            "run_agent_empty_task",
            "run_agent",
            run(json!({"task": "   "})),
        ),
        (
            "run_agent_bad_isolation",
            "run_agent",
            run(json!({"isolation": "docker"})),
        ),
        (
            "run_agent_worktree_outside_git",
            "run_agent",
            run(json!({"isolation": "worktree"})),
        ),
        (
            "run_agent_bypass_permissions_from_a_session",
            "run_agent",
            run(json!({"permission_mode": "bypassPermissions"})),
        ),
        (
            "run_agent_unknown_permission_mode",
            "run_agent",
            run(json!({"permission_mode": "yolo"})),
        ),
        (
            "run_agent_cwd_outside_the_project",
            "run_agent",
            run(json!({"cwd": outside})),
        ),
        (
            "run_agent_cwd_missing",
            "run_agent",
            run(json!({"cwd": "/nonexistent/dir"})),
        ),
        (
            "run_agent_allowed_tools_wider_than_the_config",
            "run_agent",
            run(json!({"allowed_tools": ["Read", "WebFetch", "mcp__github"]})),
        ),
        (
            "run_agent_acceptance_too_long",
            "run_agent",
            run(json!({"acceptance": "x".repeat(5000)})),
        ),
        (
            "run_agent_fix_rounds_too_big",
            "run_agent",
            run(json!({"acceptance": "true", "fix_rounds": 11})),
        ),
        (
            "run_agent_resume_of_an_unknown_job",
            "run_agent",
            run(json!({"resume_job": "20200101-000000-00000000"})),
        ),
        (
            "run_agent_resume_of_a_malformed_job_id",
            "run_agent",
            run(json!({"resume_job": "../etc"})),
        ),
        (
            "job_status_malformed_job_id",
            "job_status",
            json!({"job_id": "../etc"}),
        ),
        (
            "job_status_unknown_job",
            "job_status",
            json!({"job_id": "20200101-000000-00000000"}),
        ),
        (
            "cleanup_jobs_older_than_days_too_big",
            "cleanup_jobs",
            json!({"older_than_days": u64::MAX}),
        ),
    ];
    for (name, tool, args) in cases {
        let text = refused(&h, tool, args).await;
        snap!(&dir, name, text);
    }
    // Nothing was started.
    let (_, list) = h.call("list_jobs", json!({})).await;
    assert!(list.contains("\"count\":0"), "{list}");
    h.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acceptance_without_bash_over_mcp() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n  allowed_tools: [Read, Edit]\n",
            fake.url()
        ))
        .serve()
        .await;
    let text = refused(
        &h,
        "run_agent",
        json!({"task": "Say hello.", "model": "gemma3-270m", "acceptance": "cargo test"}),
    )
    .await;
    snap!(h.dir(), "run_agent_acceptance_without_bash", text);
    h.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_unavailable_over_mcp() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\nmodels:\n  qwen3.8-27b:\n    host: gpu-server\n    notes: default mid-size coder on llama.cpp\ndefaults:\n  setting_sources: []\n",
            fake.url()
        ))
        .serve()
        .await;
    for (name, model) in [
        ("model_unavailable_known_model_not_running", "qwen3.8-27b"),
        ("model_unavailable_unknown_model", "no-such-model"),
    ] {
        let text = refused(
            &h,
            "run_agent",
            json!({"task": "Say hello.", "model": model}),
        )
        .await;
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(v["error"], "model_unavailable", "{text}");
        snap!(h.dir(), name, text);
    }
    h.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_shot_refusals_over_mcp() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n",
            fake.url()
        ))
        .serve()
        .await;
    let secret = h.home().join("secret.txt");
    std::fs::write(&secret, "not for the model\n").unwrap();
    let cases: Vec<(&str, &'static str, Value)> = vec![
        (
            "local_complete_empty_prompt",
            "local_complete",
            json!({"prompt": "  ", "model": "gemma3-270m"}),
        ),
        (
            "local_complete_file_outside_the_project",
            "local_complete",
            json!({"prompt": "Summarize.", "model": "gemma3-270m", "files": [secret]}),
        ),
        (
            "local_complete_missing_file",
            "local_complete",
            json!({"prompt": "Summarize.", "model": "gemma3-270m", "files": ["no-such-file.txt"]}),
        ),
    ];
    for (name, tool, args) in cases {
        let text = refused(&h, tool, args).await;
        snap!(h.dir(), name, text);
    }
    h.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_error_over_mcp() {
    let h = Harness::new()
        .config("endpoints:\n  a: {base_url: http://x\n")
        .serve()
        .await;
    let text = refused(&h, "list_models", json!({})).await;
    snap!(h.dir(), "list_models_config_yaml_syntax", text);
    h.cancel().await;
}
