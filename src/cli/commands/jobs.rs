//! `localagents jobs` and `localagents job show|log|diff|cancel`.

use std::io::Write;

use crate::api::{self, Context, Manager, Status};
use crate::cli::render::{render_job, render_jobs};
use crate::cli::{ExitStatus, JobCommand, fail};

pub fn list(
    ctx: &Context,
    json: bool,
    status: Option<Status>,
    limit: usize,
) -> anyhow::Result<ExitStatus> {
    let m = Manager::new(ctx.clone());
    let list = match api::list_jobs(&m, status, limit, usize::MAX) {
        Ok(v) => v,
        Err(e) => return Ok(fail(&e)),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &list)?;
        writeln!(out)?;
    } else {
        render_jobs(&mut out, &list)?;
    }
    Ok(ExitStatus::Success)
}

pub async fn one(ctx: Context, cmd: JobCommand) -> anyhow::Result<ExitStatus> {
    let m = Manager::new(ctx);
    let mut out = anstream::stdout().lock();
    match cmd {
        JobCommand::Show { id, json } => match m.record(&id) {
            Ok(r) if json => {
                serde_json::to_writer_pretty(&mut out, &r)?;
                writeln!(out)?;
            }
            Ok(r) => render_job(&mut out, &r)?,
            Err(e) => return Ok(fail(&e.into())),
        },
        JobCommand::Log { id, stream, tail } => {
            match api::job_log(&m, &id, stream.into(), tail, None) {
                Ok(page) => write!(out, "{}", page.text)?,
                Err(e) => return Ok(fail(&e)),
            }
        }
        JobCommand::Diff { id } => {
            let mut offset = 0;
            loop {
                match api::job_diff(&m, &id, 100_000, offset).await {
                    Ok(page) => {
                        write!(out, "{}", page.diff)?;
                        match page.next_offset {
                            Some(n) => offset = n,
                            None => break,
                        }
                    }
                    Err(e) => return Ok(fail(&e)),
                }
            }
        }
        JobCommand::Cancel { id } => match api::cancel_job(&m, &id).await {
            Ok(s) => writeln!(out, "job {id}: {}", s.status.as_str())?,
            Err(e) => return Ok(fail(&e)),
        },
    }
    Ok(ExitStatus::Success)
}
