//! One-time setup, health checks, and bringing a model up on request.
//!
//! `setup` is the one install command after `cargo install`: a starter
//! config if there is none, and the plugin registered with Claude Code.
//! `doctor` checks everything a delegated job needs, each line `ok`, `warn`
//! or `fail` with the fix. `bringup` runs a model's configured `bring_up`
//! command detached, logging to the state dir, and polls until the model is
//! served; localagents never starts a server unless the user asks this way.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api::Context;
use crate::config;
use crate::probe;
use crate::registry;

/// The starter config written by `setup`.
pub const EXAMPLE_CONFIG: &str = include_str!("../models.example.yaml");

/// The plugin's files, built into the binary. `setup` writes them to a
/// clean directory of their own and registers that: Claude Code's install
/// copies the whole marketplace directory, git-ignored files included (a
/// known Claude Code issue), which for a checkout with a `target/` means
/// gigabytes of build output.
pub const PLUGIN_FILES: &[(&str, &str, bool)] = &[
    (
        ".claude-plugin/plugin.json",
        include_str!("../.claude-plugin/plugin.json"),
        false,
    ),
    (
        ".claude-plugin/marketplace.json",
        include_str!("../.claude-plugin/marketplace.json"),
        false,
    ),
    (
        "plugin/localagents",
        include_str!("../plugin/localagents"),
        true,
    ),
    ("bin/localagents", include_str!("../bin/localagents"), true),
    (
        "hooks/hooks.json",
        include_str!("../hooks/hooks.json"),
        false,
    ),
    (
        "commands/local-status.md",
        include_str!("../commands/local-status.md"),
        false,
    ),
    (
        "commands/local-bringup.md",
        include_str!("../commands/local-bringup.md"),
        false,
    ),
    (
        "commands/local-jobs.md",
        include_str!("../commands/local-jobs.md"),
        false,
    ),
    (
        "skills/local-agents/SKILL.md",
        include_str!("../skills/local-agents/SKILL.md"),
        false,
    ),
    (
        "skills/local-agents/reference.md",
        include_str!("../skills/local-agents/reference.md"),
        false,
    ),
    ("LICENSE", include_str!("../LICENSE"), false),
];

/// Write the plugin files under `dir` (overwriting: idempotent).
pub fn write_plugin_files(dir: &Path) -> std::io::Result<()> {
    for (rel, body, exec) in PLUGIN_FILES {
        let path = dir.join(rel);
        crate::paths::write_atomic(&path, body.as_bytes())?;
        #[cfg(unix)]
        if *exec {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(())
}

/// Where `setup` keeps its clean copy of the plugin.
pub fn plugin_copy_dir() -> Option<PathBuf> {
    use etcetera::BaseStrategy;
    etcetera::choose_base_strategy()
        .ok()
        .map(|s| s.data_dir().join("localagents").join("plugin"))
}

/// Where the plugin files are: `--root` (a checkout, for development), else
/// a clean copy written from the binary.
pub fn plugin_root(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p
            .join(".claude-plugin/plugin.json")
            .is_file()
            .then(|| p.to_path_buf());
    }
    let dir = plugin_copy_dir()?;
    write_plugin_files(&dir).ok()?;
    Some(dir)
}

/// The claude binary jobs will use: the same lookup as the runner
/// (`defaults.claude_path`, `$LOCALAGENTS_CLAUDE`, PATH); with a config that
/// does not load, the built-in defaults.
fn claude_bin(ctx: &Context) -> Result<PathBuf, String> {
    let config = config::load(&ctx.discovery())
        .map(|l| l.config)
        .unwrap_or_else(|_| std::sync::Arc::new(config::Config::builtin()));
    crate::runner::find_claude(&config)
}

fn run_claude(bin: &Path, args: &[&str]) -> (bool, String) {
    match Command::new(bin).args(args).stdin(Stdio::null()).output() {
        Ok(o) => {
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
            (o.status.success(), text.trim().to_string())
        }
        Err(e) => (false, e.to_string()),
    }
}

/// `localagents setup`. Returns the exit code.
pub fn setup(ctx: &Context, root: Option<&Path>, out: &mut impl Write) -> std::io::Result<u8> {
    let mut code = 0;
    // 1. A starter config, only if there is none.
    let d = ctx.discovery();
    let existing: Vec<PathBuf> = d.candidates().into_iter().filter(|p| p.is_file()).collect();
    if let Some(first) = existing.first() {
        writeln!(out, "config: {} exists; left as is", first.display())?;
    } else {
        let target = ctx
            .explicit_config
            .clone()
            .or_else(|| crate::paths::config_dir().map(|c| c.join("models.yaml")));
        match target {
            Some(t) => {
                crate::paths::write_atomic(&t, EXAMPLE_CONFIG.as_bytes())?;
                writeln!(
                    out,
                    "config: wrote a starter {} (edit base_url to point at your server)",
                    t.display()
                )?;
            }
            None => writeln!(out, "config: no config dir is known; pass --config FILE")?,
        }
    }
    // 2. The plugin, if Claude Code is here.
    match (claude_bin(ctx), plugin_root(root)) {
        (Err(why), _) => {
            writeln!(out, "plugin: {why}; then run `localagents setup` again")?;
        }
        (Ok(_), None) => {
            code = 1;
            writeln!(
                out,
                "plugin: cannot write the plugin files (no data dir, or --root has no .claude-plugin/plugin.json); pass --root <a localagents checkout>"
            )?;
        }
        (Ok(bin), Some(root)) => {
            let root_s = root.display().to_string();
            let (ok, text) = run_claude(&bin, &["plugin", "marketplace", "add", &root_s]);
            if ok {
                writeln!(out, "plugin: marketplace localagents added from {root_s}")?;
            } else if text.to_lowercase().contains("already") {
                writeln!(out, "plugin: marketplace localagents already added")?;
            } else {
                code = 1;
                writeln!(
                    out,
                    "plugin: `claude plugin marketplace add {root_s}` failed: {text}"
                )?;
            }
            let (ok, text) = run_claude(&bin, &["plugin", "install", "localagents@localagents"]);
            if ok {
                writeln!(
                    out,
                    "plugin: localagents@localagents installed (or already installed)"
                )?;
            } else if text.to_lowercase().contains("already") {
                writeln!(out, "plugin: localagents@localagents already installed")?;
            } else {
                code = 1;
                writeln!(
                    out,
                    "plugin: `claude plugin install localagents@localagents` failed: {text}"
                )?;
            }
        }
    }
    writeln!(
        out,
        "next: start your llama-server or vLLM, run `localagents doctor`, then restart Claude Code and ask it to \"use the local agent to …\""
    )?;
    Ok(code)
}

/// One doctor finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// `localagents doctor`: every check, in order.
pub async fn doctor(ctx: &Context) -> Vec<(Level, String)> {
    let mut out = vec![claude_finding(ctx)];
    let loaded = match config::load(&ctx.discovery()) {
        Ok(l) => l,
        Err(e) => {
            out.push((Level::Fail, format!("config: {e}")));
            return finish(ctx, out);
        }
    };
    config_findings(&loaded, &mut out);
    if let Ok(bin) = claude_bin(ctx) {
        out.push(fixed_prompt_line(
            &crate::prefix::measure(&loaded.config, &bin).await,
        ));
    }
    let probes = probe::probe_all(&loaded.config).await;
    endpoint_findings(ctx, &loaded.config, probes, &mut out);
    finish(ctx, out)
}

/// The doctor's line on the claude CLI: found, and its version.
fn claude_finding(ctx: &Context) -> (Level, String) {
    match claude_bin(ctx) {
        Ok(bin) => {
            let (ok, v) = run_claude(&bin, &["--version"]);
            if ok {
                (
                    Level::Ok,
                    format!(
                        "claude CLI {} ({})",
                        v.lines().next().unwrap_or(""),
                        bin.display()
                    ),
                )
            } else {
                (
                    Level::Fail,
                    format!(
                        "{} --version failed ({v}): reinstall Claude Code (npm install -g @anthropic-ai/claude-code)",
                        bin.display()
                    ),
                )
            }
        }
        Err(why) => (Level::Fail, why),
    }
}

/// The doctor's lines on the config files and their warnings.
fn config_findings(loaded: &config::Loaded, out: &mut Vec<(Level, String)>) {
    if loaded.files.is_empty() {
        out.push((Level::Warn, "config: no models.yaml; probing the built-in endpoints at http://127.0.0.1:8080 (llama.cpp's default port) and :9931 (its announced new default) (run `localagents setup` for a starter file)".into()));
    } else {
        let files: Vec<String> = loaded
            .files
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        out.push((Level::Ok, format!("config: {}", files.join(" + "))));
    }
    for w in &loaded.warnings {
        out.push((Level::Warn, format!("config: {w}")));
    }
}

/// The doctor's lines on each endpoint (one line for the built-in ones
/// when none is written).
fn endpoint_findings(
    ctx: &Context,
    config: &config::Config,
    probes: Vec<probe::EndpointStatus>,
    out: &mut Vec<(Level, String)>,
) {
    if config.endpoints_are_builtin() {
        let level = if probes.iter().any(|p| p.up) {
            Level::Ok
        } else {
            Level::Fail
        };
        let mut line = crate::registry::builtin_sentence(&probes);
        if level == Level::Fail {
            line.push_str(": start llama-server, or write a models.yaml with `localagents setup`");
        }
        out.push((level, line));
    }
    let store = crate::jobs::Store::new(&ctx.state_dir);
    let losses =
        crate::jobs::metrics::recent_slot_losses(&store, crate::jobs::metrics::SLOT_LOSS_DAYS);
    let runaways =
        crate::jobs::metrics::recent_runaways(&store, crate::jobs::metrics::SLOT_LOSS_DAYS);
    for st in crate::registry::builtin_answered(config, probes) {
        if !st.up {
            if config.endpoints_are_builtin() {
                continue; // said above, in one line
            }
            out.push((
                Level::Fail,
                format!(
                    "endpoint {}: {}",
                    st.name,
                    st.error.clone().unwrap_or_default()
                ),
            ));
            continue;
        }
        up_endpoint_findings(ctx, &st, &losses, out);
        for l in runaways.iter().filter(|l| l.endpoint == st.name) {
            out.push((Level::Warn, l.line(crate::jobs::metrics::SLOT_LOSS_DAYS)));
        }
    }
}

/// The doctor's lines on an endpoint that is up: its models and windows,
/// chat template, `/metrics`, and whether each model was evaluated.
fn up_endpoint_findings(
    ctx: &Context,
    st: &probe::EndpointStatus,
    losses: &[crate::jobs::metrics::SlotLosses],
    out: &mut Vec<(Level, String)>,
) {
    let models: Vec<String> = st
        .models
        .iter()
        .map(|m| {
            format!(
                "{} ({})",
                m.id,
                m.context
                    .map(|c| format!("{c}/slot"))
                    .unwrap_or_else(|| "window unknown".into())
            )
        })
        .collect();
    let small = st
        .models
        .iter()
        .any(|m| m.context.is_some_and(|c| c < probe::MIN_WINDOW));
    let lvl = if small { Level::Warn } else { Level::Ok };
    let extra = if small {
        "; under 32k per slot even a short job makes Claude Code compact: raise -c or lower --parallel"
    } else {
        ""
    };
    out.push((
        lvl,
        format!(
            "endpoint {} ({}): up, serves {}{extra}",
            st.name,
            st.backend,
            models.join(", ")
        ),
    ));
    // Behind a vLLM router: a line a replica, a down one with its fix.
    for r in &st.replicas {
        match &r.error {
            Some(e) => out.push((Level::Fail, format!("endpoint {}: {e}", st.name))),
            None => out.push((
                if r.healthy == Some(false) {
                    Level::Warn
                } else {
                    Level::Ok
                },
                format!(
                    "endpoint {}: replica {} up{}, {} slot(s){}",
                    st.name,
                    r.url,
                    r.models
                        .iter()
                        .map(|m| match m.context {
                            Some(c) => format!(", {} ({c}/slot)", m.id),
                            None => format!(", {}", m.id),
                        })
                        .collect::<String>(),
                    r.slots.map(|s| s.total).unwrap_or(0),
                    if r.healthy == Some(false) {
                        "; the router holds it unhealthy and sends it nothing"
                    } else {
                        ""
                    }
                ),
            )),
        }
    }
    match st.chat_template.as_ref().and_then(|c| c.supports_system_role) {
        Some(true) => out.push((Level::Ok, format!("endpoint {}: chat template takes a leading system message (mid-conversation ones are folded by the shim)", st.name))),
        Some(false) => out.push((Level::Warn, format!("endpoint {}: chat template has no system role; llama.cpp merges Claude Code's system prompt into the first user turn: prefer a template with one (--chat-template-file)", st.name))),
        None => {}
    }
    if st.backend == "llama.cpp" && !st.metrics {
        out.push((Level::Warn, format!("endpoint {}: /metrics is off: start llama-server with --metrics for per-job cache figures", st.name)));
    }
    for l in losses.iter().filter(|l| l.endpoint == st.name) {
        out.push((Level::Warn, l.line(crate::jobs::metrics::SLOT_LOSS_DAYS)));
    }
    for e in crate::eval::lines(&ctx.state_dir, std::slice::from_ref(st)) {
        let lvl = if e.evaluated && e.stale.is_none() {
            Level::Ok
        } else {
            Level::Warn
        };
        let text = if e.evaluated {
            format!("model {} on `{}`: {}", e.model, e.endpoint, e.line)
        } else {
            format!(
                "model {} on `{}` has never been evaluated: run `localagents eval --model {} --endpoint {}` (minutes; temporary repositories only) before you rely on it",
                e.model,
                e.endpoint,
                crate::session_env::sh_quote(&e.model),
                e.endpoint
            )
        };
        out.push((lvl, text));
    }
}

/// The doctor's line on the delegate's fixed prompt.
pub fn fixed_prompt_line(m: &Result<crate::prefix::FixedPrompt, String>) -> (Level, String) {
    match m {
        Ok(p) => {
            let kb = |b: usize| format!("{:.1} KB", b as f64 / 1000.0);
            let text = format!(
                "delegate fixed prompt: {} tools offered ({}); system {} + tools {} = {} ≈ {} tokens, sent cold once per server cache; first request {}",
                p.tools.len(),
                if p.tools.is_empty() {
                    "none".to_string()
                } else {
                    p.tools.join(", ")
                },
                kb(p.system_bytes),
                kb(p.tools_bytes),
                kb(p.bytes()),
                crate::jobs::metrics::thousands(p.est_tokens() as u64),
                kb(p.request_bytes),
            );
            if p.est_tokens() > 8_000 {
                (
                    Level::Warn,
                    format!(
                        "{text}; that is heavy for a local model: narrow defaults.allowed_tools"
                    ),
                )
            } else {
                (Level::Ok, text)
            }
        }
        Err(e) => (
            Level::Warn,
            format!("delegate fixed prompt: not measured ({e})"),
        ),
    }
}

fn finish(ctx: &Context, mut out: Vec<(Level, String)>) -> Vec<(Level, String)> {
    match Command::new("git").arg("--version").output() {
        Ok(o) if o.status.success() => out.push((Level::Ok, String::from_utf8_lossy(&o.stdout).trim().to_string())),
        _ => out.push((Level::Warn, "git is not on PATH: delegates cannot commit or inspect history (worktree isolation itself works without it)".into())),
    }
    let probe_file = ctx.state_dir.join(".doctor");
    match crate::paths::write_atomic(&probe_file, b"ok") {
        Ok(()) => {
            let _ = std::fs::remove_file(&probe_file);
            out.push((
                Level::Ok,
                format!("state dir {} is writable", ctx.state_dir.display()),
            ));
        }
        Err(e) => out.push((
            Level::Fail,
            format!(
                "state dir {} is not writable ({e}): fix its permissions or pass --state-dir",
                ctx.state_dir.display()
            ),
        )),
    }
    out
}

/// What `bringup` is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BringupAction {
    /// Say what it takes.
    Show,
    /// Load it: through the endpoint when it loads on demand, else with
    /// the configured `bring_up` command.
    Run,
    /// Free it on a router or llama-swap.
    Unload,
}

/// `localagents bringup MODEL [--run | --unload] [--force]`. Returns the
/// exit code.
pub async fn bringup(
    ctx: &Context,
    model: &str,
    action: BringupAction,
    force: bool,
    timeout: Duration,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    let loaded = match config::load(&ctx.discovery()) {
        Ok(l) => l,
        Err(e) => {
            writeln!(out, "config error: {e}")?;
            return Ok(2);
        }
    };
    let cfg = loaded.config.clone();
    let ask = Bringup {
        ctx,
        model,
        action,
        force,
        timeout,
    };
    let probes = probe::probe_all(&cfg).await;
    if let Ok(r) = registry::resolve(&cfg, &probes, Some(model), None) {
        return bringup_served(&ask, &cfg, &probes, &r, out).await;
    }
    bringup_unserved(&ask, &cfg, out).await
}

/// One `bringup` request, as asked.
struct Bringup<'a> {
    ctx: &'a Context,
    model: &'a str,
    action: BringupAction,
    force: bool,
    timeout: Duration,
}

/// A window for a sentence: its size, or `unknown`.
fn window(c: Option<u64>) -> String {
    c.map(|c| c.to_string()).unwrap_or_else(|| "unknown".into())
}

/// `bringup` of a model an endpoint serves: unload it, load it (or wake
/// the server) through the endpoint, or say it is served already.
async fn bringup_served(
    ask: &Bringup<'_>,
    cfg: &config::Config,
    probes: &[probe::EndpointStatus],
    r: &registry::Resolved,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    let (ctx, model, force) = (ask.ctx, ask.model, ask.force);
    let st = probes.iter().find(|p| p.name == r.endpoint);
    let state = st
        .and_then(|s| s.models.iter().find(|m| m.id == r.served_id))
        .and_then(|m| m.state.clone());
    let kind = st.and_then(|s| s.kind);
    if let (BringupAction::Unload, Some(st), Some(ep)) = (ask.action, st, cfg.endpoint(&r.endpoint))
    {
        if !force
            && let Err(why) = crate::jobs::evict::check_unload(
                &crate::jobs::Store::new(&ctx.state_dir),
                st,
                &r.served_id,
            )
        {
            writeln!(out, "{why}")?;
            return Ok(1);
        }
        return unload_served(ep, kind, r, out).await;
    }
    let need = probe::load::need(kind, state.as_ref());
    let (Some(need), Some(st), Some(ep)) = (need, st, cfg.endpoint(&r.endpoint)) else {
        writeln!(
            out,
            "{model} is already served: {} on `{}` (window {})",
            r.served_id,
            r.endpoint,
            window(r.context)
        )?;
        return Ok(0);
    };
    if ask.action != BringupAction::Run {
        writeln!(
            out,
            "{model} is listed on `{}` as {} ({}, window {}). `localagents bringup {model} --run` loads it through the endpoint; no command runs on any host",
            r.endpoint,
            r.served_id,
            state.as_ref().map_or("unloaded", probe::ModelState::as_str),
            window(r.context)
        )?;
        return Ok(0);
    }
    if !force
        && let Err(why) = crate::jobs::evict::check_load(
            &crate::jobs::Store::new(&ctx.state_dir),
            st,
            &r.served_id,
        )
    {
        writeln!(out, "{why}")?;
        return Ok(1);
    }
    writeln!(
        out,
        "loading {} on `{}` through the endpoint…",
        r.served_id, r.endpoint
    )?;
    let swap = kind == Some(probe::ServerKind::LlamaSwap);
    let limit = ask
        .timeout
        .min(Duration::from_secs(cfg.defaults.load_timeout_s.max(1)));
    load_served(ep, r, need, swap, limit, out).await
}

/// Unload a served model through its endpoint.
async fn unload_served(
    ep: &config::Endpoint,
    kind: Option<probe::ServerKind>,
    r: &registry::Resolved,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    match probe::load::unload(ep, kind, &r.served_id).await {
        Ok(true) => {
            writeln!(out, "unloaded {} on `{}`", r.served_id, r.endpoint)?;
            Ok(0)
        }
        Ok(false) => {
            writeln!(out, "{} was not loaded on `{}`", r.served_id, r.endpoint)?;
            Ok(0)
        }
        Err(why) => {
            writeln!(out, "{why}")?;
            Ok(1)
        }
    }
}

/// Load (or wake) a served model through its endpoint, wait until it is
/// ready, and say the window it got.
async fn load_served(
    ep: &config::Endpoint,
    r: &registry::Resolved,
    need: probe::load::Need,
    swap: bool,
    limit: Duration,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    match probe::load::ready(ep, &r.served_id, need, swap, limit).await {
        Ok(took) => {
            probe::invalidate();
            let now = probe::probe(ep, Duration::from_secs(5)).await;
            let ctx_now = now
                .models
                .iter()
                .find(|m| m.id == r.served_id)
                .and_then(|m| m.context)
                .or(r.context);
            writeln!(
                out,
                "loaded {} on `{}` in {:.1} s (window {})",
                r.served_id,
                r.endpoint,
                took.as_secs_f64(),
                window(ctx_now)
            )?;
            Ok(0)
        }
        Err(why) => {
            writeln!(out, "{why}")?;
            Ok(1)
        }
    }
}

/// `bringup` of a model no endpoint serves: say what it takes, or run its
/// `bring_up` command.
async fn bringup_unserved(
    ask: &Bringup<'_>,
    cfg: &config::Config,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    let (model, action, run) = (ask.model, ask.action, ask.action == BringupAction::Run);
    if action == BringupAction::Unload {
        writeln!(
            out,
            "{model} is not served by any endpoint: nothing to unload"
        )?;
        return Ok(1);
    }
    let entry = cfg.model(model);
    let host = entry
        .and_then(|e| e.host.clone())
        .unwrap_or_else(|| "its host".into());
    let notes = entry.and_then(|e| e.notes.clone());
    let Some(cmd) = entry.and_then(|e| e.bring_up.clone()) else {
        writeln!(
            out,
            "{model} is not running and has no bring_up command on file. The user must start it on {host}{}. (To let localagents start it on request, add `bring_up: <command>` under models.{model} in models.yaml.)",
            notes
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        )?;
        return Ok(if run { 1 } else { 0 });
    };
    if !run {
        writeln!(
            out,
            "{model} is not running. It lives on {host}{}.",
            notes
                .as_deref()
                .map(|n| format!("; notes: {n}"))
                .unwrap_or_default()
        )?;
        writeln!(out, "bring_up on file: {cmd}")?;
        writeln!(out, "run it with: localagents bringup {model} --run")?;
        return Ok(0);
    }
    run_bring_up(ask, cfg, &cmd, out).await
}

/// Run a model's `bring_up` command, logging to the state dir, and wait
/// until an endpoint serves the model, the command fails, or the timeout
/// passes.
async fn run_bring_up(
    ask: &Bringup<'_>,
    cfg: &config::Config,
    cmd: &str,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    let (ctx, model, timeout) = (ask.ctx, ask.model, ask.timeout);
    let dir = ctx.state_dir.join("bringup");
    crate::paths::private_dir_all(&dir)?;
    let safe: String = model
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let log = dir.join(format!(
        "{safe}-{}.log",
        chrono::Local::now().format("%Y%m%d-%H%M%S")
    ));
    let f = std::fs::File::create(&log)?;
    let f2 = f.try_clone()?;
    let mut c = tokio::process::Command::new("sh");
    c.arg("-c")
        .arg(cmd)
        .stdin(Stdio::null())
        .stdout(f)
        .stderr(f2);
    crate::process::new_group(&mut c);
    let mut child = c.spawn()?;
    writeln!(
        out,
        "started `{cmd}` (pid {}), logging to {}",
        child.id().unwrap_or(0),
        log.display()
    )?;
    let started = Instant::now();
    let tail = |log: &Path| -> String {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    };
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        probe::invalidate();
        let probes = probe::probe_all(cfg).await;
        if let Ok(r) = registry::resolve(cfg, &probes, Some(model), None) {
            writeln!(
                out,
                "{model} is up: {} on `{}` after {:.0}s",
                r.served_id,
                r.endpoint,
                started.elapsed().as_secs_f64()
            )?;
            return Ok(0);
        }
        if let Ok(Some(status)) = child.try_wait()
            && !status.success()
        {
            writeln!(
                out,
                "the bring_up command failed ({status}); last lines of {}:\n{}",
                log.display(),
                tail(&log)
            )?;
            return Ok(1);
        }
        if started.elapsed() > timeout {
            writeln!(
                out,
                "{model} is still not served after {}s; last lines of {}:\n{}",
                timeout.as_secs(),
                log.display(),
                tail(&log)
            )?;
            return Ok(1);
        }
    }
}
