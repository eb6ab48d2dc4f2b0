//! The HTML of `localagents ui`, written on the server from typed results.
//!
//! Every text that comes from a job, a project or a backend (briefs,
//! transcripts, diffs, tool inputs, model names, error bodies) goes through
//! [`esc`]; nothing from them lands in an attribute unescaped or in a
//! script. The pages carry no inline script: the one script is a static
//! file that only opens the live stream and swaps in fragments the server
//! wrote with these same functions. With JavaScript off, every page shows
//! all it has, as of its loading.

use std::fmt::Write;

use crate::api::{DiffPage, Isolation, JobListItem, JobRecord, LiveProgress, RequestPoint};
use crate::eval::EvalLine;
use crate::ledger::{self, Savings};
use crate::probe::EndpointStatus;

use super::chart::{self, Bars, Group};
pub use super::html::esc;

/// Which page a link goes to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Now,
    Savings,
    Models,
    Job,
}

/// A page: the head, the navigation, the body. `live` is the query of
/// its live stream (`/events?…`), when it has one.
pub fn layout(token: &str, nav: Nav, title: &str, live: Option<&str>, body: &str) -> String {
    let link = |n: Nav, href: &str, name: &str| {
        format!(
            r#"<a href="{href}?token={token}"{}>{name}</a>"#,
            if n == nav { r#" class="here""# } else { "" }
        )
    };
    let events = live
        .map(|q| format!(r#" data-events="/events?token={token}&amp;{}""#, esc(q)))
        .unwrap_or_default();
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width">
<meta name="referrer" content="same-origin">
<title>{title} · localagents</title>
<link rel="stylesheet" href="/static/style.css?token={token}">
<script src="/static/app.js?token={token}" defer></script>
</head><body{events}>
<header><strong>localagents</strong> <nav>{} {} {}</nav></header>
<main>
{body}
</main>
</body></html>
"#,
        link(Nav::Now, "/", "Now"),
        link(Nav::Savings, "/savings", "Savings"),
        link(Nav::Models, "/models", "Models"),
        title = esc(title),
    )
}

fn job_link(token: &str, id: &str) -> String {
    format!(
        r#"<a href="/jobs/{id}?token={token}">{id}</a>"#,
        id = esc(id)
    )
}

fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map(|v| esc(&v.to_string())).unwrap_or_default()
}

/// Ollama's and LM Studio's models whose window is too small for a job,
/// each with the server's own fix (the sentence status and doctor say).
fn refusals(e: &EndpointStatus) -> String {
    crate::probe::refusals(e)
        .iter()
        .map(|r| format!(r#"<p class="refused">{}</p>"#, esc(r)))
        .collect()
}

/// The overview's endpoint table (also its live fragment).
pub fn endpoints(list: Result<&[EndpointStatus], &str>) -> String {
    let list = match list {
        Ok(l) => l,
        Err(e) => return format!(r#"<p class="error">{}</p>"#, esc(e)),
    };
    if list.is_empty() {
        return "<p>No endpoint is configured: see <code>localagents doctor</code>.</p>".into();
    }
    let mut s = String::from(
        "<table class=\"endpoints\"><tr><th>endpoint</th><th>up</th><th>slots</th><th>models</th><th>note</th></tr>",
    );
    for e in list {
        let slots = match &e.slots {
            Some(sl) => {
                let mut cells = String::new();
                for i in 0..sl.total.min(64) {
                    let busy = i < sl.busy;
                    let _ = write!(
                        cells,
                        r#"<span class="slot {}" title="slot {i}: {}"></span>"#,
                        if busy { "busy" } else { "free" },
                        if busy { "busy" } else { "free" }
                    );
                }
                format!(
                    r#"{cells} <span class="slots-text">{} busy, {} free</span>"#,
                    sl.busy, sl.free
                )
            }
            None => "—".into(),
        };
        let models: Vec<String> = e
            .models
            .iter()
            .map(|m| {
                let state = m.state.as_ref().map(|s| s.as_str()).unwrap_or("served");
                format!(
                    r#"<span class="model">{}</span> <span class="state {}">{}</span>{}"#,
                    esc(&m.id),
                    esc(state),
                    esc(state),
                    m.context
                        .map(|c| format!(" · {} a slot", crate::fmt::thousands(c)))
                        .unwrap_or_default()
                )
            })
            .collect();
        let _ = write!(
            s,
            r#"<tr class="endpoint" data-name="{name}"><td>{name}<br><small>{url}</small></td><td class="{up}">{up}</td><td>{slots}</td><td>{}</td><td>{}{}</td></tr>"#,
            models.join("<br>"),
            opt(&e.error),
            refusals(e),
            name = esc(&e.name),
            url = esc(&e.base_url),
            up = if e.up { "up" } else { "down" },
        );
        // Behind a vLLM router: a row a replica, under the router's.
        for r in &e.replicas {
            let health = r.router_says().unwrap_or_default();
            let slots = r
                .slots
                .map(|sl| format!("{} busy, {} free", sl.busy, sl.free))
                .unwrap_or_else(|| "—".into());
            let models: Vec<String> = r
                .models
                .iter()
                .map(|m| {
                    format!(
                        "{}{}",
                        esc(&m.id),
                        m.context
                            .map(|c| format!(" · {} a slot", crate::fmt::thousands(c)))
                            .unwrap_or_default()
                    )
                })
                .collect();
            let _ = write!(
                s,
                r#"<tr class="replica" data-name="{name}"><td>↳ replica<br><small>{url}</small></td><td class="{up}">{up}</td><td>{slots}</td><td>{}</td><td>{}{}</td></tr>"#,
                models.join("<br>"),
                esc(&health),
                r.error
                    .as_deref()
                    .map(|e| format!("<br>{}", esc(e)))
                    .unwrap_or_default(),
                name = esc(&e.name),
                url = esc(&r.url),
                up = if r.up { "up" } else { "down" },
            );
        }
    }
    s.push_str("</table>");
    s
}

/// A running or queued job with its progress.
pub struct Active {
    pub record: JobRecord,
    pub progress: LiveProgress,
}

/// The overview's jobs: running and queued with their progress, then the
/// recent ones (also its live fragment).
pub fn jobs(token: &str, active: &[Active], recent: &[JobListItem]) -> String {
    let mut s = String::from("<h2>Running and queued</h2>");
    if active.is_empty() {
        s.push_str("<p class=\"none\">No job is running.</p>");
    } else {
        s.push_str("<table class=\"active\"><tr><th>job</th><th>status</th><th>model</th><th>turn</th><th>tool calls</th><th>tokens</th><th>acceptance</th><th>last activity</th></tr>");
        for a in active {
            let r = &a.record;
            let p = &a.progress;
            let _ = write!(
                s,
                r#"<tr class="job" data-id="{}"><td>{}</td><td class="status {st}">{st}</td><td>{}@{}</td><td class="turns">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(r.id()),
                job_link(token, r.id()),
                esc(r.served_id()),
                esc(r.endpoint()),
                p.turns,
                p.tool_calls,
                crate::fmt::thousands(p.tokens),
                p.acceptance_round
                    .map(|n| format!("round {n}"))
                    .unwrap_or_default(),
                opt(&p.last_activity),
                st = p.status.as_str(),
            );
        }
        s.push_str("</table>");
    }
    s.push_str("<h2>Recent jobs</h2>");
    if recent.is_empty() {
        s.push_str("<p class=\"none\">No job yet.</p>");
        return s;
    }
    s.push_str("<table class=\"recent\"><tr><th>job</th><th>status</th><th>model</th><th>created</th><th>time</th><th>files</th><th>task</th></tr>");
    for j in recent {
        let _ = write!(
            s,
            r#"<tr class="job"><td>{}</td><td class="status {st}">{st}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            job_link(token, &j.id),
            esc(&j.model),
            esc(&j.created),
            j.elapsed_s.map(|e| format!("{e:.0} s")).unwrap_or_default(),
            j.files_changed,
            esc(&j.task),
            st = j.status.as_str(),
        );
    }
    s.push_str("</table>");
    s
}

/// The overview page.
pub fn overview(token: &str, endpoints_html: &str, jobs_html: &str) -> String {
    let body = format!(
        r#"<h1>Now</h1>
<h2>Endpoints</h2>
<section id="endpoints" data-live="endpoints">{endpoints_html}</section>
<section id="jobs" data-live="jobs">{jobs_html}</section>"#
    );
    layout(token, Nav::Now, "Now", Some("view=overview"), &body)
}

/// A job's live block (also its live fragment).
pub fn progress(p: &LiveProgress) -> String {
    format!(
        r#"<dl class="progress"><dt>status</dt><dd class="status {st}">{st}</dd><dt>turn</dt><dd id="turns">{}</dd><dt>tool calls</dt><dd>{}</dd><dt>tokens</dt><dd>{}</dd><dt>acceptance round</dt><dd>{}</dd><dt>elapsed</dt><dd>{}</dd><dt>last activity</dt><dd>{}</dd></dl>"#,
        p.turns,
        p.tool_calls,
        crate::fmt::thousands(p.tokens),
        p.acceptance_round
            .map(|n| n.to_string())
            .unwrap_or("—".into()),
        p.elapsed_s
            .map(|e| format!("{e:.0} s"))
            .unwrap_or("—".into()),
        opt(&p.last_activity),
        st = p.status.as_str(),
    )
}

/// Everything a job's page shows.
pub struct JobView<'a> {
    pub record: &'a JobRecord,
    pub progress: &'a LiveProgress,
    pub brief: &'a str,
    pub transcript: &'a str,
    pub requests: &'a [RequestPoint],
    pub diff: Result<DiffPage, String>,
}

/// The transcript as a timeline: an entry per `[kind] …` line, with the
/// lines that follow it (a multi-line answer).
fn timeline(transcript: &str) -> String {
    let mut entries: Vec<(&str, String)> = Vec::new();
    for line in transcript.lines() {
        let kinds = [
            ("[assistant] ", "assistant"),
            ("[tool error] ", "tool-error"),
            ("[tool] ", "tool"),
            ("[result] ", "result"),
            ("[retry] ", "retry"),
        ];
        match kinds.iter().find(|(p, _)| line.starts_with(p)) {
            Some((p, class)) => entries.push((class, line[p.len()..].to_string())),
            None => match entries.last_mut() {
                Some((_, text)) => {
                    text.push('\n');
                    text.push_str(line);
                }
                None => entries.push(("note", line.to_string())),
            },
        }
    }
    if entries.is_empty() {
        return "<p class=\"none\">Nothing yet.</p>".into();
    }
    let mut s = String::from("<ol class=\"timeline\">");
    for (class, text) in entries {
        let _ = write!(
            s,
            r#"<li class="{class}"><span class="kind">{}</span><pre>{}</pre></li>"#,
            class.replace('-', " "),
            esc(&text)
        );
    }
    s.push_str("</ol>");
    s
}

/// The requests chart: a bar pair (new, cached prompt tokens) per request
/// and the time to first token over them.
pub fn requests_chart(requests: &[RequestPoint]) -> String {
    if requests.is_empty() {
        return "<p class=\"none\">No request yet.</p>".into();
    }
    let groups: Vec<Group> = requests
        .iter()
        .enumerate()
        .map(|(i, r)| Group {
            label: (i + 1).to_string(),
            values: vec![r.new_tokens as f64, r.cached_tokens as f64],
        })
        .collect();
    let ttft: Vec<Option<f64>> = requests
        .iter()
        .map(|r| r.ttft_ms.map(|t| t as f64))
        .collect();
    let tokens = |v: f64| ledger::short(v.max(0.0) as u64);
    let ms = |v: f64| {
        if v < 1000.0 {
            format!("{v:.0} ms")
        } else {
            format!("{:.1} s", v / 1000.0)
        }
    };
    chart::bars(&Bars {
        series: &[("new", "new tokens"), ("cached", "cached tokens")],
        groups: &groups,
        line: Some(("time to first token", &ttft)),
        fmt: &tokens,
        line_fmt: &ms,
        title: "prompt tokens per request: new and cached; time to first token",
    })
}

/// A job page's acceptance: the command, how it ended, its output's tail.
fn acceptance_section(s: &mut String, r: &JobRecord) {
    s.push_str("<h2>Acceptance</h2>");
    match r.acceptance() {
        Some(a) => {
            let _ = write!(
                s,
                r#"<p class="{}"><code>{}</code>: {} after {} round{} (exit {}, {:.1} s){}</p><pre>{}</pre>"#,
                if a.passed { "passed" } else { "failed" },
                esc(&a.command),
                if a.passed { "passed" } else { "failed" },
                a.rounds,
                if a.rounds == 1 { "" } else { "s" },
                a.exit_code.map(|c| c.to_string()).unwrap_or("none".into()),
                a.elapsed_s,
                opt(&a.stopped.as_ref().map(|x| format!(" · {x}"))),
                esc(&a.output_tail)
            );
        }
        None => s.push_str("<p class=\"none\">No acceptance command.</p>"),
    }
}

/// A job page's model faults: a row per kind, and a runaway's cut.
fn faults_section(s: &mut String, r: &JobRecord) {
    s.push_str("<h2>Model faults</h2>");
    match r.model_faults() {
        Some(f) => {
            let _ = write!(
                s,
                "<table class=\"faults\"><tr><td>tool calls repaired from text</td><td>{}</td></tr><tr><td>tool-call text left unparsed</td><td>{}</td></tr><tr><td>loop notes</td><td>{}</td></tr><tr><td>max_tokens retries</td><td>{}</td></tr><tr><td>empty answers</td><td>{}</td></tr><tr><td>answers cut off as runaway output</td><td>{}</td></tr></table>",
                f.repaired_tool_calls,
                f.unparsed_tool_text,
                f.loop_notes,
                f.max_tokens_retries,
                f.empty_responses,
                f.runaways()
            );
            if let Some(r) = &f.runaway_output {
                let _ = write!(
                    s,
                    "<p class=\"runaway\">{} ({} bytes dropped)</p>",
                    esc(&r.why),
                    r.bytes_dropped
                );
            }
        }
        None => s.push_str("<p class=\"none\">None recorded.</p>"),
    }
}

/// A job page's diff: a page of it, each line classed, and a link to
/// the next page (`id` is the job's, escaped).
fn diff_section(s: &mut String, diff: &Result<DiffPage, String>, id: &str, token: &str) {
    s.push_str("<h2>Diff</h2>");
    match diff {
        Ok(d) if d.total_bytes == Some(0) => s.push_str("<p class=\"none\">No change.</p>"),
        Ok(d) => {
            let of = match d.total_bytes {
                Some(t) => t.to_string(),
                None => format!("more, in {} files", d.files),
            };
            let _ = write!(
                s,
                r#"<p>{} · bytes {}–{} of {}</p><pre class="diff">"#,
                esc(&d.files_changed.join(", ")),
                d.offset,
                d.offset + d.diff.len(),
                of
            );
            for line in d.diff.lines() {
                let class = match line.as_bytes().first() {
                    Some(b'+') if !line.starts_with("+++") => "add",
                    Some(b'-') if !line.starts_with("---") => "del",
                    Some(b'@') => "hunk",
                    _ => "ctx",
                };
                let _ = writeln!(s, r#"<span class="{class}">{}</span>"#, esc(line));
            }
            s.push_str("</pre>");
            if let Some(next) = d.next_offset {
                let _ = write!(
                    s,
                    r#"<p><a href="/jobs/{id}?token={token}&amp;diff_offset={next}">Next page of the diff</a></p>"#
                );
            }
        }
        Err(e) => {
            let _ = write!(s, r#"<p class="none">{}</p>"#, esc(e));
        }
    }
}

/// A job's page.
pub fn job(token: &str, v: &JobView) -> String {
    let r = v.record;
    let id = esc(r.id());
    let mut s = format!(
        r#"<h1>Job {id}</h1>
<p class="meta">{} on <b>{}</b> · {} · created {} · isolation {}</p>"#,
        esc(r.served_id()),
        esc(r.endpoint()),
        esc(&r.cwd().display().to_string()),
        esc(r.created()),
        match r.isolation() {
            Isolation::None => "none (in the tree)",
            Isolation::Worktree => "worktree",
        },
    );
    let _ = write!(
        s,
        r#"<section id="progress" data-live="progress">{}</section>"#,
        progress(v.progress)
    );
    if !r.status().terminal() {
        let _ = write!(
            s,
            r#"<p><a class="button danger" href="/jobs/{id}/cancel?token={token}">Cancel this job…</a></p>"#
        );
    }
    let agent = r.agent().map(|a| a.line());
    let window = r.window().line();
    let ending = r.ending().line();
    for (label, text, class) in [
        ("Result", r.result(), "result"),
        ("Error", r.error(), "error"),
        ("Finish", ending.as_deref(), "note"),
        ("Subagent", agent.as_deref(), "note"),
        ("Model", r.model_note(), "note"),
        ("Cache", r.cache_note(), "note"),
        ("Window", window.as_deref(), "note"),
    ] {
        if let Some(t) = text {
            let _ = write!(s, r#"<p class="{class}"><b>{label}:</b> {}</p>"#, esc(t));
        }
    }
    let _ = write!(
        s,
        r#"<h2>Brief</h2><pre class="brief">{}</pre>"#,
        esc(if v.brief.is_empty() { r.task() } else { v.brief })
    );
    let _ = write!(
        s,
        r#"<h2>Requests</h2><div class="requests" data-count="{}">{}</div>"#,
        v.requests.len(),
        requests_chart(v.requests)
    );
    acceptance_section(&mut s, r);
    faults_section(&mut s, r);
    let _ = write!(s, "<h2>Transcript</h2>{}", timeline(v.transcript));
    diff_section(&mut s, &v.diff, &id, token);
    let live = (!r.status().terminal()).then(|| format!("view=job&job={}", r.id()));
    layout(
        token,
        Nav::Job,
        &format!("Job {}", r.id()),
        live.as_deref(),
        &s,
    )
}

/// The cancel confirmation: a form that posts, so a link alone never
/// cancels.
pub fn cancel_confirm(token: &str, r: &JobRecord) -> String {
    let id = esc(r.id());
    let body = format!(
        r#"<h1>Cancel job {id}?</h1>
<p>{} on {} · {}</p>
<pre class="brief">{}</pre>
<form method="post" action="/jobs/{id}/cancel?token={token}"><button class="danger" type="submit">Yes, cancel it</button> <a href="/jobs/{id}?token={token}">No, back to the job</a></form>"#,
        esc(r.served_id()),
        esc(r.endpoint()),
        r.status().as_str(),
        esc(r.task())
    );
    layout(token, Nav::Job, "Cancel", None, &body)
}

/// The savings page: gross and net a day over `days` days, and per model.
pub fn savings(token: &str, s: &Savings, days: &[chrono::NaiveDate]) -> String {
    let mut body = format!(
        r#"<h1>Savings</h1><p class="line">{}</p>"#,
        esc(&ledger::line(s, ledger::Since::Days(days.len() as u32)))
    );
    let groups: Vec<Group> = days
        .iter()
        .map(|d| {
            let key = d.format("%Y-%m-%d").to_string();
            let p = s.by_day.iter().find(|p| p.start == key);
            Group {
                label: d.format("%m-%d").to_string(),
                values: vec![
                    p.and_then(|p| p.equivalent_usd).unwrap_or(0.0),
                    // No bar where nothing had a net (every job gross only).
                    p.filter(|p| p.jobs + p.completions > p.jobs_without_transcript)
                        .and_then(|p| p.net_usd)
                        .unwrap_or(f64::NAN),
                ],
            }
        })
        .collect();
    let usd = |v: f64| ledger::dollars(v);
    let _ = write!(
        body,
        r#"<h2>Per day, last {} days</h2><div class="savings-chart">{}</div>"#,
        days.len(),
        chart::bars(&Bars {
            series: &[("gross", "gross"), ("net", "net")],
            groups: &groups,
            line: None,
            fmt: &usd,
            line_fmt: &usd,
            title: "list-price equivalent a day: gross, and net of Claude's own cost",
        })
    );
    body.push_str("<h2>Per model</h2><table class=\"by-model\"><tr><th>model</th><th>endpoint</th><th>jobs</th><th>completions</th><th>tokens (in + cached + out)</th><th>gross</th><th>Claude's cost</th><th>net</th><th>gross only</th></tr>");
    let money = |x: Option<f64>| x.map(ledger::dollars).unwrap_or("—".into());
    for r in &s.by_model {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} + {} + {}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.model),
            esc(&r.endpoint),
            r.jobs,
            r.completions,
            ledger::short(r.tokens.input),
            ledger::short(r.tokens.cache_read),
            ledger::short(r.tokens.output),
            money(r.equivalent_usd),
            money(r.orchestration.usd),
            money(
                r.net_usd
                    .filter(|_| r.orchestration.jobs + r.completions > 0)
            ),
            r.orchestration.jobs_without_transcript
        );
    }
    body.push_str("</table><h2>Per week</h2><table class=\"by-week\"><tr><th>week of</th><th>jobs</th><th>completions</th><th>tokens</th><th>gross</th><th>Claude's cost</th><th>net</th></tr>");
    // Net is "—" where every job counted gross only.
    for w in s.by_week.iter().rev() {
        let _ = write!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&w.start),
            w.jobs,
            w.completions,
            ledger::short(w.tokens.total()),
            money(w.equivalent_usd),
            money(w.orchestration_usd),
            money(
                w.net_usd
                    .filter(|_| w.jobs + w.completions > w.jobs_without_transcript)
            )
        );
    }
    let _ = write!(
        body,
        "</table><p class=\"meaning\">{}.<br>{}.</p>",
        esc(ledger::MEANING),
        esc(ledger::NET_MEANING)
    );
    layout(token, Nav::Savings, "Savings", None, &body)
}

/// The models page: what each endpoint serves, and its eval result.
pub fn models(token: &str, list: Result<(&[EndpointStatus], &[EvalLine]), &str>) -> String {
    let mut body = String::from("<h1>Models</h1>");
    match list {
        Err(e) => {
            let _ = write!(body, r#"<p class="error">{}</p>"#, esc(e));
        }
        Ok((endpoints, evals)) => {
            body.push_str("<table class=\"models\"><tr><th>model</th><th>endpoint</th><th>state</th><th>window a slot</th><th>template</th><th>eval</th></tr>");
            for e in endpoints {
                if !e.up {
                    let _ = write!(
                        body,
                        r#"<tr><td>—</td><td>{}</td><td class="down">down</td><td></td><td></td><td>{}</td></tr>"#,
                        esc(&e.name),
                        opt(&e.error)
                    );
                    continue;
                }
                let template = e
                    .chat_template
                    .as_ref()
                    .map(|t| match (t.supports_tool_calls, t.supports_system_role) {
                        (Some(false), _) => "no tool calls",
                        (_, Some(false)) => "no system role",
                        (Some(true), _) => "tool calls",
                        _ => "",
                    })
                    .unwrap_or("");
                for m in &e.models {
                    let eval = evals
                        .iter()
                        .find(|l| l.endpoint == e.name && l.model == m.id)
                        .map(|l| l.line.as_str())
                        .unwrap_or("never evaluated: localagents eval");
                    let _ = write!(
                        body,
                        r#"<tr class="model"><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class="eval">{}</td></tr>"#,
                        esc(&m.id),
                        esc(&e.name),
                        esc(m.state.as_ref().map(|s| s.as_str()).unwrap_or("served")),
                        m.context.map(crate::fmt::thousands).unwrap_or_default(),
                        template,
                        esc(eval)
                    );
                }
            }
            body.push_str("</table>");
        }
    }
    layout(token, Nav::Models, "Models", None, &body)
}

/// A page that says what went wrong.
pub fn error(token: &str, message: &str) -> String {
    layout(
        token,
        Nav::Job,
        "Error",
        None,
        &format!(r#"<h1>Not here</h1><p class="error">{}</p>"#, esc(message)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_router_shows_a_row_a_replica_with_its_health_and_error() {
        let ep: crate::config::Endpoint = crate::config::Config::builtin().endpoints[0].clone();
        let mut e = crate::probe::EndpointStatus::new(&ep);
        e.up = true;
        let replica = |url: &str, up: bool, error: Option<&str>| crate::probe::Replica {
            url: url.into(),
            up,
            healthy: Some(up),
            load: Some(0),
            error: error.map(str::to_string),
            error_kind: None,
            latency_ms: None,
            backend: "llama.cpp".into(),
            models: Vec::new(),
            slots: None,
            counters: None,
        };
        e.replicas = vec![
            replica("http://gpu1:8080", true, None),
            replica(
                "http://gpu2:8080",
                false,
                Some("replica http://gpu2:8080 is down: <start it>"),
            ),
        ];
        let html = endpoints(Ok(&[e]));
        assert_eq!(html.matches("<tr class=\"replica\"").count(), 2, "{html}");
        assert!(
            html.contains("<small>http://gpu2:8080</small></td><td class=\"down\">down</td>"),
            "{html}"
        );
        assert!(html.contains("router: unhealthy, 0 in flight<br>replica http://gpu2:8080 is down: &lt;start it&gt;"), "{html}");
    }

    /// The page says what status and doctor say of a window too small
    /// on Ollama: no job starts, and the server's own fix.
    #[test]
    fn a_window_too_small_on_ollama_is_said_with_the_fix() {
        let ep = crate::config::Config::builtin().endpoints[2].clone();
        let mut e = crate::probe::EndpointStatus::new(&ep);
        e.up = true;
        e.backend = "ollama".into();
        let model = |id: &str, c: u64| crate::probe::ServedModel {
            id: id.into(),
            context: Some(c),
            context_source: None,
            state: None,
            file: None,
        };
        e.models = vec![model("gemma3:4b", 4096), model("qwen3-coder:latest", 65536)];
        let html = endpoints(Ok(&[e]));
        assert_eq!(html.matches("class=\"refused\"").count(), 1, "{html}");
        assert!(
            html.contains("gemma3:4b: window 4,096 tokens per slot")
                && html.contains("OLLAMA_CONTEXT_LENGTH=65536 ollama serve"),
            "{html}"
        );
    }

    #[test]
    fn a_jobs_page_says_where_its_window_went() {
        let rec: JobRecord =
            serde_json::from_str(include_str!("../jobs/job-every-field.json")).unwrap();
        let progress = LiveProgress {
            status: rec.status(),
            turns: 0,
            tool_calls: 0,
            tokens: 0,
            last_activity: None,
            acceptance_round: None,
            elapsed_s: None,
        };
        let html = job(
            "t",
            &JobView {
                record: &rec,
                progress: &progress,
                brief: "b",
                transcript: "",
                requests: &[],
                diff: Err("none".into()),
            },
        );
        assert!(
            html.contains("<b>Window:</b> compacted once (15,672 → 4,473 tokens last), cleared old tool results twice (9 results), largest tool result 4,095 tokens (Read src/lib.rs)"),
            "{html}"
        );
        // And how it ended: a delegate that stopped early is no crash.
        assert!(
            html.contains("<b>Finish:</b> incomplete, pending: &quot;I&#39;ll now update the tests.&quot; (nudged once)"),
            "{html}"
        );
    }

    #[test]
    fn text_from_a_job_is_escaped() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        let t =
            timeline("[assistant] <script>alert(1)</script>\nsecond line\n[tool] Bash rm -rf <x>");
        assert!(!t.contains("<script>"), "{t}");
        assert_eq!(t.matches("<li").count(), 2, "{t}");
        assert!(
            t.contains("&lt;script&gt;alert(1)&lt;/script&gt;\nsecond line"),
            "{t}"
        );
    }
}
