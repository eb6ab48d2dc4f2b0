//! `localagents savings`: the ledger, per model and endpoint.

use std::io::Write;

use crate::api::{self, Context};
use crate::cli::{ExitStatus, fail};
use crate::ledger::{self, Since};

pub fn run(ctx: &Context, since: Since, json: bool) -> anyhow::Result<ExitStatus> {
    let s = match api::savings(ctx, since) {
        Ok(s) => s,
        Err(e) => return Ok(fail(&e)),
    };
    let mut out = anstream::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &s)?;
        writeln!(out)?;
        return Ok(ExitStatus::Success);
    }
    for r in &s.by_model {
        let count = match (r.jobs, r.completions) {
            (j, 0) => format!("{j} jobs"),
            (j, c) => format!("{j} jobs + {c} completions"),
        };
        writeln!(
            out,
            "{}  {}  {count}  {} in + {} cached + {} out{}",
            r.endpoint,
            r.model,
            ledger::short(r.tokens.input),
            ledger::short(r.tokens.cache_read),
            ledger::short(r.tokens.output),
            r.equivalent_usd
                .map(|x| format!("  ≈ {}", ledger::dollars(x)))
                .unwrap_or_default()
        )?;
    }
    writeln!(out, "{}", ledger::line(&s, since))?;
    writeln!(out, "({})", ledger::MEANING)?;
    if s.orchestration.jobs > 0 {
        writeln!(out, "({})", ledger::NET_MEANING)?;
    }
    Ok(ExitStatus::Success)
}
