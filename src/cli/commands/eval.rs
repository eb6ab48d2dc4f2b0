//! `localagents eval`: qualify a served model, with a progress bar (task k
//! of n, the current request). SIGINT (Ctrl-C), SIGTERM or SIGHUP cancels
//! the running task's job, prints what the eval has (it stores nothing)
//! and exits with the signal's code (130, 143, 129); a second signal exits
//! at once.

use std::io::Write;
use std::sync::{Arc, OnceLock};

use crate::api::Context;
use crate::cli::{EvalCmd, ExitStatus};
use crate::eval::{self, EvalArgs, tasks::Suite};
use crate::signals::{Stop, Stops};

pub async fn run(ctx: Context, args: EvalCmd) -> anyhow::Result<ExitStatus> {
    let eargs = EvalArgs {
        model: args.model,
        endpoint: args.endpoint,
        suite: Suite::parse(&args.suite).unwrap_or(Suite::Quick),
        probe_only: args.probe,
        force: args.force,
        max_turns: args.max_turns,
        task_timeout_s: args.task_timeout,
    };
    let bar = crate::cli::render::spinner();
    // The first signal, once one came.
    let stop: Arc<OnceLock<Stop>> = Arc::default();
    let mut stops = Stops::listen();
    let first = stop.clone();
    let listener = tokio::spawn(async move {
        let _ = first.set(stops.next().await);
        // A second signal does not wait for the cancel to finish.
        std::process::exit(stops.next().await.exit_code().into());
    });
    let b = bar.clone();
    let result = eval::run(
        &ctx,
        &eargs,
        move |p| {
            let head = if p.task == 0 {
                "capability probe".to_string()
            } else {
                format!("task {} of {} ({})", p.task, p.of, p.name)
            };
            b.set_message(format!("{head} · {}", p.line));
        },
        &|| stop.get().is_some(),
    )
    .await;
    listener.abort();
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "localagents: {e}");
            return Ok(stop.get().map_or(ExitStatus::Failure, |s| ExitStatus::Stopped(*s)));
        }
    };
    let printed = print(&report, args.json);
    match stop.get() {
        // After SIGHUP the terminal may be gone: the exit code still says
        // what stopped the eval.
        Some(s) => Ok(ExitStatus::Stopped(*s)),
        None => printed.map(|()| {
            if report.cancelled.is_some() {
                ExitStatus::Failure
            } else {
                ExitStatus::Success
            }
        }),
    }
}

/// The report as JSON, or the table for a person.
fn print(report: &eval::EvalReport, json: bool) -> anyhow::Result<()> {
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", eval::table(report))?;
    }
    Ok(())
}
