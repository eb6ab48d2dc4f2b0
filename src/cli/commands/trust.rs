//! `localagents trust [DIR] [--remove]`.

use std::io::Write;
use std::path::Path;

use crate::api::{self, Context};
use crate::cli::{ExitStatus, fail};

pub fn run(ctx: &Context, dir: Option<&Path>, remove: bool) -> anyhow::Result<ExitStatus> {
    let here = std::env::current_dir()?;
    let dir = dir.unwrap_or(&here);
    let r = match api::trust_project(ctx, dir, !remove) {
        Ok(r) => r,
        Err(e) => return Ok(fail(&e)),
    };
    let mut out = anstream::stdout().lock();
    let what = match (r.trusted, r.changed) {
        (true, true) => "now trusted: its models.yaml is read in full",
        (true, false) => "already trusted",
        (false, true) => "no longer trusted: only its menu entries are read",
        (false, false) => "was not trusted",
    };
    writeln!(out, "{}: {what} (recorded in {})", r.dir, r.recorded_in)?;
    Ok(ExitStatus::Success)
}
