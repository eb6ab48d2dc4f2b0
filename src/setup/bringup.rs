//! `localagents bringup MODEL`: say what it takes to serve a model, load or
//! unload it through an endpoint that does that on demand, or run its
//! configured `bring_up` command detached (logging to the state dir) and
//! poll until it is served. localagents never starts a server unless the
//! user asks this way.

use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::api::Context;
use crate::config;
use crate::probe;
use crate::registry;

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
    let limit = ask
        .timeout
        .min(Duration::from_secs(cfg.defaults.load_timeout_s.max(1)));
    load_served(ep, r, need, kind, limit, out).await
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
    kind: Option<probe::ServerKind>,
    limit: Duration,
    out: &mut (impl Write + Send),
) -> std::io::Result<u8> {
    match probe::load::ready(ep, &r.served_id, need, kind, limit).await {
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
