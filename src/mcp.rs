//! The MCP server on stdio (rmcp): tool schemas and thin handlers.
//!
//! stdout belongs to the protocol; nothing else may write there. Handlers
//! only translate between MCP and [`crate::api`]. A failure the caller can
//! act on comes back as a tool result with `isError` and a sentence that says
//! what to do, never as a protocol error that Claude Code would render as
//! "internal error".

mod params;
mod stdio;
mod tasks;

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::IntoCallToolResult;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult, ErrorData, GetTaskParams,
    GetTaskResult, Implementation, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use rmcp::model::{ContentBlock, IntoContents};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};

use crate::api::{
    self, CleanupReport, Context, DiffPage, JobList, JobReply, LogPage, ModelsReport, Registered,
};
use crate::api::{BatchArgs, Caller, JobSummary, Manager, Review};
pub use params::*;

/// What Claude reads about this server in its system prompt.
pub const INSTRUCTIONS: &str = "localagents runs coding tasks on a model served from the user's own server (llama.cpp, vLLM, Ollama, LM Studio, SGLang, exo, Docker Model Runner, Lemonade, LocalAI, llamafile, Jan, vllm-mlx, mlx_lm.server, TabbyAPI, KoboldCpp or any OpenAI-compatible server), through a full headless Claude Code session. The loop: (1) list_models to see what is up, each endpoint's served ids, per-slot window and free slots; (2) run_agent with a self-contained brief (files, interface, acceptance command, constraints); (3) wait_job, or leave it running and poll job_status later; (4) review what it changed before accepting it. If the model you need is not running, do not retry: tell the user its name and host and ask them to start it. register_endpoint adds a server the user tells you about. Work that needs no tools does not need a session: local_complete for one answer (a commit message, a docstring, a regex), local_batch for many small independent ones, local_review to have a local model read a diff before you do.";

/// A successful tool result: `T` as one JSON text block.
#[derive(Debug)]
pub struct Reply<T>(pub T);

impl<T: serde::Serialize> IntoContents for Reply<T> {
    fn into_contents(self) -> Vec<ContentBlock> {
        vec![ContentBlock::text(
            serde_json::to_string(&self.0).unwrap_or_else(|_| "{}".into()),
        )]
    }
}

/// A failed call's structured content: the kind beside the sentence, or
/// for `model_unavailable` beside whom to ask for what.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
enum ToolError<'a> {
    Sentence {
        kind: crate::error::Kind,
        error: String,
    },
    Unavailable {
        kind: crate::error::Kind,
        #[serde(flatten)]
        unavailable: &'a crate::registry::Unavailable,
    },
}

impl IntoCallToolResult for api::Error {
    /// An `isError` result: the sentence as its text (`model_unavailable`:
    /// its whole structure, whom to ask for what), and the kind beside it
    /// as its structured content.
    fn into_call_tool_result(self) -> Result<CallToolResponse, ErrorData> {
        let kind = self.kind();
        let (text, structured) = match self.unavailable() {
            Some(u) => (
                serde_json::to_string(u).unwrap_or_else(|_| self.to_string()),
                ToolError::Unavailable {
                    kind,
                    unavailable: u,
                },
            ),
            None => (
                self.to_string(),
                ToolError::Sentence {
                    kind,
                    error: self.to_string(),
                },
            ),
        };
        let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
        r.structured_content = serde_json::to_value(&structured).ok();
        Ok(r.into())
    }
}

/// The localagents MCP server.
#[derive(Clone)]
pub struct Server {
    ctx: Arc<Context>,
    manager: Arc<Manager>,
    /// The calling session's project: `run_agent` works only inside it (or
    /// under `defaults.allowed_roots`). `$CLAUDE_PROJECT_DIR`, which Claude
    /// Code gives plugin MCP servers, else the cwd it started us in.
    project: std::path::PathBuf,
    tool_router: ToolRouter<Self>,
}

/// How often a waiting call reports progress at most.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl Server {
    /// Run `wait` (a wait for job `id`); while it runs, and when the call
    /// carries a progress token, send `notifications/progress` with the
    /// job's turn, tool calls, tokens and last activity: once at once, then
    /// on change, at most every [`PROGRESS_EVERY`].
    async fn with_progress<T>(
        &self,
        id: &str,
        ctx: &RequestContext<RoleServer>,
        wait: impl std::future::Future<Output = T>,
    ) -> T {
        let (Some(token), Some(mut rx)) =
            (ctx.meta.get_progress_token(), self.manager.progress(id))
        else {
            return wait.await;
        };
        let peer = ctx.peer.clone();
        let report = async move {
            let mut n = 0.0;
            loop {
                let line = rx.borrow_and_update().line();
                n += 1.0;
                let note = ProgressNotificationParam::new(token.clone(), n).with_message(line);
                if peer.notify_progress(note).await.is_err() {
                    break;
                }
                tokio::time::sleep(PROGRESS_EVERY).await;
                if rx.changed().await.is_err() {
                    break; // The job ended.
                }
            }
        };
        tokio::pin!(wait);
        tokio::select! {
            r = &mut wait => r,
            // Nothing more to report (or nobody listens): just wait.
            () = report => wait.await,
        }
    }
}

type ToolResult<T> = Result<Reply<T>, api::Error>;

/// The key under which Claude Code names the tool call in a `tools/call`'s
/// `_meta` (2.1.328; checked in its source and by `tasks::a_job_knows_the_tool_call_that_started_it`).
pub const TOOL_USE_ID_META: &str = "claudecode/toolUseId";

/// The tool call's id from `meta`, if it looks like one (the client's
/// word, so only a short id of ASCII letters, digits, `_` and `-`).
fn tool_use_id(meta: &rmcp::model::RequestMetaObject) -> Option<String> {
    let id = meta.get(TOOL_USE_ID_META)?.as_str()?;
    let ok = (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    ok.then(|| id.to_string())
}

#[tool_router]
impl Server {
    pub fn new(ctx: Context) -> Self {
        let manager = Manager::new(ctx.clone());
        let project = std::env::var_os("CLAUDE_PROJECT_DIR")
            .map(std::path::PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
            .or_else(|| std::env::current_dir().ok())
            .unwrap_or_else(|| std::path::PathBuf::from("/nonexistent"));
        Server {
            ctx: Arc::new(ctx),
            manager,
            project,
            tool_router: Self::tool_router(),
        }
    }

    /// The job manager (to stop running jobs on shutdown).
    pub fn manager(&self) -> Arc<Manager> {
        self.manager.clone()
    }

    /// Hand a task to a local model: starts a full headless Claude Code session on the user's own server and returns the job summary at once (or after wait_s). If the model is not running, the answer says whom to ask for what: ask the user, do not retry.
    #[tool(name = "run_agent")]
    async fn run_agent(
        &self,
        Parameters(p): Parameters<RunAgentParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, api::Error> {
        let wait_s = p.wait_s.unwrap_or(0);
        let mut args = p.into_args(self.project.clone())?;
        args.tool_use_id = tool_use_id(&ctx.meta);
        let started = api::run_agent(&self.manager, args, 0).await?;
        // A client that speaks the tasks extension (Claude Code, interactive,
        // protocol 2026-07-28) gets the job as a task at once: it polls
        // tasks/get and hands the result to the model when the job ends.
        if ctx
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Ok(CallToolResponse::Task(CreateTaskResult::new(
                tasks::task_of(&started.job.id, &self.manager),
            )));
        }
        let reply = if wait_s == 0 || !started.still_running {
            started
        } else {
            let id = started.job.id.clone();
            let wait = api::wait_job(&self.manager, &id, wait_s);
            self.with_progress(&id, &ctx, wait).await?
        };
        Ok(CallToolResult::success(Reply(reply).into_contents()).into())
    }

    /// Wait for a job to end, up to timeout_s (max 110). Returns the summary with still_running.
    #[tool(name = "wait_job")]
    async fn wait_job(
        &self,
        Parameters(p): Parameters<WaitJobParams>,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<JobReply> {
        let t = p.timeout_s.unwrap_or(api::MAX_WAIT.as_secs());
        let wait = api::wait_job(&self.manager, &p.job_id, t);
        self.with_progress(&p.job_id, &ctx, wait).await.map(Reply)
    }

    /// The summary of a job: status, result, files changed, worktree, metrics.
    #[tool(name = "job_status")]
    async fn job_status(&self, Parameters(p): Parameters<JobIdParams>) -> ToolResult<JobSummary> {
        api::blocking(&self.manager, move |m| api::job_status(m, &p.job_id))
            .await
            .map(Reply)
    }

    /// Jobs, newest first, across restarts.
    #[tool(name = "list_jobs")]
    async fn list_jobs(&self, Parameters(p): Parameters<ListJobsParams>) -> ToolResult<JobList> {
        let status = api::parse_arg(p.status.as_deref().filter(|s| !s.trim().is_empty()))?;
        let limit = p.limit.unwrap_or(api::DEFAULT_LIST_LIMIT);
        api::blocking(&self.manager, move |m| {
            api::list_jobs(m, status, limit, api::MAX_LIST_LIMIT)
        })
        .await
        .map(Reply)
    }

    /// A page of a job's transcript, request log or raw events.
    #[tool(name = "job_log")]
    async fn job_log(&self, Parameters(p): Parameters<JobLogParams>) -> ToolResult<LogPage> {
        let stream = api::parse_arg(p.stream.as_deref())?.unwrap_or_default();
        let tail = p.tail_lines.unwrap_or(api::DEFAULT_TAIL_LINES);
        api::blocking(&self.manager, move |m| {
            api::job_log(m, &p.job_id, stream, tail, p.offset)
        })
        .await
        .map(Reply)
    }

    /// The full diff of a job (a worktree job against its base, untracked files included), paged.
    #[tool(name = "job_diff")]
    async fn job_diff(&self, Parameters(p): Parameters<JobDiffParams>) -> ToolResult<DiffPage> {
        let max = p.max_bytes.unwrap_or(api::DEFAULT_DIFF_BYTES);
        api::job_diff(&self.manager, &p.job_id, max, p.offset.unwrap_or(0))
            .await
            .map(Reply)
    }

    /// Stop a job: the delegate and every process it started are gone within 5 s.
    #[tool(name = "cancel_job")]
    async fn cancel_job(&self, Parameters(p): Parameters<JobIdParams>) -> ToolResult<JobSummary> {
        api::cancel_job(&self.manager, &p.job_id).await.map(Reply)
    }

    /// Remove old finished jobs. A dry run unless dry_run is false. A worktree with uncommitted files or unmerged commits is kept and listed (force removes it).
    #[tool(name = "cleanup_jobs")]
    async fn cleanup_jobs(
        &self,
        Parameters(p): Parameters<CleanupParams>,
    ) -> ToolResult<CleanupReport> {
        let args = api::CleanupArgs {
            older_than_days: p.older_than_days,
            job_id: p.job_id,
            dry_run: p.dry_run.unwrap_or(true),
            force: p.force,
            ..api::CleanupArgs::default()
        };
        api::cleanup_jobs(&self.manager, &args).await.map(Reply)
    }

    /// One answer from a local model, no tools and no session: a commit message, a docstring, a regex, test data. Cheap: a session costs thousands of prompt tokens before it starts. A prompt that cannot fit the model's window is refused before it is sent.
    #[tool(name = "local_complete")]
    async fn local_complete(
        &self,
        Parameters(p): Parameters<CompleteParams>,
    ) -> ToolResult<crate::complete::Completion> {
        let options = crate::complete::Options {
            max_tokens: p.max_tokens,
            temperature: p.temperature,
        };
        api::local_complete(
            &self.ctx,
            ask_of(p.prompt, p.system, p.files),
            p.model.as_deref(),
            p.endpoint.as_deref(),
            options,
            &Caller::Session {
                project: self.project.clone(),
            },
        )
        .await
        .map(Reply)
    }

    /// Many independent one-shot answers, fanned out over the free slots of every endpoint serving the model; results in input order, each with its own usage and ms. An item that fails fails alone. Runs as a job: past wait_s, wait_job returns the results.
    #[tool(name = "local_batch")]
    async fn local_batch(
        &self,
        Parameters(p): Parameters<BatchParams>,
        ctx: RequestContext<RoleServer>,
    ) -> ToolResult<api::BatchReply> {
        let args = BatchArgs {
            items: p
                .items
                .into_iter()
                .map(|i| ask_of(i.prompt, i.system, i.files))
                .collect(),
            model: p.model,
            endpoint: p.endpoint,
            options: crate::complete::Options {
                max_tokens: p.max_tokens,
                temperature: p.temperature,
            },
            base: self.project.clone(),
        };
        let caller = Caller::Session {
            project: self.project.clone(),
        };
        let rec = api::start_batch(&self.manager, args, &caller).await?;
        let wait_s = p.wait_s.unwrap_or(api::MAX_WAIT.as_secs());
        let wait = api::batch_reply(&self.manager, rec.id(), wait_s);
        self.with_progress(rec.id(), &ctx, wait).await.map(Reply)
    }

    /// Ask a local model to review a finished job's diff against its brief (or a given diff): verdict looks_right / problems, findings (file, line, what), summary. Advice for you, not a gate; it saves your tokens on big or mechanical diffs. Kept with the job; job_status shows it.
    #[tool(name = "local_review")]
    async fn local_review(&self, Parameters(p): Parameters<ReviewParams>) -> ToolResult<Review> {
        let args = api::ReviewArgs {
            job_id: p.job_id,
            diff: p.diff,
            model: p.model,
            endpoint: None,
            focus: p.focus,
        };
        api::local_review(&self.manager, args).await.map(Reply)
    }

    /// Live view of every configured endpoint (llama.cpp, vLLM, Ollama, LM Studio, SGLang, exo, Docker Model Runner, Lemonade, LocalAI, llamafile, Jan, vllm-mlx, mlx_lm.server, TabbyAPI, KoboldCpp or any OpenAI-compatible server): up or down (with the fix), served model ids, per-slot context window, slots busy/free, load, plus the menu of model names and where each is running. Call this before run_agent.
    #[tool(name = "list_models")]
    async fn list_models(&self) -> ToolResult<ModelsReport> {
        api::list_models(&self.ctx).await.map(Reply)
    }

    /// Add a server the user told you about. Writes only the sidecar models.local.yaml next to the active config (the hand-written file is never touched) and returns a live probe of the new endpoint.
    #[tool(name = "register_endpoint")]
    async fn register_endpoint(
        &self,
        Parameters(p): Parameters<RegisterEndpointParams>,
    ) -> ToolResult<Registered> {
        let args = api::RegisterArgs {
            name: p.name,
            base_url: p.base_url,
            backend: p.backend,
            host: p.host,
            notes: p.notes,
            api_key_env: p.api_key_env.map(|v| match v {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            }),
        };
        api::register_endpoint(&self.ctx, args).await.map(Reply)
    }
}

/// Every tool this server offers, as `tools/list` lists them (sorted by
/// name). docs/reference/mcp-tools.md is generated from it.
pub fn tools() -> Vec<rmcp::model::Tool> {
    Server::tool_router().list_all()
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(
            "localagents",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(INSTRUCTIONS)
    }

    /// `tasks/get`: a run_agent job, by its id. Working with the progress
    /// line while it runs; completed with the same result a plain call
    /// would have returned once it ends.
    async fn get_task(
        &self,
        request: GetTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        // Records read from disk: on the blocking pool (a client polls
        // this every 2 s per task).
        let m = self.manager.clone();
        tokio::task::spawn_blocking(move || tasks::get(&m, &request.task_id))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?
            .map(GetTaskResult::new)
    }

    /// `tasks/cancel`: cancel the job (its processes are gone within 5 s).
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let (m, id) = (self.manager.clone(), request.task_id.clone());
        tokio::task::spawn_blocking(move || tasks::known(&m, &id))
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))??;
        api::cancel_job(&self.manager, &request.task_id)
            .await
            .map(|_| ())
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))
    }
}

/// Serve MCP on stdin/stdout until the client disconnects or a signal
/// arrives; then stop this process's jobs (no orphans).
pub async fn serve_stdio(ctx: Context) -> anyhow::Result<()> {
    let server = Server::new(ctx.clone());
    let manager = server.manager();
    let service = server
        .serve(stdio::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP initialisation failed: {e}"))?;
    // The reaping step: a delegate whose localagents process died is
    // stopped now (reading its record never signals).
    let reaper = manager.clone();
    // Off the start-up path: it reads every job record.
    drop(tokio::spawn(async move { reaper.reap_lost().await }));
    // The session's first job starts from the cache (off the start-up
    // path too; it sends nothing where it could cost anything).
    let warm = manager.clone();
    let prewarm = tokio::spawn(async move { warm.prewarm().await });
    // Old ended jobs go in the background, never on a request's path.
    let retention = crate::api::retention::spawn(&manager, &ctx, crate::api::retention::SERVE_DELAY);
    let ended = tokio::select! {
        r = service.waiting() => r.map(drop),
        _ = crate::signals::wait_for_shutdown() => Ok(()),
    };
    // A prewarm still under way stops here (its capture's claude with it:
    // the guard ends when the task drops the lifeline).
    prewarm.abort();
    retention.abort();
    manager.shutdown().await;
    ended?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The schema text of one tool (description and parameters).
    fn tool_text(name: &str) -> String {
        let tool = tools()
            .into_iter()
            .find(|t| t.name == name)
            .unwrap_or_else(|| panic!("no tool {name}"));
        serde_json::to_string(&tool).unwrap()
    }

    /// Each default lives in one const; the texts Claude reads quote it.
    #[test]
    fn docs_quote_the_defaults() {
        let wait = api::MAX_WAIT.as_secs();
        let d = crate::config::Defaults::default();
        for (tool, phrase) in [
            ("run_agent", format!("capped at {wait})")),
            ("run_agent", format!("Turn limit (default {})", d.max_turns)),
            (
                "run_agent",
                format!("timeout in seconds (default {})", d.timeout_s),
            ),
            (
                "run_agent",
                format!(
                    "Fix rounds after a failed acceptance (default {}",
                    d.fix_rounds
                ),
            ),
            (
                "run_agent",
                format!(
                    "At most {} MiB: name long material",
                    api::MAX_TASK_BYTES / (1024 * 1024)
                ),
            ),
            ("wait_job", format!("(default {wait}, the maximum)")),
            ("wait_job", format!("up to timeout_s (max {wait})")),
            (
                "list_jobs",
                format!(
                    "(default {}, at most {})",
                    api::DEFAULT_LIST_LIMIT,
                    api::MAX_LIST_LIMIT
                ),
            ),
            ("job_log", format!("(default {})", api::DEFAULT_TAIL_LINES)),
            ("job_diff", format!("(default {})", api::DEFAULT_DIFF_BYTES)),
            (
                "cleanup_jobs",
                format!("(default {})", api::DEFAULT_CLEANUP_DAYS),
            ),
        ] {
            let text = tool_text(tool);
            assert!(text.contains(&phrase), "{tool}: `{phrase}` not in {text}");
        }
        let skill = include_str!("../skills/local-agents/SKILL.md");
        let reference = include_str!("../skills/local-agents/reference.md");
        assert!(skill.contains(&format!("`wait_job` (up to {wait} s per call)")));
        assert!(reference.contains(&format!("`wait_s` up to {wait} |")));
        assert!(reference.contains(&format!("waits up to {wait} s;")));
    }
}
