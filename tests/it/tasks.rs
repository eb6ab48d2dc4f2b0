//! Jobs as MCP tasks (issue 13), with the real Claude Code CLI 2.1.328 as
//! the MCP client. What the CLI does (found with a probe server, see the
//! docs/guide.md's client notes): only an interactive session on protocol
//! 2026-07-28 offers the tasks extension; `-p` never does. So:
//! - interactive: run_agent answers with a task, Claude Code polls
//!   `tasks/get`, and the job's result reaches the top-level model as a
//!   task notification, without any `wait_job` call;
//! - `-p`: the same server answers the plain way (job id, then wait_job).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::support::harness::Harness;
use crate::support::{claude, fake_llama, script};

/// One fake answers both models: the top-level session (its requests
/// offer `mcp__localagents__run_agent`) and the delegate.
fn top_level_and_delegate(done: std::path::PathBuf) -> script::Script {
    Arc::new(move |req: &Value| {
        let text = req.to_string();
        let top = text.contains("mcp__localagents__run_agent");
        if !top {
            return script::Reply::Text("DELEGATE-REPORT-42".into());
        }
        if text.contains("DELEGATE-REPORT-42") {
            let _ = std::fs::write(&done, "done");
            return script::Reply::Text("The local job reported back.".into());
        }
        if script::tool_results(req) == 0 {
            return script::Reply::Tool {
                name: "mcp__localagents__run_agent".into(),
                input: json!({"task": "Say hello.", "model": "gemma-3-270m"}),
            };
        }
        script::Reply::Text("Started; I will wait for it.".into())
    })
}

/// The top-level session starts the job, then waits for it with
/// `wait_job` (the id read from run_agent's result), then ends.
fn delegate_and_wait() -> script::Script {
    Arc::new(move |req: &Value| {
        let text = req.to_string();
        if !text.contains("mcp__localagents__run_agent") {
            return script::Reply::Text("DELEGATE-REPORT-42".into());
        }
        match script::tool_results(req) {
            0 => script::Reply::Tool {
                name: "mcp__localagents__run_agent".into(),
                input: json!({"task": "Say hello.", "model": "gemma-3-270m"}),
            },
            1 => {
                // run_agent's reply, as JSON text inside the tool result.
                let at = text.rfind("\\\"id\\\":\\\"").map(|i| i + 9);
                let id: String = at
                    .map(|i| text[i..].chars().take_while(|c| *c != '\\').collect())
                    .unwrap_or_default();
                script::Reply::Tool {
                    name: "mcp__localagents__wait_job".into(),
                    input: json!({"job_id": id}),
                }
            }
            _ => script::Reply::Text("The local job is done.".into()),
        }
    })
}

/// The fake (both models) and a session's dirs and config for it.
async fn fake_session() -> (fake_llama::FakeLlama, Session) {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        ..Default::default()
    })
    .await;
    let s = session(fake.url());
    (fake, s)
}

struct Session {
    h: Harness,
    home: std::path::PathBuf,
    work: std::path::PathBuf,
    state: std::path::PathBuf,
    mcp: std::path::PathBuf,
    done: std::path::PathBuf,
}

fn session(fake_url: &str) -> Session {
    let h = Harness::new().config(&format!("endpoints:\n  box:\n    base_url: {fake_url}\n    backend: llama.cpp\nmodels:\n  gemma-3-270m:\n    notes: tiny\ndefaults:\n  max_turns: 4\n  setting_sources: []\n  prewarm: false\n"));
    let work = h.work().canonicalize().unwrap();
    let h = h.cwd(&work);
    let root = h.dir().to_path_buf();
    let (home, state, cfg) = (
        h.home().to_path_buf(),
        h.state_dir().to_path_buf(),
        h.config_path().to_path_buf(),
    );
    // Claude Code starts `localagents serve` itself, from this file: the
    // command line the harness would give it.
    let mcp = root.join("mcp.json");
    std::fs::write(
        &mcp,
        json!({"mcpServers": {"localagents": {"type": "stdio", "command": crate::support::bin(),
            "args": ["--config", cfg, "--state-dir", state, "serve"],
            "env": {"LOCALAGENTS_CLAUDE": claude::binary()}}}})
        .to_string(),
    )
    .unwrap();
    // No onboarding, trust or API-key dialogs in the fresh HOME.
    let key = "sk-local-test-key-000000000000";
    std::fs::write(
        home.join(".claude.json"),
        json!({"hasCompletedOnboarding": true, "theme": "dark", "numStartups": 5,
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
            "projects": {work.display().to_string(): {"hasTrustDialogAccepted": true, "allowedTools": [], "hasCompletedProjectOnboarding": true}}})
        .to_string(),
    )
    .unwrap();
    let done = root.join("done");
    Session {
        h,
        home,
        work,
        state,
        mcp,
        done,
    }
}

fn top_level_env(s: &Session, fake_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("HOME", s.home.display().to_string()),
        ("TERM", "xterm-256color".into()),
        ("ANTHROPIC_BASE_URL", fake_url.to_string()),
        ("ANTHROPIC_API_KEY", "sk-local-test-key-000000000000".into()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
        ("ENABLE_TOOL_SEARCH", "false".into()),
    ]
}

fn job_records(state: &std::path::Path) -> Vec<Value> {
    std::fs::read_dir(state.join("jobs"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|d| {
            serde_json::from_slice(&std::fs::read(d.path().join("job.json")).ok()?).ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interactive_claude_code_gets_the_job_result_as_a_task_without_wait_job() {
    let (fake, s) = fake_session().await;
    fake.set_script(top_level_and_delegate(s.done.clone()));
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/drive_pty.py");
    let out = tokio::process::Command::new("python3")
        .arg(driver)
        .arg(claude::binary())
        .arg(&s.work)
        .arg(&s.done)
        .arg("120")
        .arg("Use the local agent to say hello.")
        .arg("--")
        .args([
            "--model",
            "gemma3-270m",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(&s.mcp)
        .args(["--allowedTools", "mcp__localagents__run_agent"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(top_level_env(&s, fake.url()))
        .output()
        .await
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout).to_string();
    let screen =
        std::fs::read_to_string(s.work.parent().unwrap().join("tty.txt")).unwrap_or_default();
    let tail: String = screen
        .chars()
        .rev()
        .take(3000)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert!(
        status.contains("\"done\": true"),
        "{status}\n{}\n{tail}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The job ran and succeeded; the top-level model got its result in a
    // task notification, and nothing ever called wait_job.
    let jobs = job_records(&s.state);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    assert_eq!(jobs[0]["status"], "succeeded", "{}", jobs[0]);
    let bodies: Vec<String> = fake.bodies().iter().map(Value::to_string).collect();
    let top: Vec<&String> = bodies
        .iter()
        .filter(|b| b.contains("mcp__localagents__run_agent"))
        .collect();
    let delivered = top
        .iter()
        .find(|b| b.contains("DELEGATE-REPORT-42"))
        .expect("the job's result reached the top-level model");
    assert!(delivered.contains("task-notification"), "{delivered}");
    assert!(
        !top.iter()
            .any(|b| b.contains("\"name\":\"mcp__localagents__wait_job\",\"input\"")),
        "wait_job was called"
    );
    // The run_agent tool result itself was the background task handle.
    assert!(
        top.iter().any(|b| b.contains("moved to the background")),
        "{top:?}"
    );
}

/// `claude -p` as the top-level session asking the local agent to say
/// hello (one run_agent call).
async fn print_mode(s: &Session, fake_url: &str) -> std::process::Output {
    tokio::process::Command::new(claude::binary())
        .args([
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--max-turns",
            "3",
        ])
        .args([
            "--model",
            "gemma3-270m",
            "--strict-mcp-config",
            "--mcp-config",
        ])
        .arg(&s.mcp)
        .args([
            "--allowedTools",
            "mcp__localagents__run_agent,mcp__localagents__wait_job",
            "--",
            "Use the local agent to say hello.",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(top_level_env(s, fake_url))
        .current_dir(&s.work)
        .output()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn print_mode_claude_code_gets_the_plain_job_reply() {
    let (fake, s) = fake_session().await;
    fake.set_script(top_level_and_delegate(s.done.clone()));
    let out = print_mode(&s, fake.url()).await;
    let events = String::from_utf8_lossy(&out.stdout);
    // The tool result is the job reply (id, status, still_running), not a task.
    assert!(events.contains("still_running"), "{events}");
    assert!(!events.contains("moved to the background"), "{events}");
    let jobs = job_records(&s.state);
    assert_eq!(jobs.len(), 1, "{jobs:?}");
}

/// Issue 25's link from a job to the session that delegated it: Claude
/// Code 2.1.328 names the tool call in `tools/call`'s
/// `_meta["claudecode/toolUseId"]`; the job records it, and the session's
/// own transcript under `~/.claude/projects/` holds that `tool_use` with
/// the assistant turn's `usage`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_knows_the_tool_call_that_started_it() {
    let (fake, s) = fake_session().await;
    fake.set_script(top_level_and_delegate(s.done.clone()));
    let out = print_mode(&s, fake.url()).await;
    let jobs = job_records(&s.state);
    assert_eq!(
        jobs.len(),
        1,
        "{jobs:?} {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let id = jobs[0]["tool_use_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no tool_use_id: {}", jobs[0]))
        .to_string();
    // It is the id the top-level model's run_agent call had: the next
    // top-level request answers it.
    let answered = format!("\"tool_use_id\":\"{id}\"");
    assert!(
        fake.bodies()
            .iter()
            .any(|b| b.to_string().contains(&answered)),
        "no request answers {id}"
    );
    // The session's transcript holds it, with the turn's usage.
    let mut found = Vec::new();
    let mut stack = vec![s.home.join(".claude").join("projects")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for line in text.lines() {
                    let Ok(v) = serde_json::from_str::<Value>(line) else {
                        continue;
                    };
                    let calls = v["message"]["content"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|b| b["type"] == "tool_use" && b["id"] == id.as_str())
                    });
                    if v["type"] == "assistant" && calls {
                        found.push(v);
                    }
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0]["message"]["usage"]["output_tokens"].is_u64(),
        "{}",
        found[0]
    );
}

/// Issue 25, the net ledger: two jobs delegated by two real Claude Code
/// sessions (`-p`, driven by the fake, transcripts written by the CLI)
/// and one started from the shell. `savings` takes Claude's side from the
/// transcripts; this test reads them on its own: the output tokens of the
/// assistant messages that called our tools (each message once) and the
/// size of our tool results at 3 bytes a token. The shell job has no
/// transcript: gross only, and said so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savings_subtracts_what_the_delegating_sessions_spent() {
    let (fake, s) = fake_session().await;
    fake.set_script(delegate_and_wait());
    for _ in 0..2 {
        print_mode(&s, fake.url()).await;
    }
    // A shell with nothing exported.
    let bare = s.h.clone().bare_env().claude(claude::binary());
    let run = |args: &[&str]| bare.command(args).output().unwrap();
    let shell = run(&["run", "--model", "gemma-3-270m", "--json", "Say hello."]);
    assert!(
        shell.status.success(),
        "{}",
        String::from_utf8_lossy(&shell.stderr)
    );
    let jobs = job_records(&s.state);
    assert_eq!(jobs.len(), 3, "{jobs:?}");
    let calls: Vec<String> = jobs
        .iter()
        .filter_map(|j| j["tool_use_id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(calls.len(), 2, "{jobs:?}");
    // The independent reading.
    let (mut output, mut results) = (std::collections::HashMap::new(), 0u64);
    let mut ours = std::collections::HashSet::new();
    let projects = s.home.join(".claude").join("projects");
    for d in std::fs::read_dir(&projects).unwrap().flatten() {
        for f in std::fs::read_dir(d.path()).unwrap().flatten() {
            if f.path().extension().is_none_or(|x| x != "jsonl") {
                continue;
            }
            let text = std::fs::read_to_string(f.path()).unwrap();
            for line in text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            {
                let blocks = line["message"]["content"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                for b in &blocks {
                    if line["type"] == "assistant"
                        && b["type"] == "tool_use"
                        && b["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with("mcp__localagents__"))
                    {
                        ours.insert(b["id"].as_str().unwrap().to_string());
                        output.insert(
                            line["message"]["id"].as_str().unwrap().to_string(),
                            line["message"]["usage"]["output_tokens"].as_u64().unwrap(),
                        );
                    }
                    if line["type"] == "user"
                        && b["type"] == "tool_result"
                        && ours.contains(b["tool_use_id"].as_str().unwrap_or(""))
                    {
                        results += (serde_json::to_string(&b["content"]).unwrap().len() as u64)
                            .div_ceil(3);
                    }
                }
            }
        }
    }
    let out = run(&["savings", "--json"]);
    let sv: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let o = &sv["orchestration"];
    assert_eq!(o["jobs"], 2, "{sv:#}");
    assert_eq!(o["jobs_without_transcript"], 1, "{sv:#}");
    assert_eq!(o["output_tokens"], output.values().sum::<u64>(), "{sv:#}");
    assert_eq!(o["result_tokens"], results, "{sv:#}");
    // net = gross of the covered jobs less the orchestration, at the
    // price table (the fake's model has no price: the reference model's).
    let gross_covered: f64 = jobs
        .iter()
        .filter(|j| j["tool_use_id"].is_string())
        .map(|j| {
            let u = &j["usage"];
            (u["input"].as_f64().unwrap() * 3.0
                + u["cache_read"].as_f64().unwrap() * 0.3
                + u["output"].as_f64().unwrap() * 15.0)
                / 1e6
        })
        .sum();
    let net = sv["net_usd"].as_f64().unwrap();
    let cost = o["usd"].as_f64().unwrap();
    assert!(cost > 0.0, "{sv:#}");
    assert!(
        (net - (gross_covered - cost)).abs() < 0.0002,
        "net {net} vs {gross_covered} - {cost}: {sv:#}"
    );
    // Per week: every job ran this week, so its one row is the total.
    let week = &sv["by_week"][0];
    assert_eq!(sv["by_week"].as_array().map(Vec::len), Some(1), "{sv:#}");
    assert_eq!(week["net_usd"], sv["net_usd"], "{sv:#}");
    assert_eq!(week["orchestration_usd"], o["usd"], "{sv:#}");
    let text = String::from_utf8_lossy(&run(&["savings"]).stdout).to_string();
    assert!(
        text.contains("(1 job without a session transcript counted gross)"),
        "{text}"
    );
    // The prompt hook of the session that delegated a job: its line says
    // the job's net, from the transcript Claude Code hands the hook.
    let transcript = std::fs::read_dir(&projects)
        .unwrap()
        .flatten()
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .map(|f| f.path())
        .find(|p| {
            p.extension().is_some_and(|x| x == "jsonl")
                && std::fs::read_to_string(p).unwrap().contains(&calls[0])
        })
        .unwrap();
    use std::io::Write;
    // A hook gets HOME only.
    let mut hook = bare
        .command(["hook", "prompt-submit"])
        .env_remove("PATH")
        .env_remove("LOCALAGENTS_CLAUDE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = json!({"session_id": "s-net", "cwd": s.work, "hook_event_name": "UserPromptSubmit",
        "prompt": "hi", "transcript_path": transcript});
    hook.stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let said = String::from_utf8_lossy(&hook.wait_with_output().unwrap().stdout).to_string();
    let ours = jobs
        .iter()
        .find(|j| j["tool_use_id"] == calls[0].as_str())
        .unwrap();
    let line = said
        .split("localagents job ")
        .find(|l| l.starts_with(ours["id"].as_str().unwrap()))
        .unwrap_or_else(|| panic!("no line for {}: {said}", ours["id"]));
    // The line's net is this job's: its gross (the record's) less what
    // delegating it cost Claude (the figure the line gives, from this
    // job's call in the transcript), to the rounding of the figures. Its
    // sign is the fake's arithmetic (its cached share of a request), not
    // the point.
    let money = |after: &str, before: &str| -> f64 {
        let v = line
            .split(after)
            .nth(1)
            .and_then(|r| r.split(before).next())
            .unwrap_or_else(|| panic!("no {after:?} in {line}"));
        v.replace('$', "")
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let said = money(", net ≈ ", " after Claude's own ");
    let own = money(" after Claude's own ", " for delegating");
    let gross = ours["equivalent_usd"].as_f64().unwrap();
    assert!(own > 0.0 && own <= cost, "{own} of {cost}: {line}");
    assert!(
        (said - (gross - own)).abs() < 0.0002,
        "{said} vs {gross} - {own}: {line}"
    );
    assert!(line.contains("for delegating"), "{line}");
}
