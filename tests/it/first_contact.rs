//! First contact (issue 12): what a new session does for a user who just
//! installed the plugin from the marketplace, with the real Claude Code CLI
//! in a temporary HOME and the plugin installed from a clean copy.
//!
//! Without the binary, the SessionStart hook (the launcher) starts
//! `cargo install` into `${CLAUDE_PLUGIN_DATA}` once, detached, and says so;
//! a stand-in `cargo` records its arguments and installs the prebuilt
//! binary, so nothing compiles for minutes. With the binary, the hook says
//! "no endpoint is up" when none is, once a day, and nothing otherwise.
//!
//! The line is the hook JSON's `systemMessage`: Claude Code records it in
//! the transcript as a `hook_system_message` attachment, which is what it
//! shows the user ("SessionStart:startup says: …"), and keeps it out of the
//! model's requests. Both are checked on every line below.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::plugin::{claude_cmd, clean_checkout, output_within};
use crate::support::harness::Harness;
use crate::support::{claude, fake_llama, net, script, until_blocking};

/// The localagents binary under test, as the plugin's launcher is told of
/// it (`LOCALAGENTS_BIN`) or a stand-in cargo installs it.
fn bin() -> String {
    crate::support::bin().display().to_string()
}
const BARE_PATH: &str = "/usr/bin:/bin";

/// The plugin installed with `claude plugin marketplace add` + `install`
/// from a clean copy (the files git knows, no `target/`), and a fake
/// Anthropic API for the sessions.
struct Installed {
    _h: Harness,
    dir: PathBuf,
    home: PathBuf,
    work: PathBuf,
    /// `${CLAUDE_PLUGIN_ROOT}`. For a marketplace in a local directory,
    /// 2.1.328 runs the plugin from that directory (`readFromFolder` in
    /// `claude plugin list --json`), not from its cache copy
    /// (`installPath`).
    plugin_root: PathBuf,
    cfg: PathBuf,
    top: fake_llama::FakeLlama,
}

/// What one session start showed.
struct Started {
    run: claude::Run,
    /// The SessionStart lines shown to the user (transcript attachments).
    shown: Vec<String>,
}

fn check(o: &std::process::Output) {
    assert!(
        o.status.success(),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

async fn installed() -> Installed {
    assert!(
        !Path::new("/usr/bin/localagents").exists()
            && !Path::new("/bin/localagents").exists()
            && !Path::new("/usr/bin/cargo").exists()
            && !Path::new("/bin/cargo").exists(),
        "these tests need {BARE_PATH} without localagents or cargo"
    );
    let top = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "top-model".into(),
        ..Default::default()
    })
    .await;
    top.set_script(script::text("ok"));
    let h = Harness::new();
    let dir = h.dir().canonicalize().unwrap();
    let (home, work, checkout) = (dir.join("home"), dir.join("work"), dir.join("checkout"));
    for d in [&home, &work] {
        std::fs::create_dir_all(d).unwrap();
    }
    clean_checkout(&checkout);
    assert!(!checkout.join("target").exists());
    check(
        &claude_cmd(&home)
            .args(["plugin", "marketplace", "add"])
            .arg(&checkout)
            .output()
            .unwrap(),
    );
    check(
        &claude_cmd(&home)
            .args(["plugin", "install", "localagents@localagents"])
            .output()
            .unwrap(),
    );
    let list = claude_cmd(&home)
        .args(["plugin", "list", "--json"])
        .output()
        .unwrap();
    let entry = crate::support::plugin_install::installed_entry(&list.stdout)
        .unwrap_or_else(|| panic!("not installed: {}", String::from_utf8_lossy(&list.stdout)));
    let plugin_root = PathBuf::from(
        entry["readFromFolder"]
            .as_str()
            .or(entry["installPath"].as_str())
            .unwrap(),
    );
    // An endpoint that is up, for the sessions that have the binary.
    let cfg = dir.join("models.yaml");
    std::fs::write(
        &cfg,
        format!(
            "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n",
            top.url()
        ),
    )
    .unwrap();
    Installed {
        _h: h,
        dir,
        home,
        work,
        plugin_root,
        cfg,
        top,
    }
}

impl Installed {
    /// `claude -p hi` with this PATH (and extra env), to the end.
    async fn session(&self, path: &str, extra: &[(&str, String)]) -> Started {
        let mut env: Vec<(String, String)> = vec![
            ("PATH".into(), path.into()),
            ("ANTHROPIC_BASE_URL".into(), self.top.url().to_string()),
            ("LOCALAGENTS_CONFIG".into(), self.cfg.display().to_string()),
            (
                "LOCALAGENTS_STATE_DIR".into(),
                self.dir.join("state").display().to_string(),
            ),
            ("MCP_TIMEOUT".into(), "10000".into()),
        ];
        env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.clone())));
        let run = claude::run(
            claude::command(
                &self.home,
                &self.work,
                &env,
                &[
                    "--model",
                    "top-model",
                    "--include-hook-events",
                    "--debug-to-stderr",
                ],
                "hi",
            ),
            Duration::from_secs(90),
        )
        .await;
        assert_eq!(
            run.result().map(|r| r["subtype"].clone()),
            Some("success".into()),
            "{}",
            run.stderr
        );
        // The hook ran and succeeded (exit 0) at session start.
        let responses: Vec<&Value> = run
            .events
            .iter()
            .filter(|e| e["subtype"] == "hook_response" && e["hook_event"] == "SessionStart")
            .collect();
        assert_eq!(responses.len(), 1, "{:?}", run.events);
        assert_eq!(responses[0]["exit_code"], 0, "{}", responses[0]);
        assert_eq!(responses[0]["outcome"], "success", "{}", responses[0]);
        let shown = self.shown(&run);
        // What the user is shown never reaches the model.
        let bodies = self
            .top
            .bodies()
            .iter()
            .map(Value::to_string)
            .collect::<String>();
        for line in &shown {
            assert!(!bodies.contains(line.as_str()), "{line} reached the model");
        }
        Started { run, shown }
    }

    /// The SessionStart `hook_system_message` attachments of the run's
    /// transcript: the lines Claude Code shows the user.
    fn shown(&self, run: &claude::Run) -> Vec<String> {
        let id = run.result().unwrap()["session_id"].as_str().unwrap();
        let name = format!("{id}.jsonl");
        let projects = self.home.join(".claude/projects");
        let file = std::fs::read_dir(&projects)
            .unwrap()
            .flatten()
            .map(|d| d.path().join(&name))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("no transcript {name} under {}", projects.display()));
        std::fs::read_to_string(file)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| {
                e["attachment"]["type"] == "hook_system_message"
                    && e["attachment"]["hookEvent"] == "SessionStart"
            })
            .map(|e| {
                e["attachment"]["content"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    }

    /// Claude Code's `${CLAUDE_PLUGIN_DATA}` for the installed plugin: the
    /// one directory under `~/.claude/plugins/data/`.
    fn data_dir(&self) -> PathBuf {
        let base = self.home.join(".claude/plugins/data");
        let dirs: Vec<PathBuf> = std::fs::read_dir(&base)
            .unwrap_or_else(|e| panic!("{}: {e}", base.display()))
            .flatten()
            .map(|d| d.path())
            .collect();
        assert_eq!(dirs.len(), 1, "{dirs:?}");
        dirs[0].clone()
    }
}

/// A stand-in for `cargo` in its own directory: it records its arguments
/// and CARGO_TARGET_DIR, waits until the test creates `release` (or 60 s),
/// then exits with the code in `exit_code` (default 0), installing the
/// prebuilt binary into `<--root>/bin` on success.
struct StandIn {
    dir: PathBuf,
}

impl StandIn {
    fn new(under: &Path) -> StandIn {
        use std::os::unix::fs::PermissionsExt;
        let dir = under.join("standin");
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display();
        let bin = bin();
        let script = format!(
            r#"#!/bin/sh
echo "$*" >>"{d}/calls"
echo "$CARGO_TARGET_DIR" >"{d}/target_dir"
pwd >"{d}/cwd"
n=0
while [ ! -e "{d}/release" ] && [ "$n" -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
root=
while [ $# -gt 0 ]; do [ "$1" = --root ] && root=$2; shift; done
code=$(cat "{d}/exit_code" 2>/dev/null || echo 0)
if [ "$code" = 0 ]; then mkdir -p "$root/bin" && cp "{bin}" "$root/bin/localagents"; else echo "error: could not compile (stand-in)" >&2; fi
exit "$code"
"#
        );
        let exe = dir.join("cargo");
        std::fs::write(&exe, script).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        StandIn { dir }
    }

    /// PATH with the stand-in and the bare system dirs.
    fn path(&self) -> String {
        format!("{}:{BARE_PATH}", self.dir.display())
    }

    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn release(&self) {
        let _ = std::fs::write(self.dir.join("release"), "");
    }
}

impl Drop for StandIn {
    // A failing test does not leave the stand-in waiting.
    fn drop(&mut self) {
        self.release();
    }
}

/// The plugin MCP server's status in the run's init event.
pub(crate) fn mcp_status(run: &claude::Run) -> String {
    let init = run
        .events
        .iter()
        .find(|e| e["subtype"] == "init")
        .expect("an init event");
    init["mcp_servers"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|m| m["name"] == "plugin:localagents:localagents")
        })
        .and_then(|m| m["status"].as_str())
        .unwrap_or("absent")
        .to_string()
}

/// No process names the test's temp dir once the launcher has exited: a
/// build it started in the background (`sh -c … DATA … ROOT`, then cargo
/// with `--root DATA`) is forked before it exits, so it would be here, or
/// would have finished and left its cargo call. A check, not a sleep.
fn nothing_left_running(tmp: &Path) {
    let left = crate::support::processes_naming(&tmp.display().to_string());
    assert!(left.is_empty(), "the launcher left these running: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_session_builds_the_binary_once_and_the_next_says_still_building() {
    let p = installed().await;
    let cargo = StandIn::new(&p.dir);
    // 1. The first session starts the build and says so.
    let s1 = p.session(&cargo.path(), &[]).await;
    assert_eq!(s1.shown.len(), 1, "{:?}", s1.shown);
    let line = &s1.shown[0];
    assert!(
        line.contains("building the localagents binary in the background")
            && line.contains("3-4 minutes")
            && line.contains("/mcp"),
        "{line}"
    );
    until_blocking(
        "the stand-in cargo to start",
        Duration::from_secs(10),
        || !cargo.calls().is_empty(),
    );
    let data = p.data_dir();
    eprintln!(
        "CLAUDE_PLUGIN_ROOT {} CLAUDE_PLUGIN_DATA {}",
        p.plugin_root.display(),
        data.display()
    );
    assert!(
        data.starts_with(p.home.join(".claude/plugins/data")),
        "{}",
        data.display()
    );
    assert_eq!(
        cargo.calls(),
        vec![format!(
            "install --locked --path {} --root {}",
            p.plugin_root.display(),
            data.display()
        )]
    );
    assert!(
        line.contains(&data.join("build.log").display().to_string()),
        "{line}"
    );
    // Never in the session's project (a rust-toolchain.toml there would
    // choose the toolchain that runs).
    assert_eq!(
        std::fs::read_to_string(cargo.dir.join("cwd"))
            .unwrap()
            .trim(),
        data.canonicalize().unwrap().display().to_string(),
        "the build runs in the data dir"
    );
    // Its target dir is in the data dir, not in the plugin root.
    assert_eq!(
        std::fs::read_to_string(cargo.dir.join("target_dir"))
            .unwrap()
            .trim(),
        data.join("target").display().to_string()
    );
    // 2. The build outlived that session; the next one does not start
    // another and says it is still building.
    let s2 = p.session(&cargo.path(), &[]).await;
    assert_eq!(s2.shown.len(), 1, "{:?}", s2.shown);
    assert!(
        s2.shown[0].contains("still building") && s2.shown[0].contains("/mcp"),
        "{}",
        s2.shown[0]
    );
    assert_eq!(
        cargo.calls().len(),
        1,
        "a second build: {:?}",
        cargo.calls()
    );
    // 3. The build ends: the binary lands where the launcher looks.
    cargo.release();
    let built = data.join("bin/localagents");
    until_blocking("the build to finish", Duration::from_secs(10), || {
        std::fs::read_to_string(data.join("build.status")).is_ok_and(|s| s.trim() == "0")
            && !data.join("build.lock").exists()
    });
    assert!(built.is_file(), "{}", built.display());
    // 4. The next session runs that binary's hook, which says once that it
    // is built and how to get the MCP server going: Claude Code 2.1.328
    // skips a plugin MCP server that failed to start, in new sessions too,
    // for 15 minutes, and records that in ~/.claude/mcp-needs-auth-cache.json.
    let s3 = p.session(&cargo.path(), &[]).await;
    assert_eq!(s3.shown.len(), 1, "{:?}", s3.shown);
    assert!(
        s3.shown[0].contains("binary is built") && s3.shown[0].contains("/mcp"),
        "{}",
        s3.shown[0]
    );
    assert_eq!(
        mcp_status(&s3.run),
        "failed",
        "Claude Code's 15-minute skip"
    );
    let skip = p.home.join(".claude/mcp-needs-auth-cache.json");
    assert!(
        std::fs::read_to_string(&skip)
            .unwrap_or_default()
            .contains("plugin:localagents:localagents"),
        "{}",
        skip.display()
    );
    // 5. Once that skip is over (15 minutes, here: its entry removed), a
    // session starts the built binary's MCP server; with an endpoint up the
    // hook says nothing.
    std::fs::remove_file(&skip).unwrap();
    let s4 = p.session(&cargo.path(), &[]).await;
    assert!(s4.shown.is_empty(), "{:?}", s4.shown);
    assert_eq!(mcp_status(&s4.run), "connected", "{}", s4.run.stderr);
    assert_eq!(cargo.calls().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_build_names_its_log_and_is_not_retried() {
    let p = installed().await;
    let cargo = StandIn::new(&p.dir);
    std::fs::write(cargo.dir.join("exit_code"), "101").unwrap();
    cargo.release();
    let s1 = p.session(&cargo.path(), &[]).await;
    assert!(s1.shown[0].contains("building"), "{:?}", s1.shown);
    let data = p.data_dir();
    until_blocking("the build to fail", Duration::from_secs(10), || {
        data.join("build.status").is_file()
    });
    let s2 = p.session(&cargo.path(), &[]).await;
    assert_eq!(s2.shown.len(), 1, "{:?}", s2.shown);
    let log = data.join("build.log");
    let line = &s2.shown[0];
    assert!(
        line.contains("failed")
            && line.contains("exit code 101")
            && line.contains(&format!("the log is {}", log.display())),
        "{line}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("could not compile (stand-in)") && text.contains("exit code 101"),
        "{text}"
    );
    assert_eq!(cargo.calls().len(), 1, "retried: {:?}", cargo.calls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_cargo_the_line_names_the_install_steps() {
    let p = installed().await;
    let s = p.session(BARE_PATH, &[]).await;
    assert_eq!(s.shown.len(), 1, "{:?}", s.shown);
    let data = p.data_dir();
    let line = &s.shown[0];
    assert!(
        line.contains("cargo is not on PATH")
            && line.contains("https://rustup.rs")
            && line.contains(&format!(
                "cargo install --locked --path \"{}\" --root \"{}\"",
                p.plugin_root.display(),
                data.display()
            ))
            && line.contains("/mcp"),
        "{line}"
    );
    assert!(!data.join("build.lock").exists() && !data.join("build.log").exists());
}

/// The launcher as Claude Code runs a hook: hook JSON on stdin, the plugin
/// env, PATH as given, HOME the data dir's parent, nothing else.
fn launcher_hook(root: &Path, data: &Path, path: &str, which: &str) -> Command {
    let home = data.parent().unwrap();
    let mut c = Harness::new()
        .bin(root.join("plugin/localagents"))
        .bare_env()
        .no_config()
        .no_state_dir()
        .home_dir(home)
        .cwd(home)
        .env("PATH", path)
        .env("CLAUDE_PLUGIN_ROOT", root)
        .env("CLAUDE_PLUGIN_DATA", data)
        .command(["hook", which]);
    c.env_remove("LOCALAGENTS_CLAUDE");
    c
}

#[test]
fn the_prompt_hook_costs_nothing_without_the_binary() {
    let h = Harness::new();
    let root = h.dir().join("checkout");
    clean_checkout(&root);
    let data = h.dir().join("data");
    let cargo = StandIn::new(h.dir());
    cargo.release();
    let input = json!({"session_id": "s", "cwd": h.dir(), "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).to_string();
    for path in [cargo.path(), BARE_PATH.to_string()] {
        let t = Instant::now();
        let mut child = launcher_hook(&root, &data, &path, "prompt-submit")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
        }
        if !crate::support::holds_within(Duration::from_secs(1), || {
            child.try_wait().unwrap().is_some()
        }) {
            let _ = child.kill();
            panic!("the prompt hook did not finish within 1 s (PATH={path})");
        }
        let took = t.elapsed();
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{o:?}");
        eprintln!("prompt hook without the binary (PATH={path}): {took:?}");
    }
    // It never starts a build, even with cargo on PATH: nothing it started
    // is left running (a build would be, or would have called cargo).
    nothing_left_running(h.dir());
    assert!(cargo.calls().is_empty(), "{:?}", cargo.calls());
    assert!(!data.join("build.lock").exists());
}

#[test]
fn the_launcher_never_starts_a_build_without_plugin_data() {
    let h = Harness::new();
    let root = h.dir().join("checkout");
    clean_checkout(&root);
    let cargo = StandIn::new(h.dir());
    cargo.release();
    let mut c = launcher_hook(&root, &h.dir().join("data"), &cargo.path(), "session-start");
    c.env_remove("CLAUDE_PLUGIN_DATA");
    let o = output_within(&mut c, Duration::from_secs(2)).expect("finishes");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    let line = v["systemMessage"].as_str().unwrap();
    assert!(
        line.contains("CLAUDE_PLUGIN_DATA is not set")
            && line.contains(&format!(
                "cargo install --locked --path \"{}\"",
                root.display()
            )),
        "{line}"
    );
    nothing_left_running(h.dir());
    assert!(cargo.calls().is_empty(), "{:?}", cargo.calls());
}

#[test]
fn the_launcher_finds_cargo_where_rustup_puts_it() {
    // A desktop-launched Claude Code may lack ~/.cargo/bin on its PATH.
    let h = Harness::new();
    let home = h.dir().canonicalize().unwrap();
    let root = home.join("checkout");
    clean_checkout(&root);
    let cargo = StandIn::new(&home);
    cargo.release();
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::os::unix::fs::symlink(cargo.dir.join("cargo"), home.join(".cargo/bin/cargo")).unwrap();
    let data = home.join("data");
    let o = output_within(
        &mut launcher_hook(&root, &data, BARE_PATH, "session-start"),
        Duration::from_secs(2),
    )
    .expect("finishes");
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("building the localagents binary"),
        "{o:?}"
    );
    until_blocking("the build", Duration::from_secs(10), || {
        data.join("bin/localagents").is_file() && !data.join("build.lock").exists()
    });
    assert_eq!(
        cargo.calls(),
        vec![format!(
            "install --locked --path {} --root {}",
            root.display(),
            data.display()
        )]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_binary_no_endpoint_is_said_once_a_day() {
    let p = installed().await;
    let refused = net::refused_addr();
    let down = p.dir.join("down.yaml");
    std::fs::write(
        &down,
        format!("endpoints:\n  box:\n    base_url: http://{refused}\n    backend: llama.cpp\n"),
    )
    .unwrap();
    let env = [
        ("LOCALAGENTS_BIN", bin()),
        ("LOCALAGENTS_CONFIG", down.display().to_string()),
    ];
    let s1 = p.session(BARE_PATH, &env).await;
    assert_eq!(
        s1.shown,
        vec!["localagents: no endpoint is up; `/local-status` shows why.".to_string()]
    );
    let s2 = p.session(BARE_PATH, &env).await;
    assert!(
        s2.shown.is_empty(),
        "said again within the day: {:?}",
        s2.shown
    );
    // With the endpoint up (a fresh state dir): nothing to say.
    let up_env = [
        ("LOCALAGENTS_BIN", bin()),
        (
            "LOCALAGENTS_STATE_DIR",
            p.dir.join("state-up").display().to_string(),
        ),
    ];
    let s3 = p.session(BARE_PATH, &up_env).await;
    assert!(s3.shown.is_empty(), "{:?}", s3.shown);
}

/// The hook binary itself: output, cache, and a hung endpoint.
fn session_start(h: &Harness, state: &Path) -> (std::process::Output, Duration) {
    let t = Instant::now();
    let o = output_within(
        &mut h.clone().state_at(state).command(["hook", "session-start"]),
        Duration::from_secs(10),
    )
    .expect("the hook finishes");
    (o, t.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_start_hook_never_waits_long_for_a_hung_endpoint() {
    let silent = net::silent_listener().await;
    let up = fake_llama::spawn(fake_llama::LlamaOpts::default()).await;
    let h = Harness::new();
    let cfg = h.config_path().to_path_buf();
    let state = h.state_dir().to_path_buf();
    // Only the hung endpoint: it gives up within its budget and says so.
    std::fs::write(
        &cfg,
        format!(
            "endpoints:\n  hung:\n    base_url: http://{}\n    backend: llama.cpp\n",
            silent.addr
        ),
    )
    .unwrap();
    let (o, took) = tokio::task::block_in_place(|| session_start(&h, &state));
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v,
        json!({"systemMessage": "localagents: no endpoint is up; `/local-status` shows why."})
    );
    assert!(took < Duration::from_millis(3000), "{took:?}");
    // Hung and up together: the first up endpoint ends the probe at once.
    std::fs::write(
        &cfg,
        format!(
            "endpoints:\n  hung:\n    base_url: http://{}\n    backend: llama.cpp\n  box:\n    base_url: {}\n    backend: llama.cpp\n",
            silent.addr,
            up.url()
        ),
    )
    .unwrap();
    let state2 = h.dir().join("state2");
    let (o, took) = tokio::task::block_in_place(|| session_start(&h, &state2));
    assert_eq!(o.status.code(), Some(0));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(took < Duration::from_millis(1000), "{took:?}");
    // A config that does not load is named, once.
    std::fs::write(&cfg, "endpoints: [unclosed\n").unwrap();
    let state3 = h.dir().join("state3");
    let (o, _) = tokio::task::block_in_place(|| session_start(&h, &state3));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["systemMessage"]
            .as_str()
            .unwrap()
            .contains("the config does not load"),
        "{v}"
    );
    let (o, _) = tokio::task::block_in_place(|| session_start(&h, &state3));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_session_shows_the_line_on_screen() {
    // The transcript's hook_system_message is what the UI renders; this
    // checks the screen itself once, in a pseudo-terminal.
    let p = installed().await;
    let key = "sk-local-test-key-000000000000";
    std::fs::write(
        p.home.join(".claude.json"),
        json!({"hasCompletedOnboarding": true, "theme": "dark", "numStartups": 5,
            "customApiKeyResponses": {"approved": [&key[key.len() - 20..]], "rejected": []},
            "projects": {p.work.display().to_string(): {"hasTrustDialogAccepted": true, "allowedTools": [], "hasCompletedProjectOnboarding": true}}})
        .to_string(),
    )
    .unwrap();
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/drive_pty.py");
    let out = tokio::process::Command::new("python3")
        .arg(driver)
        .arg(claude::binary())
        .arg(&p.work)
        .arg(p.dir.join("never"))
        .arg("3")
        .arg("")
        .arg("--")
        .args(["--model", "top-model"])
        .env_clear()
        .env("PATH", BARE_PATH)
        // harness-rules: Claude Code's own session (the plugin starts localagents)
        .env("HOME", &p.home)
        .env("TERM", "xterm-256color")
        .env("ANTHROPIC_BASE_URL", p.top.url())
        .env("ANTHROPIC_API_KEY", key)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .output()
        .await
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(status.contains("\"ready\": true"), "{status}");
    let screen = std::fs::read_to_string(p.dir.join("tty.txt")).unwrap_or_default();
    assert!(
        screen.contains(
            "SessionStart:startup says: localagents: the localagents binary is not installed"
        ),
        "{screen}"
    );
}
