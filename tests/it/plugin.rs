//! The plugin bundle with the real Claude Code CLI in a temporary HOME:
//! validation, marketplace install, MCP and delegation through the real
//! client, the prompt hook, `/local-status`, and the launcher.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::harness::Harness;
pub(crate) use crate::support::plugin_install::{claude_cmd, clean_checkout};
use crate::support::script::{self, Reply};
use crate::support::{claude, fake_llama};

/// The localagents binary under test, for a launcher to find.
fn bin() -> PathBuf {
    crate::support::bin()
}

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TOOL: &str = "mcp__plugin_localagents_localagents__";

#[test]
fn plugin_validates_strictly_and_versions_match() {
    let h = Harness::new();
    let out = claude_cmd(h.home())
        .args(["plugin", "validate", ROOT, "--strict"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Validation passed"), "{text}");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(ROOT).join(".claude-plugin/plugin.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        manifest["version"],
        env!("CARGO_PKG_VERSION"),
        "plugin.json and Cargo.toml versions"
    );
    assert_eq!(manifest["name"], "localagents");
}

#[test]
fn the_binary_embeds_every_plugin_file() {
    let embedded: Vec<&str> = localagents::setup::PLUGIN_FILES
        .iter()
        .map(|f| f.0)
        .collect();
    for dir in [
        ".claude-plugin",
        "plugin",
        "bin",
        "hooks",
        "commands",
        "skills/local-agents",
    ] {
        for e in std::fs::read_dir(Path::new(ROOT).join(dir)).unwrap() {
            let rel = format!("{dir}/{}", e.unwrap().file_name().to_string_lossy());
            assert!(
                embedded.contains(&rel.as_str()),
                "{rel} is not in setup::PLUGIN_FILES"
            );
        }
    }
    for (rel, body, _) in localagents::setup::PLUGIN_FILES {
        assert_eq!(
            &std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap(),
            body,
            "{rel}"
        );
    }
}

#[test]
fn setup_writes_config_and_registers_the_plugin_idempotently() {
    // `localagents setup` as a person runs it: a shell with little
    // exported, no --config or --state-dir, in HOME.
    let h = Harness::new();
    let setup = h
        .clone()
        .bare_env()
        .no_config()
        .no_state_dir()
        .claude(claude::binary())
        .cwd(h.home())
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    let run = || setup.command(["setup"]).output().unwrap();
    let t = Instant::now();
    let o = run();
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(text.contains("wrote a starter"), "{text}");
    assert!(h.home().join(".config/localagents/models.yaml").is_file());
    // The starter probes the local defaults (llama.cpp, Ollama, LM
    // Studio); the remote examples are comments, so a newcomer's first
    // doctor names no example host (issue 44). Before, it printed a
    // failure for gpu-server.lan.
    let doctor = setup.command(["doctor"]).output().unwrap();
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert!(!said.contains("gpu-server"), "{said}");
    assert!(said.contains("127.0.0.1:11434"), "{said}");
    let st = setup.command(["status", "--json"]).output().unwrap();
    let st: serde_json::Value = serde_json::from_slice(&st.stdout).unwrap();
    let names: Vec<&str> = st["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["local", "local-9931", "ollama", "lmstudio"], "{st}");
    assert!(
        h.home()
            .join(".local/share/localagents/plugin/plugin/localagents")
            .is_file()
    );
    let o = run();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{text}");
    assert!(text.contains("left as is"), "{text}");
    let list = claude_cmd(h.home())
        .args(["plugin", "list", "--json"])
        .output()
        .unwrap();
    let entry = crate::support::plugin_install::installed_entry(&list.stdout).unwrap_or_default();
    assert_eq!(entry["enabled"], true, "{entry}");
    eprintln!("localagents setup (config + marketplace add + install) took {took:?}");
}

#[test]
fn marketplace_add_then_install_enables_the_plugin() {
    let h = Harness::new();
    let checkout = h.home().join("checkout");
    clean_checkout(&checkout);
    let add = claude_cmd(h.home())
        .args(["plugin", "marketplace", "add"])
        .arg(&checkout)
        .output()
        .unwrap();
    assert!(
        add.status.success(),
        "{}{}",
        String::from_utf8_lossy(&add.stdout),
        String::from_utf8_lossy(&add.stderr)
    );
    let t = Instant::now();
    let inst = claude_cmd(h.home())
        .args(["plugin", "install", "localagents@localagents"])
        .output()
        .unwrap();
    let took = t.elapsed();
    assert!(
        inst.status.success(),
        "{}{}",
        String::from_utf8_lossy(&inst.stdout),
        String::from_utf8_lossy(&inst.stderr)
    );
    let list = claude_cmd(h.home())
        .args(["plugin", "list", "--json"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&list.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&list.stdout)));
    let text = v.to_string();
    assert!(text.contains("localagents@localagents"), "{text}");
    let entry = v
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|p| p.to_string().contains("localagents@localagents"))
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(entry["enabled"], true, "{entry}");
    eprintln!("plugin install took {took:?}");
}

#[test]
fn launcher_finds_the_binary_by_each_route_and_explains_when_none() {
    let launcher = Path::new(ROOT).join("plugin/localagents");
    let h = Harness::new();
    let bare_path = "/usr/bin:/bin";
    // The launcher with nothing in its environment but what each route
    // gives it.
    let bare = launcher_env(&launcher, h.home());
    let run = |envs: &[(&str, String)], path: &str, root: &Path| {
        let mut c = bare.command(["--version"]);
        c.env("PATH", path).env("CLAUDE_PLUGIN_ROOT", root);
        for (k, v) in envs {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let empty_root = h.home().join("root");
    std::fs::create_dir_all(&empty_root).unwrap();
    // 1. $LOCALAGENTS_BIN
    let o = run(
        &[("LOCALAGENTS_BIN", bin().display().to_string())],
        bare_path,
        &empty_root,
    );
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("localagents "));
    // 1b. The prebuilt binary npm put into the plugin: the package's own
    // file is run; a link out of the package, or a launcher copy, is not.
    // Its --version must be the plugin's (plugin.json).
    let npm_root = h.home().join("npm-root");
    let pkg_bin = npm_root.join(format!(
        "node_modules/@localagents/cli-{}/bin",
        crate::support::plugin_install::platform()
    ));
    std::fs::create_dir_all(&pkg_bin).unwrap();
    std::fs::create_dir_all(npm_root.join(".claude-plugin")).unwrap();
    std::fs::copy(
        Path::new(ROOT).join(".claude-plugin/plugin.json"),
        npm_root.join(".claude-plugin/plugin.json"),
    )
    .unwrap();
    std::os::unix::fs::symlink(bin(), pkg_bin.join("localagents")).unwrap();
    let o = run(&[], bare_path, &npm_root);
    assert!(
        !o.status.success(),
        "a link out of the package is not the package's binary"
    );
    std::fs::remove_file(pkg_bin.join("localagents")).unwrap();
    std::fs::copy(
        Path::new(ROOT).join("plugin/localagents"),
        pkg_bin.join("localagents"),
    )
    .unwrap();
    let o = run(&[], bare_path, &npm_root);
    assert!(!o.status.success(), "a launcher copy is never run");
    std::fs::remove_file(pkg_bin.join("localagents")).unwrap();
    if std::fs::hard_link(bin(), pkg_bin.join("localagents")).is_err() {
        std::fs::copy(bin(), pkg_bin.join("localagents")).unwrap();
    }
    let o = run(&[], bare_path, &npm_root);
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("localagents "),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // 2. PATH
    let pathdir = h.home().join("pathbin");
    std::fs::create_dir_all(&pathdir).unwrap();
    std::os::unix::fs::symlink(bin(), pathdir.join("localagents")).unwrap();
    let o = run(
        &[],
        &format!("{}:{bare_path}", pathdir.display()),
        &empty_root,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 3. ${CLAUDE_PLUGIN_DATA}/bin
    let data = h.home().join("data");
    std::fs::create_dir_all(data.join("bin")).unwrap();
    std::os::unix::fs::symlink(bin(), data.join("bin/localagents")).unwrap();
    let o = run(
        &[("CLAUDE_PLUGIN_DATA", data.display().to_string())],
        bare_path,
        &empty_root,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 3b. ~/.cargo/bin (cargo install's default root)
    let home = h.home().join("home");
    std::fs::create_dir_all(home.join(".cargo/bin")).unwrap();
    std::os::unix::fs::symlink(bin(), home.join(".cargo/bin/localagents")).unwrap();
    let o = run(
        &[("HOME", home.display().to_string())],
        bare_path,
        &empty_root,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // 4. ${CLAUDE_PLUGIN_ROOT}/target/release
    let built_root = h.home().join("built");
    std::fs::create_dir_all(built_root.join("target/release")).unwrap();
    std::os::unix::fs::symlink(bin(), built_root.join("target/release/localagents")).unwrap();
    let o = run(&[], bare_path, &built_root);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // None: non-zero, the install hint on stderr, nothing on stdout.
    let o = run(&[], bare_path, &empty_root);
    assert!(!o.status.success());
    assert!(
        o.stdout.is_empty(),
        "stdout is MCP: {:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("cargo install --locked --path") && err.contains("localagents setup"),
        "{err}"
    );
}

/// A copy of the plugin's launcher scripts and plugin.json (the version a
/// prebuilt binary must say) in `dest` (no binary, no build).
pub(crate) fn launcher_copy(dest: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for rel in [
        "plugin/localagents",
        "bin/localagents",
        ".claude-plugin/plugin.json",
    ] {
        let to = dest.join(rel);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(Path::new(ROOT).join(rel), &to).unwrap();
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The plugin's launcher (or its bin/ wrapper) at `exe`, run in `cwd`
/// with an empty environment: the test gives it PATH and the plugin's
/// variables. (`cwd` outlives the command; the harness's own dir need not.)
pub(crate) fn launcher_env(exe: &Path, cwd: &Path) -> Harness {
    Harness::new()
        .bin(exe)
        .empty_env()
        .no_config()
        .no_state_dir()
        .cwd(cwd)
}

/// Run `c` with stdin closed; None if it is still running after `limit`
/// (then it is killed).
pub(crate) fn output_within(c: &mut Command, limit: Duration) -> Option<std::process::Output> {
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if !crate::support::holds_within(limit, || child.try_wait().unwrap().is_some()) {
        let _ = child.kill();
        let _ = child.wait();
        return None;
    }
    Some(child.wait_with_output().unwrap())
}

#[test]
fn launcher_never_runs_itself_when_the_binary_is_missing() {
    // Claude Code 2.1.328 appends the plugin's bin/ to the Bash tool's PATH,
    // and bin/localagents defers to the launcher: with no binary installed,
    // a launcher that takes that for the binary execs itself forever.
    assert!(
        !Path::new("/usr/bin/localagents").exists() && !Path::new("/bin/localagents").exists(),
        "this test needs a PATH without a localagents binary"
    );
    let h = Harness::new();
    let root = h.home().join("plugin-root");
    launcher_copy(&root);
    // A second copy of the plugin (another version, or the same plugin
    // loaded twice) whose bin/ is on PATH too, and a symlink to the bin/
    // wrapper from elsewhere on PATH.
    let other = h.home().join("other-root");
    launcher_copy(&other);
    let linkdir = h.home().join("links");
    std::fs::create_dir_all(&linkdir).unwrap();
    std::os::unix::fs::symlink(root.join("bin/localagents"), linkdir.join("localagents")).unwrap();
    let bin_dir = root.join("bin");
    let paths = [
        format!("{}:/usr/bin:/bin", bin_dir.display()),
        format!(
            "{}:{}:{}:/usr/bin:/bin",
            bin_dir.display(),
            linkdir.display(),
            other.join("bin").display()
        ),
    ];
    let cmd = |exe: &Path, path: &str, args: &[&str], plugin_root: bool| {
        let mut c = launcher_env(exe, &root).command(args);
        c.env("PATH", path);
        if plugin_root {
            c.env("CLAUDE_PLUGIN_ROOT", &root);
        }
        c
    };
    for path in &paths {
        // What the Bash tool runs (`localagents status`), and the launcher
        // as the MCP server starts it.
        for (exe, plugin_root) in [
            (root.join("bin/localagents"), false),
            (root.join("plugin/localagents"), true),
        ] {
            let o = output_within(
                &mut cmd(&exe, path, &["--version"], plugin_root),
                Duration::from_secs(2),
            )
            .unwrap_or_else(|| {
                panic!(
                    "{} with PATH={path} did not finish within 2 s: it runs itself",
                    exe.display()
                )
            });
            assert!(!o.status.success(), "{path}");
            assert!(o.stdout.is_empty(), "stdout is MCP: {o:?}");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("the localagents binary is not installed")
                    && err.contains("cargo install --locked --path"),
                "{path}: {err}"
            );
        }
        // The UserPromptSubmit hook: exit 0, nothing at all, at once.
        let o = output_within(
            &mut cmd(
                &root.join("plugin/localagents"),
                path,
                &["hook", "prompt-submit"],
                true,
            ),
            Duration::from_secs(1),
        )
        .unwrap_or_else(|| panic!("the hook with PATH={path} did not finish within 1 s"));
        assert_eq!(o.status.code(), Some(0), "{o:?}");
        assert!(o.stdout.is_empty() && o.stderr.is_empty(), "{o:?}");
    }
    // Skipping its own bin/ still finds a real binary later on PATH.
    let real_dir = h.home().join("real");
    std::fs::create_dir_all(&real_dir).unwrap();
    std::os::unix::fs::symlink(bin(), real_dir.join("localagents")).unwrap();
    let path = format!(
        "{}:{}:{}:/usr/bin:/bin",
        bin_dir.display(),
        other.join("bin").display(),
        real_dir.display()
    );
    let o = output_within(
        &mut cmd(&root.join("bin/localagents"), &path, &["--version"], false),
        Duration::from_secs(2),
    )
    .expect("finishes");
    assert!(
        o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("localagents "),
        "{o:?}"
    );
}

/// Finished job records for the hook, written as the job manager writes them.
fn fake_finished_job(state: &Path, cwd: &Path, n: u32, finished_ago_s: i64) -> String {
    let created = chrono::Utc::now() - chrono::Duration::seconds(finished_ago_s + 100);
    let id = format!(
        "{}-{:08x}",
        created.format("%Y%m%d-%H%M%S"),
        0xa0000000u32 + n
    );
    let dir = state.join("jobs").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    let finished = (chrono::Utc::now() - chrono::Duration::seconds(finished_ago_s)).to_rfc3339();
    let rec = json!({
        "id": id, "task": "t", "model": "qwen3.8-27b", "served_id": "qwen3.8-27b", "endpoint": "box", "base_url": "http://x",
        "cwd": cwd, "origin_cwd": cwd, "isolation": "worktree", "status": "succeeded", "created": created.to_rfc3339(),
        "started": created.to_rfc3339(), "finished": finished, "elapsed_s": 192.0, "session_id": "s", "result": "done", "error": null,
        "num_turns": 4, "tool_calls": 6, "usage": {"input": 1, "cache_read": 2, "output": 3},
        "files_touched": [], "files_changed": ["a", "b", "c", "d"],
        "worktree": {"path": "/tmp/wt", "branch": format!("local-agent/{id}"), "base": "abc", "repo": "/tmp", "kept": true, "diffstat": "4 files changed, +10 -2", "files": [], "note": null},
        "last_activity": null, "log_dir": dir, "context": 131072, "metrics": null, "queued_note": null,
        "permission_mode": "acceptEdits", "max_turns": 60, "timeout_s": 1800, "allowed_tools": [], "disallowed_tools": [],
        "system_prompt_append": null, "resumed_from": null, "pid": null, "owner_pid": 1
    });
    std::fs::write(dir.join("job.json"), serde_json::to_vec(&rec).unwrap()).unwrap();
    id
}

fn hook(h: &Harness, stdin: &str) -> (Option<i32>, String) {
    let mut c = h
        .command(["hook", "prompt-submit"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    c.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let o = c.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn hook_reports_each_finished_job_once_per_session() {
    let h = Harness::new().no_config();
    let state = h.state_dir().to_path_buf();
    let proj = h.dir().join("proj");
    let other = h.dir().join("other");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    let proj = proj.canonicalize().unwrap();
    let id = fake_finished_job(&state, &proj, 1, 30);
    fake_finished_job(&state, &other.canonicalize().unwrap(), 2, 30);
    fake_finished_job(&state, &proj, 3, 3 * 24 * 3600); // long ago
    let input = json!({"session_id": "11111111-2222-3333-4444-555555555555", "cwd": proj, "hook_event_name": "UserPromptSubmit", "prompt": "hi"}).to_string();
    let (code, out) = hook(&h, &input);
    assert_eq!(code, Some(0));
    let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "UserPromptSubmit");
    let ctx = v["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert_eq!(
        ctx,
        format!(
            "localagents job {id} (qwen3.8-27b) finished: succeeded in 3m12s, 4 files changed in worktree branch local-agent/{id}, 6 tokens local; review with job_status or job_diff."
        )
    );
    let (code, out) = hook(&h, &input);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), ""),
        "reported once per session"
    );
    // Another session hears about it too.
    let other_session = input.replace("11111111", "99999999");
    assert!(hook(&h, &other_session).1.contains(&id));
    // Bad input: exit 0, no output.
    for bad in ["", "not json", "{\"cwd\": 5}", "\u{0}\u{1}"] {
        assert_eq!(hook(&h, bad), (Some(0), String::new()), "{bad:?}");
    }
}

/// A top-level "Claude" played by a fake, and the localagents plugin loaded
/// with --plugin-dir, its MCP server pointed at a local fake llama.cpp.
struct Session {
    _h: Harness,
    home: PathBuf,
    work: PathBuf,
    state: PathBuf,
    cfg: PathBuf,
    top: fake_llama::FakeLlama,
    local: fake_llama::FakeLlama,
}

async fn session() -> Session {
    let top = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "top-model".into(),
        ..Default::default()
    })
    .await;
    let local = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: 131072,
        strict_template: true,
        ..Default::default()
    })
    .await;
    // Claude Code starts the plugin's `localagents serve` itself, with
    // the harness's dirs and config passed on through its environment.
    let h = Harness::new().config(&format!("endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\ndefaults:\n  setting_sources: []\n", local.url()));
    let (home, state, cfg) = (
        h.home().to_path_buf(),
        h.state_dir().to_path_buf(),
        h.config_path().to_path_buf(),
    );
    let work = h.work().canonicalize().unwrap();
    Session {
        _h: h,
        home,
        work,
        state,
        cfg,
        top,
        local,
    }
}

impl Session {
    fn claude(&self, prompt: &str, extra: &[&str]) -> tokio::process::Command {
        let env: Vec<(String, String)> = vec![
            ("ANTHROPIC_BASE_URL".into(), self.top.url().to_string()),
            ("LOCALAGENTS_BIN".into(), bin().display().to_string()),
            ("LOCALAGENTS_CONFIG".into(), self.cfg.display().to_string()),
            (
                "LOCALAGENTS_STATE_DIR".into(),
                self.state.display().to_string(),
            ),
            (
                "LOCALAGENTS_CLAUDE".into(),
                claude::binary().display().to_string(),
            ),
            ("MCP_TIMEOUT".into(), "20000".into()),
        ];
        let mut args = vec!["--model", "top-model", "--plugin-dir", ROOT];
        args.extend_from_slice(extra);
        claude::command(&self.home, &self.work, &env, &args, prompt)
    }
}

fn tool_result_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["content"].to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_client_calls_list_models_through_the_plugin() {
    let s = session().await;
    let name = format!("{TOOL}list_models");
    let n2 = name.clone();
    s.top.set_script(Arc::new(move |req| {
        if script::tool_results(req) == 0 {
            Reply::Tool {
                name: n2.clone(),
                input: json!({}),
            }
        } else {
            Reply::Text("Listed.".into())
        }
    }));
    let run = claude::run(
        s.claude("What local models are up?", &["--allowedTools", &name]),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    let bodies = s.top.bodies();
    // (2.1.328 lists MCP tools as deferred, behind ToolSearch; calling one
    // by name works all the same.)
    let result = tool_result_text(bodies.last().unwrap());
    assert!(
        result.contains("\\\"name\\\":\\\"box\\\"")
            && result.contains("gemma3-270m")
            && result.contains("\\\"up\\\":true"),
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_client_delegates_with_run_agent_and_wait_job() {
    let s = session().await;
    s.local.set_script(script::write_then_report(
        "delegated.txt",
        "made by the delegate\n",
    ));
    let (run_agent, wait_job) = (format!("{TOOL}run_agent"), format!("{TOOL}wait_job"));
    let (r2, w2) = (run_agent.clone(), wait_job.clone());
    s.top
        .set_script(Arc::new(move |req| match script::tool_results(req) {
            0 => Reply::Tool {
                name: r2.clone(),
                input: json!({"task": "Create delegated.txt.", "model": "gemma3-270m"}),
            },
            1 => {
                // Take the job id from the run_agent result.
                let text = tool_result_text(req);
                let id = text
                    .split("\\\"id\\\":\\\"")
                    .nth(1)
                    .and_then(|r| r.split("\\\"").next())
                    .unwrap_or("missing")
                    .to_string();
                Reply::Tool {
                    name: w2.clone(),
                    input: json!({"job_id": id, "timeout_s": 60}),
                }
            }
            _ => Reply::Text("Reviewed.".into()),
        }));
    let tools = format!("{run_agent},{wait_job}");
    let run = claude::run(
        s.claude(
            "Use the local agent to create delegated.txt.",
            &["--allowedTools", &tools],
        ),
        Duration::from_secs(120),
    )
    .await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    assert_eq!(
        std::fs::read_to_string(s.work.join("delegated.txt")).unwrap(),
        "made by the delegate\n"
    );
    let last = tool_result_text(s.top.bodies().last().unwrap());
    assert!(last.contains("succeeded"), "{last}");
    assert_eq!(
        s.local
            .state
            .system_entries_seen
            .load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_puts_a_finished_job_into_the_next_prompt_once() {
    let s = session().await;
    let id = fake_finished_job(&s.state, &s.work, 7, 20);
    s.top.set_script(script::text("ok"));
    let run = claude::run(s.claude("first prompt", &[]), Duration::from_secs(60)).await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    let first = s.top.bodies()[0].to_string();
    assert_eq!(
        first.matches(&format!("localagents job {id}")).count(),
        1,
        "{first}"
    );
    let session_id = run.result().unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let n_before = s.top.bodies().len();
    let run = claude::run(
        s.claude("second prompt", &["--resume", &session_id]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    let second = &s.top.bodies()[n_before];
    let last_user = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .unwrap()
        .to_string();
    assert!(last_user.contains("second prompt"), "{last_user}");
    assert!(
        !last_user.contains(&id),
        "the second prompt does not carry it again: {last_user}"
    );
    // Exactly once: in the first prompt's history, not again.
    let second = second.to_string();
    assert_eq!(
        second.matches(&format!("localagents job {id}")).count(),
        1,
        "{second}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_status_expands_with_the_status_output() {
    let s = session().await;
    s.top.set_script(script::text("Summary."));
    let run = claude::run(s.claude("/local-status", &[]), Duration::from_secs(60)).await;
    assert_eq!(
        run.result().map(|r| r["subtype"].clone()),
        Some("success".into()),
        "{}",
        run.stderr
    );
    let body = s.top.bodies()[0].to_string();
    assert!(
        body.contains("gemma3-270m (131072/slot)"),
        "the `!` line ran: {body}"
    );
    assert!(body.contains("Summarise this for the user"), "{body}");
    assert!(
        body.contains(
            "last 7 days: 0 jobs, 0 tokens local ≈ $0.00 at claude-sonnet-4.5 list prices"
        ),
        "the ledger line: {body}"
    );
}
