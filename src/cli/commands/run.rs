//! `localagents run`: a job in the foreground, with a spinner; Ctrl-C
//! cancels it.

use std::io::Write;

use crate::api::Context;
use crate::cli::render::render_job;
use crate::cli::{ExitStatus, RunCmd, fail};
use crate::jobs::manager::{Manager, RunArgs};
use crate::jobs::{Isolation, Status};

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
            ..Default::default()
        }
    }
}

pub async fn run(ctx: Context, args: RunCmd) -> anyhow::Result<ExitStatus> {
    let manager = Manager::new(ctx);
    let json = args.json;
    let run_args = RunArgs::from(args);
    let rec = match manager.start(run_args).await {
        Ok(r) => r,
        Err(e) => return Ok(fail(&e.into())),
    };
    let id = rec.id.clone();
    let bar = crate::cli::render::spinner();
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
                        let round = p
                            .acceptance_round
                            .map(|r| format!(" · acceptance round {r}"))
                            .unwrap_or_default();
                        bar.set_message(format!(
                            "job {id} · requests {} · tool calls {} · tokens {} · {}{round}",
                            p.turns,
                            rec.tool_calls.max(p.tool_calls),
                            p.tokens,
                            crate::fmt::first_chars(&p.last_activity, 60)
                        ));
                    }
                    Err(e) => {
                        bar.finish_and_clear();
                        return Ok(fail(&e.into()));
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
    let rec = manager.record(&id).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &rec)?;
        writeln!(out)?;
    } else {
        render_job(&mut out, &rec)?;
    }
    Ok(if rec.status == Status::Succeeded {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}
