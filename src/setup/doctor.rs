//! `localagents doctor`: every check a delegated job needs, in order, each
//! a line `ok`, `warn` or `fail` with the fix: the claude CLI, the config,
//! the fixed prompt a job sends, each endpoint and its models, git, and the
//! state dir. It reads and probes; it changes nothing.

use std::process::Command;

use super::{claude_bin, run_claude};
use crate::api::Context;
use crate::config;
use crate::probe;

/// One doctor finding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// The findings made so far, each handed on as soon as its check ends.
struct Said<'a> {
    out: Vec<(Level, String)>,
    emit: &'a mut (dyn FnMut(Level, String) + Send),
}

impl Said<'_> {
    /// Hand on what the last checks found.
    fn flush(&mut self) {
        for (l, s) in self.out.drain(..) {
            (self.emit)(l, s);
        }
    }
}

/// `localagents doctor`: every check, in order, each finding given to
/// `emit` as soon as its check ends: a check that waits (the fixed
/// prompt's capture, a probe) never holds back the lines before it.
pub async fn doctor_each(ctx: &Context, emit: &mut (dyn FnMut(Level, String) + Send)) {
    let mut said = Said {
        out: vec![claude_finding(ctx)],
        emit,
    };
    said.flush();
    let loaded = match config::load(&ctx.discovery()) {
        Ok(l) => l,
        Err(e) => {
            said.out.push((Level::Fail, format!("config: {e}")));
            finish(ctx, crate::config::DEFAULT_KEEP_DAYS, &mut said.out);
            return said.flush();
        }
    };
    config_findings(&loaded, &mut said.out);
    said.flush();
    let otel = loaded.config.defaults.otel.clone().unwrap_or_default();
    for l in crate::otel::check::lines(&otel).await {
        said.out.push((if l.warn { Level::Warn } else { Level::Ok }, l.text));
    }
    said.flush();
    if let Ok(bin) = claude_bin(ctx) {
        said.out.push(fixed_prompt_line(
            &crate::prefix::measure(&loaded.config, &bin).await,
        ));
        said.flush();
    }
    let probes = probe::probe_all(&loaded.config).await;
    said.out.extend(slot_saving(&loaded.config, &probes).await);
    endpoint_findings(ctx, &loaded.config, probes, &mut said.out);
    said.flush();
    finish(ctx, loaded.config.defaults.keep_days, &mut said.out);
    said.flush();
}

/// On each plain llama-server that is up (where jobs are pinned to their
/// slot): whether it can save a job's slot for a resumed job, asked
/// without saving anything ([`probe::saved::can_save`]), each at once.
async fn slot_saving(config: &config::Config, probes: &[probe::EndpointStatus]) -> Vec<(Level, String)> {
    let asks = probes
        .iter()
        .filter(|st| st.up && st.backend == "llama.cpp" && st.slots.is_some())
        .filter_map(|st| {
            let ep = config.endpoint(&st.name)?;
            crate::shim::chat::pinnable(st.kind, ep.vllm_router).then_some((st.name.clone(), ep))
        })
        .map(|(name, ep)| async move {
            match probe::saved::can_save(ep, std::time::Duration::from_secs(2)).await {
                probe::saved::CanSave::Yes => (Level::Ok, format!("endpoint {name}: saves a job's slot when it ends and restores it when the job resumes (--slot-save-path; a sliding-window model such as Gemma 3 or gpt-oss also needs --swa-full for the restored cache to be reused)")),
                probe::saved::CanSave::NoSavePath => (Level::Warn, format!("endpoint {name}: a resumed job starts cold once another job used its slot: start llama-server with --slot-save-path DIR so that a job's slot is saved and restored (and --swa-full for a sliding-window model such as Gemma 3 or gpt-oss, whose restored cache is otherwise processed again)")),
                probe::saved::CanSave::NoSlots => (Level::Warn, format!("endpoint {name}: its slot endpoints are off (--no-slots): start llama-server with --slots (and --slot-save-path DIR so that a resumed job starts warm)")),
                probe::saved::CanSave::Unknown(why) => (Level::Warn, format!("endpoint {name}: cannot tell whether it saves slots ({why})")),
            }
        });
    futures::future::join_all(asks).await
}

/// The doctor's line on the claude CLI: found, and its version.
fn claude_finding(ctx: &Context) -> (Level, String) {
    match claude_bin(ctx) {
        Ok(bin) => {
            let (ok, v) = run_claude(&bin, &["--version"]);
            if ok {
                let first = v.lines().next().unwrap_or("");
                let said = format!("claude CLI {first} ({})", bin.display());
                match version_note(first) {
                    None => (Level::Ok, said),
                    Some(note) => (Level::Warn, format!("{said}: {note}")),
                }
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

/// What `doctor` says of a Claude Code version outside the tested range
/// ([`crate::runner::TESTED_CLAUDE`]), in one sentence with how to pin;
/// `None` inside it.
fn version_note(first_line: &str) -> Option<String> {
    let (lo, hi) = crate::runner::TESTED_CLAUDE;
    let range = format!("localagents is tested with Claude Code {lo} to {hi}");
    let pin = format!("npm install -g @anthropic-ai/claude-code@{hi}");
    let Some(v) = crate::runner::claude_version(first_line) else {
        return Some(format!("its version does not read as one ({range}): if jobs misbehave, install a tested one: {pin}"));
    };
    let (lo_v, hi_v) = (crate::runner::claude_version(lo)?, crate::runner::claude_version(hi)?);
    if v > hi_v {
        Some(format!("newer than the versions tested ({range}): where a session compacts, what its stream says and how it counts its window may differ; if jobs misbehave, pin a tested one: {pin} (or set defaults.claude_path to it)"))
    } else if v < lo_v {
        Some(format!("older than the versions tested ({range}): update it: {pin}"))
    } else {
        None
    }
}

/// The doctor's lines on the config files and their warnings.
fn config_findings(loaded: &config::Loaded, out: &mut Vec<(Level, String)>) {
    if loaded.files.is_empty() {
        out.push((Level::Warn, "config: no models.yaml; probing the built-in endpoints at http://127.0.0.1:8080 (llama.cpp's default port), :9931 (its announced new default), :11434 (Ollama's) and :1234 (LM Studio's) (run `localagents setup` for a starter file)".into()));
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
            line.push_str(": start llama-server, Ollama or LM Studio, or name your server under `endpoints:` in models.yaml (`localagents setup` writes a starter)");
        }
        out.push((level, line));
    }
    let recent = crate::jobs::Store::new(&ctx.state_dir).recent(Some(
        chrono::Utc::now() - chrono::Duration::days(crate::jobs::metrics::SLOT_LOSS_DAYS),
    ));
    let losses = crate::jobs::metrics::recent_slot_losses(&recent);
    let runaways = crate::jobs::metrics::recent_runaways(&recent);
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
        small_window_refusals(&st, out);
        window_and_guard(config, &st, out);
        for l in runaways.iter().filter(|l| l.endpoint == st.name) {
            out.push((Level::Warn, l.line(crate::jobs::metrics::SLOT_LOSS_DAYS)));
        }
    }
}

/// Ollama and LM Studio below the smallest window: no job starts there,
/// and the line says the server's own fix.
fn small_window_refusals(st: &probe::EndpointStatus, out: &mut Vec<(Level, String)>) {
    for refusal in probe::refusals(st) {
        out.push((Level::Fail, format!("endpoint {}: {refusal}", st.name)));
    }
}

/// A server that says no window of a model and has no `window:`: no job
/// starts there; and what the truncation guard can still check where the
/// server's answers count less than everything (issue 54).
fn window_and_guard(
    config: &crate::config::Config,
    st: &probe::EndpointStatus,
    out: &mut Vec<(Level, String)>,
) {
    let Some(backend) = crate::config::Backend::parse(&st.backend) else {
        return;
    };
    // A model entry's own `window:` (or `context:`) gives it one.
    let entry_says = |id: &str| {
        config.models.iter().any(|e| {
            e.context.is_some() && (e.name == id || e.served_name.as_deref() == Some(id))
        })
    };
    if backend.needs_window()
        && let Some(m) = st
            .models
            .iter()
            .find(|m| m.context.is_none() && !entry_says(&m.id))
    {
        out.push((
            Level::Fail,
            format!("endpoint {}: {}", st.name, probe::no_window(backend, &st.name, &m.id)),
        ));
    }
    if let Some(note) = probe::guard_note(backend) {
        out.push((Level::Warn, format!("endpoint {}: {note}", st.name)));
    }
}

/// The note on a model under the smallest window, with the server's fix;
/// empty when none is.
fn small_note(st: &probe::EndpointStatus) -> String {
    if !st
        .models
        .iter()
        .any(|m| m.context.is_some_and(|c| c < probe::MIN_WINDOW))
    {
        return String::new();
    }
    let fix = crate::config::Backend::parse(&st.backend)
        .map(|b| b.window_fix("MODEL"))
        .unwrap_or_else(|| "give each slot 16,384 or more".into());
    format!("; under 16,384 per slot a delegate's conversation has no room (issue 45's measure): {fix}")
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
    let extra = small_note(st);
    let lvl = if extra.is_empty() { Level::Ok } else { Level::Warn };
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

fn finish(ctx: &Context, keep_days: u32, out: &mut Vec<(Level, String)>) {
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
    if let Ok((free, total)) = crate::paths::disk_space(&ctx.state_dir) {
        out.push(disk_check(&ctx.state_dir, free, total, keep_days));
    }
}

/// Below this much free, or [`DISK_LOW_PERCENT`] of the disk, `doctor`
/// warns.
const DISK_LOW_BYTES: u64 = 2_000_000_000;
const DISK_LOW_PERCENT: u64 = 5;

/// The state dir's disk: ok, or nearly full with what to do.
fn disk_check(dir: &std::path::Path, free: u64, total: u64, keep_days: u32) -> (Level, String) {
    let pct = free.saturating_mul(100).checked_div(total).unwrap_or(0);
    let said = format!(
        "the disk of the state dir {} has {} free ({pct}% of {})",
        dir.display(),
        crate::fmt::bytes(free),
        crate::fmt::bytes(total)
    );
    if free >= DISK_LOW_BYTES && pct >= DISK_LOW_PERCENT {
        return (Level::Ok, said);
    }
    let retention = if keep_days == 0 {
        "set defaults.keep_days (0 now keeps every job) so that retention removes old jobs".to_string()
    } else {
        format!("lower defaults.keep_days (now {keep_days}) so that retention removes more old jobs")
    };
    (
        Level::Warn,
        format!(
            "{said}: nearly full, and a job whose record or logs cannot be written loses what it did; free space there, or {retention}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_outside_the_tested_range_is_named_with_how_to_pin() {
        let (lo, hi) = crate::runner::TESTED_CLAUDE;
        assert_eq!(version_note(&format!("{lo} (Claude Code)")), None);
        assert_eq!(version_note(&format!("{hi} (Claude Code)")), None);
        let newer = version_note("99.0.1 (Claude Code)").unwrap();
        assert!(newer.contains("newer") && newer.contains(&format!("@anthropic-ai/claude-code@{hi}")), "{newer}");
        let older = version_note("1.0.0 (Claude Code)").unwrap();
        assert!(older.contains("older"), "{older}");
        assert!(version_note("a wrapper").unwrap().contains("does not read"));
    }

    #[test]
    fn a_nearly_full_disk_is_a_warning_with_what_to_do() {
        let dir = std::path::Path::new("/s");
        let (l, t) = disk_check(dir, 50_000_000_000, 100_000_000_000, 30);
        assert_eq!(l, Level::Ok, "{t}");
        let (l, t) = disk_check(dir, 900_000_000, 100_000_000_000, 30);
        assert_eq!(l, Level::Warn);
        assert!(t.contains("900.0 MB free") && t.contains("now 30"), "{t}");
        let (l, t) = disk_check(dir, 3_000_000_000, 100_000_000_000, 0);
        assert_eq!(l, Level::Warn, "3% free: {t}");
        assert!(t.contains("0 now keeps every job"), "{t}");
    }
}
