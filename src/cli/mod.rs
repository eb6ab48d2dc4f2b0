//! The command line: argument definitions and dispatch. Each command lives
//! in its own file under `commands/` and is a thin layer over
//! [`crate::api`], [`crate::registry`] or [`crate::config`]; `render` turns
//! typed results into text for a person.
//!
//! Exit codes come from one place, [`ExitStatus`]: 0 on success (also when
//! endpoints are down: that is a finding, not a failure of the command), 1
//! on a runtime error, 2 on a usage or config error, 128 + the signal's
//! number (130, 143, 129) when SIGINT, SIGTERM or SIGHUP stopped a command
//! that works until done (`run`, `complete`, `batch`, `review`, `eval`),
//! which stops its work first ([`crate::signals`]). A closed stdout (a
//! pipe into `head`) is not an error.

mod commands;
pub mod render;

use crate::setup::BringupAction;
use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use crate::api::ExitStatus;
use crate::api::{Context, LogStream, Status};

/// Hand Claude Code's grunt work to a model on your own server: llama.cpp, vLLM, Ollama, LM Studio, SGLang, exo, Docker Model Runner, Lemonade, LocalAI, llamafile, Jan, vllm-mlx, mlx_lm.server, TabbyAPI, KoboldCpp or any OpenAI-compatible server.
#[derive(Debug, Parser)]
#[command(name = "localagents", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

/// Options every command takes.
#[derive(Debug, Args)]
pub struct Global {
    /// Config file; replaces the user and project models.yaml (its sidecar still merges over it).
    #[arg(long, global = true, env = "LOCALAGENTS_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Where job records and logs live [default: $XDG_STATE_HOME/localagents].
    #[arg(long, global = true, env = "LOCALAGENTS_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the MCP server on stdio (what Claude Code starts).
    Serve,
    /// Probe every endpoint: what is up, what it serves, window, slots, latency.
    Status {
        /// Print the stable JSON object (the same as the list_models tool).
        #[arg(long)]
        json: bool,
    },
    /// Hand a task to a local model and wait for it (the same path as the run_agent tool).
    Run(RunCmd),
    /// One answer from a local model, no tools and no session (the local_complete tool).
    Complete(CompleteCmd),
    /// Many independent one-shot answers over the free slots (the local_batch tool).
    Batch(BatchCmd),
    /// A local model's review of a job's diff, or of a diff file (the local_review tool).
    Review(ReviewCmd),
    /// Qualify a served model: a capability probe, then small tasks run as real jobs in temporary repositories.
    Eval(EvalCmd),
    /// Tokens kept on your servers and their list-price equivalent, per model and endpoint.
    Savings {
        /// The period: Nd (7d, 30d) or all.
        #[arg(long, default_value = "7d")]
        since: crate::ledger::Since,
        /// Print JSON (tokens, equivalent_usd, reference_model, jobs, since).
        #[arg(long)]
        json: bool,
    },
    /// A local web page of endpoints, jobs and savings; prints its URL (127.0.0.1, with a token) and opens nothing.
    Ui {
        /// The port (0: a free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// List jobs, newest first.
    Jobs {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Only jobs with this status.
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
        /// How many.
        #[arg(long, default_value_t = crate::api::DEFAULT_LIST_LIMIT)]
        limit: usize,
    },
    /// Inspect or stop one job.
    #[command(subcommand)]
    Job(JobCommand),
    /// Run a shim for a whole local Claude Code session; prints its URL, then the env for `claude`.
    Shim(ShimArgs),
    /// Write a starter config if there is none and register the Claude Code plugin.
    Setup {
        /// Register this plugin directory (a checkout) instead of a clean copy written to $XDG_DATA_HOME/localagents/plugin.
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check everything a delegated job needs: claude, config, endpoints, templates, git, state dir.
    Doctor,
    /// Say what it takes to bring MODEL up; with --run, run its bring_up command and wait.
    Bringup {
        /// Model name from the menu.
        model: String,
        /// Load it: through the endpoint on a router, llama-swap or sleeping server; else run the configured bring_up command (detached, logged) and poll until the model is served.
        #[arg(long, conflicts_with = "unload")]
        run: bool,
        /// Unload it on a router or llama-swap endpoint.
        #[arg(long)]
        unload: bool,
        /// Load or unload even if a running job uses a model that would go.
        #[arg(long)]
        force: bool,
        /// Seconds to wait with --run.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
    },
    /// Trust this project's models.yaml (default: the current directory): read it in full, not only its menu entries.
    Trust {
        /// The project directory.
        dir: Option<PathBuf>,
        /// Take the trust back.
        #[arg(long)]
        remove: bool,
    },
    /// Claude Code hooks (the plugin calls these).
    #[command(subcommand)]
    Hook(HookCommand),
    /// Inspect the configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
}

/// `localagents run`.
#[derive(Debug, Args)]
pub struct RunCmd {
    /// Model name, served id or fuzzy name.
    #[arg(long)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Project directory (default: the current directory).
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Work in a fresh git worktree on branch `local-agent/<job>`.
    #[arg(long)]
    pub worktree: bool,
    /// Turn limit.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Whole-job timeout in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// A shell command that must pass for the job to succeed; run in the job's tree when the delegate is done.
    #[arg(long, value_name = "CMD")]
    pub accept: Option<String>,
    /// Fix rounds after a failed --accept (default: defaults.fix_rounds, 2).
    #[arg(long, value_name = "N")]
    pub fix_rounds: Option<u32>,
    /// Load the model even if that may unload one a running job uses.
    #[arg(long)]
    pub force: bool,
    /// Run as the subagent profile NAME (`.claude/agents/NAME.md` in the project, else in ~/.claude/agents).
    #[arg(long, value_name = "NAME")]
    pub agent: Option<String>,
    /// Print the job record as JSON.
    #[arg(long)]
    pub json: bool,
    /// The task.
    #[arg(required = true, num_args = 1..)]
    pub task: Vec<String>,
}

/// `localagents eval`.
#[derive(Debug, Args)]
pub struct EvalCmd {
    /// Model name, served id or fuzzy name (default: as for run).
    #[arg(long)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// quick: 2 tasks; standard: 6, one of each kind.
    #[arg(long, default_value = "quick", value_parser = ["quick", "standard"])]
    pub suite: String,
    /// Only the capability probe (seconds): tool calls, folded system notes, count_tokens, speeds, window, thinking.
    #[arg(long)]
    pub probe: bool,
    /// Each task's turn limit (a task needs 4 to 8 turns; a model that
    /// needs more is not doing it well).
    #[arg(long, value_name = "N", default_value_t = crate::eval::TASK_TURNS)]
    pub max_turns: u32,
    /// Each task's time limit in seconds, its fix round included.
    #[arg(long, value_name = "S", default_value_t = crate::eval::TASK_TIMEOUT_S)]
    pub task_timeout: u64,
    /// Load the model even if that may unload one a running job uses.
    #[arg(long)]
    pub force: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `localagents complete`.
#[derive(Debug, Args)]
pub struct CompleteCmd {
    /// Model name from the menu, a served id, or a fuzzy name.
    #[arg(long)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// A system prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Attach a file as text (repeatable; 256 KiB each, 1 MiB in all).
    #[arg(long, value_name = "FILE")]
    pub file: Vec<PathBuf>,
    /// Most output tokens (default 2048, less when the window has less room).
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Print the result as JSON (text, usage, ms, model, stop_reason).
    #[arg(long)]
    pub json: bool,
    /// The prompt, or - to read it from stdin.
    #[arg(required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

/// `localagents batch`.
#[derive(Debug, Args)]
pub struct BatchCmd {
    /// Model name from the menu, a served id, or a fuzzy name.
    #[arg(long)]
    pub model: Option<String>,
    /// Only use this endpoint (default: every endpoint serving the model).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Most output tokens per item.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// JSON lines {"prompt", "system"?, "files"?}, or - for stdin.
    pub file: String,
}

/// `localagents review`.
#[derive(Debug, Args)]
pub struct ReviewCmd {
    /// The job whose diff to review against its brief.
    #[arg(required_unless_present = "diff", conflicts_with = "diff")]
    pub job: Option<String>,
    /// Review this diff file instead (- for stdin).
    #[arg(long, value_name = "FILE")]
    pub diff: Option<String>,
    #[arg(long)]
    pub model: Option<String>,
    #[arg(long)]
    pub endpoint: Option<String>,
    /// What to look at especially.
    #[arg(long)]
    pub focus: Option<String>,
    /// Print the review as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// UserPromptSubmit: report finished jobs of this project once per session.
    PromptSubmit,
    /// SessionStart: one line for the user when something needs them (at most once a day).
    SessionStart,
}

/// `--status`: clap's side of [`Status`] (the core knows no clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    Queued,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
    Lost,
}

impl From<StatusArg> for Status {
    fn from(s: StatusArg) -> Status {
        match s {
            StatusArg::Queued => Status::Queued,
            StatusArg::Running => Status::Running,
            StatusArg::Succeeded => Status::Succeeded,
            StatusArg::Failed => Status::Failed,
            StatusArg::Cancelled => Status::Cancelled,
            StatusArg::Timeout => Status::Timeout,
            StatusArg::Lost => Status::Lost,
        }
    }
}

/// `--stream`: clap's side of [`LogStream`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamArg {
    /// What the delegate said and did.
    Transcript,
    /// Every backend request (the shim's log).
    Requests,
    /// The raw stream-json events.
    Events,
}

impl From<StreamArg> for LogStream {
    fn from(s: StreamArg) -> LogStream {
        match s {
            StreamArg::Transcript => LogStream::Transcript,
            StreamArg::Requests => LogStream::Requests,
            StreamArg::Events => LogStream::Events,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// The job's summary (or its whole record with --json).
    Show {
        id: String,
        #[arg(long)]
        json: bool,
    },
    /// A page of the job's transcript, requests or events log.
    Log {
        id: String,
        /// Which log.
        #[arg(long, value_enum, default_value_t = StreamArg::Transcript)]
        stream: StreamArg,
        /// Lines from the end.
        #[arg(long, default_value_t = crate::api::DEFAULT_TAIL_LINES)]
        tail: usize,
    },
    /// The job's full diff (untracked files included).
    Diff { id: String },
    /// Stop the job and its whole process group.
    Cancel { id: String },
}

/// `localagents shim`.
#[derive(Debug, Args)]
pub struct ShimArgs {
    /// Model name, served id or glob (default: `defaults.model`, else the first served model).
    #[arg(long)]
    pub model: Option<String>,
    /// Only use this endpoint.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Port on 127.0.0.1 (0: any free port).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Serve at the bare URL, without the unguessable `/j/<token>` prefix (for a fixed local setup).
    #[arg(long)]
    pub no_token: bool,
    /// Write the `claude --settings` JSON to stdout and exit (needs --port and --no-token, so the URL stays valid).
    #[arg(long)]
    pub print_settings: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the merged config and print it.
    Check,
    /// List the files that are read, in merge order.
    Path,
}

impl Global {
    /// The context, with the state root created and checked (private,
    /// ours, not a symlink).
    pub fn context(&self) -> Result<Context, crate::paths::StateError> {
        let state_dir = match &self.state_dir {
            Some(d) => d.clone(),
            None => crate::paths::default_state_dir().ok_or(crate::paths::StateError::NoHome)?,
        };
        crate::paths::check_state_root(&state_dir)?;
        Ok(Context {
            explicit_config: self.config.clone(),
            state_dir,
        })
    }
}

/// Run a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitStatus> {
    let ctx = match cli.global.context() {
        Ok(c) => c,
        // A hook never fails loudly: no output, exit 0.
        Err(_) if matches!(cli.command, Command::Hook(_)) => return Ok(ExitStatus::Success),
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "localagents: {e}");
            return Ok(ExitStatus::Error);
        }
    };
    if matches!(
        cli.command,
        Command::Serve | Command::Run(_) | Command::Eval(_) | Command::Batch(_)
    ) {
        start_telemetry(&ctx).await;
    }
    match cli.command {
        Command::Serve => {
            crate::mcp::serve_stdio(ctx).await?;
            Ok(ExitStatus::Success)
        }
        Command::Status { json } => commands::status::run(&ctx, json).await,
        Command::Shim(args) => commands::shim::run(&ctx, args).await,
        Command::Run(args) => commands::run::run(ctx, args).await,
        Command::Complete(args) => commands::complete::complete(&ctx, args).await,
        Command::Batch(args) => commands::complete::batch(ctx, args).await,
        Command::Review(args) => commands::complete::review(ctx, args).await,
        Command::Eval(args) => commands::eval::run(ctx, args).await,
        Command::Savings { since, json } => commands::savings::run(&ctx, since, json),
        Command::Ui { port } => commands::ui::run(ctx, port).await,
        Command::Hook(HookCommand::PromptSubmit) => commands::hook::prompt_submit(&ctx),
        Command::Hook(HookCommand::SessionStart) => commands::hook::session_start(&ctx).await,
        Command::Setup { root } => commands::setup::setup(&ctx, root.as_deref()),
        Command::Doctor => commands::setup::doctor(&ctx).await,
        Command::Bringup {
            model,
            run,
            unload,
            force,
            timeout,
        } => {
            let action = match (run, unload) {
                (true, _) => BringupAction::Run,
                (_, true) => BringupAction::Unload,
                _ => BringupAction::Show,
            };
            commands::setup::bringup(&ctx, &model, action, force, timeout).await
        }
        Command::Jobs {
            json,
            status,
            limit,
        } => commands::jobs::list(&ctx, json, status.map(Status::from), limit),
        Command::Job(cmd) => commands::jobs::one(ctx, cmd).await,
        Command::Trust { dir, remove } => commands::trust::run(&ctx, dir.as_deref(), remove),
        Command::Config(ConfigCommand::Check) => commands::config::check(&ctx),
        Command::Config(ConfigCommand::Path) => commands::config::path(&ctx),
    }
}

/// Turn telemetry on for a command that runs jobs, when the `OTEL_*`
/// variables or `defaults.otel` say so (issue 47). The config is read and
/// the exporters built on the blocking pool; `main` flushes at exit.
async fn start_telemetry(ctx: &crate::context::Context) {
    let discovery = ctx.discovery();
    let _ = tokio::task::spawn_blocking(move || {
        let cfg = crate::config::load(&discovery)
            .ok()
            .and_then(|l| l.config.defaults.otel.clone())
            .unwrap_or_default();
        crate::otel::install(&cfg);
    })
    .await;
}

/// Say why a command failed, on stderr, and how it exits.
pub fn fail(e: &crate::api::Error) -> ExitStatus {
    let _ = writeln!(anstream::stderr(), "localagents: {e}");
    e.exit_status()
}

/// Is this error a closed stdout (`localagents jobs | head -1`)? Like
/// ripgrep, that is a normal end, not a failure.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn the_cli_enums_name_what_the_core_names() {
        for v in StatusArg::value_variants() {
            let name = v.to_possible_value().unwrap().get_name().to_string();
            assert_eq!(name, Status::from(*v).as_str());
        }
        assert_eq!(StatusArg::value_variants().len(), 7, "{}", Status::ALL);
        for v in StreamArg::value_variants() {
            let name = v.to_possible_value().unwrap().get_name().to_string();
            let core = serde_json::to_value(LogStream::from(*v)).unwrap();
            assert_eq!(core, name.as_str());
        }
    }
}
