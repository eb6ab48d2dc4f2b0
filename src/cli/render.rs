//! Text for a person: status tables and job summaries, rendered from the
//! typed results. Colour is written unconditionally; `anstream` strips it
//! when stdout is not a terminal (and honours `NO_COLOR`).

use std::io::Write;

use anstyle::{AnsiColor, Style};

use crate::api::{JobList, JobRecord, Status as JobStatus};
use crate::probe::{EndpointStatus, Replica, ServedModel};
use crate::registry::Report;

pub const GREEN: Style = AnsiColor::Green.on_default().bold();
pub const RED: Style = AnsiColor::Red.on_default().bold();
pub const YELLOW: Style = AnsiColor::Yellow.on_default();
pub const DIM: Style = Style::new().dimmed();
pub const BOLD: Style = Style::new().bold();

/// One line per endpoint, then the menu and warnings. Colour is written
/// unconditionally; `anstream` strips it when stdout is not a terminal.
pub fn render_status(out: &mut impl Write, st: &Report) -> std::io::Result<()> {
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
        for r in &e.replicas {
            writeln!(out, "{}", replica_line(r, name_w))?;
        }
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

/// A replica behind a router, under its router's line.
fn replica_line(r: &Replica, name_w: usize) -> String {
    let head = format!("{:<name_w$}  {:<9}", "", r.backend);
    let router = r
        .router_says()
        .map(|s| format!("  {s}"))
        .unwrap_or_default();
    if !r.up {
        return format!(
            "{head}  {RED}down{RED:#}  {}{router}",
            r.error.as_deref().unwrap_or("unknown error")
        );
    }
    let models = models_text(&r.models);
    let slots = r
        .slots
        .map(|s| format!("  slots {}/{} busy", s.busy, s.total))
        .unwrap_or_default();
    let latency = r
        .latency_ms
        .map(|l| format!("  {l} ms"))
        .unwrap_or_default();
    format!(
        "{head}  {GREEN}up{GREEN:#}    replica {}: {models}{slots}{router}{DIM}{latency}{DIM:#}",
        r.url
    )
}

fn models_text(models: &[ServedModel]) -> String {
    if models.is_empty() {
        "(no model)".to_string()
    } else {
        models
            .iter()
            .map(|m| match m.context {
                Some(c) => format!("{} ({c}/slot)", m.id),
                None => format!("{} (window unknown)", m.id),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn endpoint_line(e: &EndpointStatus, name_w: usize) -> String {
    let head = format!("{:<name_w$}  {:<9}", e.name, e.backend);
    if !e.up {
        return format!(
            "{head}  {RED}down{RED:#}  {}",
            e.error.as_deref().unwrap_or("unknown error")
        );
    }
    let mut models = models_text(&e.models);
    if !e.replicas.is_empty() {
        let down = e.replicas.iter().filter(|r| !r.up).count();
        models = format!(
            "vllm-router, {} replicas{}: {models}",
            e.replicas.len(),
            if down > 0 {
                format!(" ({down} down)")
            } else {
                String::new()
            }
        );
    }
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

/// A job for a person.
pub fn render_job(out: &mut impl Write, r: &JobRecord) -> std::io::Result<()> {
    let style = match r.status() {
        JobStatus::Succeeded => GREEN,
        JobStatus::Running | JobStatus::Queued => YELLOW,
        _ => RED,
    };
    writeln!(
        out,
        "job {} {style}{}{style:#} · {} on {} · {:.0}s · {} turns · {} tool calls",
        r.id(),
        r.status().as_str(),
        r.served_id(),
        r.endpoint(),
        r.elapsed_s().unwrap_or(0.0),
        r.num_turns().unwrap_or(0),
        r.tool_calls()
    )?;
    if let Some(e) = r.error() {
        writeln!(out, "{RED}error:{RED:#} {e}")?;
    }
    if let Some(res) = r.result() {
        writeln!(out, "{BOLD}result{BOLD:#}\n{}", res.trim())?;
    }
    if !r.files_changed().is_empty() {
        writeln!(
            out,
            "{BOLD}files changed{BOLD:#} {}",
            r.files_changed().join(", ")
        )?;
    }
    if let Some(w) = r.worktree() {
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
    if let Some(f) = r.first_turn() {
        writeln!(out, "{}", f.line())?;
    }
    if let Some(l) = r.load_note() {
        writeln!(out, "{l}")?;
    }
    if let Some(a) = r.acceptance() {
        writeln!(out, "{}", a.line())?;
    }
    writeln!(
        out,
        "{DIM}usage in {} (cached {}) out {} · logs {}{DIM:#}",
        r.usage().input,
        r.usage().cache_read,
        r.usage().output,
        r.log_dir().display()
    )?;
    Ok(())
}

/// `localagents jobs`: one line a job.
pub fn render_jobs(out: &mut impl Write, list: &JobList) -> std::io::Result<()> {
    if list.jobs.is_empty() && list.unreadable.is_empty() {
        writeln!(out, "no jobs yet")?;
    }
    for j in &list.jobs {
        writeln!(
            out,
            "{}  {:<9}  {:<20}  {:>5}s  {} files  {}",
            j.id,
            j.status.as_str(),
            crate::fmt::first_chars(&j.model, 20),
            j.elapsed_s.unwrap_or(0.0),
            j.files_changed,
            j.task
        )?;
    }
    for u in &list.unreadable {
        writeln!(out, "{}  unreadable  {}", u.id, u.error)?;
    }
    if let Some(n) = &list.note {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

/// The CLI's spinner on stderr: elapsed time and a message.
pub fn spinner() -> indicatif::ProgressBar {
    let bar =
        indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {elapsed} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}
