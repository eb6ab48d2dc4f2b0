//! `localagents config check|path`.

use std::io::Write;

use crate::api::Context;
use crate::cli::render::{DIM, YELLOW};
use crate::cli::{ExitStatus, fail};
use crate::config::trust::Scope;
use crate::config::{self, Discovery};

pub fn check(ctx: &Context) -> anyhow::Result<ExitStatus> {
    let discovery = ctx.discovery();
    let loaded = match config::load(&discovery) {
        Ok(l) => l,
        Err(e) => return Ok(fail(&e.into())),
    };
    let mut err = anstream::stderr().lock();
    if loaded.files.is_empty() {
        writeln!(err, "no models.yaml found: the built-in default is in use")?;
    } else {
        for f in &loaded.files {
            writeln!(err, "read {}", f.display())?;
        }
    }
    for w in &loaded.warnings {
        writeln!(err, "{YELLOW}warning:{YELLOW:#} {w}")?;
    }
    writeln!(
        err,
        "ok: {} endpoint(s), {} model name(s)",
        loaded.config.endpoints.len(),
        loaded.config.models.len()
    )?;
    let mut out = anstream::stdout().lock();
    write!(out, "{}", config::render(&loaded.config))?;
    Ok(ExitStatus::Success)
}

pub fn path(ctx: &Context) -> anyhow::Result<ExitStatus> {
    let discovery: Discovery = ctx.discovery();
    let mut out = anstream::stdout().lock();
    let trusted = config::load(&discovery)
        .map(|l| l.config.trusted_projects.clone())
        .unwrap_or_default();
    for (path, scope) in discovery.scoped_candidates() {
        let state = if path.is_file() { "read" } else { "absent" };
        let label = match scope {
            Scope::User => "",
            Scope::Project
                if discovery
                    .project_dir
                    .as_deref()
                    .is_some_and(|d| config::trust::is_trusted(d, &trusted)) =>
            {
                "  (project: trusted, read in full)"
            }
            Scope::Project => "  (project: menu entries only until `localagents trust`)",
        };
        writeln!(out, "{state:<6}  {}{label}", path.display())?;
    }
    if let Some(side) = discovery.active_sidecar() {
        writeln!(
            out,
            "{DIM}register_endpoint and trust write {}{DIM:#}",
            side.display()
        )?;
    }
    Ok(ExitStatus::Success)
}
