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
//! price), not a bill. Claude's own tokens for delegating come off in the
//! net figure, read from the delegating sessions' transcripts
//! ([`transcript`]).

pub mod transcript;

use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::jobs::Store;
use crate::wire::Usage;

/// What every figure means, in one sentence (shown with the totals).
pub const MEANING: &str = "list-price equivalent of the tokens processed locally, not a bill";

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
    /// Claude's own side of these jobs (see [`Orchestrated`]).
    pub orchestration: Orchestrated,
    /// `equivalent_usd` less the orchestration's cost, over the jobs whose
    /// session was found (and every completion); null without a price.
    pub net_usd: Option<f64>,
}

/// Claude's own tokens for delegating: the brief, the polls and the
/// results it read, from the delegating sessions' transcripts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
pub struct Orchestrated {
    /// Jobs whose session transcript was found.
    pub jobs: u64,
    /// Jobs counted gross only: started outside a Claude Code session
    /// (`localagents run`), or its transcript is gone.
    pub jobs_without_transcript: u64,
    pub output_tokens: u64,
    /// Our tool results, estimated at 3 bytes a token.
    pub result_tokens: u64,
    /// Result tokens times the later messages that carried them.
    pub result_reads: u64,
    /// At the session's own model's list price (the reference model's when
    /// the price table has no entry for it).
    pub usd: Option<f64>,
}

impl Orchestrated {
    fn add(&mut self, o: &transcript::Orchestration, usd: Option<f64>) {
        self.jobs += 1;
        self.output_tokens += o.output_tokens;
        self.result_tokens += o.result_tokens;
        self.result_reads += o.result_reads;
        self.usd = match (self.usd, usd) {
            (Some(a), Some(b)) => Some(a + b),
            (None, b) if self.jobs == 1 => b,
            _ => None,
        };
    }
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
    pub orchestration: Orchestrated,
    /// `equivalent_usd` less the orchestration, over the jobs whose
    /// session was found and every completion (what delegating saved).
    pub net_usd: Option<f64>,
    pub by_model: Vec<Row>,
    /// Per calendar week (Monday to Sunday, UTC), oldest first; only weeks
    /// with work.
    pub by_week: Vec<Period>,
    /// Per day (UTC), oldest first; only days with work.
    pub by_day: Vec<Period>,
    pub meaning: &'static str,
    /// How the net figure is computed.
    pub net_meaning: &'static str,
}

/// One day or week of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct Period {
    /// Its first day, `YYYY-MM-DD` (UTC; a week starts on Monday).
    pub start: String,
    pub jobs: u64,
    pub completions: u64,
    pub tokens: Tokens,
    /// Gross: the list-price equivalent of its local tokens.
    pub equivalent_usd: Option<f64>,
    /// Claude's own cost for delegating its jobs (found transcripts only).
    pub orchestration_usd: Option<f64>,
    /// As [`Savings::net_usd`], over this period.
    pub net_usd: Option<f64>,
    /// Its jobs counted gross only (no session transcript found).
    pub jobs_without_transcript: u64,
}

/// What a period adds up while the ledger is read.
#[derive(Default)]
struct PeriodSum {
    jobs: u64,
    completions: u64,
    tokens: Tokens,
    covered: Tokens,
    orchestration: Orchestrated,
}

/// The day an RFC 3339 time falls on, in UTC.
fn day_of(ts: &str) -> Option<chrono::NaiveDate> {
    chrono::DateTime::parse_from_rfc3339(ts)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc).date_naive())
}

/// The Monday of a day's week.
fn week_of(d: chrono::NaiveDate) -> chrono::NaiveDate {
    use chrono::Datelike;
    d - chrono::Duration::days(i64::from(d.weekday().num_days_from_monday()))
}

/// How the net figure is computed, in one sentence.
pub const NET_MEANING: &str = "net = the list-price equivalent of the local tokens (what Claude would have spent at those same token counts, an estimate) less Claude's own tokens for delegating: the output of its turns that called localagents tools, and our tool results it carried as input (written to the prompt cache once, read from it after), at its model's list price; jobs whose session transcript was not found count gross only";

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

/// A row, its usage, for a job its id and the tool call that started it
/// (`None`: a completion), and its day.
type Found = (
    usize,
    Usage,
    Option<(String, Option<String>)>,
    Option<chrono::NaiveDate>,
);

/// The index of the row of `model` on `endpoint`, a new one if none.
fn row_of(rows: &mut Vec<Row>, model: &str, endpoint: &str) -> usize {
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
        orchestration: Orchestrated::default(),
        net_usd: None,
    });
    rows.len() - 1
}

/// The jobs and completions under `state_dir` since `cutoff`, each found
/// under its row (a row per model and endpoint).
fn found_since(
    state_dir: &Path,
    cutoff: Option<chrono::DateTime<chrono::Utc>>,
) -> (Vec<Row>, Vec<Found>) {
    let store = Store::new(state_dir);
    let mut rows: Vec<Row> = Vec::new();
    let mut found: Vec<Found> = Vec::new();
    // The savings book: a line per ended job, kept after its record goes
    // (and the live jobs' figures as they stand).
    for b in store.kept(cutoff) {
        if b.endpoint.is_empty() || b.created.is_empty() || !after(&b.created, cutoff) {
            continue;
        }
        found.push((
            row_of(&mut rows, &b.served_id, &b.endpoint),
            b.usage,
            Some((b.id.clone(), b.tool_use_id.clone())),
            day_of(&b.created),
        ));
    }
    if let Ok(text) = std::fs::read_to_string(state_dir.join("complete/completions.jsonl")) {
        for line in text.lines() {
            let Ok(d) = serde_json::from_str::<Done>(line) else {
                continue;
            };
            if let (true, Some(r)) = (after(&d.ts, cutoff), d.result) {
                let i = row_of(&mut rows, &d.model, &d.endpoint);
                found.push((i, r.usage, None, day_of(&d.ts)));
            }
        }
    }
    (rows, found)
}

/// The sums over everything found: the totals, and per row, day and week
/// what the net covers (the gross of jobs with a transcript, and
/// completions).
#[derive(Default)]
struct Tally {
    tokens: Tokens,
    jobs: u64,
    completions: u64,
    all: Orchestrated,
    /// Per row: the gross of what the net covers.
    covered: Vec<Tokens>,
    covered_all: Tokens,
    days: std::collections::BTreeMap<chrono::NaiveDate, PeriodSum>,
    weeks: std::collections::BTreeMap<chrono::NaiveDate, PeriodSum>,
}

/// Add each found job and completion to its row, the totals, its day and
/// its week, with its delegating session's cost when its transcript was
/// found in `orchestrations`.
fn tally(
    config: &Config,
    rows: &mut [Row],
    found: Vec<Found>,
    orchestrations: &std::collections::HashMap<String, transcript::Orchestration>,
) -> Tally {
    let mut t = Tally {
        covered: vec![Tokens::default(); rows.len()],
        ..Tally::default()
    };
    for (i, u, job, day) in found {
        let r = &mut rows[i];
        r.tokens.add(&u);
        t.tokens.add(&u);
        let mut periods: Vec<&mut PeriodSum> = match day {
            Some(d) => vec![
                t.days.entry(d).or_default(),
                t.weeks.entry(week_of(d)).or_default(),
            ],
            None => Vec::new(),
        };
        for p in periods.iter_mut() {
            p.tokens.add(&u);
        }
        match job {
            Some((id, _)) => {
                r.jobs += 1;
                t.jobs += 1;
                for p in periods.iter_mut() {
                    p.jobs += 1;
                }
                match orchestrations.get(&id) {
                    Some(o) => {
                        let usd = orchestration_usd(config, o);
                        r.orchestration.add(o, usd);
                        t.all.add(o, usd);
                        t.covered[i].add(&u);
                        t.covered_all.add(&u);
                        for p in periods.iter_mut() {
                            p.orchestration.add(o, usd);
                            p.covered.add(&u);
                        }
                    }
                    None => {
                        r.orchestration.jobs_without_transcript += 1;
                        t.all.jobs_without_transcript += 1;
                        for p in periods.iter_mut() {
                            p.orchestration.jobs_without_transcript += 1;
                        }
                    }
                }
            }
            None => {
                r.completions += 1;
                t.completions += 1;
                t.covered[i].add(&u);
                t.covered_all.add(&u);
                for p in periods.iter_mut() {
                    p.completions += 1;
                    p.covered.add(&u);
                }
            }
        }
    }
    t
}

/// What delegating saved net: the gross of what is covered at list price
/// less what orchestrating it cost, to a hundredth of a cent.
fn net_usd(config: &Config, gross: &Tokens, o: &Orchestrated) -> Option<f64> {
    let g = gross.usd(config)?;
    let cost = if o.jobs == 0 { 0.0 } else { o.usd? };
    Some(((g - cost) * 10_000.0).round() / 10_000.0)
}

/// Each day's or week's sums as a [`Period`], in date order.
fn periods(
    config: &Config,
    m: std::collections::BTreeMap<chrono::NaiveDate, PeriodSum>,
) -> Vec<Period> {
    m.into_iter()
        .map(|(d, p)| Period {
            start: d.format("%Y-%m-%d").to_string(),
            jobs: p.jobs,
            completions: p.completions,
            tokens: p.tokens,
            equivalent_usd: p.tokens.usd(config),
            orchestration_usd: if p.orchestration.jobs == 0 {
                Some(0.0)
            } else {
                p.orchestration.usd
            },
            net_usd: net_usd(config, &p.covered, &p.orchestration),
            jobs_without_transcript: p.orchestration.jobs_without_transcript,
        })
        .collect()
}

/// Add up the jobs and completions under `state_dir` since `since`, and
/// what their delegating sessions spent, from the transcripts under
/// `projects` (Claude Code's `projects` dir).
pub fn savings(state_dir: &Path, config: &Config, since: Since, projects: &Path) -> Savings {
    let cutoff = since.cutoff();
    let (mut rows, found) = found_since(state_dir, cutoff);
    let calls: Vec<(String, String)> = found
        .iter()
        .filter_map(|(_, _, j, _)| match j {
            Some((id, Some(call))) => Some((id.clone(), call.clone())),
            _ => None,
        })
        .collect();
    // A session's transcript is written while it runs, so one older than
    // the period holds none of its jobs.
    let modified_since = cutoff.map(std::time::SystemTime::from);
    let orchestrations = transcript::scan(projects, &calls, modified_since);
    let t = tally(config, &mut rows, found, &orchestrations);
    for (r, c) in rows.iter_mut().zip(&t.covered) {
        r.equivalent_usd = r.tokens.usd(config);
        r.net_usd = net_usd(config, c, &r.orchestration);
    }
    rows.sort_by_key(|r| std::cmp::Reverse(r.tokens.total()));
    Savings {
        since: since.to_string(),
        reference_model: config.defaults.reference_model.clone(),
        jobs: t.jobs,
        completions: t.completions,
        tokens: t.tokens,
        equivalent_usd: t.tokens.usd(config),
        net_usd: net_usd(config, &t.covered_all, &t.all),
        orchestration: t.all,
        by_model: rows,
        by_week: periods(config, t.weeks),
        by_day: periods(config, t.days),
        meaning: MEANING,
        net_meaning: NET_MEANING,
    }
}

/// The orchestration's cost at its session model's list price, else the
/// reference model's.
pub fn orchestration_usd(config: &Config, o: &transcript::Orchestration) -> Option<f64> {
    let price = o
        .model
        .as_deref()
        .and_then(|m| config.price_of(m))
        .or_else(|| config.reference_price())?;
    Some((o.usd(&price) * 10_000.0).round() / 10_000.0)
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

/// "$4.20" (cents), "$0.0042" under a cent, "-$0.50" below zero.
pub fn dollars(x: f64) -> String {
    let sign = if x < 0.0 { "-" } else { "" };
    let a = x.abs();
    if a >= 0.01 || a == 0.0 {
        format!("{sign}${a:.2}")
    } else {
        format!("{sign}${a:.4}")
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
    let o = &s.orchestration;
    let gross_only = match o.jobs_without_transcript {
        0 => String::new(),
        1 => " (1 job without a session transcript counted gross)".into(),
        n => format!(" ({n} jobs without a session transcript counted gross)"),
    };
    let net = match (o.jobs, s.net_usd, o.usd) {
        (0, _, _) if s.jobs > 0 => {
            "; no session transcript found, so nothing of Claude's own is subtracted".to_string()
        }
        (0, _, _) => String::new(),
        (_, Some(n), Some(c)) => format!(
            "; net {} after Claude's own {} for delegating{gross_only}",
            dollars(n),
            dollars(c)
        ),
        _ => format!(
            "; Claude's own tokens for delegating: {} out, {} of results read{gross_only}",
            short(o.output_tokens),
            short(o.result_reads)
        ),
    };
    format!(
        "{}: {count}, {} tokens local{money}{net}",
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
    fn a_week_starts_on_monday() {
        let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        // 2026-12-03 is a Thursday.
        assert_eq!(week_of(d("2026-12-03")), d("2026-11-30"));
        assert_eq!(week_of(d("2026-11-30")), d("2026-11-30"));
        assert_eq!(week_of(d("2026-12-06")), d("2026-11-30"));
        assert_eq!(day_of("2026-12-03T23:30:00-02:00"), Some(d("2026-12-04")));
        assert_eq!(day_of("garbage"), None);
    }

    #[test]
    fn a_loss_reads_as_one() {
        assert_eq!(dollars(-0.5), "-$0.50");
        assert_eq!(dollars(-0.0042), "-$0.0042");
        assert_eq!(dollars(4.2), "$4.20");
        assert_eq!(dollars(0.0), "$0.00");
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
            orchestration: Orchestrated::default(),
            net_usd: Some(4.2),
            by_model: Vec::new(),
            by_week: Vec::new(),
            by_day: Vec::new(),
            meaning: MEANING,
            net_meaning: NET_MEANING,
        };
        assert_eq!(
            line(&s, Since::Days(7)),
            "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at claude-sonnet-4.5 list prices; no session transcript found, so nothing of Claude's own is subtracted"
        );
        let s = Savings {
            orchestration: Orchestrated {
                jobs: 12,
                jobs_without_transcript: 2,
                usd: Some(0.3),
                ..Orchestrated::default()
            },
            net_usd: Some(3.6),
            ..s
        };
        assert_eq!(
            line(&s, Since::Days(7)),
            "last 7 days: 14 jobs, 3.1 M tokens local ≈ $4.20 at claude-sonnet-4.5 list prices; net $3.60 after Claude's own $0.30 for delegating (2 jobs without a session transcript counted gross)"
        );
    }
}
