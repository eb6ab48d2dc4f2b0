//! `localagents status`: probe every endpoint; `--json` carries what the
//! text prints (each model's last eval, the notes, the savings line).

use std::io::Write;

use crate::api::Context;
use crate::cli::render::render_status;
use crate::cli::{ExitStatus, fail};

pub async fn run(ctx: &Context, json: bool) -> anyhow::Result<ExitStatus> {
    let report = match crate::api::status(ctx).await {
        Ok(r) => r,
        Err(e) => return Ok(fail(&e)),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        render_status(&mut out, &report.status)?;
        for e in &report.evals {
            writeln!(out, "{} on `{}`: {}", e.model, e.endpoint, e.line)?;
        }
        for line in &report.notes {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "{}", report.savings)?;
        writeln!(out, "{}", report.retention_line)?;
    }
    Ok(ExitStatus::Success)
}
