//! Test support: fake backends that answer with exactly the shapes real
//! llama.cpp and vLLM servers send (docs/guide.md, "Backend notes", says
//! what those are), plus small helpers. Shared by the integration tests (`tests/it`, `tests/e2e`)
//! and the benchmarks, which name it `support`: one crate of the workspace
//! (a dev-dependency), so it is compiled once, not into every test and
//! bench binary.
//!
//! Two rules every test and bench keeps (tests/it/harness_rules.rs holds
//! them):
//!
//! - The environment of a `localagents` it runs comes from
//!   [`harness::Harness`]: its temp dirs (HOME, the project, the state
//!   dir), its config, the environment policy, and the command line
//!   ([`harness::Harness::command`]); `Harness::with_fake` is the config of
//!   a fake llama.cpp. An odd environment is asked for by name
//!   (`bare_env`, `no_config`, `no_state_dir`, `home_dir`,
//!   `bin`), never built by hand.
//! - A wait is for a condition with a deadline, through [`until`] (or
//!   [`until_async`] for a condition that awaits, [`until_blocking`] off
//!   the runtime, [`holds_within`] for a caller that does not panic):
//!   never a loop of its own around a sleep.
//!
//! A library crate has no `CARGO_BIN_EXE_localagents` or
//! `CARGO_TARGET_TMPDIR` of its own: [`bin`] and [`target_tmp`] find them
//! beside the running test or bench, where Cargo puts them.

use std::path::PathBuf;

pub mod bench;
pub mod browser;
pub mod claude;
pub mod early_stops;
pub mod editor;
pub mod fake_bare;
pub mod fake_chat;
pub mod fake_llama;
pub mod fake_lmstudio;
pub mod fake_ollama;
pub mod fake_others;
pub mod fake_swap;
pub mod fake_vllm;
pub mod git;
pub mod harness;
pub mod long_job;
pub mod net;
pub mod otlp;
pub mod plugin_install;
pub mod reader;
pub mod route;
pub mod script;
pub mod session;
pub mod stats;
pub mod tokens;
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

/// [`until`] for a condition that awaits (an HTTP request, a tool call):
/// asked every 20 ms, each time to its end; past `limit`, a panic naming
/// `what`. The condition's last answer is not kept: a test that needs the
/// value asks again, or keeps it in the closure's captures.
pub async fn until_async<F, Fut>(
    what: &str,
    limit: std::time::Duration,
    mut cond: F,
) -> std::time::Duration
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let t = std::time::Instant::now();
    while !cond().await {
        assert!(t.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    t.elapsed()
}

/// Whether `cond` comes to hold within `limit`, asked every 20 ms,
/// blocking between asks: the pacing of [`until_blocking`], for a caller
/// that does something of its own when it does not (kills a child, names
/// what is left) instead of panicking.
pub fn holds_within(limit: std::time::Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = std::time::Instant::now();
    while !cond() {
        if t.elapsed() >= limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// [`until`] for a thread with no runtime (a bench's setup, a fake's
/// thread): the same asks and the same panic, blocking between them.
pub fn until_blocking(
    what: &str,
    limit: std::time::Duration,
    cond: impl FnMut() -> bool,
) -> std::time::Duration {
    let t = std::time::Instant::now();
    assert!(holds_within(limit, cond), "{what}: not within {limit:?}");
    t.elapsed()
}

/// Say that `test` did not run, and `why`: on stderr, which nextest hides
/// for a passing test, and in the file `LOCALAGENTS_TEST_SKIPS` names,
/// which `scripts/test.sh` lists after the runner's summary, so that the
/// skip never reads as a pass.
pub fn skip(test: &str, why: &str) {
    eprintln!("{test}: SKIPPED: {why}");
    if let Some(file) = std::env::var_os(browser::SKIPS_VAR) {
        browser::record_skip(std::path::Path::new(&file), test, why);
    }
}

/// Whether this is Linux. Elsewhere (macOS) `test` records its skip with
/// `why` ([`skip`]) and the caller returns: for a test of what only Linux
/// has.
pub fn linux_only(test: &str, why: &str) -> bool {
    if cfg!(target_os = "linux") {
        return true;
    }
    skip(test, why);
    false
}

/// Every live process on the machine (zombies are gone already: they only
/// wait for their parent) for which `pick(environ, cmdline)` holds: pid and
/// command line. `environ` is the environment as `/proc/PID/environ` holds
/// it (`NAME=value` strings, each ended by a NUL). Only the processes whose
/// environment this user may read count: its own.
#[cfg(target_os = "linux")]
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

/// macOS has no `/proc`: the same from the kernel ([`macos`]): every pid
/// (`proc_listallpids`), then each one's arguments and environment
/// (`sysctl` `KERN_PROCARGS2`, what `ps -E` reads), which the kernel gives
/// for this user's own processes only, as Linux gives `environ`.
#[cfg(target_os = "macos")]
fn processes(pick: impl Fn(&[u8], &str) -> bool) -> Vec<(u32, String)> {
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for pid in macos::all_pids() {
        let Some((args, env)) = macos::args_and_env(pid, &mut buf) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&args.join(&b' ')).into_owned();
        if !pick(&env, &cmd) || macos::is_zombie(pid) {
            continue;
        }
        out.push((pid, cmd));
    }
    out
}

/// Whether process `pid` has ended: gone, or a zombie its parent has not
/// reaped yet (Linux: `/proc/PID/stat`; macOS: `proc_pidinfo`).
#[cfg(target_os = "linux")]
pub fn process_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

/// Whether process `pid` has ended: gone, or a zombie its parent has not
/// reaped yet (Linux: `/proc/PID/stat`; macOS: `proc_pidinfo`).
#[cfg(target_os = "macos")]
pub fn process_ended(pid: u32) -> bool {
    macos::bsd_info(pid).is_none_or(|i| i.pbi_status == libc::SZOMB)
}

/// What Linux reads in `/proc`, asked of the macOS kernel instead: the
/// pids, a process's state and memory (`proc_pidinfo`, Apple's libproc.h)
/// and its arguments and environment (`sysctl` `KERN_PROCARGS2`). Each
/// answers `None` (or an empty list) when the process is gone or the
/// kernel refuses, as a `/proc` file that cannot be read.
#[cfg(target_os = "macos")]
pub(crate) mod macos {
    use std::mem::{MaybeUninit, size_of};

    /// The most pids one listing takes (`kern.maxproc` is a few thousand).
    const MAX_PIDS: usize = 1 << 16;

    /// Every pid now (`proc_listallpids`, which answers how many pids it
    /// wrote); a listing that fills the buffer may have been cut, so the
    /// buffer doubles and the call is made again.
    pub fn all_pids() -> Vec<u32> {
        let mut cap = 1024;
        loop {
            let mut buf: Vec<libc::pid_t> = vec![0; cap];
            let Ok(bytes) = libc::c_int::try_from(cap * size_of::<libc::pid_t>()) else {
                return Vec::new();
            };
            // SAFETY: `buf` holds `cap` pids, `bytes` bytes; libproc writes
            // at most `bytes` bytes into it and returns how many pids it wrote.
            let n = unsafe { libc::proc_listallpids(buf.as_mut_ptr().cast(), bytes) };
            let n = usize::try_from(n).unwrap_or(0).min(cap);
            if n < cap || cap >= MAX_PIDS {
                buf.truncate(n);
                return buf
                    .into_iter()
                    .filter_map(|p| u32::try_from(p).ok())
                    .filter(|p| *p > 0)
                    .collect();
            }
            cap *= 2;
        }
    }

    /// `proc_pidinfo(pid, flavor)` into a `T`, when the kernel fills it whole.
    fn pidinfo<T: Copy>(pid: u32, flavor: libc::c_int) -> Option<T> {
        let pid = libc::c_int::try_from(pid).ok().filter(|p| *p > 0)?;
        let size = libc::c_int::try_from(size_of::<T>()).ok()?;
        let mut info = MaybeUninit::<T>::zeroed();
        // SAFETY: `info` is `size` zeroed bytes; proc_pidinfo writes at most
        // that many and returns how many it wrote (0 on error).
        let n = unsafe { libc::proc_pidinfo(pid, flavor, 0, info.as_mut_ptr().cast(), size) };
        if n != size {
            return None;
        }
        // SAFETY: the C structs asked for here are integers and char
        // arrays, zeroed and then filled whole: any bit pattern is valid.
        Some(unsafe { info.assume_init() })
    }

    /// The kernel's BSD view of a live or zombie process (its state is
    /// `pbi_status`).
    pub fn bsd_info(pid: u32) -> Option<libc::proc_bsdinfo> {
        pidinfo(pid, libc::PROC_PIDTBSDINFO)
    }

    /// Whether `pid` is a zombie now.
    pub fn is_zombie(pid: u32) -> bool {
        bsd_info(pid).is_some_and(|i| i.pbi_status == libc::SZOMB)
    }

    /// A process's task counters: its resident size is `pti_resident_size`,
    /// in bytes.
    pub fn task_info(pid: u32) -> Option<libc::proc_taskinfo> {
        pidinfo(pid, libc::PROC_PIDTASKINFO)
    }

    /// `kern.argmax`: the size of the largest argument area, so the size
    /// a `KERN_PROCARGS2` answer can take.
    fn arg_max() -> usize {
        let mut mib = [libc::CTL_KERN, libc::KERN_ARGMAX];
        let mut value: libc::c_int = 0;
        let mut len = size_of::<libc::c_int>();
        // SAFETY: a two-level name and an int-sized answer buffer; sysctl
        // writes at most `len` bytes there.
        let r = unsafe {
            libc::sysctl(
                mib.as_mut_ptr(),
                2,
                std::ptr::from_mut(&mut value).cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        match usize::try_from(value) {
            Ok(v) if r == 0 && v >= 4096 => v,
            _ => 1 << 20,
        }
    }

    /// A process's arguments and its environment, the latter as
    /// `/proc/PID/environ` holds it (each `NAME=value` ended by a NUL).
    /// `buf` is reused from call to call. The kernel's answer
    /// (`KERN_PROCARGS2`): argc (an int), the executable's path, NULs up
    /// to an aligned offset, argc arguments, then the environment, each
    /// string ended by a NUL, the environment by an empty string.
    pub fn args_and_env(pid: u32, buf: &mut Vec<u8>) -> Option<(Vec<Vec<u8>>, Vec<u8>)> {
        let pid = libc::c_int::try_from(pid).ok().filter(|p| *p > 0)?;
        if buf.is_empty() {
            buf.resize(arg_max(), 0);
        }
        let mut mib = [libc::CTL_KERN, libc::KERN_PROCARGS2, pid];
        let mut len = buf.len();
        // SAFETY: a three-level name and `buf`, `len` bytes long; sysctl
        // writes at most `len` bytes into it and sets `len` to how many.
        let r = unsafe {
            libc::sysctl(
                mib.as_mut_ptr(),
                3,
                buf.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if r != 0 {
            return None;
        }
        parse_procargs(&buf[..len.min(buf.len())])
    }

    /// [`args_and_env`]'s reading of the kernel's answer.
    fn parse_procargs(area: &[u8]) -> Option<(Vec<Vec<u8>>, Vec<u8>)> {
        let argc = usize::try_from(i32::from_ne_bytes(area.get(..4)?.try_into().ok()?)).ok()?;
        let rest = &area[4..];
        let rest = &rest[rest.iter().position(|b| *b == 0)?..];
        let rest = &rest[rest.iter().position(|b| *b != 0)?..];
        let mut strings = rest.split(|b| *b == 0);
        let args: Vec<Vec<u8>> = strings.by_ref().take(argc).map(<[u8]>::to_vec).collect();
        if args.len() != argc {
            return None;
        }
        let mut env = Vec::new();
        for s in strings.take_while(|s| !s.is_empty()) {
            env.extend_from_slice(s);
            env.push(0);
        }
        Some((args, env))
    }
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
    if holds_within(limit, || job_processes(id).is_empty()) {
        return Ok(t.elapsed());
    }
    Err(job_processes(id))
}

/// Write a finished job's record, `<state>/jobs/<id>/job.json`, as a
/// `localagents` of this version writes it: for tests that need many jobs
/// without running them.
pub fn write_job_record(state: &std::path::Path, id: &str) {
    write_job_record_with(state, id, serde_json::json!({}));
}

/// [`write_job_record`] with the fields of `over` in place of its own.
pub fn write_job_record_with(state: &std::path::Path, id: &str, over: serde_json::Value) {
    let dir = state.join("jobs").join(id);
    std::fs::create_dir_all(&dir).expect("job dir");
    let mut rec = serde_json::json!({
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
    for (k, v) in over.as_object().expect("an object of fields") {
        rec[k] = v.clone();
    }
    std::fs::write(
        dir.join("job.json"),
        serde_json::to_vec(&rec).expect("json"),
    )
    .expect("job.json");
}
