//! Jobs end to end: the MCP server (`localagents serve`) driven by rmcp's
//! client, the real Claude Code CLI as the delegate, the shim, and the fake
//! llama.cpp server in strict-template mode.
#![allow(clippy::disallowed_methods)] // signals a supervisor or a job on purpose

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::harness::{Harness, call, localagents, localagents_json, serve, serve_from};
use crate::support::{fake_llama, job_processes, script, until, wait_job_gone};

pub(crate) fn git_init(dir: &Path) {
    for args in [
        vec!["init", "-q", "-b", "main"],
        vec!["config", "user.email", "t@example.com"],
        vec!["config", "user.name", "t"],
    ] {
        assert!(
            Command::new("git")
                .args(&args)
                .current_dir(dir)
                .status()
                .unwrap()
                .success()
        );
    }
    std::fs::write(dir.join("README.md"), "project\n").unwrap();
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("sub/keep.txt"), "k\n").unwrap();
    assert!(
        Command::new("git")
            .args(["add", "."])
            .current_dir(dir)
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Command::new("git")
            .args(["commit", "-qm", "init"])
            .current_dir(dir)
            .status()
            .unwrap()
            .success()
    );
}

pub(crate) fn strict_fake_opts() -> fake_llama::LlamaOpts {
    fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        strict_template: true,
        ..Default::default()
    }
}

fn lines(p: &Path) -> Vec<Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::killpg(pgid, 0) == 0 }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_agent_end_to_end_in_the_tree() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::write_then_report(
        "notes/hello.txt",
        "hello from the local model\n",
    ));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Create notes/hello.txt.", "model": "gemma-3-270m", "wait_s": 60}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["still_running"], false);
    assert!(
        v.to_string().len() < 2048,
        "compact summary: {} bytes",
        v.to_string().len()
    );
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(
        std::fs::read_to_string(e.work().join("notes/hello.txt")).unwrap(),
        "hello from the local model\n"
    );
    assert!(
        v["files_touched"].to_string().contains("notes/hello.txt"),
        "{v}"
    );
    assert!(
        v["files_changed"].to_string().contains("notes/hello.txt"),
        "{v}"
    );
    let dir = e.state_dir().join("jobs").join(&id);
    let transcript = std::fs::read_to_string(dir.join("transcript.txt")).unwrap();
    assert!(
        transcript.contains("[tool] Write notes/hello.txt"),
        "{transcript}"
    );
    assert!(transcript.contains("[result] "), "{transcript}");
    let reqs: Vec<Value> = lines(&dir.join("requests.jsonl"))
        .into_iter()
        .filter(|l| l["path"] == "/v1/messages")
        .collect();
    assert!(reqs.len() >= 2, "{reqs:?}");
    assert!(reqs.iter().all(|l| l["status"] == 200));
    assert!(
        reqs.iter()
            .any(|l| l["folded_system"].as_u64().unwrap_or(0) > 0)
    );
    assert_eq!(fake.state.system_entries_seen.load(Ordering::SeqCst), 0);
    for f in ["job.json", "task.txt", "events.jsonl"] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let rec: Value = serde_json::from_slice(&std::fs::read(dir.join("job.json")).unwrap()).unwrap();
    assert!(rec["session_id"].is_string());
    assert!(rec["metrics"]["requests"].as_u64().unwrap() >= 2);
    assert!(rec["usage"]["input"].as_u64().unwrap() > 0);

    // The other tools see it.
    let (_, st) = call(&c, "job_status", json!({"job_id": id})).await;
    assert_eq!(st["status"], "succeeded");
    let (_, list) = call(&c, "list_jobs", json!({})).await;
    assert_eq!(list["jobs"][0]["id"], id.as_str());
    let (_, log) = call(
        &c,
        "job_log",
        json!({"job_id": id, "stream": "transcript", "tail_lines": 5}),
    )
    .await;
    assert!(log["text"].as_str().unwrap().contains("[result]"));
    let (_, diff) = call(&c, "job_diff", json!({"job_id": id})).await;
    assert!(
        diff["diff"]
            .as_str()
            .unwrap()
            .contains("+hello from the local model"),
        "{diff}"
    );
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn localagents_run_from_a_shell() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::write_then_report("cli.txt", "from run\n"));
    let e = Harness::with_fake(fake.url());
    let out = tokio::process::Command::from(e.cmd())
        .args(["run", "--model", "gemma-3-270m", "--json", "Create cli.txt"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rec["status"], "succeeded");
    assert_eq!(
        std::fs::read_to_string(e.work().join("cli.txt")).unwrap(),
        "from run\n"
    );
    // Outside a git repo files_changed is empty, files_touched is not.
    assert!(rec["files_touched"].to_string().contains("cli.txt"));

    // A failing job exits non-zero.
    fake.set_script(std::sync::Arc::new(|_| script::Reply::Error {
        status: 500,
        body: fake_llama::jinja_error(),
    }));
    let out = tokio::process::Command::from(e.cmd())
        .args(["run", "--model", "gemma-3-270m", "Create cli2.txt"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("failed") && text.contains("chat template"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worktree_job_is_kept_with_diff_and_unchanged_one_is_removed() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::write_then_report("wt.txt", "in the worktree\n"));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let c = serve(&e, None).await;
    let (err, v) = call(&c, "run_agent", json!({"task": "Create wt.txt.", "model": "gemma-3-270m", "isolation": "worktree", "cwd": e.work().join("sub"), "wait_s": 60})).await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let branch = format!("local-agent/{id}");
    assert_eq!(v["worktree"]["branch"], branch.as_str());
    assert_eq!(v["worktree"]["kept"], true, "{v}");
    assert!(
        v["worktree"]["diffstat"]
            .as_str()
            .unwrap()
            .starts_with("1 files changed, +1"),
        "{v}"
    );
    let wt = PathBuf::from(v["worktree"]["path"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(wt.join("sub/wt.txt")).unwrap(),
        "in the worktree\n",
        "the job kept its offset inside the repo"
    );
    assert!(
        !e.work().join("sub/wt.txt").exists(),
        "the user's tree is untouched"
    );
    let branches = Command::new("git")
        .args(["branch", "--list", &branch])
        .current_dir(e.work())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&branches.stdout).contains(&branch));
    let (_, diff) = call(&c, "job_diff", json!({"job_id": id})).await;
    assert!(
        diff["diff"].as_str().unwrap().contains("+in the worktree"),
        "{diff}"
    );
    assert!(v["files_changed"].to_string().contains("sub/wt.txt"), "{v}");

    // A job that changes nothing leaves no worktree and no branch.
    fake.set_script(script::text("Nothing to do."));
    let (_, v) = call(&c, "run_agent", json!({"task": "Look around.", "model": "gemma-3-270m", "isolation": "worktree", "wait_s": 60})).await;
    assert_eq!(v["status"], "succeeded", "{v}");
    let id2 = v["id"].as_str().unwrap();
    assert_eq!(v["worktree"]["kept"], false, "{v}");
    assert!(!e.state_dir().join("worktrees").join(id2).exists());
    let branches = Command::new("git")
        .args(["branch", "--list", "local-agent/*"])
        .current_dir(e.work())
        .output()
        .unwrap();
    let b = String::from_utf8_lossy(&branches.stdout);
    assert!(!b.contains(id2) && b.contains(&id), "{b}");

    // Resume keeps the worktree; cleanup removes it and the branch.
    // The resumed session already holds one tool result: write on the next.
    fake.set_script(std::sync::Arc::new(|req| {
        if script::tool_results(req) == 1 {
            script::Reply::Tool {
                name: "Write".into(),
                input: json!({"file_path": "wt2.txt", "content": "second\n"}),
            }
        } else {
            script::Reply::Text("done".into())
        }
    }));
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Also create wt2.txt.", "resume_job": id, "wait_s": 60}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    assert_eq!(v["cwd"], json!(wt.join("sub")));
    assert!(wt.join("sub/wt2.txt").is_file());
    // cleanup_jobs: a dry run by default; it keeps work that is nowhere
    // else (uncommitted files, then unmerged commits); a merged, clean
    // worktree goes with its branch.
    let (_, cl) = call(&c, "cleanup_jobs", json!({"job_id": id})).await;
    assert_eq!(cl["dry_run"], true, "{cl}");
    assert_eq!(cl["kept"][0]["job_id"], id.as_str(), "{cl}");
    let (_, cl) = call(&c, "cleanup_jobs", json!({"job_id": id, "dry_run": false})).await;
    assert_eq!(cl["removed"], json!([]), "{cl}");
    assert!(
        cl["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("uncommitted"),
        "{cl}"
    );
    assert!(
        cl["kept"][0]["review"].as_str().unwrap().contains("force"),
        "{cl}"
    );
    assert!(
        wt.join("sub/wt2.txt").is_file(),
        "unreviewed work was deleted"
    );
    crate::support::git::git(&wt, &["add", "-A"]);
    crate::support::git::git(
        &wt,
        &[
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "job work",
        ],
    );
    let (_, cl) = call(&c, "cleanup_jobs", json!({"job_id": id, "dry_run": false})).await;
    assert!(
        cl["kept"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("not merged"),
        "{cl}"
    );
    assert!(wt.exists());
    crate::support::git::git(e.work(), &["merge", "-q", "--ff-only", &branch]);
    let (_, cl) = call(&c, "cleanup_jobs", json!({"job_id": id, "dry_run": false})).await;
    assert_eq!(cl["kept"], json!([]), "{cl}");
    assert!(
        cl["removed"][0]["removed"].to_string().contains(&branch),
        "{cl}"
    );
    assert!(!wt.exists());
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "more", "resume_job": v["id"]}),
    )
    .await;
    assert!(err && v.to_string().contains("worktree"), "{v}");

    // force removes a worktree with uncommitted work too.
    fake.set_script(script::write_then_report("wt3.txt", "unreviewed\n"));
    let (_, v) = call(&c, "run_agent", json!({"task": "Create wt3.txt.", "model": "gemma-3-270m", "isolation": "worktree", "wait_s": 60})).await;
    assert_eq!(v["worktree"]["kept"], true, "{v}");
    let id3 = v["id"].as_str().unwrap().to_string();
    let wt3 = e.state_dir().join("worktrees").join(&id3);
    let (_, cl) = call(&c, "cleanup_jobs", json!({"job_id": id3, "dry_run": false})).await;
    assert_eq!(cl["kept"][0]["job_id"], id3.as_str(), "{cl}");
    assert!(wt3.join("wt3.txt").is_file());
    let (_, cl) = call(
        &c,
        "cleanup_jobs",
        json!({"job_id": id3, "dry_run": false, "force": true}),
    )
    .await;
    assert!(
        cl["removed"][0]["removed"].to_string().contains(&id3),
        "{cl}"
    );
    assert!(!wt3.exists());
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_stops_the_process_group_and_timeout_ends_the_job() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait for input"}),
        )],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Sleep.", "model": "gemma-3-270m", "allowed_tools": ["Bash"]}),
    )
    .await;
    assert!(!err, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let job = e.state_dir().join("jobs").join(&id).join("job.json");
    // Wait for the Bash call to start.
    let mut pgid = 0;
    until("the job's tool call", Duration::from_secs(30), || {
        let rec: Value = serde_json::from_slice(&std::fs::read(&job).unwrap()).unwrap();
        pgid = rec["pid"].as_i64().unwrap_or(0) as i32;
        rec["tool_calls"].as_u64().unwrap_or(0) >= 1
    })
    .await;
    assert!(pgid > 0, "the job never reached its tool call");
    assert!(group_alive(pgid));
    let t = Instant::now();
    let (_, v) = call(&c, "cancel_job", json!({"job_id": id})).await;
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(
        t.elapsed() < Duration::from_secs(6),
        "cancel took {:?}",
        t.elapsed()
    );
    assert!(!group_alive(pgid), "the whole process group is gone");
    // And every process of the job, also the Bash command that Claude Code
    // started in its own session (outside the group).
    assert_eq!(
        job_processes(&id),
        vec![],
        "cancel left processes of the job"
    );

    let (_, v) = call(&c, "run_agent", json!({"task": "Sleep.", "model": "gemma-3-270m", "allowed_tools": ["Bash"], "timeout_s": 3, "wait_s": 30})).await;
    assert_eq!(v["status"], "timeout", "{v}");
    assert!(v["error"].as_str().unwrap().contains("timed out after 3 s"));
    let rec: Value = serde_json::from_slice(
        &std::fs::read(
            e.state_dir()
                .join("jobs")
                .join(v["id"].as_str().unwrap())
                .join("job.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert!(!group_alive(rec["pid"].as_i64().unwrap() as i32));
    let left = wait_job_gone(v["id"].as_str().unwrap(), Duration::from_secs(5));
    assert!(left.is_ok(), "timeout left processes of the job: {left:?}");
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_reports_the_job_lost_and_lists_old_jobs() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait for input"}),
        )],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let mut server = e
        .cmd()
        .args(["run", "--model", "gemma-3-270m", "Sleep a long time"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for its job to be running, then kill the owner hard.
    let (mut id, mut pgid) = (String::new(), 0);
    until("the job's tool call", Duration::from_secs(30), || {
        let Some(Ok(ent)) = std::fs::read_dir(e.state_dir().join("jobs"))
            .ok()
            .and_then(|mut d| d.next())
        else {
            return false;
        };
        let rec: Value =
            serde_json::from_slice(&std::fs::read(ent.path().join("job.json")).unwrap_or_default())
                .unwrap_or_default();
        if rec["tool_calls"].as_u64().unwrap_or(0) < 1 {
            return false;
        }
        id = rec["id"].as_str().unwrap().to_string();
        pgid = rec["pid"].as_i64().unwrap() as i32;
        true
    })
    .await;
    // The tool call is recorded just before Claude Code starts the command.
    until("the scripted Bash command", Duration::from_secs(10), || {
        job_processes(&id)
            .iter()
            .any(|(_, cmd)| cmd.contains("tail -f /dev/null"))
    })
    .await;
    assert!(
        job_processes(&id)
            .iter()
            .any(|(_, cmd)| cmd.contains("tail -f /dev/null")),
        "the scripted Bash command runs: {:?}",
        job_processes(&id)
    );
    let _ = pgid;
    // SIGKILL: the supervisor gets no chance to clean anything up.
    server.kill().unwrap();
    server.wait().unwrap();
    match wait_job_gone(&id, Duration::from_secs(5)) {
        Ok(took) => {
            eprintln!("SIGKILL of `localagents run` -> last process of the job gone in {took:?}")
        }
        Err(left) => panic!("5 s after SIGKILL of its supervisor, the job still has {left:?}"),
    }

    let c = serve(&e, None).await;
    let (_, v) = call(&c, "job_status", json!({"job_id": id})).await;
    assert_eq!(v["status"], "lost", "{v}");
    assert!(v["error"].as_str().unwrap().contains("is gone"), "{v}");
    let (_, list) = call(&c, "list_jobs", json!({})).await;
    assert_eq!(list["jobs"][0]["id"], id.as_str());
    c.cancel().await.unwrap();
}

/// A fake backend, `localagents serve` and a job whose delegate runs Bash
/// `tail -f /dev/null` until stopped: the fake, the env, the client, the
/// job's id, its record's path and serve's pid (once the command runs).
async fn serve_with_a_waiting_job(
    what: &str,
) -> (
    fake_llama::FakeLlama,
    Harness,
    rmcp::service::RunningService<rmcp::RoleClient, ()>,
    String,
    PathBuf,
    i32,
) {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait for input"}),
        )],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Wait.", "model": "gemma-3-270m", "allowed_tools": ["Bash"]}),
    )
    .await;
    assert!(!err, "{what}: {v}");
    let id = v["id"].as_str().unwrap().to_string();
    let job = e.state_dir().join("jobs").join(&id).join("job.json");
    until(
        &format!("{what}: the Bash command"),
        Duration::from_secs(30),
        || {
            job_processes(&id)
                .iter()
                .any(|(_, cmd)| cmd.contains("tail -f /dev/null"))
        },
    )
    .await;
    let rec: Value = serde_json::from_slice(&std::fs::read(&job).unwrap()).unwrap();
    let owner = rec["owner_pid"].as_i64().unwrap() as i32;
    assert!(owner > 0, "{what}: the Bash command never started");
    (fake, e, c, id, job, owner)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_serve_mid_job_leaves_no_process_of_the_job() {
    let (_fake, e, c, id, _job, owner) = serve_with_a_waiting_job("").await;
    // SAFETY: the `localagents serve` this test started (its record says so).
    unsafe { libc::kill(owner, libc::SIGKILL) };
    match wait_job_gone(&id, Duration::from_secs(5)) {
        Ok(took) => {
            eprintln!("SIGKILL of `localagents serve` -> last process of the job gone in {took:?}")
        }
        Err(left) => panic!("5 s after SIGKILL of serve, the job still has {left:?}"),
    }
    let _ = c.cancel().await;
    let c = serve(&e, None).await;
    let (_, v) = call(&c, "job_status", json!({"job_id": id})).await;
    assert_eq!(v["status"], "lost", "{v}");
    c.cancel().await.unwrap();
}

/// Whether process `pid` has ended (gone, or a zombie its parent has not
/// reaped yet): `support::process_ended` reads `/proc/PID/stat` on Linux,
/// asks the kernel on macOS.
fn ended(pid: i32) -> bool {
    u32::try_from(pid).map_or(true, crate::support::process_ended)
}

/// SIGTERM, SIGINT or SIGHUP to `serve` mid-job, its stdin held open by the
/// client: serve cancels the job, finishes its record and exits within 5 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_to_serve_cancels_its_jobs_and_exits_with_stdin_open() {
    for (name, sig) in [
        ("SIGTERM", libc::SIGTERM),
        ("SIGHUP", libc::SIGHUP),
        ("SIGINT", libc::SIGINT),
    ] {
        let (_fake, _e, c, id, job, owner) = serve_with_a_waiting_job(name).await;
        // SAFETY: the `localagents serve` this test started (its record says so).
        unsafe { libc::kill(owner, sig) };
        let took = until(
            &format!("{name}: serve exits after the signal"),
            Duration::from_secs(5),
            || ended(owner),
        )
        .await;
        eprintln!("{name} -> serve exited in {took:?}");
        let rec: Value = serde_json::from_slice(&std::fs::read(&job).unwrap()).unwrap();
        assert_eq!(rec["status"], "cancelled", "{name}: {rec}");
        if let Err(left) = wait_job_gone(&id, Duration::from_secs(5)) {
            panic!("{name}: 5 s after serve exited, the job still has {left:?}");
        }
        drop(c);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_jobs_keep_separate_logs_and_usage() {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        slots: 2,
        ..strict_fake_opts()
    })
    .await;
    fake.set_script(std::sync::Arc::new(|req| {
        // Each job writes its own file, named after the word in its task.
        let text = req.to_string();
        let name = if text.contains("ALPHA") {
            "alpha.txt"
        } else {
            "beta.txt"
        };
        script::write_then_report(name, "x\n")(req)
    }));
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let (_, a) = call(
        &c,
        "run_agent",
        json!({"task": "ALPHA: create the file.", "model": "gemma-3-270m"}),
    )
    .await;
    let (_, b) = call(
        &c,
        "run_agent",
        json!({"task": "BETA: create the file.", "model": "gemma-3-270m"}),
    )
    .await;
    let (_, a) = call(&c, "wait_job", json!({"job_id": a["id"]})).await;
    let (_, b) = call(&c, "wait_job", json!({"job_id": b["id"]})).await;
    assert_eq!(
        (a["status"].as_str(), b["status"].as_str()),
        (Some("succeeded"), Some("succeeded")),
        "{a}\n{b}"
    );
    assert!(e.work().join("alpha.txt").is_file() && e.work().join("beta.txt").is_file());
    let record = |j: &Value| -> Value {
        let dir = e.state_dir().join("jobs").join(j["id"].as_str().unwrap());
        serde_json::from_slice(&std::fs::read(dir.join("job.json")).unwrap()).unwrap()
    };
    let (ra, rb) = (record(&a), record(&b));
    // Parallel: each delegate started before the other finished.
    let ts = |r: &Value, k: &str| {
        chrono::DateTime::parse_from_rfc3339(r[k].as_str().unwrap_or_else(|| panic!("{k}: {r}")))
            .unwrap()
    };
    assert!(
        ts(&ra, "started") < ts(&rb, "finished") && ts(&rb, "started") < ts(&ra, "finished"),
        "the jobs did not overlap: A {}..{}, B {}..{}",
        ra["started"],
        ra["finished"],
        rb["started"],
        rb["finished"]
    );
    // Usage on each record is what the fake served that job: the fake
    // answers every request with input + cache_read = the pre-tokens of
    // the chat request it was sent as (`fake_llama::chat_tokens`: a job on
    // llama.cpp takes the chat wire) and output_tokens 9.
    assert!(
        fake.statuses().iter().all(|s| *s == 200),
        "{:?}",
        fake.statuses()
    );
    let bodies = fake.chat_bodies();
    let mut counted = 0;
    for (rec, word) in [(&ra, "ALPHA"), (&rb, "BETA")] {
        let mine: Vec<&Value> = bodies
            .iter()
            .filter(|b| b.to_string().contains(word))
            .collect();
        counted += mine.len();
        let served_in: u64 = mine.iter().map(|b| fake_llama::chat_tokens(b)).sum();
        let u = &rec["usage"];
        assert_eq!(
            u["input"].as_u64().unwrap() + u["cache_read"].as_u64().unwrap(),
            served_in,
            "{word}: {rec}"
        );
        assert_eq!(
            u["output"].as_u64().unwrap(),
            9 * mine.len() as u64,
            "{word}: {rec}"
        );
        assert_eq!(
            rec["metrics"]["requests"].as_u64().unwrap(),
            mine.len() as u64,
            "{word}: {rec}"
        );
        assert!(served_in > 0);
        let dir = e.state_dir().join("jobs").join(rec["id"].as_str().unwrap());
        let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
        let other = if word == "ALPHA" { "BETA" } else { "ALPHA" };
        assert!(!events.contains(other), "logs are separate");
    }
    assert_eq!(counted, bodies.len(), "every request belongs to one job");
    // And the two records add up to the fake's own /metrics counters.
    let total = |r: &Value| {
        r["usage"]["input"].as_u64().unwrap() + r["usage"]["cache_read"].as_u64().unwrap()
    };
    assert_eq!(
        total(&ra) + total(&rb),
        fake.state.prompt_tokens.load(Ordering::SeqCst)
            + fake.state.prompt_tokens_cached.load(Ordering::SeqCst)
    );
    assert_eq!(
        ra["usage"]["cache_read"].as_u64().unwrap() + rb["usage"]["cache_read"].as_u64().unwrap(),
        fake.state.prompt_tokens_cached.load(Ordering::SeqCst)
    );
    c.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_answers() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "x", "model": "qwen3.8-27b"}),
    )
    .await;
    assert!(err);
    assert_eq!(v["error"], "model_unavailable", "{v}");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("Ask the user to bring it up on gpu-server"),
        "{v}"
    );
    for (args, needle) in [
        (
            json!({"task": "x", "cwd": "/nonexistent/dir"}),
            "does not exist",
        ),
        (
            json!({"task": "x", "isolation": "docker"}),
            "isolation must be",
        ),
        (
            json!({"task": "x", "isolation": "worktree"}),
            "not inside a git repository",
        ),
        (json!({"task": "   "}), "task is empty"),
    ] {
        let (err, v) = call(&c, "run_agent", args.clone()).await;
        assert!(err, "{args}");
        assert!(v.to_string().contains(needle), "{args}: {v}");
    }
    for id in ["../x", "nope", "../../etc/passwd"] {
        for tool in ["job_status", "wait_job", "cancel_job"] {
            let (err, v) = call(&c, tool, json!({"job_id": id})).await;
            assert!(err, "{tool} {id}");
            assert!(
                v.to_string().contains("is not a job id"),
                "{tool} {id}: {v}"
            );
        }
    }
    let (err, v) = call(
        &c,
        "job_status",
        json!({"job_id": "20200101-000000-00000000"}),
    )
    .await;
    assert!(err && v.to_string().contains("no job"), "{v}");
    c.cancel().await.unwrap();

    let c = serve(&e, Some(Path::new("/nonexistent/claude"))).await;
    let (err, v) = call(&c, "run_agent", json!({"task": "x"})).await;
    assert!(err);
    assert!(
        v.to_string()
            .contains("LOCALAGENTS_CLAUDE names /nonexistent/claude"),
        "{v}"
    );
    c.cancel().await.unwrap();
}

/// `localagents run` with a job whose Bash step sleeps, and `sig` sent to
/// that process alone mid-step (`kill PID`; Ctrl-C and a closed terminal
/// signal the foreground group, which holds no process of the job either:
/// its guard leads a group of its own). The job ends `cancelled`, its
/// record on disk, no process of it left, and `run` exits with `code`.
async fn a_signal_to_run_mid_job(name: &str, sig: i32, code: i32) {
    // Not `sleep 600`: Claude Code refuses a long sleep as a command.
    let sleep = "python3 -c 'import time; time.sleep(600)'";
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": sleep, "description": "wait ten minutes"}),
        )],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let mut run = tokio::process::Command::from(e.command([
        "run",
        "--model",
        "gemma-3-270m",
        "--json",
        "Wait.",
    ]));
    run.stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let child = run.spawn().unwrap();
    let jobs = e.state_dir().join("jobs");
    let mut id = String::new();
    until(
        &format!("{name}: the job's Bash step sleeps"),
        Duration::from_secs(60),
        || {
            let Some(found) = std::fs::read_dir(&jobs).ok().and_then(|d| {
                d.flatten()
                    .find(|d| d.path().join("job.json").is_file())
                    .map(|d| d.file_name().to_string_lossy().into_owned())
            }) else {
                return false;
            };
            let sleeps = job_processes(&found)
                .iter()
                .any(|(_, cmd)| cmd.contains("time.sleep(600)"));
            id = found;
            sleeps
        },
    )
    .await;
    let out = signal_ends_the_job(name, "run", child, sig, code, &jobs, &id).await;
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["id"], id.as_str(), "{name}: {printed}");
}

/// Send `sig` to `child`, a `localagents WHAT` running job `id`: it must
/// exit within 30 s with `code`, the job's record under `jobs` must say
/// `cancelled`, and no process of the job may be left (waited for). Its
/// output, for what else the caller checks.
pub(crate) async fn signal_ends_the_job(
    name: &str,
    what: &str,
    child: tokio::process::Child,
    sig: i32,
    code: i32,
    jobs: &Path,
    id: &str,
) -> std::process::Output {
    // SAFETY: the `localagents` process this test started.
    unsafe { libc::kill(child.id().unwrap() as i32, sig) };
    let out = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{name}: {what} still runs 30 s after the signal"))
        .unwrap();
    let rec: Value =
        serde_json::from_slice(&std::fs::read(jobs.join(id).join("job.json")).unwrap()).unwrap();
    assert_eq!(
        (out.status.code(), rec["status"].as_str()),
        (Some(code), Some("cancelled")),
        "{name}: {what} ended with {}, the record says {}; stderr: {}",
        out.status,
        rec["status"],
        String::from_utf8_lossy(&out.stderr)
    );
    until(
        &format!("{name}: no process of job {id} left"),
        Duration::from_secs(10),
        || job_processes(id).is_empty(),
    )
    .await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_to_run_cancels_its_job_and_exits_130() {
    a_signal_to_run_mid_job("SIGINT", libc::SIGINT, 130).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_run_cancels_its_job_and_exits_143() {
    a_signal_to_run_mid_job("SIGTERM", libc::SIGTERM, 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_to_run_cancels_its_job_and_exits_129() {
    a_signal_to_run_mid_job("SIGHUP", libc::SIGHUP, 129).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_shutdown_stops_the_delegates() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::tools_then_text(
        vec![(
            "Bash",
            json!({"command": "tail -f /dev/null", "description": "wait for input"}),
        )],
        "done",
    ));
    let e = Harness::with_fake(fake.url());
    let running_job = |state: &Path| -> Option<(String, i32)> {
        let ent = std::fs::read_dir(state.join("jobs"))
            .ok()?
            .flatten()
            .find(|d| {
                let rec: Value = serde_json::from_slice(
                    &std::fs::read(d.path().join("job.json")).unwrap_or_default(),
                )
                .unwrap_or_default();
                rec["status"] == "running" && rec["tool_calls"].as_u64().unwrap_or(0) >= 1
            })?;
        let rec: Value =
            serde_json::from_slice(&std::fs::read(ent.path().join("job.json")).ok()?).ok()?;
        Some((rec["id"].as_str()?.to_string(), rec["pid"].as_i64()? as i32))
    };
    let wait_running = |state: PathBuf| async move {
        until("a running job", Duration::from_secs(30), || {
            running_job(&state).is_some()
        })
        .await;
        running_job(&state).expect("a running job")
    };

    // The MCP server stops its jobs when the client goes away.
    let c = serve(&e, None).await;
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Wait.", "model": "gemma-3-270m", "allowed_tools": ["Bash"]}),
    )
    .await;
    assert!(!err, "{v}");
    let (id, pgid) = wait_running(e.state_dir().to_path_buf()).await;
    assert_eq!(id, v["id"].as_str().unwrap());
    c.cancel().await.unwrap();
    until(
        "shutdown stopped the delegate's group",
        Duration::from_secs(10),
        || !group_alive(pgid),
    )
    .await;
    let left = wait_job_gone(&id, Duration::from_secs(5));
    assert!(left.is_ok(), "shutdown left processes of the job: {left:?}");
    let mut status = Value::Null;
    until("the job's record ends", Duration::from_secs(10), || {
        let rec: Value = serde_json::from_slice(
            &std::fs::read(e.state_dir().join("jobs").join(&id).join("job.json")).unwrap(),
        )
        .unwrap();
        status = rec["status"].clone();
        status != "running"
    })
    .await;
    assert_eq!(status, "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_starts_after_the_binary_is_replaced_under_serve() {
    // `cargo install` (or a plugin update) while `serve` runs replaces the
    // binary's file. The job guard is this binary started again: it must
    // still start, as the running version.
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text("done"));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let copy = e.home().join("bin/localagents");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(crate::support::bin(), &copy).unwrap();
    let c = serve_from(&e, &copy, None).await;
    std::fs::remove_file(&copy).unwrap();
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": "Say done.", "model": "gemma-3-270m", "wait_s": 60}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    c.cancel().await.unwrap();
}

/// Issue 26 (#11): `localagents jobs --limit N` lists N jobs, past the 200
/// it stopped at without a word; `list_jobs` over MCP stops at its cap
/// (a tool result is read into Claude's context) and says where.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_limit_is_honoured_and_the_tools_cap_says_where_it_stops() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    for n in 0..250u32 {
        crate::support::write_job_record(e.state_dir(), &format!("20261201-000000-{n:08x}"));
    }
    let v = localagents_json(&e, &["jobs", "--json", "--limit", "1000"]).await;
    assert_eq!(v["count"], 250, "every job listed");
    assert_eq!(v["jobs"].as_array().unwrap().len(), 250);
    assert_eq!(v["truncated"], false, "{}", v["note"]);
    assert_eq!(
        v["jobs"][0]["id"], "20261201-000000-000000f9",
        "newest first"
    );
    let out = localagents(&e, &["jobs", "--limit", "1000"]).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 250);
    // Fewer asked than there are: the list says more are there.
    let v = localagents_json(&e, &["jobs", "--json", "--limit", "10"]).await;
    assert_eq!(v["count"], 10);
    assert_eq!(v["truncated"], true);

    let c = serve(&e, None).await;
    let (err, v) = call(&c, "list_jobs", json!({"limit": 1000})).await;
    assert!(!err, "{v}");
    assert_eq!(v["count"], 200, "{}", v["note"]);
    assert_eq!(v["truncated"], true);
    let note = v["note"].as_str().unwrap_or_default();
    assert!(
        note.contains("the newest 200 jobs") && note.contains("localagents jobs --limit 1000"),
        "{note}"
    );
}

/// The text blocks of every user message the fake was sent, joined.
fn user_texts(bodies: &[Value]) -> Vec<String> {
    bodies
        .iter()
        .flat_map(|b| b["messages"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["role"] == "user")
        .flat_map(|m| match &m["content"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b["text"].as_str().map(str::to_string))
                .collect(),
            _ => vec![],
        })
        .collect()
}

/// Issue 26 (#7): a brief over 128 KiB (the kernel's cap on one argv
/// string) reaches the delegate whole, on its stdin, instead of failing
/// with "Argument list too long"; one over 1 MiB is refused at start with
/// a sentence, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_kb_brief_reaches_the_delegate_whole_and_one_over_1_mib_is_refused() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::text("done"));
    let e = Harness::with_fake(fake.url());
    git_init(e.work());
    let c = serve(&e, None).await;
    let mut task = String::from("Reply with the word done. The notes below need nothing.\n");
    let mut i = 0;
    while task.len() < 200_000 {
        task.push_str(&format!("note {i}: nothing to do here.\n"));
        i += 1;
    }
    task.push_str("END OF THE BRIEF");
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": task, "model": "gemma-3-270m", "isolation": "none", "wait_s": 60}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["status"], "succeeded", "{v}");
    assert!(
        user_texts(&fake.bodies()).iter().any(|t| t.contains(&task)),
        "the delegate's first message holds the whole {} byte brief",
        task.len()
    );

    let sent = fake.bodies().len();
    let jobs = std::fs::read_dir(e.state_dir().join("jobs"))
        .unwrap()
        .count();
    let big = "x".repeat(1024 * 1024 + 1);
    let (err, v) = call(
        &c,
        "run_agent",
        json!({"task": big, "model": "gemma-3-270m"}),
    )
    .await;
    assert!(err, "{v}");
    let msg = v.as_str().unwrap_or_default();
    assert!(
        msg.contains("the task is 1,025 KiB; a brief may be at most 1,024 KiB (1 MiB)"),
        "{v}"
    );
    assert_eq!(fake.bodies().len(), sent, "nothing was sent");
    assert_eq!(
        std::fs::read_dir(e.state_dir().join("jobs"))
            .unwrap()
            .count(),
        jobs,
        "no job was made"
    );
    c.cancel().await.unwrap();
}

/// Issue 26 (#9): an unreadable record is listed as unreadable with its
/// path and the reason, a record whose `id` is not its directory's name is
/// refused, and a job directory that is a symlink to another is not
/// listed twice.
#[tokio::test]
async fn unreadable_records_are_listed_with_their_path_and_never_twice() {
    let e = Harness::with_fake("http://127.0.0.1:9");
    let jobs = e.state_dir().join("jobs");
    let good = ["20261201-000000-00000001", "20261201-000000-00000002"];
    for id in good {
        crate::support::write_job_record(e.state_dir(), id);
    }
    let garbled = "20261201-000000-00000003";
    std::fs::create_dir_all(jobs.join(garbled)).unwrap();
    std::fs::write(
        jobs.join(garbled).join("job.json"),
        "{\"id\": \"20261201-00",
    )
    .unwrap();
    // A copy of a good record under another id.
    let other = "20261201-000000-00000004";
    std::fs::create_dir_all(jobs.join(other)).unwrap();
    std::fs::copy(
        jobs.join(good[0]).join("job.json"),
        jobs.join(other).join("job.json"),
    )
    .unwrap();
    // A job directory that is a link to a good one.
    let linked = "20261201-000000-00000005";
    std::os::unix::fs::symlink(jobs.join(good[1]), jobs.join(linked)).unwrap();

    let v = localagents_json(&e, &["jobs", "--json"]).await;
    let ids: Vec<&str> = v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [good[1], good[0]], "{v:#}");
    let bad = v["unreadable"]
        .as_array()
        .unwrap_or_else(|| panic!("{v:#}"));
    let by_id = |id: &str| {
        bad.iter()
            .find(|b| b["id"] == id)
            .unwrap_or_else(|| panic!("{id} is not listed as unreadable: {v:#}"))
            .clone()
    };
    let g = by_id(garbled);
    assert_eq!(g["status"], "unreadable");
    assert!(
        g["path"]
            .as_str()
            .unwrap()
            .ends_with(&format!("{garbled}/job.json")),
        "{g}"
    );
    assert!(g["error"].as_str().unwrap().contains("job.json"), "{g}");
    let o = by_id(other);
    assert!(o["error"].as_str().unwrap().contains(good[0]), "{o}");
    let l = by_id(linked);
    assert!(l["error"].as_str().unwrap().contains("symlink"), "{l}");
    // The text list says the same.
    let out = localagents(&e, &["jobs"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("unreadable") && text.contains(garbled),
        "{text}"
    );
}

/// A tmpfs mounted for a test, unmounted when dropped.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Issue 26 (#1): the state volume fills up mid-job. The job's owner keeps
/// its outcome: the job fails with a sentence naming the record's
/// directory and the disk's answer, and `localagents run` returns with it
/// instead of waiting on a record that cannot change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_state_disk_fails_the_job_and_run_returns_with_the_reason() {
    let test = "jobs::a_full_state_disk_fails_the_job_and_run_returns_with_the_reason";
    if !crate::support::linux_only(
        test,
        "it fills a tmpfs (mount -t tmpfs), which macOS does not have",
    ) {
        return;
    }
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    let e = Harness::with_fake(fake.url());
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
        .arg(e.state_dir())
        .status();
    if !matches!(mounted, Ok(s) if s.success()) {
        // Not root (GitHub's runners): said where scripts/test.sh lists skips.
        crate::support::skip(
            test,
            &format!(
                "mount -t tmpfs was refused ({mounted:?}): the disk-full path is not tested here"
            ),
        );
        return;
    }
    let _tmpfs = Tmpfs(e.state_dir().to_path_buf());
    // Fill the volume when the delegate's first request arrives (the job
    // is running, its record written), and keep it full: a page freed by
    // a removed file is taken again, so every write after this fails.
    let filled: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>> = Default::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (state, at, halt) = (e.state_dir().to_path_buf(), filled.clone(), stop.clone());
    fake.set_script(std::sync::Arc::new(move |_| {
        let mut at = at.lock().unwrap();
        if at.is_none() {
            use std::io::Write;
            let mut f = std::fs::File::create(state.join("filler")).unwrap();
            let block = vec![0u8; 64 * 1024];
            while f.write_all(&block).is_ok() {}
            *at = Some(std::time::Instant::now());
            // tmpfs counts used pages per CPU with some slack: a filler
            // on each CPU takes what each could still hand out.
            let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
            for cpu in 0..cpus {
                let (halt, state) = (halt.clone(), state.clone());
                std::thread::spawn(move || {
                    // SAFETY: a zeroed cpu_set_t with one CPU set, for this thread.
                    #[cfg(target_os = "linux")]
                    unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu, &mut set);
                        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
                    }
                    let mut f = std::fs::File::create(state.join(format!("filler{cpu}"))).unwrap();
                    while !halt.load(Ordering::Relaxed) {
                        while f.write_all(&[0u8; 4096]).is_ok() {}
                        std::thread::yield_now();
                    }
                });
            }
        }
        script::Reply::Text("done".into())
    }));
    let run = tokio::process::Command::from(e.cmd())
        .args(["run", "--model", "gemma-3-270m", "Say done"])
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), run)
        .await
        .expect("localagents run did not return within 120 s of a full disk")
        .unwrap();
    let returned = std::time::Instant::now();
    stop.store(true, Ordering::Relaxed);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Every failed write of the record is logged with its directory and
    // the disk's answer. Then either every retry failed, and the job
    // failed with that sentence; or tmpfs found a page for a retry (its
    // per-CPU accounting has slack) and the outcome was written after all.
    assert!(
        text.contains("could not write the job record in")
            && text.contains("No space left on device"),
        "{text}"
    );
    match out.status.code() {
        Some(1) => {
            assert!(text.contains("failed"), "{text}");
            eprintln!("every retry failed: the job failed with the sentence");
        }
        Some(0) => {
            assert!(text.contains("succeeded"), "{text}");
            eprintln!("a retry wrote the final record");
        }
        other => panic!("exit {other:?}: {text}"),
    }
    let at = filled.lock().unwrap().expect("the delegate made a request");
    eprintln!(
        "from the full disk to run's return: {:.2} s",
        returned.duration_since(at).as_secs_f64()
    );
}
