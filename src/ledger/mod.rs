//! The ledger: how many tokens delegation kept on the user's own servers,
//! and what they would have cost at an Anthropic model's list prices.
//!
//! Users delegate to save Anthropic tokens, and ask for that number. The
//! shim already logs exact usage per request; a job's record keeps the sum
//! (`usage`), a one-shot completion its line in `complete/completions.jsonl`.
//! This module adds them up per model and endpoint over a period. The
//! dollar figure is honest about what it is: the list-price equivalent of
//! the tokens processed locally (fresh input at the input price, tokens the
//! local server had cached at the cache-read price, output at the output
//! price), not a bill; Claude's own tokens for briefs and reviews are not
//! subtracted.

pub mod transcript;

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::jobs::{Store, valid_id};
use crate::shim::sse::Usage;

/// What every figure means, in one sentence (shown with the totals).
pub const MEANING: &str = "list-price equivalent of the tokens processed locally, not a bill; Claude's own tokens for briefs and reviews are not subtracted";

/// A period: the last N days, or everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    Days(u32),
    All,
}

impl std::str::FromStr for Since {
    type Err = String;
    fn from_str(s: &str) -> Result<Since, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(Since::All);
        }
        s.strip_suffix('d')
            .and_then(|n| n.parse::<u32>().ok())
            .filter(|n| (1..=36_500).contains(n))
            .map(Since::Days)
            .ok_or_else(|| {
                format!("since must be Nd (1d to 36500d, e.g. 7d or 30d) or all, not {s:?}")
            })
    }
}

impl std::fmt::Display for Since {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Since::Days(n) => write!(f, "{n}d"),
            Since::All => f.write_str("all"),
        }
    }
}

impl Since {
    fn cutoff(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        match self {
            Since::Days(n) => Some(chrono::Utc::now() - chrono::Duration::days(i64::from(*n))),
            Since::All => None,
        }
    }

    /// "last 7 days", "all time".
    pub fn words(&self) -> String {
        match self {
            Since::Days(1) => "last day".into(),
            Since::Days(n) => format!("last {n} days"),
            Since::All => "all time".into(),
        }
    }
}

/// Token counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Tokens {
    pub input: u64,
    pub cache_read: u64,
    pub output: u64,
}

impl Tokens {
    fn add(&mut self, u: &Usage) {
        self.input += u.input;
        self.cache_read += u.cache_read;
        self.output += u.output;
    }

    pub fn total(&self) -> u64 {
        self.input + self.cache_read + self.output
    }

    fn usd(&self, config: &Config) -> Option<f64> {
        config.equivalent_usd(self.input, self.cache_read, self.output)
    }
}

/// One model on one endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Row {
    pub model: String,
    pub endpoint: String,
    pub jobs: u64,
    pub completions: u64,
    pub tokens: Tokens,
    pub equivalent_usd: Option<f64>,
}

/// `localagents savings --json`.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Savings {
    /// `7d`, `30d` or `all`.
    pub since: String,
    pub reference_model: String,
    /// Jobs counted (agent sessions and batches).
    pub jobs: u64,
    /// One-shot completions counted.
    pub completions: u64,
    pub tokens: Tokens,
    /// Null when the reference model has no price (add `prices.<model>`).
    pub equivalent_usd: Option<f64>,
    pub by_model: Vec<Row>,
    pub meaning: &'static str,
}

/// A line of `complete/completions.jsonl`.
#[derive(Deserialize)]
struct Done {
    ts: String,
    endpoint: String,
    model: String,
    result: Option<DoneResult>,
}

#[derive(Deserialize)]
struct DoneResult {
    usage: Usage,
}

fn after(ts: &str, cutoff: Option<chrono::DateTime<chrono::Utc>>) -> bool {
    match cutoff {
        None => true,
        Some(c) => chrono::DateTime::parse_from_rfc3339(ts).is_ok_and(|t| t >= c),
    }
}

/// Add up the jobs and completions under `state_dir` since `since`.
pub fn savings(state_dir: &Path, config: &Config, since: Since) -> Savings {
    let cutoff = since.cutoff();
    let store = Store::new(state_dir);
    let mut rows: Vec<Row> = Vec::new();
    let mut row = |model: &str, endpoint: &str| -> usize {
        if let Some(i) = rows
            .iter()
            .position(|r| r.model == model && r.endpoint == endpoint)
        {
            return i;
        }
        rows.push(Row {
            model: model.to_string(),
            endpoint: endpoint.to_string(),
            jobs: 0,
            completions: 0,
            tokens: Tokens::default(),
            equivalent_usd: None,
        });
        rows.len() - 1
    };
    let mut found: Vec<(usize, Usage, bool)> = Vec::new();
    for id in store.ids_since(cutoff) {
        if !valid_id(&id) {
            continue;
        }
        let Some(b) = store.brief(&id) else {
            continue;
        };
        if b.endpoint.is_empty() || b.created.is_empty() {
            continue;
        }
        let dir = store.root.join(&id);
        if !after(&b.created, cutoff) {
            continue;
        }
        // A record without usage (a job lost before it wrote it): its
        // request log has the figures.
        let usage = if b.usage == Usage::default() {
            crate::jobs::metrics::from_log(&dir).usage
        } else {
            b.usage
        };
        found.push((row(&b.served_id, &b.endpoint), usage, true));
    }
    if let Ok(text) = std::fs::read_to_string(state_dir.join("complete/completions.jsonl")) {
        for line in text.lines() {
            let Ok(d) = serde_json::from_str::<Done>(line) else {
                continue;
            };
            if let (true, Some(r)) = (after(&d.ts, cutoff), d.result) {
                found.push((row(&d.model, &d.endpoint), r.usage, false));
            }
        }
    }
    let (mut tokens, mut jobs, mut completions) = (Tokens::default(), 0, 0);
    for (i, u, is_job) in found {
        let r = &mut rows[i];
        r.tokens.add(&u);
        tokens.add(&u);
        if is_job {
            r.jobs += 1;
            jobs += 1;
        } else {
            r.completions += 1;
            completions += 1;
        }
    }
    for r in &mut rows {
        r.equivalent_usd = r.tokens.usd(config);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.tokens.total()));
    Savings {
        since: since.to_string(),
        reference_model: config.defaults.reference_model.clone(),
        jobs,
        completions,
        tokens,
        equivalent_usd: tokens.usd(config),
        by_model: rows,
        meaning: MEANING,
    }
}

/// "2.3 M", "45.6 k", "312".
pub fn short(n: u64) -> String {
    if n >= 1_000_000 {
        format!("{:.1} M", n as f64 / 1e6)
    } else if n >= 10_000 {
        format!("{:.1} k", n as f64 / 1e3)
    } else {
        crate::fmt::thousands(n)
    }
}

/// "$4.20" (cents), "$0.0042" under a cent.
pub fn dollars(x: f64) -> String {
    if x >= 0.01 || x == 0.0 {
        format!("${x:.2}")
    } else {
        format!("${x:.4}")
    }
}

/// "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at claude-sonnet-4.5
/// list prices".
pub fn line(s: &Savings, since: Since) -> String {
    let count = match (s.jobs, s.completions) {
        (j, 0) => format!("{j} jobs"),
        (j, c) => format!("{j} jobs + {c} completions"),
    };
    let money = match s.equivalent_usd {
        Some(x) => format!(" ≈ {} at {} list prices", dollars(x), s.reference_model),
        None => format!(
            " (no price for {}: add prices.{} to models.yaml)",
            s.reference_model, s.reference_model
        ),
    };
    format!(
        "{}: {count}, {} tokens local{money}",
        since.words(),
        short(s.tokens.total())
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_parses_and_refuses_nonsense() {
        assert_eq!("7d".parse::<Since>(), Ok(Since::Days(7)));
        assert_eq!("all".parse::<Since>(), Ok(Since::All));
        for bad in ["7", "0d", "-1d", "99999999999d", "week"] {
            assert!(bad.parse::<Since>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_line_reads_like_a_sentence() {
        let s = Savings {
            since: "7d".into(),
            reference_model: "claude-sonnet-4.5".into(),
            jobs: 14,
            completions: 0,
            tokens: Tokens {
                input: 100_000,
                cache_read: 3_000_000,
                output: 10_000,
            },
            equivalent_usd: Some(4.2),
            by_model: Vec::new(),
            meaning: MEANING,
        };
        assert_eq!(
            line(&s, Since::Days(7)),
            "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at claude-sonnet-4.5 list prices"
        );
    }
}
