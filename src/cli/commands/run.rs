//! `localagents run`: a job in the foreground, with a spinner. SIGINT
//! (Ctrl-C), SIGTERM or SIGHUP cancels it: the record says `cancelled`,
//! the job's processes are gone, and the exit code is the signal's (130,
//! 143, 129). Listening starts before the job does, so no signal finds the
//! process with its default action (death, the record left `running`).

use std::io::Write;

use crate::api::{self, Context, Isolation, Manager, RunArgs, RunEvent};
use crate::cli::render::render_job;
use crate::cli::{ExitStatus, RunCmd, fail};
use crate::signals::Stops;

impl From<RunCmd> for RunArgs {
    fn from(a: RunCmd) -> RunArgs {
        RunArgs {
            task: a.task.join(" "),
            model: a.model,
            endpoint: a.endpoint,
            cwd: a.cwd,
            isolation: Some(if a.worktree {
                Isolation::Worktree
            } else {
                Isolation::None
            }),
            max_turns: a.max_turns,
            timeout_s: a.timeout,
            acceptance: a.accept,
            fix_rounds: a.fix_rounds,
            force: a.force,
            agent: a.agent,
            ..Default::default()
        }
    }
}

pub async fn run(ctx: Context, args: RunCmd) -> anyhow::Result<ExitStatus> {
    let manager = Manager::new(ctx.clone());
    // Old ended jobs go in the background while the job runs (when a pass
    // is due).
    let mut retention = {
        let (m, ctx) = (manager.clone(), ctx.clone());
        tokio::spawn(async move { api::retention::run_if_due(&m, &ctx).await })
    };
    let json = args.json;
    let run_args = RunArgs::from(args);
    // The spinner shows once the job has started.
    let mut bar = None;
    let mut stops = Stops::listen();
    let ran = api::run_job(&manager, run_args, stops.next(), |event| match event {
        RunEvent::Started(rec) => {
            let b = crate::cli::render::spinner();
            b.set_message(format!(
                "job {} on {} ({})",
                rec.id(), rec.served_id(), rec.endpoint()
            ));
            bar = Some(b);
        }
        RunEvent::Running(rec, p) => {
            let Some(bar) = &bar else { return };
            let round = p
                .acceptance_round
                .map(|r| format!(" · acceptance round {r}"))
                .unwrap_or_default();
            bar.set_message(format!(
                "job {} · requests {} · tool calls {} · tokens {} · {}{round}",
                rec.id(),
                p.turns,
                rec.tool_calls().max(p.tool_calls),
                p.tokens,
                crate::fmt::first_chars(&p.last_activity, 60)
            ));
        }
        RunEvent::Cancelling(id) => {
            if let Some(bar) = &bar {
                bar.set_message(format!("cancelling job {id}…"));
            }
        }
    })
    .await;
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), &mut retention).await;
    retention.abort();
    let end = match ran {
        Ok(end) => end,
        Err(e) => return Ok(fail(&e)),
    };
    let rec = manager.record(&end.id).map_err(|e| anyhow::anyhow!("{e}"))?;
    let printed = print(&rec, json);
    ExitStatus::of_job(&rec, end.stopped, printed)
}

/// The record as JSON, or the summary for a person.
fn print(rec: &api::JobRecord, json: bool) -> anyhow::Result<()> {
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, rec)?;
        writeln!(out)?;
    } else {
        render_job(&mut out, rec)?;
    }
    Ok(())
}
