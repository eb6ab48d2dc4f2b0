//! The command line: argument definitions and the code that renders results
//! for a person. Every command is a thin layer over [`crate::api`],
//! [`crate::registry`] or [`crate::config`].
//!
//! Exit codes: 0 on success (also when endpoints are down: that is a
//! finding, not a failure of the command), 1 on a runtime error, 2 on a
//! usage or config error.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anstyle::{AnsiColor, Style};
use clap::{Args, Parser, Subcommand};

use crate::api::Context;
use crate::config::{self, Discovery};
use crate::probe::EndpointStatus;
use crate::registry::{self, Status};

/// Hand Claude Code's grunt work to a model on your own llama.cpp or vLLM server.
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
    /// List jobs, newest first.
    Jobs {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Only jobs with this status.
        #[arg(long)]
        status: Option<String>,
        /// How many.
        #[arg(long, default_value_t = 20)]
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
        /// Run the configured bring_up command (detached, logged) and poll until the model is served.
        #[arg(long)]
        run: bool,
        /// Seconds to wait with --run.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
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
    /// Work in a fresh git worktree on branch local-agent/<job>.
    #[arg(long)]
    pub worktree: bool,
    /// Turn limit.
    #[arg(long)]
    pub max_turns: Option<u32>,
    /// Whole-job timeout in seconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Print the job record as JSON.
    #[arg(long)]
    pub json: bool,
    /// The task.
    #[arg(required = true, num_args = 1..)]
    pub task: Vec<String>,
}

#[derive(Debug, Subcommand)]
pub enum HookCommand {
    /// UserPromptSubmit: report finished jobs of this project once per session.
    PromptSubmit,
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
        /// transcript, requests or events.
        #[arg(long, default_value = "transcript")]
        stream: String,
        /// Lines from the end.
        #[arg(long, default_value_t = 80)]
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
    /// Serve at the bare URL, without the unguessable /j/<token> prefix (for a fixed local setup).
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
    pub fn context(&self) -> Context {
        Context {
            explicit_config: self.config.clone(),
            state_dir: self
                .state_dir
                .clone()
                .unwrap_or_else(crate::paths::default_state_dir),
        }
    }
}

/// Run a parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ctx = cli.global.context();
    match cli.command {
        Command::Serve => {
            crate::mcp::serve_stdio(ctx).await?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { json } => status(&ctx, json).await,
        Command::Shim(args) => shim(&ctx, args).await,
        Command::Run(args) => run_job(ctx, args).await,
        Command::Hook(HookCommand::PromptSubmit) => {
            if let Some(out) = crate::hook::prompt_submit(&ctx.state_dir) {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{out}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Setup { root } => {
            let mut out = anstream::stdout().lock();
            Ok(ExitCode::from(crate::setup::setup(
                &ctx,
                root.as_deref(),
                &mut out,
            )?))
        }
        Command::Doctor => {
            let checks = crate::setup::doctor(&ctx).await;
            let mut out = anstream::stdout().lock();
            let mut failed = false;
            for (lvl, msg) in checks {
                let tag = match lvl {
                    crate::setup::Level::Ok => format!("{GREEN}ok  {GREEN:#}"),
                    crate::setup::Level::Warn => format!("{YELLOW}warn{YELLOW:#}"),
                    crate::setup::Level::Fail => {
                        failed = true;
                        format!("{RED}fail{RED:#}")
                    }
                };
                writeln!(out, "{tag}  {msg}")?;
            }
            Ok(if failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Bringup {
            model,
            run,
            timeout,
        } => {
            let code = crate::setup::bringup(
                &ctx,
                &model,
                run,
                std::time::Duration::from_secs(timeout),
                &mut std::io::stdout(),
            )
            .await?;
            Ok(ExitCode::from(code))
        }
        Command::Jobs {
            json,
            status,
            limit,
        } => jobs(&ctx, json, status, limit),
        Command::Job(cmd) => job(ctx, cmd).await,
        Command::Config(ConfigCommand::Check) => config_check(&ctx),
        Command::Config(ConfigCommand::Path) => config_path(&ctx),
    }
}

fn config_error(e: &dyn std::fmt::Display) -> ExitCode {
    let _ = writeln!(anstream::stderr(), "localagents: config error: {e}");
    ExitCode::from(2)
}

async fn status(ctx: &Context, json: bool) -> anyhow::Result<ExitCode> {
    let discovery = ctx.discovery();
    let (_, st) = match registry::status(&discovery).await {
        Ok(x) => x,
        Err(e) => return Ok(config_error(&e)),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &st)?;
        writeln!(out)?;
    } else {
        render_status(&mut out, &st)?;
    }
    Ok(ExitCode::SUCCESS)
}

const GREEN: Style = AnsiColor::Green.on_default().bold();
const RED: Style = AnsiColor::Red.on_default().bold();
const YELLOW: Style = AnsiColor::Yellow.on_default();
const DIM: Style = Style::new().dimmed();
const BOLD: Style = Style::new().bold();

/// One line per endpoint, then the menu and warnings. Colour is written
/// unconditionally; `anstream` strips it when stdout is not a terminal.
pub fn render_status(out: &mut impl Write, st: &Status) -> std::io::Result<()> {
    let name_w = st
        .endpoints
        .iter()
        .map(|e| e.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let files = if st.config.is_empty() {
        "built-in default (no models.yaml found)".to_string()
    } else {
        st.config
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" + ")
    };
    writeln!(out, "{DIM}config: {files}{DIM:#}")?;
    for e in &st.endpoints {
        writeln!(out, "{}", endpoint_line(e, name_w))?;
    }
    if !st.models.is_empty() {
        writeln!(out, "{BOLD}menu{BOLD:#}")?;
        for m in &st.models {
            let where_ = if m.running_on.is_empty() {
                format!("{YELLOW}not running{YELLOW:#}")
            } else {
                format!("{GREEN}on{GREEN:#} {}", m.running_on.join(", "))
            };
            let host = m
                .host
                .as_deref()
                .map(|h| format!(" (host {h})"))
                .unwrap_or_default();
            writeln!(out, "  {}{host}: {where_}", m.name)?;
        }
    }
    let mut warnings: Vec<String> = st.warnings.clone();
    for e in &st.endpoints {
        warnings.extend(e.warnings.iter().map(|w| format!("{}: {w}", e.name)));
    }
    for w in warnings {
        writeln!(out, "{YELLOW}warning:{YELLOW:#} {w}")?;
    }
    Ok(())
}

fn endpoint_line(e: &EndpointStatus, name_w: usize) -> String {
    let head = format!("{:<name_w$}  {:<9}", e.name, e.backend);
    if !e.up {
        return format!(
            "{head}  {RED}down{RED:#}  {}",
            e.error.as_deref().unwrap_or("unknown error")
        );
    }
    let models = if e.models.is_empty() {
        "(no model)".to_string()
    } else {
        e.models
            .iter()
            .map(|m| match m.context {
                Some(c) => format!("{} ({c}/slot)", m.id),
                None => format!("{} (window unknown)", m.id),
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let slots = match (&e.slots, &e.load) {
        (Some(s), _) => format!("  slots {}/{} busy", s.busy, s.total),
        (None, Some(l)) => format!("  running {} waiting {}", l.running, l.waiting),
        _ => String::new(),
    };
    let latency = e
        .latency_ms
        .map(|l| format!("  {l} ms"))
        .unwrap_or_default();
    format!("{head}  {GREEN}up{GREEN:#}    {models}{slots}{DIM}{latency}{DIM:#}")
}

fn config_check(ctx: &Context) -> anyhow::Result<ExitCode> {
    let discovery = ctx.discovery();
    let loaded = match config::load(&discovery) {
        Ok(l) => l,
        Err(e) => return Ok(config_error(&e)),
    };
    let mut err = anstream::stderr().lock();
    if loaded.files.is_empty() {
        writeln!(err, "no models.yaml found: the built-in default is in use")?;
    } else {
        for f in &loaded.files {
            writeln!(err, "read {}", f.display())?;
        }
    }
    for w in &loaded.warnings {
        writeln!(err, "{YELLOW}warning:{YELLOW:#} {w}")?;
    }
    writeln!(
        err,
        "ok: {} endpoint(s), {} model name(s)",
        loaded.config.endpoints.len(),
        loaded.config.models.len()
    )?;
    let mut out = anstream::stdout().lock();
    write!(out, "{}", config::render(&loaded.config))?;
    Ok(ExitCode::SUCCESS)
}

fn config_path(ctx: &Context) -> anyhow::Result<ExitCode> {
    let discovery: Discovery = ctx.discovery();
    let mut out = anstream::stdout().lock();
    for path in discovery.candidates() {
        let state = if path.is_file() { "read" } else { "absent" };
        writeln!(out, "{state:<6}  {}", path.display())?;
    }
    if let Some(side) = discovery.active_sidecar() {
        writeln!(
            out,
            "{DIM}register_endpoint writes {}{DIM:#}",
            side.display()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn shim(ctx: &Context, args: ShimArgs) -> anyhow::Result<ExitCode> {
    use crate::shim::{Route, Shim, log::RequestLog};
    if args.print_settings && (args.port == 0 || !args.no_token) {
        let _ = writeln!(
            anstream::stderr(),
            "localagents: --print-settings writes settings for a shim you start separately, so its URL must not change: add --port PORT --no-token (and start the shim with the same flags)"
        );
        return Ok(ExitCode::from(2));
    }
    let target = match crate::api::resolve_target(
        ctx,
        args.model.as_deref(),
        args.endpoint.as_deref(),
    )
    .await
    {
        Ok(t) => t,
        Err(crate::api::ApiError::Config(e)) => return Ok(config_error(&e)),
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "localagents: {e}");
            return Ok(ExitCode::from(1));
        }
    };
    let r = &target.resolved;
    if args.print_settings {
        let url = format!("http://127.0.0.1:{}", args.port);
        let env = crate::session_env::session_env(&url, &r.served_id, r.context);
        let mut out = anstream::stdout().lock();
        serde_json::to_writer_pretty(&mut out, &crate::session_env::settings_json(&env))?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let started = chrono::Local::now().format("%Y%m%d-%H%M%S").to_string();
    let log_dir = ctx.state_dir.join("shim").join(started);
    let dump = target.config.defaults.dump_requests
        || std::env::var("LOCALAGENTS_DUMP_REQUESTS").is_ok_and(|v| v == "1");
    let route = Route {
        label: "standalone".into(),
        endpoint: target.endpoint.clone(),
        backend: target.backend,
        served_id: r.served_id.clone(),
        window: r.context,
        log: RequestLog::new(&log_dir, dump),
        idle_timeout: std::time::Duration::from_secs(target.config.defaults.stream_idle_timeout_s),
    };
    let server = match Shim::start(args.port).await {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(
                anstream::stderr(),
                "localagents: cannot listen on 127.0.0.1:{}: {e}; pick another --port or stop what uses it",
                args.port
            );
            return Ok(ExitCode::from(1));
        }
    };
    let reg = if args.no_token {
        server.register_open(route)
    } else {
        server.register(route)?
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", reg.base_url)?;
        out.flush()?;
    }
    let env = crate::session_env::session_env(&reg.base_url, &r.served_id, r.context);
    let mut err = anstream::stderr().lock();
    let window = r
        .context
        .map(|w| w.to_string())
        .unwrap_or_else(|| "unknown".into());
    writeln!(
        err,
        "localagents shim: {} on `{}` ({}), window {window}, at {}",
        r.served_id, r.endpoint, target.endpoint.base_url, reg.base_url
    )?;
    if let Some(q) = &r.queued_note {
        writeln!(err, "{YELLOW}note:{YELLOW:#} {q}")?;
    }
    writeln!(
        err,
        "requests are logged to {}",
        log_dir.join("requests.jsonl").display()
    )?;
    writeln!(err, "point claude at it with this env:")?;
    for (k, v) in &env {
        writeln!(err, "  export {k}={}", crate::session_env::sh_quote(v))?;
    }
    writeln!(
        err,
        "or: claude --settings {}",
        crate::session_env::sh_quote(&crate::session_env::settings_json(&env).to_string())
    )?;
    writeln!(
        err,
        "(if claude asks you to log in, also export ANTHROPIC_API_KEY=local; the shim never forwards it)"
    )?;
    writeln!(err, "serving until interrupted (Ctrl-C)")?;
    drop(err);
    wait_for_shutdown().await;
    drop(reg);
    Ok(ExitCode::SUCCESS)
}

/// Ctrl-C or SIGTERM.
pub async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn print_failure(f: crate::api::ToolFailure) -> ExitCode {
    let msg = match f {
        crate::api::ToolFailure::Text(t) => t,
        crate::api::ToolFailure::Structured(v) => v["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string()),
    };
    let _ = writeln!(anstream::stderr(), "localagents: {msg}");
    ExitCode::from(1)
}

async fn run_job(ctx: Context, args: RunCmd) -> anyhow::Result<ExitCode> {
    use crate::jobs::manager::{Manager, RunArgs, StartError};
    let manager = Manager::new(ctx);
    let run_args = RunArgs {
        task: args.task.join(" "),
        model: args.model,
        endpoint: args.endpoint,
        cwd: args.cwd,
        isolation: Some(if args.worktree { "worktree" } else { "none" }.into()),
        max_turns: args.max_turns,
        timeout_s: args.timeout,
        ..Default::default()
    };
    let rec = match manager.start(run_args).await {
        Ok(r) => r,
        Err(StartError::Config(e)) => return Ok(config_error(&e)),
        Err(e) => return Ok(print_failure(e.into())),
    };
    let id = rec.id.clone();
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar.set_message(format!("job {id} on {} ({})", rec.served_id, rec.endpoint));
    let mut progress = manager.progress(&id);
    let interrupted = loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break true,
            r = manager.wait(&id, std::time::Duration::from_secs(1)) => {
                match r {
                    Ok((_, false)) => break false,
                    Ok((rec, true)) => {
                        let p = progress.as_mut().map(|p| p.borrow_and_update().clone()).unwrap_or_default();
                        bar.set_message(format!(
                            "job {id} · requests {} · tool calls {} · tokens in {} out {} · {}",
                            p.turns,
                            rec.tool_calls.max(p.tool_calls),
                            rec.usage.input + rec.usage.cache_read,
                            rec.usage.output,
                            p.last_activity.chars().take(60).collect::<String>()
                        ));
                    }
                    Err(e) => {
                        bar.finish_and_clear();
                        return Ok(print_failure(e.into()));
                    }
                }
            }
        }
    };
    if interrupted {
        bar.set_message(format!("cancelling job {id}…"));
        let _ = manager.cancel(&id).await;
    }
    bar.finish_and_clear();
    let rec = manager
        .store
        .load(&id)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = anstream::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &rec)?;
        writeln!(out)?;
    } else {
        render_job(&mut out, &rec)?;
    }
    Ok(if rec.status == crate::jobs::Status::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// A job for a person.
pub fn render_job(out: &mut impl Write, r: &crate::jobs::JobRecord) -> std::io::Result<()> {
    let style = match r.status {
        crate::jobs::Status::Succeeded => GREEN,
        crate::jobs::Status::Running | crate::jobs::Status::Queued => YELLOW,
        _ => RED,
    };
    writeln!(
        out,
        "job {} {style}{}{style:#} · {} on {} · {:.0}s · {} turns · {} tool calls",
        r.id,
        r.status.as_str(),
        r.served_id,
        r.endpoint,
        r.elapsed_s.unwrap_or(0.0),
        r.num_turns.unwrap_or(0),
        r.tool_calls
    )?;
    if let Some(e) = &r.error {
        writeln!(out, "{RED}error:{RED:#} {e}")?;
    }
    if let Some(res) = &r.result {
        writeln!(out, "{BOLD}result{BOLD:#}\n{}", res.trim())?;
    }
    if !r.files_changed.is_empty() {
        writeln!(
            out,
            "{BOLD}files changed{BOLD:#} {}",
            r.files_changed.join(", ")
        )?;
    }
    if let Some(w) = &r.worktree {
        writeln!(
            out,
            "{BOLD}worktree{BOLD:#} {} ({})",
            w.branch,
            w.diffstat.clone().unwrap_or_else(|| "no changes".into())
        )?;
        if let Some(n) = &w.note {
            writeln!(out, "  {n}")?;
        }
    }
    if let Some(f) = &r.first_turn {
        writeln!(out, "{}", f.line())?;
    }
    writeln!(
        out,
        "{DIM}usage in {} (cached {}) out {} · logs {}{DIM:#}",
        r.usage.input,
        r.usage.cache_read,
        r.usage.output,
        r.log_dir.display()
    )?;
    Ok(())
}

fn jobs(
    ctx: &Context,
    json: bool,
    status: Option<String>,
    limit: usize,
) -> anyhow::Result<ExitCode> {
    let m = crate::jobs::manager::Manager::new(ctx.clone());
    let v = match crate::api::list_jobs(&m, status.as_deref(), limit) {
        Ok(v) => v,
        Err(f) => return Ok(print_failure(f)),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let list = v["jobs"].as_array().cloned().unwrap_or_default();
    if list.is_empty() {
        writeln!(out, "no jobs yet")?;
    }
    for j in list {
        writeln!(
            out,
            "{}  {:<9}  {:<20}  {:>5}s  {} files  {}",
            j["id"].as_str().unwrap_or(""),
            j["status"].as_str().unwrap_or(""),
            j["model"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(20)
                .collect::<String>(),
            j["elapsed_s"].as_f64().unwrap_or(0.0),
            j["files_changed"].as_u64().unwrap_or(0),
            j["task"].as_str().unwrap_or("")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn job(ctx: Context, cmd: JobCommand) -> anyhow::Result<ExitCode> {
    let m = crate::jobs::manager::Manager::new(ctx);
    let mut out = anstream::stdout().lock();
    match cmd {
        JobCommand::Show { id, json } => match m.store.load(&id) {
            Ok(r) if json => {
                serde_json::to_writer_pretty(&mut out, &r)?;
                writeln!(out)?;
            }
            Ok(r) => render_job(&mut out, &r)?,
            Err(e) => return Ok(print_failure(e.into())),
        },
        JobCommand::Log { id, stream, tail } => {
            match crate::api::job_log(&m, &id, &stream, tail, None) {
                Ok(v) => write!(out, "{}", v["text"].as_str().unwrap_or(""))?,
                Err(f) => return Ok(print_failure(f)),
            }
        }
        JobCommand::Diff { id } => {
            let mut offset = 0;
            loop {
                match crate::api::job_diff(&m, &id, 100_000, offset) {
                    Ok(v) => {
                        write!(out, "{}", v["diff"].as_str().unwrap_or(""))?;
                        match v["next_offset"].as_u64() {
                            Some(n) => offset = n as usize,
                            None => break,
                        }
                    }
                    Err(f) => return Ok(print_failure(f)),
                }
            }
        }
        JobCommand::Cancel { id } => match crate::api::cancel_job(&m, &id).await {
            Ok(v) => writeln!(out, "job {id}: {}", v["status"].as_str().unwrap_or("?"))?,
            Err(f) => return Ok(print_failure(f)),
        },
    }
    Ok(ExitCode::SUCCESS)
}
