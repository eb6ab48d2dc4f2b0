//! `localagents savings`: the ledger, per model and endpoint, and per week.

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
    let count = |jobs: u64, completions: u64| match (jobs, completions) {
        (j, 0) => format!("{j} jobs"),
        (j, c) => format!("{j} jobs + {c} completions"),
    };
    for r in &s.by_model {
        writeln!(
            out,
            "{}  {}  {}  {} in + {} cached + {} out{}{}",
            r.endpoint,
            r.model,
            count(r.jobs, r.completions),
            ledger::short(r.tokens.input),
            ledger::short(r.tokens.cache_read),
            ledger::short(r.tokens.output),
            r.equivalent_usd
                .map(|x| format!("  ≈ {}", ledger::dollars(x)))
                .unwrap_or_default(),
            net_words(r.net_usd, r.orchestration.jobs),
        )?;
    }
    for w in &s.by_week {
        writeln!(
            out,
            "week of {}  {}  {} tokens{}{}",
            w.start,
            count(w.jobs, w.completions),
            ledger::short(w.tokens.total()),
            w.equivalent_usd
                .map(|x| format!("  ≈ {}", ledger::dollars(x)))
                .unwrap_or_default(),
            match (w.orchestration_usd, w.net_usd) {
                (Some(c), Some(n)) if c > 0.0 => format!(
                    "  less Claude's {} = net {}",
                    ledger::dollars(c),
                    ledger::dollars(n)
                ),
                _ => String::new(),
            },
        )?;
    }
    writeln!(out, "{}", ledger::line(&s, since))?;
    writeln!(out, "({})", ledger::MEANING)?;
    if s.orchestration.jobs > 0 {
        writeln!(out, "({})", ledger::NET_MEANING)?;
    }
    Ok(ExitStatus::Success)
}

/// "  net $3.10" when some of the row's jobs had a session transcript.
fn net_words(net: Option<f64>, found: u64) -> String {
    match net {
        Some(n) if found > 0 => format!("  net {}", ledger::dollars(n)),
        _ => String::new(),
    }
}
