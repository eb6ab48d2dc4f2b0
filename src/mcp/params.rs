//! The parameters of the MCP tools: what each tool takes, with the
//! descriptions Claude reads in its schema, and how a session's
//! `run_agent` call becomes a job's arguments.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::api::{self, Caller, Isolation, LogStream, RunArgs, Status};

/// Arguments of `register_endpoint`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RegisterEndpointParams {
    /// Endpoint name: letters, digits, `_`, `.` or `-` (e.g. `gpu-box`).
    pub name: String,
    /// Base URL of the server, http or https, without `/v1` (e.g. `http://10.0.0.5:8080`).
    pub base_url: String,
    /// `llama.cpp`, `vllm`, `ollama`, `lmstudio`, `sglang`, `exo`, `docker-model-runner`, `lemonade`, `localai`, `llamafile`, `jan`, `vllm-mlx`, `mlx-lm`, `tabbyapi`, `koboldcpp`, `openai` (any OpenAI chat-completions server; set `window:` in models.yaml if it says none) or `other`. Leave out to detect it.
    #[serde(default)]
    pub backend: Option<String>,
    /// A label for the machine, used when asking the user to start a model there.
    #[serde(default)]
    pub host: Option<String>,
    /// Free text: what runs there and how to start it.
    #[serde(default)]
    pub notes: Option<String>,
    /// Not taken: a key is the user's to configure, never a model's. Kept
    /// out of the schema; present, it is refused with a sentence.
    #[serde(default)]
    #[schemars(skip)]
    pub api_key_env: Option<serde_json::Value>,
}

/// Arguments of `run_agent`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RunAgentParams {
    /// The brief: a self-contained task with the files, the interface, the acceptance command and the constraints. The delegate sees only this. At most 1 MiB: name long material by its path instead.
    pub task: String,
    /// Model name from list_models (menu name, served id, or a fuzzy name like `qwen3.8-27b`). Default: defaults.model, else the first served model.
    #[serde(default)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Project directory to work in (default: the current project).
    #[serde(default)]
    pub cwd: Option<String>,
    /// `none` (work in the tree) or `worktree` (a fresh git worktree on branch `local-agent/<job>`, kept only if it changed).
    #[serde(default)]
    #[schemars(with = "Option<Isolation>")]
    pub isolation: Option<String>,
    /// Seconds to wait for the job before returning (0: return at once; capped at 110).
    #[serde(default)]
    pub wait_s: Option<u64>,
    /// Claude Code permission mode (default acceptEdits).
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Turn limit (default 60).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Tools the delegate may use without asking. An empty list means no tools at all.
    #[serde(default)]
    pub allowed_tools: Option<Vec<String>>,
    /// Tools the delegate may not use (default Agent, Task).
    #[serde(default)]
    pub disallowed_tools: Option<Vec<String>>,
    /// Text appended to the delegate's system prompt (replaces the default delegate suffix).
    #[serde(default)]
    pub system_prompt_append: Option<String>,
    /// Continue an earlier job's session (same model, endpoint, cwd and worktree); `task` is the follow-up.
    #[serde(default)]
    pub resume_job: Option<String>,
    /// Run as one of the user's subagent profiles (`.claude/agents/<name>.md`, project then user; list_models lists them): its prompt, and of its tools those allowed_tools allows. `task` stays the brief.
    #[serde(default)]
    pub agent: Option<String>,
    /// Whole-job timeout in seconds (default 1800).
    #[serde(default)]
    pub timeout_s: Option<u64>,
    /// A shell command that must pass for the job to succeed, e.g. `cargo test -p foo`. We run it in the job's tree after the delegate finishes; on failure the same session gets the output and another try.
    #[serde(default)]
    pub acceptance: Option<String>,
    /// Fix rounds after a failed acceptance (default 2, at most 10).
    #[serde(default)]
    pub fix_rounds: Option<u32>,
    /// Load the model even if the endpoint may unload another model that a running job uses (a router past --models-max, a llama-swap group). Only when the user says so.
    #[serde(default)]
    pub force: bool,
}

/// A job id.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobIdParams {
    /// The job id from run_agent or list_jobs.
    pub job_id: String,
}

/// Arguments of `wait_job`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct WaitJobParams {
    /// The job id.
    pub job_id: String,
    /// Seconds to wait at most (default 110, the maximum).
    #[serde(default)]
    pub timeout_s: Option<u64>,
}

/// Arguments of `list_jobs`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ListJobsParams {
    /// Only jobs with this status: queued, running, succeeded, failed, cancelled, timeout, lost.
    #[serde(default)]
    #[schemars(with = "Option<Status>")]
    pub status: Option<String>,
    /// How many, newest first (default 20, at most 200).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Arguments of `job_log`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobLogParams {
    /// The job id.
    pub job_id: String,
    /// `transcript` (what the delegate said and did), `requests` (every backend request) or `events` (raw stream-json).
    #[serde(default)]
    #[schemars(with = "Option<LogStream>")]
    pub stream: Option<String>,
    /// Lines to return (default 80).
    #[serde(default)]
    pub tail_lines: Option<usize>,
    /// Start at this line instead of the tail (for paging; see next_offset).
    #[serde(default)]
    pub offset: Option<usize>,
}

/// Arguments of `job_diff`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobDiffParams {
    /// The job id.
    pub job_id: String,
    /// Bytes per page (default 20000).
    #[serde(default)]
    pub max_bytes: Option<usize>,
    /// Byte offset of the page (see next_offset).
    #[serde(default)]
    pub offset: Option<usize>,
}

/// Arguments of `cleanup_jobs`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CleanupParams {
    /// Remove finished jobs older than this many days (default 7), with their kept worktrees and branches.
    #[serde(default)]
    pub older_than_days: Option<u64>,
    /// Remove just this finished job (its worktree, branch and directory).
    #[serde(default)]
    pub job_id: Option<String>,
    /// Only list what would be removed (default true). Pass false to remove.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Also remove worktrees with uncommitted files or unmerged commits (default false). Only when the user said so.
    #[serde(default)]
    pub force: bool,
}

/// Arguments of `local_complete`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CompleteParams {
    /// The prompt: one self-contained question or instruction.
    pub prompt: String,
    /// A system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Files to attach as text (paths inside the project; at most 256 KiB each, 1 MiB in all).
    #[serde(default)]
    pub files: Vec<String>,
    /// Model name from list_models (default: defaults.model, else the first served).
    #[serde(default)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Most output tokens (default 2048, less when the window has less room).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f64>,
}

/// One item of `local_batch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BatchItemParams {
    pub prompt: String,
    #[serde(default)]
    pub system: Option<String>,
    /// Files to attach as text (paths inside the project).
    #[serde(default)]
    pub files: Vec<String>,
}

/// Arguments of `local_batch`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BatchParams {
    /// Independent prompts; each is answered on its own, in input order. At most 1000.
    pub items: Vec<BatchItemParams>,
    /// Model name from list_models.
    #[serde(default)]
    pub model: Option<String>,
    /// Only use this endpoint (default: every endpoint that serves the model).
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Most output tokens per item (default 2048).
    #[serde(default)]
    pub max_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Seconds to wait for the results (default and maximum 110); a longer batch goes on as a job: wait_job returns its results.
    #[serde(default)]
    pub wait_s: Option<u64>,
}

/// Arguments of `local_review`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct ReviewParams {
    /// A finished job whose diff to review against its brief.
    #[serde(default)]
    pub job_id: Option<String>,
    /// Or: a unified diff to review.
    #[serde(default)]
    pub diff: Option<String>,
    /// Model name from list_models.
    #[serde(default)]
    pub model: Option<String>,
    /// What to look at especially (e.g. "error handling", "the new tests").
    #[serde(default)]
    pub focus: Option<String>,
}

pub(super) fn ask_of(
    prompt: String,
    system: Option<String>,
    files: Vec<String>,
) -> crate::complete::Ask {
    crate::complete::Ask {
        prompt,
        system,
        files: files.into_iter().map(std::path::PathBuf::from).collect(),
    }
}

impl RunAgentParams {
    /// The job a session asks for; `project` is the session's project.
    pub(super) fn into_args(self, project: std::path::PathBuf) -> Result<RunArgs, api::Error> {
        let p = self;
        Ok(RunArgs {
            caller: Caller::Session { project },
            task: p.task,
            model: p.model,
            endpoint: p.endpoint,
            cwd: p.cwd.map(std::path::PathBuf::from),
            isolation: api::parse_arg(p.isolation.as_deref())?,
            permission_mode: p.permission_mode,
            max_turns: p.max_turns,
            allowed_tools: p.allowed_tools,
            disallowed_tools: p.disallowed_tools,
            system_prompt_append: p.system_prompt_append,
            resume_job: p.resume_job,
            timeout_s: p.timeout_s,
            acceptance: p.acceptance,
            fix_rounds: p.fix_rounds,
            force: p.force,
            tool_use_id: None,
            agent: p.agent,
        })
    }
}
