//! Plugin figures (issue 4): the prompt hook's run time with 200 finished
//! jobs in the state dir, and `claude plugin install` time. Issue 12: the
//! SessionStart hook's run time with the binary present, with a fresh cache
//! (an endpoint found up minutes ago: no probe) and without one (a probe of
//! a local fake llama.cpp that is up). Issue 22: the install with the
//! prebuilt binary through npm, and the first `tools/list` after it.
//!
//! Run: `cargo bench --bench plugin`. Prints a Markdown table; `-- --markdown`
//! prints only the docs/benchmarks.md table (scripts/bench-readme.sh pastes it between
//! the `<!-- bench:plugin -->` markers).
//!
//! `-- --smoke` (run by `.ci/run`): only the hook, 20 runs, no Claude Code
//! and no network; fails on a gross regression, a p50 over
//! [`SMOKE_HOOK_MS`]; and the SessionStart hook with a fresh cache, 20 runs,
//! limit [`SMOKE_SESSION_START_MS`].

use localagents_testkit as support;

use std::io::Write;
use std::process::Stdio;
use std::time::Instant;

use serde_json::json;

use support::harness::Harness;
use support::stats::pct;

/// Smoke limit: the prompt hook's run time, p50.
const SMOKE_HOOK_MS: f64 = 50.0;
/// Smoke limit: the SessionStart hook's run time with a fresh cache, p50.
const SMOKE_SESSION_START_MS: f64 = 50.0;

/// How the SessionStart hook is started.
#[derive(Clone, Copy, PartialEq)]
enum Via {
    /// `localagents hook session-start`.
    Binary,
    /// What Claude Code runs: `plugin/localagents hook session-start`, the
    /// binary in `${CLAUDE_PLUGIN_DATA}/bin`, PATH `/usr/bin:/bin`.
    Launcher,
}

/// The SessionStart hook run `runs` times; each run's milliseconds.
/// `fresh`: keep the cache the first run writes; else remove it before
/// each run, so each run probes.
fn session_start_ms(
    state: &std::path::Path,
    cfg: &std::path::Path,
    runs: usize,
    fresh: bool,
    via: Via,
) -> Vec<f64> {
    let cache = state.join("hook/session-start.json");
    let data = state.join("plugin-data");
    if via == Via::Launcher {
        std::fs::create_dir_all(data.join("bin")).unwrap();
        let _ = std::os::unix::fs::symlink(support::bin(), data.join("bin/localagents"));
    }
    // The config and state reach the hook through the environment, as the
    // plugin passes them on.
    let root = env!("CARGO_MANIFEST_DIR");
    let h = match via {
        Via::Binary => Harness::new().no_config().no_state_dir(),
        // What Claude Code gives the launcher: nothing but the plugin's
        // variables and a bare PATH.
        Via::Launcher => Harness::new()
            .bin(format!("{root}/plugin/localagents"))
            .bare_env()
            .no_config()
            .no_state_dir()
            .env("PATH", "/usr/bin:/bin")
            .env("CLAUDE_PLUGIN_ROOT", root)
            .env("CLAUDE_PLUGIN_DATA", &data),
    };
    let run = || {
        let t = Instant::now();
        let mut c = h.cmd();
        match via {
            Via::Binary => c.env_remove("CLAUDE_PLUGIN_DATA"),
            Via::Launcher => c.env_remove("HOME").env_remove("LOCALAGENTS_CLAUDE"),
        };
        let o = c
            .env("LOCALAGENTS_STATE_DIR", state)
            .env("LOCALAGENTS_CONFIG", cfg)
            .args(["hook", "session-start"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            o.status.success() && o.stdout.is_empty(),
            "session-start: {o:?}"
        );
        t.elapsed().as_secs_f64() * 1000.0
    };
    if fresh {
        run();
        assert!(cache.is_file(), "the first run writes the cache");
    }
    (0..runs)
        .map(|_| {
            if !fresh {
                let _ = std::fs::remove_file(&cache);
            }
            run()
        })
        .collect()
}

use support::bench::Mode;

fn mode() -> Mode {
    support::bench::mode("plugin", true)
}

fn main() {
    let mode = mode();
    let tmp = Harness::new().no_config();
    let state = tmp.state_dir().to_path_buf();
    let proj = tmp.dir().join("proj");
    let other = tmp.dir().join("other");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    for i in 0..200u32 {
        let created = chrono::Utc::now() - chrono::Duration::seconds(i as i64 * 300 + 600);
        let id = format!(
            "{}-{:08x}",
            created.format("%Y%m%d-%H%M%S"),
            0xb0000000u32 + i
        );
        let dir = state.join("jobs").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        let cwd = if i % 2 == 0 { &proj } else { &other };
        let rec = json!({
            "id": id, "task": "a task ".repeat(40), "model": "m", "served_id": "qwen3.8-27b", "endpoint": "box", "base_url": "http://x",
            "cwd": cwd, "origin_cwd": cwd, "isolation": "none", "status": "succeeded", "created": created.to_rfc3339(),
            "started": created.to_rfc3339(), "finished": (created + chrono::Duration::seconds(200)).to_rfc3339(), "elapsed_s": 200.0,
            "session_id": "s", "result": "done ".repeat(100), "error": null, "num_turns": 4, "tool_calls": 6,
            "usage": {"input": 1, "cache_read": 2, "output": 3}, "files_touched": ["a"], "files_changed": ["a", "b"],
            "worktree": null, "last_activity": null, "log_dir": dir, "context": 131072, "metrics": null, "queued_note": null,
            "permission_mode": "acceptEdits", "max_turns": 60, "timeout_s": 1800, "allowed_tools": [], "disallowed_tools": [],
            "system_prompt_append": null, "resumed_from": null, "pid": null, "owner_pid": 1
        });
        std::fs::write(
            dir.join("job.json"),
            serde_json::to_vec_pretty(&rec).unwrap(),
        )
        .unwrap();
    }
    let input = json!({"session_id": "bench-session", "cwd": proj, "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).to_string();
    let mut ms = Vec::new();
    let mut reported = 0;
    let runs = if mode == Mode::Smoke { 20 } else { 100 };
    for _ in 0..runs {
        let t = Instant::now();
        let mut c = tmp
            .command(["hook", "prompt-submit"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "hook failed: {}", o.status);
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        reported += String::from_utf8_lossy(&o.stdout)
            .matches("localagents job ")
            .count();
    }
    let first = ms[0];
    let (p50, p95) = (pct(&mut ms, 0.5), pct(&mut ms, 0.95));

    // The SessionStart hook, binary present, one endpoint up (a fake).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let fake = rt.block_on(support::fake_llama::spawn(Default::default()));
    let cfg = tmp.dir().join("models.yaml");
    std::fs::write(
        &cfg,
        format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n",
            fake.url()
        ),
    )
    .unwrap();
    let ss_runs = if mode == Mode::Smoke { 20 } else { 50 };
    let mut fresh = session_start_ms(
        &tmp.dir().join("ss-fresh"),
        &cfg,
        ss_runs,
        true,
        Via::Binary,
    );
    let (ss_p50, ss_p95) = (pct(&mut fresh, 0.5), pct(&mut fresh, 0.95));
    if mode == Mode::Smoke {
        println!(
            "smoke plugin: SessionStart hook, fresh cache, p50 of {ss_runs} runs: {ss_p50:.1} ms; limit {SMOKE_SESSION_START_MS} ms"
        );
        if ss_p50 > SMOKE_SESSION_START_MS {
            eprintln!(
                "smoke plugin FAILED: the SessionStart hook took {ss_p50:.1} ms (p50 of {ss_runs} runs, fresh cache), over the {SMOKE_SESSION_START_MS} ms limit."
            );
            std::process::exit(1);
        }
    }
    let mut cold = if mode == Mode::Smoke {
        vec![0.0]
    } else {
        session_start_ms(
            &tmp.dir().join("ss-cold"),
            &cfg,
            ss_runs,
            false,
            Via::Binary,
        )
    };
    let (cold_p50, cold_p95) = (pct(&mut cold, 0.5), pct(&mut cold, 0.95));
    let mut launched = if mode == Mode::Smoke {
        vec![0.0]
    } else {
        session_start_ms(
            &tmp.dir().join("ss-launcher"),
            &cfg,
            ss_runs,
            true,
            Via::Launcher,
        )
    };
    let (l_p50, l_p95) = (pct(&mut launched, 0.5), pct(&mut launched, 0.95));
    drop(fake);

    if mode == Mode::Smoke {
        println!(
            "smoke plugin: prompt hook, 200 finished jobs in the state dir, p50 of {runs} runs: {p50:.1} ms (first run {first:.1} ms, max {:.1} ms); limit {SMOKE_HOOK_MS} ms",
            ms[ms.len() - 1]
        );
        if p50 > SMOKE_HOOK_MS {
            eprintln!(
                "smoke plugin FAILED: the prompt hook took {p50:.1} ms (p50 of {runs} runs), over the {SMOKE_HOOK_MS} ms limit."
            );
            std::process::exit(1);
        }
        return;
    }

    // Plugin install from a clean directory holding only the plugin files.
    let plug = tmp.dir().join("plugin");
    localagents::setup::write_plugin_files(&plug).unwrap();
    let home = tmp.home().to_path_buf();
    let cl = |args: &[&str]| {
        support::plugin_install::claude_cmd(&home)
            .args(args)
            .output()
            .unwrap()
    };
    let t = Instant::now();
    assert!(
        cl(&["plugin", "marketplace", "add", plug.to_str().unwrap()])
            .status
            .success()
    );
    let add_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    assert!(
        cl(&["plugin", "install", "localagents@localagents"])
            .status
            .success()
    );
    let install_s = t.elapsed().as_secs_f64();

    println!("| figure | value | target |");
    println!("|---|---|---|");
    println!(
        "| hook run time, 200 finished jobs in the state dir (100 for this project), {runs} runs | p50 {p50:.1} ms, p95 {p95:.1} ms, first run {first:.1} ms | p50 < 20 ms |"
    );
    println!(
        "| SessionStart hook run time, binary present, fresh cache (no probe), {ss_runs} runs | p50 {ss_p50:.1} ms, p95 {ss_p95:.1} ms | p50 < 30 ms |"
    );
    println!(
        "| SessionStart hook run time, no cache: probes one local endpoint that is up, {ss_runs} runs | p50 {cold_p50:.1} ms, p95 {cold_p95:.1} ms | |"
    );
    println!(
        "| the same as Claude Code runs it, through `plugin/localagents` (binary in `${{CLAUDE_PLUGIN_DATA}}/bin`), fresh cache, {ss_runs} runs | p50 {l_p50:.1} ms, p95 {l_p95:.1} ms | |"
    );
    println!(
        "| `claude plugin marketplace add` (clean plugin dir) | {:.2} s | |",
        add_s
    );
    println!(
        "| `claude plugin install localagents@localagents` | {:.2} s | |",
        install_s
    );
    // Issue 22: the install a user without Rust gets. The release binary
    // packed as this machine's npm package (linux-x64 on CI), the plugin's lockfile generated
    // from it, the npm cache seeded; `claude plugin marketplace add
    // localagents/localagents` (git clones a local repository in place of
    // GitHub's) + `install` with no cargo on PATH, then the first
    // `tools/list` through the launcher. Fresh HOME each run.
    let npm_runs = 3;
    let packs = tmp.dir().join("npm-packs");
    let packed = support::plugin_install::pack(&packs, &support::plugin_install::pack_bin());
    let size = std::fs::metadata(&packed.platform).unwrap().len();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (mut installs, mut lists) = (Vec::new(), Vec::new());
    for _ in 0..npm_runs {
        let m = support::plugin_install::market(&packs, None);
        support::plugin_install::npm_cache_add(&m.cache, &packed.platform);
        let path = support::plugin_install::path_without(&m.dir.join("path"), &[]);
        let (_, took, root) = m.install(&path);
        let platform = support::plugin_install::platform();
        assert!(
            root.join(format!(
                "node_modules/@localagents/cli-{platform}/bin/localagents"
            ))
            .is_file()
        );
        let cfg = support::plugin_install::endpoint_config(&m.dir, "http://127.0.0.1:9");
        let (names, first) = rt.block_on(m.tools(&root, &path, &cfg));
        assert!(names.iter().any(|n| n == "run_agent"));
        installs.push(took.as_secs_f64());
        lists.push(first.as_secs_f64() * 1000.0);
    }
    installs.sort_by(f64::total_cmp);
    lists.sort_by(f64::total_cmp);
    println!(
        "| no Rust: `marketplace add localagents/localagents` + `install`, prebuilt binary from a seeded npm cache ({} package {:.1} MB), median of {npm_runs} | {:.2} s (max {:.2} s) | < 10 s |",
        support::plugin_install::platform(),
        size as f64 / 1e6,
        installs[npm_runs / 2],
        installs[npm_runs - 1]
    );
    println!(
        "| then the first `tools/list` through the launcher, median of {npm_runs} | {:.0} ms | |",
        lists[npm_runs / 2]
    );
    if mode == Mode::Full {
        println!("\n{reported} jobs reported by the hook in all, 5 a prompt at most");
    }
}
