//! Bad input gets a clear error and loses nothing: numbers too big for a
//! duration or a date, and a closed stdout.

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use serde_json::{Value, json};

use crate::support::harness::Harness;
use crate::support::{claude, fake_llama};

async fn call(
    c: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> (bool, String) {
    let r = tokio::time::timeout(
        Duration::from_secs(20),
        c.call_tool(
            CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap()),
        ),
    )
    .await
    .unwrap_or_else(|_| panic!("{tool} {args} got no answer"));
    match r {
        Ok(r) => (
            r.is_error == Some(true),
            r.content
                .iter()
                .find_map(|c| c.as_text().map(|t| t.text.clone()))
                .unwrap_or_default(),
        ),
        // A protocol error is an answer too, but not the one we want.
        Err(e) => (false, format!("protocol error: {e}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numbers_too_big_for_a_duration_or_a_date_are_sentences() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        ..Default::default()
    })
    .await;
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n",
            fake.url()
        ))
        .claude(claude::binary())
        .serve()
        .await;
    let c = &h.client;

    for days in [json!(1_000_000_000_000_000u64), json!(u64::MAX)] {
        let (err, text) = call(c, "cleanup_jobs", json!({"older_than_days": days})).await;
        assert!(err, "cleanup_jobs {days}: {text}");
        assert!(text.contains("older_than_days must be at most"), "{text}");
    }
    for t in [json!(u64::MAX), json!(10_000_000_000u64), json!(0)] {
        let (err, text) = call(
            c,
            "run_agent",
            json!({"task": "Say hello.", "model": "gemma3-270m", "timeout_s": t}),
        )
        .await;
        assert!(err, "run_agent timeout_s {t}: {text}");
        assert!(text.contains("timeout_s must be between 1 and"), "{text}");
    }
    // Nothing was started, so no record says `running`.
    let (_, list) = call(c, "list_jobs", json!({})).await;
    assert!(list.contains("\"count\":0"), "{list}");
    // The server still answers.
    let (err, _) = call(c, "list_models", json!({})).await;
    assert!(!err);
    h.cancel().await;
}

#[test]
fn a_closed_stdout_is_not_an_error() {
    let mut child = Harness::new()
        .no_config()
        .command(["jobs"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Like `| head -0`: the reader is gone before anything is written.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
