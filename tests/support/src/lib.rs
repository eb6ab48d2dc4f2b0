//! Test support: fake backends that answer with exactly the shapes real
//! llama.cpp and vLLM servers send (see shared/reference/backends.md), plus
//! small helpers. Shared by the integration tests (`tests/it`, `tests/e2e`)
//! and the benchmarks, which name it `support`: one crate of the workspace
//! (a dev-dependency), so it is compiled once, not into every test and
//! bench binary.
//!
//! A library crate has no `CARGO_BIN_EXE_localagents` or
//! `CARGO_TARGET_TMPDIR` of its own: [`bin`] and [`target_tmp`] find them
//! beside the running test or bench, where Cargo puts them.

use std::path::PathBuf;

pub mod bench;
pub mod browser;
pub mod claude;
pub mod fake_llama;
pub mod fake_swap;
pub mod fake_vllm;
pub mod git;
pub mod harness;
pub mod net;
pub mod plugin_install;
pub mod route;
pub mod script;
pub mod session;
pub mod stats;
pub mod vllm_router;

/// The running test's or bench's `target/<profile>/deps` directory.
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent().expect("the deps dir").to_path_buf()
}

/// The `localagents` binary Cargo built for this test or bench run
/// (`target/<profile>/localagents`: Cargo builds a package's binaries for
/// its integration tests and benchmarks). `LOCALAGENTS_TEST_BIN` names
/// another.
pub fn bin() -> PathBuf {
    if let Some(p) = std::env::var_os("LOCALAGENTS_TEST_BIN") {
        return PathBuf::from(p);
    }
    let profile = deps_dir().parent().expect("the profile dir").to_path_buf();
    profile.join("localagents")
}

/// Cargo's temp dir for tests and benches, `target/tmp`
/// (`CARGO_TARGET_TMPDIR` of an integration test), made if missing.
pub fn target_tmp() -> PathBuf {
    let target = deps_dir()
        .parent()
        .and_then(|p| p.parent())
        .expect("the target dir")
        .to_path_buf();
    let tmp = target.join("tmp");
    std::fs::create_dir_all(&tmp).expect("target/tmp");
    tmp
}

/// The repository's root (the `localagents` package).
pub fn repo_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .canonicalize()
        .expect("the repository root")
}

/// A fresh HTTP client for a test to talk to a shim or a fake. reqwest is
/// built without a default crypto provider (`rustls-no-provider`), so this
/// installs the one the binary installs first (`probe::install_crypto_provider`):
/// a test must not depend on an earlier test in the same process having done it.
/// No proxy: everything a test talks to is on loopback.
pub fn http_client() -> reqwest::Client {
    localagents::probe::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

/// Wait until `cond` holds, asking every 20 ms; how long it took. Panics
/// naming `what` past `limit`: a test waits for a condition with a
/// deadline, never for a fixed sleep.
pub async fn until(
    what: &str,
    limit: std::time::Duration,
    mut cond: impl FnMut() -> bool,
) -> std::time::Duration {
    let t = std::time::Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    t.elapsed()
}

/// Every live process on the machine (zombies are gone already: they only
/// wait for their parent) for which `pick(environ, cmdline)` holds: pid and
/// command line.
fn processes(pick: impl Fn(&[u8], &str) -> bool) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    for ent in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = ent.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(ent.path().join("environ")) else {
            continue;
        };
        let cmd = std::fs::read(ent.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if !pick(&env, &cmd) {
            continue;
        }
        let stat = std::fs::read_to_string(ent.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        out.push((pid, cmd));
    }
    out
}

/// Every process on the machine whose environment says it belongs to job
/// `id` (`LOCALAGENTS_JOB`, which every descendant of a delegate inherits,
/// whatever its session or group): pid and command line.
pub fn job_processes(id: &str) -> Vec<(u32, String)> {
    let tag = format!("LOCALAGENTS_JOB={id}");
    processes(|env, _| env.split(|b| *b == 0).any(|v| v == tag.as_bytes()))
}

/// Every process on the machine whose command line names `needle` (say a
/// test's own temp dir): what a program the test ran left running.
pub fn processes_naming(needle: &str) -> Vec<(u32, String)> {
    processes(|_, cmd| cmd.contains(needle))
}

/// Wait up to `limit` for job `id` to have no process left; how long it took,
/// or the processes still there.
pub fn wait_job_gone(
    id: &str,
    limit: std::time::Duration,
) -> Result<std::time::Duration, Vec<(u32, String)>> {
    let t = std::time::Instant::now();
    loop {
        let left = job_processes(id);
        if left.is_empty() {
            return Ok(t.elapsed());
        }
        if t.elapsed() > limit {
            return Err(left);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Write a finished job's record, `<state>/jobs/<id>/job.json`, as a
/// `localagents` of this version writes it: for tests that need many jobs
/// without running them.
pub fn write_job_record(state: &std::path::Path, id: &str) {
    let dir = state.join("jobs").join(id);
    std::fs::create_dir_all(&dir).expect("job dir");
    let rec = serde_json::json!({
        "id": id, "task": format!("task of {id}"), "model": "gemma3-270m", "served_id": "gemma3-270m",
        "endpoint": "box", "base_url": "http://127.0.0.1:1", "cwd": "/tmp", "origin_cwd": "/tmp",
        "isolation": "none", "status": "succeeded", "created": "2026-12-01T00:00:00.000Z",
        "started": null, "finished": "2026-12-01T00:01:00.000Z", "elapsed_s": 60.0,
        "session_id": "s", "result": "done", "error": null, "num_turns": 1, "tool_calls": 0,
        "usage": {"input": 1, "cache_read": 0, "output": 1}, "files_touched": [],
        "files_changed": [], "worktree": null, "last_activity": null,
        "log_dir": dir, "context": 32768, "queued_note": null, "metrics": null,
        "permission_mode": "acceptEdits", "max_turns": 10, "timeout_s": 60,
        "allowed_tools": [], "disallowed_tools": [], "system_prompt_append": null,
        "resumed_from": null, "pid": null, "owner_pid": 1
    });
    std::fs::write(
        dir.join("job.json"),
        serde_json::to_vec(&rec).expect("json"),
    )
    .expect("job.json");
}
