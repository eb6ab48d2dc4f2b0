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
//! ```
//!
//! The policy ([`clean_env`]): the child starts from this process's
//! environment minus everything that could leak into or steer the program
//! under test (the XDG dirs, every `LOCALAGENTS_*`, `ANTHROPIC_*`,
//! `CLAUDE_*`, `CLAUDECODE`), then gets a temp `HOME`, the pinned Claude
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
];

/// Variables removed from the child's environment by prefix: the
/// program's own settings (`LOCALAGENTS_CONFIG`, `LOCALAGENTS_STATE_DIR`,
/// `LOCALAGENTS_DUMP_REQUESTS`, ...), and what a Claude Code session that
/// runs the tests would pass on (`CLAUDE_PROJECT_DIR` moves the project,
/// `ANTHROPIC_BASE_URL` the model).
pub const REMOVED_PREFIXES: &[&str] = &["LOCALAGENTS_", "ANTHROPIC_", "CLAUDE_"];

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

/// A `localagents serve` to start: dirs, config, env.
pub struct Harness {
    tmp: tempfile::TempDir,
    home: PathBuf,
    work: PathBuf,
    state: PathBuf,
    config: Option<PathBuf>,
    bin: PathBuf,
    claude: Option<PathBuf>,
    env: Vec<(OsString, OsString)>,
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
            tmp,
            home,
            work,
            state,
            config: Some(root.join("models.yaml")),
            bin: PathBuf::from(env!("CARGO_BIN_EXE_localagents")),
            claude: crate::support::claude::find(),
            env: Vec::new(),
        }
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

    /// `localagents [--config …] --state-dir … ARGS` with the policy's
    /// environment and cwd: a one-shot command beside the server.
    pub fn command<I, S>(&self, args: I) -> std::process::Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut c = std::process::Command::new(&self.bin);
        if let Some(cfg) = &self.config {
            c.arg("--config").arg(cfg);
        }
        c.arg("--state-dir").arg(&self.state).args(args);
        clean_env(&mut c, &self.home);
        if let Some(claude) = &self.claude {
            c.env("LOCALAGENTS_CLAUDE", claude);
        }
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.current_dir(&self.work);
        c
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
