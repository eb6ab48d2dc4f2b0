//! The real Claude Code CLI (pinned, installed by scripts/install-claude.sh),
//! run headless in a throwaway HOME so no user settings leak in.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub const PINNED: &str = "2.1.332";

/// The claude binary: `$LOCALAGENTS_CLAUDE`, else the pinned install in
/// ~/.cache, else `claude` on PATH. Panics with the install command when
/// there is none: these tests must not pass silently without it.
pub fn binary() -> PathBuf {
    if let Some(p) = find() {
        return p;
    }
    panic!(
        "the Claude Code CLI {PINNED} is needed for this test: run scripts/install-claude.sh (or set LOCALAGENTS_CLAUDE)"
    );
}

/// The claude binary [`binary`] names, or `None` where there is none
/// (for a test that does not run a delegate but passes the CLI on anyway).
pub fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LOCALAGENTS_CLAUDE") {
        return Some(PathBuf::from(p));
    }
    let cached = cached()?;
    let executable = std::fs::metadata(&cached).is_ok_and(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.is_file() && m.permissions().mode() & 0o111 != 0
    });
    executable.then_some(cached)
}

/// Where scripts/install-claude.sh installs the pinned CLI's native binary
/// on this machine (installed or not): `<cache>/localagents-claude/<PINNED>/
/// node_modules/@anthropic-ai/claude-code-<platform>/claude`.
pub fn cached() -> Option<PathBuf> {
    Some(cache_dir()?.join(format!(
        "localagents-claude/{PINNED}/node_modules/@anthropic-ai/claude-code-{}/claude",
        package_platform()?
    )))
}

/// Where scripts/install-claude.sh caches the CLI: `$XDG_CACHE_HOME`, else
/// `~/.cache`.
fn cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache"))
}

/// The platform part of the npm package that holds the native binary,
/// `claude-code-<os>-<cpu>[-musl]`, chosen as scripts/install-claude.sh
/// chooses it (there from `uname -s`/`uname -m`): linux or darwin, x64 or
/// arm64, and `-musl` on a Linux whose C library is musl (`/lib/ld-musl-*`).
/// `None` where that script installs nothing.
fn package_platform() -> Option<String> {
    use std::env::consts::{ARCH, OS};
    let os = match OS {
        "linux" => "linux",
        "macos" => "darwin",
        _ => return None,
    };
    let cpu = match ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        _ => return None,
    };
    let musl = os == "linux"
        && std::fs::read_dir("/lib").is_ok_and(|rd| {
            rd.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("ld-musl-"))
        });
    Some(format!("{os}-{cpu}{}", if musl { "-musl" } else { "" }))
}

/// A `claude -p` command with a clean environment: a temp HOME, no
/// network beyond the base URL, and the given extra env.
pub fn command(
    home: &Path,
    cwd: &Path,
    env: &[(String, String)],
    args: &[&str],
    prompt: &str,
) -> tokio::process::Command {
    let mut c = command_without_key(home, cwd, env, args, prompt);
    if !env.iter().any(|(k, _)| k == "ANTHROPIC_API_KEY") {
        c.env("ANTHROPIC_API_KEY", "placeholder-not-a-key");
    }
    c
}

/// [`command`] as a user with no Anthropic credential at all: no key is
/// set, and `home` holds no login. Only `env` can let claude start.
pub fn command_without_key(
    home: &Path,
    cwd: &Path,
    env: &[(String, String)],
    args: &[&str],
    prompt: &str,
) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(binary());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (k, v) in env {
        c.env(k, v);
    }
    c.args(["-p", "--output-format", "stream-json", "--verbose"]);
    c.args(args);
    // `--` so a variadic option (--allowedTools) cannot swallow the prompt.
    c.arg("--").arg(prompt);
    c
}

/// Output of a finished run.
pub struct Run {
    pub status: Option<i32>,
    pub events: Vec<serde_json::Value>,
    pub stderr: String,
}

impl Run {
    pub fn result(&self) -> Option<&serde_json::Value> {
        self.events.iter().rev().find(|e| e["type"] == "result")
    }
}

/// Run to the end, or kill it after `limit`.
pub async fn run(mut cmd: tokio::process::Command, limit: Duration) -> Run {
    let child = cmd.spawn().expect("spawn claude");
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("claude did not finish within {limit:?}"))
        .expect("claude output");
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Run {
        status: out.status.code(),
        events,
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
