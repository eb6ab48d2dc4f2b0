//! `localagents serve` as an rmcp child process, the way a Claude Code
//! session starts it, with one environment policy for every test:
//!
//! ```ignore
//! let h = Harness::new()           // temp dir: home/, work/, state/
//!     .config(&yaml)               // <dir>/models.yaml, passed as --config
//!     .env("X", "y")               // extra env on the child, on purpose
//!     .serve()
//!     .await;                      // rmcp client: h.client
//! let (is_error, text) = h.call("list_models", json!({})).await;
//!
//! let h = Harness::with_fake(&fake.url()); // the config of a fake llama.cpp
//! let out = h.command(["status"]).output()?; // a one-shot command
//! ```
//!
//! [`Harness`] is the one way a test in tests/it or tests/e2e, or a bench,
//! builds the environment of a `localagents` it runs (tests/it/
//! harness_rules.rs holds that): a test that needs an odd environment says
//! so with a method of its own ([`Harness::home_dir`] for a HOME of the
//! test's, [`Harness::no_config`], [`Harness::no_state_dir`],
//! [`Harness::bin`] for another executable, [`Harness::bare_env`] for an
//! environment of nothing but PATH and HOME, [`Harness::empty_env`] for
//! nothing at all but what the test passes). Cloning a harness shares its temp
//! dir, which lives as long as the last clone.
//!
//! The policy ([`clean_env`]): the child starts from this process's
//! environment minus everything that could leak into or steer the program
//! under test (the XDG dirs, every `LOCALAGENTS_*`, `ANTHROPIC_*`,
//! `CLAUDE_*`, `CLAUDECODE`, `OTEL_*`, `TRACEPARENT`), then gets a temp `HOME`, the pinned Claude
//! Code CLI as `LOCALAGENTS_CLAUDE` (where one is installed), and what the
//! test passes with [`Harness::env`]. PATH and the rest stay.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;

/// Variables removed from the child's environment by name.
pub const REMOVED: &[&str] = &[
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "CLAUDECODE",
    "TRACEPARENT",
    "TRACESTATE",
];

/// Variables removed from the child's environment by prefix: the
/// program's own settings (`LOCALAGENTS_CONFIG`, `LOCALAGENTS_STATE_DIR`,
/// `LOCALAGENTS_DUMP_REQUESTS`, ...), and what a Claude Code session that
/// runs the tests would pass on (`CLAUDE_PROJECT_DIR` moves the project,
/// `ANTHROPIC_BASE_URL` the model), and the OpenTelemetry settings of the
/// machine (a test turns telemetry on only on purpose).
pub const REMOVED_PREFIXES: &[&str] = &["LOCALAGENTS_", "ANTHROPIC_", "CLAUDE_", "OTEL_"];

/// Does the policy remove `name` from a child's environment?
pub fn removed(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else {
        return false;
    };
    REMOVED.contains(&name) || REMOVED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Apply the policy to `cmd`: remove what [`removed`] names, then set
/// `HOME` to `home`. What a test sets on purpose comes after this.
pub fn clean_env(cmd: &mut std::process::Command, home: &Path) {
    for (k, _) in std::env::vars_os() {
        if removed(&k) {
            cmd.env_remove(&k);
        }
    }
    cmd.env("HOME", home);
}

/// `bin [--config …] [--state-dir …]` under the policy: [`clean_env`], then
/// the pinned CLI, then the test's own variables; cwd `work`. The one place
/// a test builds a `localagents` command line ([`Harness::command`]).
fn policy_command(h: &Harness) -> std::process::Command {
    let mut c = std::process::Command::new(&h.bin);
    if let Some(cfg) = &h.config {
        c.arg("--config").arg(cfg);
    }
    if h.state_arg {
        c.arg("--state-dir").arg(&h.state);
    }
    if h.empty {
        c.env_clear();
    } else if h.bare {
        c.env_clear();
        c.env("PATH", std::env::var_os("PATH").unwrap_or_default());
        c.env("HOME", &h.home);
    } else {
        clean_env(&mut c, &h.home);
    }
    // An empty environment gets no CLI either.
    let claude = h.claude.as_deref().filter(|_| !h.empty);
    let (env, work) = (&h.env, &h.work);
    if let Some(claude) = claude {
        c.env("LOCALAGENTS_CLAUDE", claude);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.current_dir(work);
    c
}

/// A test's `localagents`, one-shot or `serve`: dirs, config, env.
#[derive(Clone)]
pub struct Harness {
    tmp: std::sync::Arc<tempfile::TempDir>,
    home: PathBuf,
    work: PathBuf,
    state: PathBuf,
    config: Option<PathBuf>,
    bin: PathBuf,
    claude: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
    /// Pass `--state-dir` (unless [`Harness::no_state_dir`]).
    state_arg: bool,
    /// Start from an empty environment ([`Harness::bare_env`]).
    bare: bool,
    /// Nothing but the test's own variables ([`Harness::empty_env`]).
    empty: bool,
}

impl Default for Harness {
    fn default() -> Self {
        Self::new()
    }
}

impl Harness {
    /// A fresh temp dir with `home/`, `work/` (the cwd) and `state/` (the
    /// state dir); the config is `<dir>/models.yaml`, passed as `--config`
    /// whether or not it exists (write it with [`Harness::config`]).
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().expect("a temp dir");
        let root = tmp.path().to_path_buf();
        let (home, work, state) = (root.join("home"), root.join("work"), root.join("state"));
        for d in [&home, &work, &state] {
            std::fs::create_dir_all(d).expect("the harness dirs");
        }
        Harness {
            tmp: std::sync::Arc::new(tmp),
            home,
            work,
            state,
            config: Some(root.join("models.yaml")),
            bin: crate::bin(),
            claude: crate::claude::find(),
            env: Vec::new(),
            state_arg: true,
            bare: false,
            empty: false,
        }
    }

    /// [`Harness::new`] with the config [`fake_config`] writes: the fake
    /// llama.cpp at `fake_url` as the endpoint `box`.
    pub fn with_fake(fake_url: &str) -> Self {
        Self::new().config(&fake_config(fake_url))
    }

    /// Write `yaml` as the config file (`<dir>/models.yaml`, unless
    /// [`Harness::config_file`] named another).
    pub fn config(mut self, yaml: &str) -> Self {
        let path = self
            .config
            .get_or_insert_with(|| self.tmp.path().join("models.yaml"));
        std::fs::write(path, yaml).expect("write the config");
        self
    }

    /// `--config path`, an existing file or not.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// No `--config`: the program discovers its config (`$HOME/.config`,
    /// the cwd).
    pub fn no_config(mut self) -> Self {
        self.config = None;
        self
    }

    /// No `--state-dir`: the program finds its state dir (under `HOME`).
    pub fn no_state_dir(mut self) -> Self {
        self.state_arg = false;
        self
    }

    /// Start the child from an empty environment: `PATH`, `HOME` and the
    /// pinned CLI only, then what the test passes with [`Harness::env`]
    /// (what a shell with nothing exported, or a hook, gives the program).
    pub fn bare_env(mut self) -> Self {
        self.bare = true;
        self
    }

    /// Start the child from an empty environment and give it nothing but
    /// what the test passes with [`Harness::env`] (no PATH, no HOME, no
    /// CLI): the plugin's launcher as a test of its routes starts it.
    pub fn empty_env(mut self) -> Self {
        self.empty = true;
        self
    }

    /// `HOME` for the child instead of `<dir>/home`.
    pub fn home_dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.home = path.into();
        self
    }

    /// `--state-dir` instead of `<dir>/state`.
    pub fn state_at(mut self, path: impl Into<PathBuf>) -> Self {
        self.state = path.into();
        self
    }

    /// The child's cwd (its project) instead of `<dir>/work`.
    pub fn cwd(mut self, path: impl Into<PathBuf>) -> Self {
        self.work = path.into();
        self
    }

    /// Run this localagents binary instead of the one cargo built.
    pub fn bin(mut self, path: impl Into<PathBuf>) -> Self {
        self.bin = path.into();
        self
    }

    /// `LOCALAGENTS_CLAUDE` for the child instead of the pinned CLI.
    pub fn claude(mut self, path: impl Into<PathBuf>) -> Self {
        self.claude = Some(path.into());
        self
    }

    /// One more variable for the child, set after the policy's removals.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The temp dir everything defaults to.
    pub fn dir(&self) -> &Path {
        self.tmp.path()
    }

    pub fn home(&self) -> &Path {
        &self.home
    }

    pub fn work(&self) -> &Path {
        &self.work
    }

    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The `--config` file (a panic after [`Harness::no_config`]).
    pub fn config_path(&self) -> &Path {
        self.config.as_deref().expect("a --config file")
    }

    /// `localagents [--config …] [--state-dir …] ARGS` with the policy's
    /// environment and cwd: a one-shot command beside the server.
    pub fn command<I, S>(&self, args: I) -> std::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = self.cmd();
        // The subcommand's arguments come after the global ones.
        c.args(args);
        c
    }

    /// [`Harness::command`] with no arguments yet: the test adds them
    /// (`h.cmd().args([...]).arg(x)`), or a `tokio::process::Command` is
    /// made from it.
    pub fn cmd(&self) -> std::process::Command {
        policy_command(self)
    }

    /// Start `localagents serve` and initialize an rmcp client.
    pub async fn serve(self) -> Served<()> {
        self.serve_with(()).await
    }

    /// [`Harness::serve`] with a client handler of the test's (one that
    /// records notifications, say).
    pub async fn serve_with<S: ClientHandler>(self, handler: S) -> Served<S> {
        let cmd = tokio::process::Command::from(self.command(["serve"]));
        let transport = TokioChildProcess::new(cmd).expect("spawn localagents serve");
        let client = handler.serve(transport).await.expect("initialize");
        Served {
            client,
            harness: self,
        }
    }
}

/// A running `localagents serve` and its rmcp client.
pub struct Served<S: ClientHandler = ()> {
    pub client: RunningService<RoleClient, S>,
    /// Holds the temp dir for as long as the server runs.
    pub harness: Harness,
}

impl<S: ClientHandler> Served<S> {
    pub fn dir(&self) -> &Path {
        self.harness.dir()
    }

    pub fn home(&self) -> &Path {
        self.harness.home()
    }

    pub fn work(&self) -> &Path {
        self.harness.work()
    }

    pub fn state_dir(&self) -> &Path {
        self.harness.state_dir()
    }

    pub fn config_path(&self) -> &Path {
        self.harness.config_path()
    }

    /// Call `tool` with `args` (a JSON object): whether it is a tool
    /// error, and its text. A protocol error, or no answer within 300 s, is
    /// a panic: every tool answers, even to bad input.
    pub async fn call(&self, tool: &'static str, args: Value) -> (bool, String) {
        let r = self.call_result(tool, args).await;
        let text = r
            .content
            .iter()
            .find_map(|c| c.as_text().map(|t| t.text.clone()))
            .unwrap_or_default();
        (r.is_error == Some(true), text)
    }

    /// [`Served::call`]'s whole result.
    pub async fn call_result(
        &self,
        tool: &'static str,
        args: Value,
    ) -> rmcp::model::CallToolResult {
        let params = CallToolRequestParams::new(tool).with_arguments(
            args.as_object()
                .cloned()
                .unwrap_or_else(|| panic!("{tool}: arguments {args} are not an object")),
        );
        tokio::time::timeout(Duration::from_secs(300), self.client.call_tool(params))
            .await
            .unwrap_or_else(|_| panic!("{tool} got no answer within 300 s"))
            .unwrap_or_else(|e| panic!("{tool}: protocol error: {e}"))
    }

    /// Close the client; the server exits.
    pub async fn cancel(self) {
        self.client.cancel().await.expect("close the client");
    }
}

/// The config of a test beside a fake llama.cpp: the fake at `fake_url`
/// as the endpoint `box`, two models of the registry, and test defaults
/// (no prewarm, no setting sources).
pub fn fake_config(fake_url: &str) -> String {
    format!(
        "endpoints:\n  box:\n    base_url: {fake_url}\n    backend: llama.cpp\nmodels:\n  gemma-3-270m:\n    notes: tiny test model\n    host: the test box\n  qwen3.8-27b:\n    host: gpu-server\n    notes: default mid-size coder on llama.cpp\ndefaults:\n  max_turns: 6\n  setting_sources: []\n  prewarm: false\n"
    )
}

/// `localagents ARGS` in `e`, awaited.
pub async fn localagents(e: &Harness, args: &[&str]) -> std::process::Output {
    tokio::process::Command::from(e.command(args))
        .output()
        .await
        .unwrap()
}

/// `localagents ARGS` whose stdout is JSON: the value (a panic with both
/// streams when it is not).
pub async fn localagents_json(e: &Harness, args: &[&str]) -> Value {
    let out = localagents(e, args).await;
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| {
        panic!(
            "{err}: stdout {} stderr {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// What the `UserPromptSubmit` hook says for the jobs of `e`'s project.
pub async fn hook_line(e: &Harness) -> String {
    use tokio::io::AsyncWriteExt;
    let mut hook = tokio::process::Command::from(e.command(["hook", "prompt-submit"]))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::json!({"session_id": "s1", "cwd": e.work(), "hook_event_name": "UserPromptSubmit", "prompt": "hi"});
    let mut stdin = hook.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).await.unwrap();
    drop(stdin);
    let out = hook.wait_with_output().await.unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `localagents serve` in `e` with the real CLI (or `claude_bin`); `e`
/// stays the test's, for one-shot commands beside the server.
pub async fn serve(e: &Harness, claude_bin: Option<&Path>) -> RunningService<RoleClient, ()> {
    serve_from(e, &crate::bin(), claude_bin).await
}

/// [`serve`] started from the localagents binary `localagents`.
pub async fn serve_from(
    e: &Harness,
    localagents: &Path,
    claude_bin: Option<&Path>,
) -> RunningService<RoleClient, ()> {
    let bin = claude_bin
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::claude::binary);
    e.clone().bin(localagents).claude(bin).serve().await.client
}

/// Call `tool` on `c`: whether it is a tool error, and its text read as
/// JSON (a string when it is not JSON).
pub async fn call(
    c: &RunningService<RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> (bool, Value) {
    let r = c
        .call_tool(
            CallToolRequestParams::new(tool).with_arguments(args.as_object().cloned().unwrap()),
        )
        .await
        .unwrap();
    let text = r
        .content
        .iter()
        .find_map(|c| c.as_text().map(|t| t.text.clone()))
        .unwrap_or_default();
    let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (r.is_error == Some(true), v)
}
