//! `localagents eval`: qualify a served model, with a progress bar (task k
//! of n, the current request); Ctrl-C cancels the running task's job and
//! stores nothing.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api::Context;
use crate::cli::{EvalCmd, ExitStatus};
use crate::eval::{self, EvalArgs, tasks::Suite};

pub async fn run(ctx: Context, args: EvalCmd) -> anyhow::Result<ExitStatus> {
    let eargs = EvalArgs {
        model: args.model,
        endpoint: args.endpoint,
        suite: Suite::parse(&args.suite).unwrap_or(Suite::Quick),
        probe_only: args.probe,
        force: args.force,
    };
    let bar = crate::cli::render::spinner();
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            stop2.store(true, Ordering::SeqCst);
        }
        // A second Ctrl-C does not wait for the cancel to finish.
        if tokio::signal::ctrl_c().await.is_ok() {
            std::process::exit(130);
        }
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
        &|| stop.load(Ordering::SeqCst),
    )
    .await;
    ctrl_c.abort();
    bar.finish_and_clear();
    let report = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(anstream::stderr(), "localagents: {e}");
            return Ok(ExitStatus::Failure);
        }
    };
    let mut out = anstream::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write!(out, "{}", eval::table(&report))?;
    }
    Ok(if report.cancelled.is_some() {
        ExitStatus::Failure
    } else {
        ExitStatus::Success
    })
}
