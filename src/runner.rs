//! Starting a delegate: a headless Claude Code process in its own process
//! group, and reading its stream-json events.
//!
//! The delegate runs `claude -p --output-format stream-json --verbose` with
//! the job's model, permissions and tools, pointed at the job's shim route.
//! Its prompt (the brief, or a fix round's) is read from its stdin, a file
//! in the job's dir: the kernel refuses an argv string over 128 KiB.
//! It is the leader of a new process group, so cancel, timeout and shutdown
//! stop it and everything it started: SIGTERM to the group, then SIGKILL
//! after a grace period. No orphans are left behind.
//!
//! A delegate is lean on purpose: every job pays its fixed prompt, and a
//! local GPU processes it cold unless the server's prefix cache still holds
//! it. So it is offered only the tools it may use (`--tools`; an
//! `--allowedTools` list alone only pre-approves, and all 22-23 schemas,
//! about 72 KB, would still be sent), runs without auto-memory (whose
//! directory, derived from the cwd, would put tree-specific text into
//! `system` and break the prefix from one tree to the next) and without any
//! MCP server but the ones `defaults.mcp_config` names (a project's
//! `.mcp.json` would otherwise start inside every headless delegate). The
//! result: `system` and `tools` are the same bytes for every job with the
//! same config and Claude Code version, whatever the tree.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::{Config, Endpoint};

mod kept;
pub use kept::{EVENT_LINE_MAX, EVENTS_CAP, event_to_keep};

/// The Claude Code versions localagents is tested with: from the pinned
/// one (scripts/install-claude.sh) to the newest the weekly run of npm's
/// `latest` passed (.github/workflows/ci.yml). The README states them, and
/// `doctor` names a version outside them.
pub const TESTED_CLAUDE: (&str, &str) = ("2.1.328", "2.1.332");

/// `2.1.328` as numbers, from `claude --version`'s first word.
pub fn claude_version(said: &str) -> Option<Vec<u64>> {
    let word = said.split_whitespace().next()?;
    word.split('.').map(|p| p.parse().ok()).collect()
}

pub use crate::process::GRACE;

/// What is needed to start one delegate.
#[derive(Debug, Clone)]
pub struct Launch {
    pub claude: PathBuf,
    pub args: Vec<String>,
    /// The prompt, given on stdin (`claude -p` with no prompt argument
    /// reads it there), never in `args`.
    pub prompt: String,
    /// Set on the child, in order (later wins).
    pub env: Vec<(String, String)>,
    /// Removed from the inherited environment first.
    pub env_remove: Vec<String>,
    pub cwd: PathBuf,
}

/// Variables that would send a delegate's traffic to a cloud provider
/// instead of the shim.
const PROVIDER_SWITCHES: &[&str] = &[
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
    // A nested session must not think it runs inside Claude Code.
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
];

/// The delegate's environment, cleaned: from the inherited `parent`
/// variables, drop the provider switches, every `ANTHROPIC_*` that `ours`
/// does not set (an inherited `ANTHROPIC_AUTH_TOKEN` or a real key must not
/// reach the delegate) and the backend key variable (the shim adds the key
/// on the way out; the delegate never needs it). Then `NO_PROXY`/`no_proxy`
/// gain 127.0.0.1 and localhost, so the shim URL never goes through a proxy.
/// Returns (names to remove, pairs to set after `ours`).
pub fn clean_env<'a>(
    parent: impl IntoIterator<Item = (&'a str, &'a str)>,
    ours: &[(String, String)],
    key_var: Option<&str>,
) -> (Vec<String>, Vec<(String, String)>) {
    let mut remove = Vec::new();
    let mut no_proxy: Option<String> = None;
    for (k, v) in parent {
        let set_by_us = ours.iter().any(|(o, _)| o == k);
        if PROVIDER_SWITCHES.contains(&k)
            || (k.starts_with("ANTHROPIC_") && !set_by_us)
            || key_var == Some(k)
        {
            remove.push(k.to_string());
        }
        if (k == "NO_PROXY" || k == "no_proxy") && !v.is_empty() {
            no_proxy = Some(v.to_string());
        }
    }
    let mut list: Vec<String> = no_proxy
        .map(|v| v.split(',').map(|x| x.trim().to_string()).collect())
        .unwrap_or_default();
    for h in ["127.0.0.1", "localhost"] {
        if !list.iter().any(|x| x == h) {
            list.push(h.to_string());
        }
    }
    list.retain(|x| !x.is_empty());
    let joined = list.join(",");
    (
        remove,
        vec![
            ("NO_PROXY".to_string(), joined.clone()),
            ("no_proxy".to_string(), joined),
        ],
    )
}

/// `ours` over this process's environment as [`clean_env`] leaves it:
/// the pairs to set (ours, then the proxy exemptions) and the names to
/// remove. What every program a job starts (the delegate, an acceptance
/// command) runs with.
pub fn over_clean_env(
    mut ours: Vec<(String, String)>,
    key_var: Option<&str>,
) -> (Vec<(String, String)>, Vec<String>) {
    let parent: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().unwrap_or_default())))
        .collect();
    let (remove, proxy) = clean_env(
        parent.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        &ours,
        key_var,
    );
    ours.extend(proxy);
    (ours, remove)
}

/// The claude binary: `defaults.claude_path`, then `$LOCALAGENTS_CLAUDE`,
/// then `claude` on PATH.
pub fn find_claude(config: &Config) -> Result<PathBuf, String> {
    let named = config
        .defaults
        .claude_path
        .clone()
        .map(|p| (p, "defaults.claude_path"))
        .or_else(|| {
            std::env::var("LOCALAGENTS_CLAUDE")
                .ok()
                .map(|p| (p, "LOCALAGENTS_CLAUDE"))
        });
    if let Some((p, origin)) = named {
        let path = PathBuf::from(&p);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{origin} names {p}, which does not exist: fix it, or install Claude Code with `npm install -g @anthropic-ai/claude-code`"
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        let c = dir.join("claude");
        if c.is_file() {
            return Ok(c);
        }
    }
    Err("the Claude Code CLI (`claude`) is not on PATH: install it with `npm install -g @anthropic-ai/claude-code`, or set defaults.claude_path or LOCALAGENTS_CLAUDE".into())
}

/// `defaults.mcp_config` as a path: `~/` is the home directory; the file
/// must exist and the path be absolute.
pub fn mcp_config_path(s: &str) -> Result<PathBuf, String> {
    let p = match s.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(rest),
            None => {
                return Err(format!(
                    "defaults.mcp_config is {s}, but HOME is not set: give an absolute path"
                ));
            }
        },
        None => PathBuf::from(s),
    };
    if !p.is_absolute() {
        return Err(format!(
            "defaults.mcp_config is {s}, a relative path: give an absolute path (or one under ~/)"
        ));
    }
    if !p.is_file() {
        return Err(format!(
            "defaults.mcp_config names {}, which does not exist: create it (the format of `claude --mcp-config`) or remove the key",
            p.display()
        ));
    }
    Ok(p)
}

/// Settings of one delegate run.
#[derive(Debug, Clone)]
pub struct RunSettings<'a> {
    pub served_id: &'a str,
    pub window: Option<u64>,
    /// How the session is held to `window` (`defaults.window_budget`).
    pub window_rule: crate::session_env::WindowRule,
    pub permission_mode: &'a str,
    pub allowed_tools: &'a [String],
    pub disallowed_tools: &'a [String],
    pub max_turns: u32,
    pub setting_sources: &'a [String],
    pub system_prompt_append: &'a str,
    pub resume_session: Option<&'a str>,
    /// `defaults.mcp_config`: the only MCP servers a delegate gets.
    pub mcp_config: Option<&'a Path>,
    /// `defaults.sandbox`: Bash runs in Claude Code's sandbox.
    pub sandbox: bool,
    /// The shim's longest silence on this job's streams (the delegate's
    /// watchdog must outwait it: [`crate::session_env::stream_idle_env`]).
    pub shim_silence: Option<std::time::Duration>,
    /// Run as this subagent, defined in a file of `--agents` JSON.
    pub agent: Option<AgentArg<'a>>,
}

/// A subagent the delegate runs as: `--agents FILE --agent NAME`, and
/// `--tools` its tools (already narrowed to what the config allows).
#[derive(Debug, Clone, Copy)]
pub struct AgentArg<'a> {
    pub name: &'a str,
    pub file: &'a Path,
    pub tools: &'a [String],
}

/// The `--agents` JSON of one profile: its description, prompt and the
/// tools it is offered. No `model`: the delegate stays on the local
/// endpoint.
pub fn agents_json(name: &str, description: &str, prompt: &str, tools: &[String]) -> String {
    let mut m = serde_json::Map::new();
    m.insert(
        name.to_string(),
        serde_json::json!({"description": description, "prompt": prompt, "tools": tools}),
    );
    serde_json::Value::Object(m).to_string()
}

/// The tool name of an allow or deny rule: `Bash(cargo test:*)` is `Bash`.
pub fn rule_tool(rule: &str) -> &str {
    rule.split('(').next().unwrap_or(rule).trim()
}

/// The built-in tools a delegate is offered (`--tools`): the allowed ones,
/// less those denied outright, in the order given, without duplicates. A
/// deny rule with a specifier (`Bash(rm:*)`) narrows a tool, it does not
/// remove it. MCP tools (`mcp__…`) come from their servers, not `--tools`.
pub fn offered_tools(allowed: &[String], disallowed: &[String]) -> Vec<String> {
    let denied: Vec<&str> = disallowed
        .iter()
        .filter(|d| !d.contains('('))
        .map(|d| d.trim())
        .collect();
    let mut out: Vec<String> = Vec::new();
    for a in allowed {
        let t = rule_tool(a);
        if t.is_empty() || t.starts_with("mcp__") || denied.contains(&t) {
            continue;
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// Offered tools that the delegate's `system/init` event does not list:
/// Claude Code drops a name it does not know from `--tools` without a word.
pub fn missing_tools(offered: &[String], init_tools: &[String]) -> Vec<String> {
    offered
        .iter()
        .filter(|t| !init_tools.contains(t))
        .cloned()
        .collect()
}

/// Build the command line and environment of a delegate.
pub fn launch(
    claude: PathBuf,
    cwd: &Path,
    base_url: &str,
    endpoint: &Endpoint,
    s: &RunSettings,
    task: &str,
) -> Launch {
    let mut args: Vec<String> = ["-p", "--output-format", "stream-json", "--verbose"]
        .map(String::from)
        .to_vec();
    args.extend(["--model".into(), s.served_id.to_string()]);
    args.extend(["--permission-mode".into(), s.permission_mode.to_string()]);
    // Offer only what may be used; an empty list means no tools at all.
    // A subagent's tools are already narrowed to those.
    let tools = match &s.agent {
        Some(a) => a.tools.to_vec(),
        None => offered_tools(s.allowed_tools, s.disallowed_tools),
    };
    args.extend(["--tools".into(), tools.join(",")]);
    if let Some(a) = &s.agent {
        args.extend([
            "--agents".into(),
            a.file.display().to_string(),
            "--agent".into(),
            a.name.to_string(),
        ]);
    }
    if !s.allowed_tools.is_empty() {
        args.extend(["--allowedTools".into(), s.allowed_tools.join(",")]);
    }
    if !s.disallowed_tools.is_empty() {
        args.extend(["--disallowedTools".into(), s.disallowed_tools.join(",")]);
    }
    args.extend(["--max-turns".into(), s.max_turns.to_string()]);
    if !s.setting_sources.is_empty() {
        args.extend(["--setting-sources".into(), s.setting_sources.join(",")]);
    }
    if s.sandbox {
        // Claude Code's own sandbox for Bash (bubblewrap + socat on Linux,
        // Seatbelt on macOS): writes only in the cwd (and temp), no network
        // but allowed domains (none). Refuse to start without it rather than
        // run unsandboxed, and never fall back per command.
        args.extend([
            "--settings".into(),
            r#"{"sandbox":{"enabled":true,"failIfUnavailable":true,"allowUnsandboxedCommands":false}}"#.into(),
        ]);
    }
    if !s.system_prompt_append.is_empty() {
        args.extend([
            "--append-system-prompt".into(),
            s.system_prompt_append.to_string(),
        ]);
    }
    // No project `.mcp.json` (or user MCP config) starts in a delegate:
    // only what the user's own config names.
    args.push("--strict-mcp-config".into());
    if let Some(p) = s.mcp_config {
        args.extend(["--mcp-config".into(), p.display().to_string()]);
    }
    if let Some(session) = s.resume_session {
        args.extend(["--resume".into(), session.to_string()]);
    }

    let mut env = crate::session_env::session_env(base_url, s.served_id, s.window, s.window_rule);
    if let Some(d) = s.shim_silence {
        env.push(crate::session_env::stream_idle_env(d));
    }
    env.extend(
        [
            // Placeholder auth: the shim never forwards it.
            ("ANTHROPIC_API_KEY", "localagents-placeholder"),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1"),
            ("DISABLE_TELEMETRY", "1"),
            ("DISABLE_AUTOUPDATER", "1"),
            ("DISABLE_ERROR_REPORTING", "1"),
            // The memory section names a cwd-derived directory (it would
            // break the shared prefix), and a delegate has no business in
            // the user's memory files.
            ("CLAUDE_CODE_DISABLE_AUTO_MEMORY", "1"),
            // No git-status snapshot and no commit-attribution reminder in
            // the first message: about 1.3 KB of job-specific text every
            // job pays cold (the delegate runs `git status` when it needs
            // it, and a local model's commits are not Claude Code's).
            ("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS", "1"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    env.extend(endpoint.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let (env, env_remove) = over_clean_env(env, endpoint.api_key_env.as_deref());
    Launch {
        claude,
        args,
        prompt: task.to_string(),
        env,
        env_remove,
        cwd: cwd.to_path_buf(),
    }
}

/// Spawn a delegate under a job guard ([`crate::process::guard`]) that
/// leads a new process group; stdout and stderr piped, the guard's stdin
/// is the lifeline (keep the child while the job runs). Its stdin is
/// `prompt_file`, which [`write_prompt`] filled; keep the file until the
/// delegate has started.
pub fn spawn(l: &Launch, prompt_file: &Path) -> std::io::Result<crate::process::Guarded> {
    crate::process::spawn_guarded(&l.claude, &l.args, Some(prompt_file), |cmd| {
        cmd.current_dir(&l.cwd)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        for k in &l.env_remove {
            cmd.env_remove(k);
        }
        for (k, v) in &l.env {
            cmd.env(k, v);
        }
    })
}

/// Write the launch's prompt to `prompt_file` (private, replaced whole),
/// for [`spawn`].
pub fn write_prompt(l: &Launch, prompt_file: &Path) -> std::io::Result<()> {
    crate::paths::write_private(prompt_file, l.prompt.as_bytes())
}

/// What one stream-json event tells the job.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct EventInfo {
    pub session_id: Option<String>,
    /// `system/init`: the tools the session really has.
    pub init_tools: Option<Vec<String>>,
    /// `system/init`: `claude_code_version`.
    pub claude_version: Option<String>,
    /// Transcript lines (`[tool] Write path`, `[assistant] …`, `[result] …`).
    pub transcript: Vec<String>,
    pub tool_calls: u64,
    pub files_touched: Vec<String>,
    pub last_activity: Option<String>,
    pub result: Option<ResultEvent>,
    /// `system/compact_boundary`: Claude Code compacted the conversation.
    pub compaction: Option<Compaction>,
    /// Tool calls: their id and what they were (`Read src/a.rs`).
    pub tool_uses: Vec<(String, String)>,
    /// Tool results: the id of their call and their size in bytes.
    pub tool_results: Vec<(String, u64)>,
    /// The assistant's text in this event, whole (its text blocks joined).
    pub said: Option<String>,
}

/// One compaction, from its `compact_boundary` event.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct Compaction {
    /// `auto` (the window filled) or `manual`.
    pub trigger: String,
    /// Claude Code's count of the conversation before it.
    pub pre_tokens: Option<u64>,
    /// And after, when it says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_tokens: Option<u64>,
}

/// The final `result` event.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultEvent {
    pub success: bool,
    pub text: Option<String>,
    pub num_turns: Option<u64>,
    pub usage: Option<Value>,
    pub subtype: String,
    pub terminal_reason: Option<String>,
}

use crate::fmt::{one_line, tool_arg};

/// Claude Code's stream-json events, as far as a job reads them. Every
/// field follows the crate's lenient rule ([`crate::anthropic::lenient`]):
/// a field of another type reads as absent, so an odd event loses that
/// field, not the event. A message's blocks are the Messages API's
/// ([`crate::anthropic::Block`]). Unknown event types and blocks are
/// `Unknown`.
mod events {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    use crate::anthropic::{blocks, lenient, present};
    pub use crate::anthropic::Block;

    #[derive(Debug, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    pub enum Event {
        System(System),
        Assistant(Turn),
        User(Turn),
        Result(Finished),
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Deserialize)]
    #[serde(rename_all = "snake_case")]
    pub enum SystemKind {
        Init,
        ApiRetry,
        CompactBoundary,
        #[serde(other)]
        Unknown,
    }

    #[derive(Debug, Deserialize)]
    pub struct System {
        #[serde(default, deserialize_with = "lenient")]
        pub subtype: Option<SystemKind>,
        #[serde(default, deserialize_with = "lenient")]
        pub session_id: Option<String>,
        #[serde(default, deserialize_with = "strings")]
        pub tools: Option<Vec<String>>,
        #[serde(default, deserialize_with = "lenient")]
        pub claude_code_version: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        pub attempt: Option<u64>,
        #[serde(default, deserialize_with = "lenient")]
        pub error_status: Option<u64>,
        #[serde(default, deserialize_with = "lenient")]
        pub compact_metadata: Option<CompactMetadata>,
    }

    /// `system/compact_boundary`'s `compact_metadata`.
    #[derive(Debug, Deserialize)]
    pub struct CompactMetadata {
        #[serde(default, deserialize_with = "lenient")]
        pub trigger: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        pub pre_tokens: Option<u64>,
        #[serde(default, deserialize_with = "lenient")]
        pub post_tokens: Option<u64>,
    }

    /// An assistant or user message.
    #[derive(Debug, Deserialize)]
    pub struct Turn {
        #[serde(default, deserialize_with = "lenient")]
        pub message: Option<Message>,
    }

    #[derive(Debug, Deserialize)]
    pub struct Message {
        #[serde(default, deserialize_with = "blocks")]
        pub content: Option<Vec<Block>>,
    }

    /// The input keys that name the file an editing tool writes.
    #[derive(Debug, Deserialize)]
    pub struct FileInput {
        #[serde(default, deserialize_with = "lenient")]
        pub file_path: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        pub notebook_path: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    pub struct Finished {
        #[serde(default, deserialize_with = "lenient")]
        pub subtype: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        pub is_error: Option<bool>,
        #[serde(default, deserialize_with = "lenient")]
        pub result: Option<String>,
        #[serde(default, deserialize_with = "strings")]
        pub errors: Option<Vec<String>>,
        #[serde(default, deserialize_with = "lenient")]
        pub num_turns: Option<u64>,
        /// Kept as the CLI wrote it (`null` too), for the job's figures.
        #[serde(default, deserialize_with = "present")]
        pub usage: Option<Value>,
        #[serde(default, deserialize_with = "lenient")]
        pub terminal_reason: Option<String>,
    }

    /// A list's strings (other entries skipped); not a list: absent.
    fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Array(a) => Some(
                a.into_iter()
                    .filter_map(|v| match v {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => None,
        })
    }
}

/// A `system` event: the session's start, a retry, a compaction.
fn system_event(s: events::System, info: &mut EventInfo) {
    use events::SystemKind;
    match s.subtype {
        Some(SystemKind::Init) => {
            info.session_id = s.session_id;
            info.init_tools = s.tools;
            info.claude_version = s.claude_code_version;
            info.last_activity = Some("session started".into());
        }
        Some(SystemKind::ApiRetry) => {
            let l = format!(
                "[retry] attempt {} after HTTP {}",
                s.attempt.unwrap_or(0),
                s.error_status
                    .map(|s| s.to_string())
                    .unwrap_or_else(|| "?".into())
            );
            info.last_activity = Some(l.clone());
            info.transcript.push(l);
        }
        Some(SystemKind::CompactBoundary) => {
            let m = s.compact_metadata;
            let c = Compaction {
                trigger: m
                    .as_ref()
                    .and_then(|m| m.trigger.clone())
                    .unwrap_or_else(|| "auto".into()),
                pre_tokens: m.as_ref().and_then(|m| m.pre_tokens),
                post_tokens: m.as_ref().and_then(|m| m.post_tokens),
            };
            let l = format!(
                "[compacted] {} at {} tokens",
                c.trigger,
                c.pre_tokens.map(|t| t.to_string()).unwrap_or_else(|| "?".into())
            );
            info.last_activity = Some(l.clone());
            info.transcript.push(l);
            info.compaction = Some(c);
        }
        _ => {}
    }
}

/// Read one stream-json line.
pub fn parse_event(line: &str) -> EventInfo {
    use events::{Block, Event};
    let mut info = EventInfo::default();
    let Ok(event) = serde_json::from_str::<Event>(line) else {
        return info;
    };
    match event {
        Event::System(s) => system_event(s, &mut info),
        Event::Assistant(turn) => {
            for b in turn.message.and_then(|m| m.content).unwrap_or_default() {
                match b {
                    Block::Text { text } => {
                        let t = text.unwrap_or_default();
                        if !t.trim().is_empty() {
                            info.transcript.push(format!("[assistant] {}", t.trim()));
                            info.last_activity = Some(format!("said: {}", one_line(&t, 120)));
                            match info.said.as_mut() {
                                Some(s) => {
                                    s.push('\n');
                                    s.push_str(&t);
                                }
                                None => info.said = Some(t),
                            }
                        }
                    }
                    Block::ToolUse { id, name, input } => {
                        let name = name.as_deref().unwrap_or("?");
                        let arg = tool_arg(name, &input);
                        info.tool_calls += 1;
                        if let Some(id) = id {
                            info.tool_uses
                                .push((id, format!("{name} {arg}").trim_end().to_string()));
                        }
                        if matches!(name, "Edit" | "Write" | "MultiEdit" | "NotebookEdit")
                            && let Ok(f) = serde_json::from_value::<events::FileInput>(input)
                            && let Some(p) = f.file_path.or(f.notebook_path)
                        {
                            info.files_touched.push(p);
                        }
                        let l = format!("[tool] {name} {arg}").trim_end().to_string();
                        info.last_activity = Some(l.clone());
                        info.transcript.push(l);
                    }
                    _ => {}
                }
            }
        }
        Event::User(turn) => {
            for b in turn.message.and_then(|m| m.content).unwrap_or_default() {
                let Block::ToolResult {
                    tool_use_id,
                    is_error,
                    content,
                } = b
                else {
                    continue;
                };
                let c = match content {
                    Value::String(s) => s,
                    other => other.to_string(),
                };
                if let Some(id) = tool_use_id {
                    info.tool_results.push((id, c.len() as u64));
                }
                if is_error == Some(true) {
                    info.transcript
                        .push(format!("[tool error] {}", one_line(&c, 300)));
                }
            }
        }
        Event::Result(r) => {
            let finished = r.subtype.as_deref().unwrap_or("?").to_string();
            let subtype = r.subtype.unwrap_or_default();
            let success = subtype == "success" && r.is_error != Some(true);
            // A start-up failure (a sandbox that cannot start, …) has no
            // `result` text, only `errors`.
            let errors = r.errors.unwrap_or_default();
            let text = r
                .result
                .or_else(|| (!errors.is_empty()).then(|| errors.join("; ")));
            info.transcript
                .push(format!("[result] {}", text.as_deref().unwrap_or(&subtype)));
            info.last_activity = Some(format!("finished: {finished}"));
            info.result = Some(ResultEvent {
                success,
                text,
                num_turns: r.num_turns,
                usage: r.usage,
                subtype,
                terminal_reason: r.terminal_reason,
            });
        }
        Event::Unknown => {}
    }
    info
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_odd_field_is_absent_and_an_unknown_event_is_nothing() {
        // A field of another type loses that field, not the event.
        let e = parse_event(
            r#"{"type":"system","subtype":"init","session_id":7,"tools":["Read",3,"Edit"],"claude_code_version":"2.1.328"}"#,
        );
        assert_eq!(e.session_id, None);
        assert_eq!(e.init_tools, Some(vec!["Read".into(), "Edit".into()]));
        assert_eq!(e.claude_version.as_deref(), Some("2.1.328"));
        let e = parse_event(
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":5},{"type":"tool_use","name":"Edit","input":{"file_path":"a.rs"}},{"type":"thinking","thinking":"x"}]}}"#,
        );
        assert_eq!(e.tool_calls, 1);
        assert_eq!(e.files_touched, ["a.rs"]);
        assert_eq!(e.transcript, ["[tool] Edit a.rs"]);
        let e = parse_event(
            r#"{"type":"result","subtype":"success","is_error":"no","num_turns":-1,"usage":null}"#,
        );
        let r = e.result.expect("a result");
        assert!(r.success, "is_error that is not true is not an error");
        assert_eq!((r.num_turns, r.usage), (None, Some(Value::Null)));
        for line in [
            r#"{"type":"stream_event"}"#,
            "[]",
            "not json",
            r#"{"type":1}"#,
        ] {
            assert_eq!(parse_event(line), EventInfo::default(), "{line}");
        }
    }

    #[test]
    fn events_become_transcript_lines() {
        let e = parse_event(
            r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Creating it."},{"type":"tool_use","id":"t","name":"Write","input":{"file_path":"a.txt","content":"x"}}]}}"#,
        );
        assert_eq!(
            e.transcript,
            ["[assistant] Creating it.", "[tool] Write a.txt"]
        );
        assert_eq!(e.tool_calls, 1);
        assert_eq!(e.files_touched, ["a.txt"]);
        let e = parse_event(
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"done"}"#,
        );
        let r = e.result.unwrap();
        assert!(r.success);
        assert_eq!(r.num_turns, Some(3));
        assert_eq!(parse_event("not json"), EventInfo::default());
        let e = parse_event(r#"{"type":"system","subtype":"init","session_id":"s-1"}"#);
        assert_eq!(e.session_id.as_deref(), Some("s-1"));
    }

    #[test]
    fn empty_allowed_tools_means_none() {
        let ep = Endpoint {
            name: "e".into(),
            base_url: "http://x".into(),
            backend: None,
            host: None,
            notes: None,
            env: [("API_TIMEOUT_MS".to_string(), "5".to_string())]
                .into_iter()
                .collect(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        };
        let s = RunSettings {
            served_id: "m",
            window: Some(65536),
            window_rule: crate::session_env::WindowRule::Budget,
            permission_mode: "acceptEdits",
            allowed_tools: &[],
            disallowed_tools: &["Agent".into()],
            max_turns: 3,
            setting_sources: &["project".into()],
            system_prompt_append: "be a delegate",
            resume_session: Some("sess"),
            mcp_config: None,
            sandbox: false,
            shim_silence: None,
            agent: None,
        };
        let l = launch(
            "claude".into(),
            Path::new("/tmp"),
            "http://127.0.0.1:1/j/t",
            &ep,
            &s,
            "do it",
        );
        let a = l.args.join(" ");
        assert!(a.contains("--tools  --disallowedTools Agent"), "{a}");
        assert!(!a.contains("--allowedTools"));
        assert!(a.contains("--strict-mcp-config"), "{a}");
        assert!(!a.contains("--mcp-config"), "{a}");
        assert!(a.contains("--resume sess"));
        assert!(!a.contains("--settings"), "{a}");
        assert_eq!(l.prompt, "do it");
        assert!(
            !l.args.iter().any(|a| a == "do it"),
            "the prompt is not an argument"
        );
        assert!(
            l.env.contains(&("API_TIMEOUT_MS".into(), "5".into())),
            "endpoint env last"
        );
        assert!(
            l.env
                .contains(&("CLAUDE_CODE_MAX_OUTPUT_TOKENS".into(), "8192".into()))
        );
        assert!(
            l.env
                .contains(&("ENABLE_TOOL_SEARCH".into(), "false".into()))
        );
        assert!(
            l.env
                .contains(&("CLAUDE_CODE_DISABLE_AUTO_MEMORY".into(), "1".into()))
        );
        assert!(
            l.env
                .contains(&("CLAUDE_CODE_DISABLE_GIT_INSTRUCTIONS".into(), "1".into()))
        );
    }

    #[test]
    fn the_delegates_environment_is_clean() {
        let ours = vec![
            (
                "ANTHROPIC_BASE_URL".to_string(),
                "http://127.0.0.1:1/j/t".to_string(),
            ),
            (
                "ANTHROPIC_API_KEY".to_string(),
                "localagents-placeholder".to_string(),
            ),
        ];
        let parent = [
            ("ANTHROPIC_AUTH_TOKEN", "sk-real"),
            ("ANTHROPIC_API_KEY", "sk-real-too"),
            ("ANTHROPIC_BASE_URL", "https://elsewhere"),
            ("ANTHROPIC_CUSTOM_HEADERS", "x: y"),
            ("CLAUDE_CODE_USE_BEDROCK", "1"),
            ("CLAUDE_CODE_USE_VERTEX", "1"),
            ("CLAUDECODE", "1"),
            ("LLAMA_KEY", "k"),
            ("no_proxy", "corp.example, 127.0.0.1"),
            ("PATH", "/usr/bin"),
        ];
        let (remove, set) = clean_env(parent, &ours, Some("LLAMA_KEY"));
        for k in [
            "ANTHROPIC_AUTH_TOKEN",
            "ANTHROPIC_CUSTOM_HEADERS",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "CLAUDECODE",
            "LLAMA_KEY",
        ] {
            assert!(remove.iter().any(|r| r == k), "{k} not removed: {remove:?}");
        }
        // Ours are overwritten, not removed; PATH stays.
        assert!(
            !remove
                .iter()
                .any(|r| r == "ANTHROPIC_BASE_URL" || r == "PATH")
        );
        assert_eq!(
            set,
            [
                (
                    "NO_PROXY".to_string(),
                    "corp.example,127.0.0.1,localhost".to_string()
                ),
                (
                    "no_proxy".to_string(),
                    "corp.example,127.0.0.1,localhost".to_string()
                )
            ]
        );
    }

    #[test]
    fn only_allowed_tools_are_offered() {
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            offered_tools(
                &v(&[
                    "Read",
                    "Bash(cargo test:*)",
                    "Bash",
                    "Agent",
                    "mcp__x__y",
                    "Edit"
                ]),
                &v(&["Agent", "Task", "Bash(rm:*)"])
            ),
            v(&["Read", "Bash", "Edit"])
        );
        assert_eq!(
            missing_tools(&v(&["Read", "Bogus"]), &v(&["Bash", "Read"])),
            v(&["Bogus"])
        );
        let e = parse_event(
            r#"{"type":"system","subtype":"init","session_id":"s","tools":["Bash","Read"],"claude_code_version":"2.1.328"}"#,
        );
        assert_eq!(e.init_tools, Some(v(&["Bash", "Read"])));
        assert_eq!(e.claude_version.as_deref(), Some("2.1.328"));
    }

    #[test]
    fn default_tools_are_offered_and_mcp_config_passed() {
        let ep = Endpoint {
            name: "e".into(),
            base_url: "http://x".into(),
            backend: None,
            host: None,
            notes: None,
            env: Default::default(),
            api_key_env: None,
            allow_insecure_key: false,
            session_header: None,
            vllm_router: false,
            wire: None,
            window: None,
        };
        let d = crate::config::Defaults::default();
        let s = RunSettings {
            served_id: "m",
            window: None,
            window_rule: crate::session_env::WindowRule::Budget,
            permission_mode: "acceptEdits",
            allowed_tools: &d.allowed_tools,
            disallowed_tools: &d.disallowed_tools,
            max_turns: 3,
            setting_sources: &[],
            system_prompt_append: "",
            resume_session: None,
            mcp_config: Some(Path::new("/etc/mcp.json")),
            sandbox: true,
            shim_silence: None,
            agent: None,
        };
        let l = launch("claude".into(), Path::new("/tmp"), "u", &ep, &s, "t");
        let pos = |f: &str| l.args.iter().position(|a| a == f).unwrap();
        assert_eq!(
            l.args[pos("--tools") + 1],
            "Read,Edit,Write,Glob,Grep,Bash,WebFetch"
        );
        assert_eq!(
            l.args[pos("--allowedTools") + 1],
            "Read,Edit,Write,Glob,Grep,Bash,WebFetch"
        );
        assert_eq!(l.args[pos("--mcp-config") + 1], "/etc/mcp.json");
        let settings: Value = serde_json::from_str(&l.args[pos("--settings") + 1]).unwrap();
        assert_eq!(settings["sandbox"]["enabled"], true);
        assert_eq!(settings["sandbox"]["failIfUnavailable"], true);
        assert_eq!(settings["sandbox"]["allowUnsandboxedCommands"], false);
    }
}
