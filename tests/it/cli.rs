//! The binary's exit codes and output, as a person or script sees them.
#![allow(clippy::disallowed_methods)] // signals a supervisor or a job on purpose

use crate::support::harness::Harness;

#[test]
fn status_exits_0_when_down_and_2_on_config_error() {
    let addr = crate::support::net::refused_addr();
    let h = Harness::new().config(&format!(
        "endpoints:\n  gone:\n    base_url: http://{addr}\n"
    ));
    let out = h.command(["status"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("gone") && text.contains("down") && text.contains("nothing listens"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );

    std::fs::write(h.config_path(), "endpoints: [\n").unwrap();
    let out = h.command(["status", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("models.yaml:") && err.contains("config error"),
        "{err}"
    );
}

#[test]
fn config_path_lists_user_then_project_with_sidecars() {
    // No --config: the program lists what it would discover.
    let h = Harness::new().no_config();
    let proj = h.dir().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("models.yaml"), "models: {}\n").unwrap();
    let out = h.cwd(&proj).command(["config", "path"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with(".config/localagents/models.yaml") && lines[0].starts_with("absent"),
        "{text}"
    );
    assert!(
        lines[1].ends_with(".config/localagents/models.local.yaml"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("read")
            && lines[2].contains("proj/models.yaml")
            && lines[2].ends_with("(project: menu entries only until `localagents trust`)"),
        "{text}"
    );
    assert!(lines[3].contains("proj/models.local.yaml"), "{text}");
    // The program writes only user scope, never into a project.
    assert!(
        lines[4].contains("register_endpoint and trust write")
            && lines[4].ends_with(".config/localagents/models.local.yaml"),
        "{text}"
    );
}

#[test]
fn bringup_runs_the_command_on_request_and_waits_until_served() {
    let h = Harness::new();
    let srv = h.dir().join("srv");
    std::fs::create_dir_all(srv.join("v1")).unwrap();
    std::fs::write(
        srv.join("v1/models"),
        r#"{"object":"list","data":[{"id":"tiny-model","object":"model","owned_by":"me"}]}"#,
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let h = h.config(&format!(
            "endpoints:\n  box:\n    base_url: http://127.0.0.1:{port}\n    backend: other\nmodels:\n  tiny:\n    served_name: tiny-model\n    host: this box\n    notes: a static file server\n    bring_up: cd {} && exec python3 -m http.server {port} --bind 127.0.0.1\n  broken:\n    bring_up: echo boom-from-bring-up; exit 3\n  manual:\n    host: gpu-server\n    notes: start it with --reasoning on\n",
        srv.display()
    ));
    let run = |args: &[&str]| h.command(args).output().unwrap();
    // Without --run: what it takes.
    let o = run(&["bringup", "tiny"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && t.contains("bring_up on file: cd ") && t.contains("this box"),
        "{t}"
    );
    let o = run(&["bringup", "manual", "--run"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        t.contains("The user must start it on gpu-server (start it with --reasoning on)"),
        "{t}"
    );
    let o = run(&["bringup", "broken", "--run", "--timeout", "20"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(
        t.contains("failed") && t.contains("boom-from-bring-up"),
        "the log's last lines: {t}"
    );
    // With --run: started detached, polled until served.
    let o = run(&["bringup", "tiny", "--run", "--timeout", "30"]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("tiny is up: tiny-model on `box`"), "{t}");
    let o = run(&["bringup", "tiny"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("already served"));
    // Stop the detached server (it leads its own process group).
    let pid = t
        .split("(pid ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|p| p.parse::<i32>().ok())
        .unwrap();
    // SAFETY: the group this test's bring_up started.
    unsafe { libc::killpg(pid, libc::SIGKILL) };
    let logs: Vec<_> = std::fs::read_dir(h.state_dir().join("bringup"))
        .unwrap()
        .collect();
    assert!(!logs.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_ok_warn_fail_with_the_fix() {
    let fake = crate::support::fake_llama::spawn(crate::support::fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 12288,
        supports_system_role: false,
        ..Default::default()
    })
    .await;
    let refused = crate::support::net::refused_addr();
    let h = Harness::new()
        .config(&format!(
            "endpoints:\n  box:\n    base_url: {}\n  gone:\n    base_url: http://{refused}\n",
            fake.url()
        ))
        .claude(crate::support::claude::binary());
    let out = tokio::process::Command::from(h.command(["doctor"]))
        .output()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a failed check fails the command: {text}"
    );
    // The CLI the tests run (the pinned one, or the weekly run's latest):
    // ok inside the tested range, a warning naming the range outside it.
    let version = String::from_utf8(
        std::process::Command::new(crate::support::claude::binary())
            .arg("--version")
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let version = version.lines().next().unwrap().to_string();
    let (lo, hi) = localagents::runner::TESTED_CLAUDE;
    let num = |v: &str| localagents::runner::claude_version(v).unwrap();
    let tested =
        localagents::runner::claude_version(&version).is_some_and(|v| v >= num(lo) && v <= num(hi));
    if tested {
        assert!(
            text.contains(&format!("ok    claude CLI {version}")),
            "{text}"
        );
    } else {
        assert!(
            text.contains(&format!("warn  claude CLI {version}"))
                && text.contains("than the versions tested"),
            "{text}"
        );
    }
    assert!(
        text.contains(
            "warn  endpoint box (llama.cpp): up, serves gemma3-270m (12288/slot); under 16,384 per slot"
        ),
        "{text}"
    );
    assert!(
        text.contains("warn  endpoint box: chat template has no system role"),
        "{text}"
    );
    assert!(
        text.contains("fail  endpoint gone: host is up, nothing listens on port"),
        "{text}"
    );
    assert!(text.contains("is writable"), "{text}");
    // The delegate's fixed prompt, measured with the real CLI.
    assert!(
        text.contains(
            "ok    delegate fixed prompt: 7 tools offered (Bash, Edit, Glob, Grep, Read, WebFetch, Write); system "
        ),
        "{text}"
    );
}

/// Issue 14, defect 4: the real tier builds llama.cpp from source, so the
/// prerequisites name a C/C++ compiler and `.ci/run` checks for one like
/// for its other tools.
#[test]
fn prerequisites_name_the_compiler_and_ci_checks_for_it() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("## Quick start").unwrap();
    let end = readme[start..].find("\n## ").map(|e| start + e).unwrap();
    let quick = &readme[start..end];
    assert!(
        quick.contains("C/C++ compiler") && quick.contains("g++"),
        "the Quick start names the compiler: {quick}"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.contains("command -v g++") && ci.contains("g++ (or c++) is missing from PATH"),
        ".ci/run checks for the compiler"
    );
}

/// Issue 56: a `claude` that is not a working CLI (a wrapper that prints
/// a version and exits, a broken install). `doctor` prints its first line
/// while the later checks still run, names the version outside the tested
/// range with how to pin, and answers as soon as that `claude` ends, with
/// its last words and the fix, where it waited its full minute before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_names_a_claude_that_exits_early_and_a_version_outside_the_range() {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let dir = tempfile::tempdir().unwrap();
    let stand_in = dir.path().join("claude");
    std::fs::write(
        &stand_in,
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '99.1.0 (Claude Code)'; exit 0; fi\necho 'wrapper: no real claude here' >&2\nsleep 8\nexit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let h = Harness::new()
        .config("endpoints:\n  box:\n    base_url: http://127.0.0.1:9\n")
        .claude(&stand_in);
    let started = std::time::Instant::now();
    let mut child = tokio::process::Command::from(h.command(["doctor"]))
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut out = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).await.unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "the first line came before doctor ended: {first}"
    );
    assert!(
        first.starts_with("warn  claude CLI 99.1.0 (Claude Code)")
            && first.contains("newer than the versions tested")
            && first.contains("npm install -g @anthropic-ai/claude-code@"),
        "{first}"
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).await.unwrap();
    child.wait().await.unwrap();
    assert!(
        rest.contains("before it sent a request, saying: wrapper: no real claude here")
            && rest.contains("exit status: 3")
            && rest.contains("reinstall Claude Code"),
        "{rest}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(45),
        "doctor waited for a claude that had ended: {:?}",
        started.elapsed()
    );
}
