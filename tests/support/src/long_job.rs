//! The long jobs of issue 45 through the real Claude Code CLI and
//! `localagents run`, on a fake llama.cpp server of a given window that
//! refuses a prompt over it with llama.cpp's 400 and keeps a prompt cache
//! like llama-server's: the reader ([`super::reader`]) and the edit-heavy
//! job ([`super::editor`]). Shared by the tests (`tests/it/window.rs`) and
//! the bench (`benches/long_jobs.rs`).

use std::path::Path;

use serde_json::Value;

use super::fake_llama::{self, FakeLlama};
use super::harness::Harness;
use super::{editor, git, reader, tokens};

/// Files in the reader's tree, and tokens in each (issue 45's job).
pub const PARTS: usize = 20;
pub const PART_TOKENS: u64 = 4_500;

/// What one long job left behind.
pub struct LongRun {
    pub code: Option<i32>,
    pub record: Value,
    pub fake: FakeLlama,
    /// The delegate's stream-json events.
    pub events: Vec<Value>,
    /// SUMMARY.md as the reader left it.
    pub summary: Option<String>,
    /// `localagents run`'s wall time.
    pub elapsed: std::time::Duration,
    /// Kept so that the job's temp dirs live as long as the run.
    pub harness: Harness,
}

impl LongRun {
    /// The `compact_boundary` events of the delegate's stream.
    pub fn compact_boundaries(&self) -> usize {
        self.events
            .iter()
            .filter(|e| e["type"] == "system" && e["subtype"] == "compact_boundary")
            .count()
    }

    /// The largest prompt the fake was sent plus the output it was asked
    /// for, and the request that sent it.
    pub fn largest_request(&self) -> (u64, usize) {
        self.fake
            .bodies()
            .iter()
            .enumerate()
            .map(|(i, b)| (prompt_tokens(b) + b["max_tokens"].as_u64().unwrap_or(0), i))
            .max()
            .unwrap_or((0, 0))
    }
}

/// A request's prompt tokens, as the fake counts them.
pub fn prompt_tokens(body: &Value) -> u64 {
    tokens::count(body)
}

/// The two long jobs of issue 45.
#[derive(Debug, Clone, Copy)]
pub enum Job {
    /// [`reader`]: 20 files of 4,500 tokens, read to their ends.
    Reader,
    /// [`editor`]: 30 Edits, each followed by a test run.
    Editor,
}

/// `defaults:` lines of a job as localagents ran it before issue 45:
/// Claude Code told the real window and an output of window/8, nothing
/// cleared.
pub const BEFORE: &str = "  window_budget: false\n  clear_tool_results: off\n";

/// `defaults:` lines of the window budget and the shim's clearing of old
/// tool results (off by default).
pub const CLEARING: &str = "  clear_tool_results: auto\n";

/// Functions the edit-heavy job fixes.
pub const FUNCTIONS: usize = 30;

/// Run `job` at `window` tokens per slot with `extra` lines of
/// `defaults:` and `env` lines for the endpoint.
pub async fn long_job(job: Job, window: u64, extra: &str, env: &str) -> LongRun {
    long_job_as(job, window, extra, env, false).await
}

/// A short delegate prompt, written as a project subagent profile
/// (`.claude/agents/lean-delegate.md`): what a localagents prompt for local
/// models would keep of Claude Code's (the tools, CLAUDE.md, the verify
/// loop, the brief's rules), sent the way a profile's prompt is, in place
/// of Claude Code's system prompt (e2e t20: 1,948 tokens of fixed prompt
/// against 4,581).
pub const LEAN_PROFILE: &str = "---\nname: lean-delegate\ndescription: A delegate for local models.\ntools: Read, Edit, Write, Glob, Grep, Bash\n---\nYou are a coding delegate working in this repository. Follow the project's CLAUDE.md. Use the tools: Read before you Edit, keep edits small, run the project's checks after each change and read their output. Read a long file in parts with offset and limit. Do only what the brief asks; when done, report what you changed and how you verified it.\n";

/// [`long_job`], run as the [`LEAN_PROFILE`] subagent when `lean`.
pub async fn long_job_as(job: Job, window: u64, extra: &str, env: &str, lean: bool) -> LongRun {
    long_job_by(&crate::bin(), job, window, extra, env, lean).await
}

/// [`long_job`] run by the localagents binary `bin` (another build, for a
/// before-and-after figure).
pub async fn long_job_from(bin: &Path, job: Job, window: u64) -> LongRun {
    long_job_by(bin, job, window, "", "", false).await
}

async fn long_job_by(
    bin: &Path,
    job: Job,
    window: u64,
    extra: &str,
    env: &str,
    lean: bool,
) -> LongRun {
    let fake = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "gemma3-270m".into(),
        n_ctx: window,
        slots: 1,
        prefix_cache: true,
        ..Default::default()
    })
    .await;
    let harness = Harness::new().bin(bin).config(&format!(
        "endpoints:\n  box:\n    base_url: {}\n    backend: llama.cpp\n{}defaults:\n  max_turns: 300\n  timeout_s: 1200\n{extra}",
        fake.url(),
        if env.is_empty() { String::new() } else { format!("    env:\n{env}") }
    ));
    let dir = harness.work().join("job");
    git::repo(&dir);
    let brief = match job {
        Job::Reader => {
            reader::write_tree(&dir, PARTS, PART_TOKENS);
            fake.set_script(reader::script(&dir, PARTS));
            reader::brief(PARTS)
        }
        Job::Editor => {
            editor::write_tree(&dir, FUNCTIONS);
            fake.set_script(editor::script(&dir, FUNCTIONS));
            editor::brief(FUNCTIONS)
        }
    };
    let mut c = harness.command(["run", "--model", "gemma3-270m", "--json"]);
    if lean {
        let agents = dir.join(".claude/agents");
        std::fs::create_dir_all(&agents).expect("the agents dir");
        std::fs::write(agents.join("lean-delegate.md"), LEAN_PROFILE).expect("the profile");
        c.args(["--agent", "lean-delegate"]);
    }
    c.arg(brief).current_dir(&dir);
    let started = std::time::Instant::now();
    let out = tokio::process::Command::from(c)
        .output()
        .await
        .expect("localagents run");
    let record: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "run printed no record: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let events = record["log_dir"]
        .as_str()
        .map(|d| read_lines(&Path::new(d).join("events.jsonl")))
        .unwrap_or_default();
    let summary = std::fs::read_to_string(dir.join("SUMMARY.md")).ok();
    LongRun {
        code: out.status.code(),
        record,
        fake,
        events,
        summary,
        elapsed: started.elapsed(),
        harness,
    }
}

/// The JSON lines of a file (a job's events or request log).
pub fn read_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}
