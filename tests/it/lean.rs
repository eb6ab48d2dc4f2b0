//! Lean delegates: the real Claude Code CLI (2.1.328) through
//! `localagents run`, against the fake llama.cpp server in strict mode.
//! What the fake receives is what a real backend would: the folded bodies.

use std::path::Path;

use serde_json::Value;

use crate::support::git::repo;
use crate::support::harness::Harness;
use crate::support::{fake_llama, script};

/// A harness whose config is on the fake, with `defaults` given as YAML
/// lines (indented by 2).
fn lean_env(fake_url: &str, defaults: &str) -> Harness {
    Harness::new().config(&format!(
        "endpoints:\n  box:\n    base_url: {fake_url}\n    backend: llama.cpp\ndefaults:\n  max_turns: 4\n{defaults}"
    ))
}

/// `localagents run --json` in `cwd`; the record it prints, and the exit code.
async fn run(e: &Harness, cwd: &Path, extra: &[&str], task: &str) -> (Option<i32>, Value) {
    let mut c = e.command(["run", "--model", "gemma-3-270m", "--json"]);
    c.args(extra).arg(task).current_dir(cwd);
    let out = tokio::process::Command::from(c).output().await.unwrap();
    let rec = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "run printed no record: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), rec)
}

fn strict() -> fake_llama::LlamaOpts {
    fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        strict_template: true,
        ..Default::default()
    }
}

pub(crate) fn tool_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The text of `system` (a string or a list of text blocks).
fn system_text(body: &Value) -> String {
    match &body["system"] {
        Value::String(s) => s.clone(),
        Value::Array(bs) => bs
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_request_is_lean_and_its_prefix_is_the_same_in_every_tree() {
    let fake = fake_llama::spawn(strict()).await;
    fake.set_script(script::text("Nothing to do."));
    let e = lean_env(fake.url(), "  setting_sources: [project, local]\n");
    let a = e.dir().join("repo-a");
    let b = e.dir().join("other/repo-b");
    repo(&a);
    repo(&b);
    std::fs::create_dir_all(b.join("deep/dir")).unwrap();

    let (code, rec) = run(&e, &a, &[], "Look around.").await;
    assert_eq!(code, Some(0), "{rec}");
    let first_a = fake.bodies()[0].clone();

    let n = fake.bodies().len();
    let (code, rec2) = run(&e, &b.join("deep/dir"), &["--worktree"], "Look around.").await;
    assert_eq!(code, Some(0), "{rec2}");
    assert_eq!(rec2["isolation"], "worktree", "{rec2}");
    let first_b = fake.bodies()[n].clone();

    // Only the default tools, in the order Claude Code sorts them.
    assert_eq!(
        tool_names(&first_a),
        ["Bash", "Edit", "Glob", "Grep", "Read", "WebFetch", "Write"],
        "only the allowed tools are offered"
    );
    // No git-status snapshot or attribution reminder in the first message.
    let first_msgs = serde_json::to_string(&first_a["messages"]).unwrap();
    assert!(
        !first_msgs.contains("gitStatus") && !first_msgs.contains("Co-Authored-By"),
        "{first_msgs}"
    );
    let sys = system_text(&first_a);
    assert!(
        !sys.contains("/memory/") && !sys.contains("# Memory"),
        "no auto-memory section in system: {}",
        sys.chars().take(400).collect::<String>()
    );
    let bytes = serde_json::to_vec(&first_a).unwrap().len();
    assert!(
        bytes < 30_000,
        "first request with the default tools is {bytes} bytes"
    );

    // Byte-identical system and tools across an in-tree job and a worktree
    // job in another repository.
    assert_eq!(
        serde_json::to_string(&first_a["system"]).unwrap(),
        serde_json::to_string(&first_b["system"]).unwrap(),
        "system differs between trees"
    );
    assert_eq!(
        serde_json::to_string(&first_a["tools"]).unwrap(),
        serde_json::to_string(&first_b["tools"]).unwrap(),
        "tools differ between trees"
    );
    // The trees really differ in what the model is told (in `messages`).
    let msgs = |v: &Value| serde_json::to_string(&v["messages"]).unwrap();
    assert!(msgs(&first_a).contains("repo-a"));
    assert!(msgs(&first_b).contains("worktrees"));

    // The record carries the first turn; the fake reports bytes/4 tokens.
    let ft = &rec["first_turn"];
    assert!(ft["prompt_tokens"].as_u64().unwrap() > 1000, "{rec}");
    assert!(ft["ms"].is_u64(), "{rec}");
    // The summary line, as `job show` prints it.
    let out = e
        .command(["job", "show", rec["id"].as_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("first turn: ") && text.contains(" new tokens, "),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projects_mcp_server_does_not_start_in_a_delegate() {
    let fake = fake_llama::spawn(strict()).await;
    fake.set_script(script::text("Nothing to do."));
    // Claude Code reads a project's .mcp.json with the project setting
    // source, which is the default.
    let e = lean_env(fake.url(), "  setting_sources: [project, local]\n");
    let work = e.dir().join("repo");
    repo(&work);
    let marker = e.dir().join("marker");
    std::fs::write(
        work.join(".mcp.json"),
        format!(
            r#"{{"mcpServers":{{"marker":{{"command":"sh","args":["-c","echo started >> {}; sleep 2"]}}}}}}"#,
            marker.display()
        ),
    )
    .unwrap();
    let (code, rec) = run(&e, &work, &[], "Look around.").await;
    assert_eq!(code, Some(0), "{rec}");
    assert!(
        !marker.exists(),
        "the project's MCP server was started inside the delegate"
    );
    assert!(
        !fake.bodies()[0].to_string().contains("mcp__marker"),
        "no MCP tool schemas"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_allowed_tool_fails_the_job_at_start() {
    let fake = fake_llama::spawn(strict()).await;
    fake.set_script(script::text("Nothing to do."));
    let e = lean_env(
        fake.url(),
        "  setting_sources: []\n  allowed_tools: [Read, Grpe]\n",
    );
    let work = e.dir().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let (code, rec) = run(&e, &work, &[], "Look around.").await;
    assert_eq!(code, Some(1), "{rec}");
    assert_eq!(rec["status"], "failed", "{rec}");
    let err = rec["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("`Grpe`") && err.contains("allowed_tools"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_config_gives_delegates_servers_on_purpose() {
    let fake = fake_llama::spawn(strict()).await;
    fake.set_script(script::text("Nothing to do."));
    let e = Harness::new();
    let marker = e.dir().join("marker");
    let mcp = e.dir().join("mcp.json");
    std::fs::write(
        &mcp,
        format!(
            r#"{{"mcpServers":{{"mine":{{"command":"sh","args":["-c","echo started >> {}; sleep 2"]}}}}}}"#,
            marker.display()
        ),
    )
    .unwrap();
    let e = e.config(&format!(
        "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  max_turns: 4\n  setting_sources: []\n  mcp_config: {}\n",
        fake.url(),
        mcp.display()
    ));
    let work = e.dir().join("w");
    std::fs::create_dir_all(&work).unwrap();
    let (code, rec) = run(&e, &work, &[], "Look around.").await;
    assert_eq!(code, Some(0), "{rec}");
    assert!(marker.exists(), "the configured MCP server did not start");

    // A missing file is a sentence, before anything starts.
    std::fs::remove_file(&mcp).unwrap();
    let mut c = e.command(["run", "--model", "gemma-3-270m", "Look around."]);
    c.current_dir(&work);
    let out = tokio::process::Command::from(c).output().await.unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("defaults.mcp_config") && err.contains("does not exist"),
        "{err}"
    );
}
