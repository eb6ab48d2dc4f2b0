//! Per-job figures.
//!
//! Exact ones come from the job's own `requests.jsonl` (the shim saw every
//! request of this job and nothing else). Server-wide ones are the delta of
//! the backend's `/metrics` counters before and after the job; other jobs
//! on the same server add to those counters, so the delta is flagged
//! `shared` when jobs overlapped.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::probe::Slots;
use crate::probe::metrics::{Counters, delta};
use crate::wire::Usage;

/// The `/metrics` delta over a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerDelta {
    /// Prompt tokens the server processed (not cached).
    pub prompt_processed: Option<f64>,
    /// Prompt tokens served from the cache.
    pub prompt_cached: Option<f64>,
    pub hit_ratio: Option<f64>,
    pub prompt_tok_s: Option<f64>,
    pub gen_tok_s: Option<f64>,
    /// Speculative decoding: accepted / drafted.
    pub spec_acceptance: Option<f64>,
    /// Other jobs ran on the same server meanwhile.
    pub shared: bool,
    /// Behind a vLLM router: the replica these figures are from, the one
    /// that served the job ([`router_delta`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
}

/// What a job behind a vLLM router saw of its replicas.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouterView {
    /// Replicas the router listed at the job's start.
    pub replicas: u64,
    /// The header the job's requests carried its id in; none: the
    /// endpoint sends none (`session_header: ""`).
    pub session_header: Option<String>,
    /// Replicas that were up at the job's start and down at its end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost: Vec<String>,
}

/// The job's first `/v1/messages` request: what its fixed prompt cost.
///
/// `prompt_tokens` is the whole prompt (new + cached); `ms` is the time to
/// the first streamed byte (prompt processing), or the whole request when
/// it was not streamed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct FirstTurn {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    pub ms: u64,
}

pub use crate::fmt::thousands;

impl FirstTurn {
    /// "first turn: 226 new tokens, 4,259 from cache, 0.8 s"
    pub fn line(&self) -> String {
        format!(
            "first turn: {} new tokens, {} from cache, {:.1} s",
            thousands(self.prompt_tokens.saturating_sub(self.cached_tokens)),
            thousands(self.cached_tokens),
            self.ms as f64 / 1000.0
        )
    }
}

/// Figures of one job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobMetrics {
    /// The first request (also on the record, as `first_turn`).
    #[serde(default)]
    pub first_turn: Option<FirstTurn>,
    pub requests: u64,
    pub usage: Usage,
    /// cache_read / (input + cache_read), per `/v1/messages` request.
    pub cache_ratio_per_turn: Vec<f64>,
    pub mean_ttft_ms: Option<f64>,
    pub server: Option<ServerDelta>,
    pub slots_at_start: Option<Slots>,
    /// Turns on which the server had lost this job's conversation from
    /// its cache ([`context_lost`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub slot_losses: u64,
    /// Prompt tokens of this job's own earlier turns that the server
    /// processed again on those turns.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reprocessed_tokens: u64,
    /// The slot its requests were pinned to (the chat wire, `id_slot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<u64>,
    /// Later turns that found the job's conversation so far in the cache:
    /// all of the previous turn's prompt but fewer than
    /// [`MIN_LOST_TOKENS`] came from it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub prefix_hits: u64,
    /// Behind a vLLM router: its replicas over the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<RouterView>,
    /// The model's faults (kept on the record as `model_faults`).
    #[serde(skip)]
    pub faults: super::faults::ModelFaults,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Fewest re-processed tokens that count as a lost cache (a turn's own
/// few new tokens never do).
pub const MIN_LOST_TOKENS: u64 = 256;

/// Did the server lose the job's conversation from its cache before this
/// turn? `prev` is the previous turn's whole prompt, `prompt` and `cached`
/// this turn's. The conversation grew (append-only: `prompt >= prev`), so
/// all of the previous prompt could have come from the cache; at least
/// [`MIN_LOST_TOKENS`] of it did not and was processed again. That is what
/// llama-server does when another job's request took the slot: its prompt
/// matched the shared system and tools prefix, so this turn's cache falls
/// back to about that prefix. `Some(re-processed tokens)`.
pub fn context_lost(prev: u64, prompt: u64, cached: u64) -> Option<u64> {
    let again = prev.saturating_sub(cached);
    (prompt >= prev && again >= MIN_LOST_TOKENS).then_some(again)
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The compact form of [`JobMetrics`] for summaries.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct MetricsShort {
    pub requests: u64,
    /// Turns on which the server had lost the job's conversation from its
    /// cache (another request took its slot).
    #[serde(skip_serializing_if = "is_zero")]
    pub slot_losses: u64,
    /// Prompt tokens of the job's own earlier turns processed again then.
    #[serde(skip_serializing_if = "is_zero")]
    pub reprocessed_tokens: u64,
    /// Mean cache ratio of turns 2 on.
    pub cache_ratio_turn2_on: Option<f64>,
    pub mean_ttft_ms: Option<f64>,
    pub server: Option<ServerShort>,
}

/// The server-wide delta, compact.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ServerShort {
    pub hit_ratio: Option<f64>,
    pub prompt_tok_s: Option<f64>,
    pub gen_tok_s: Option<f64>,
    pub shared: bool,
}

impl JobMetrics {
    /// "lost its cache on 6 of 7 turns: 15,900 tokens re-processed; another
    /// job shared the slot …", when the server lost it at all. `llama_cpp`:
    /// name llama-server's flags as the fix.
    pub fn cache_note(&self, llama_cpp: bool) -> Option<String> {
        if self.slot_losses == 0 {
            return self.slot.map(|s| self.pinned_note(s));
        }
        let shared = self.server.as_ref().is_some_and(|s| s.shared);
        let router = self.router.as_ref();
        let cause = if let Some(lost) = router.and_then(|r| r.lost.first()) {
            format!(
                "replica {lost} went down during the job, and the router sent its later turns to another replica, which processed the conversation again"
            )
        } else if router.is_some_and(|r| r.session_header.is_none()) {
            return Some(format!(
                "lost its cache on {} of {} turns: {} tokens re-processed; the endpoint sends no session header (`session_header: \"\"`), so the router placed the job's turns by their body, not by the job (vllm-router puts every Claude Code session on one replica then): remove `session_header: \"\"` (the default sends X-Session-ID: <job id>)",
                self.slot_losses,
                self.cache_ratio_per_turn.len(),
                thousands(self.reprocessed_tokens)
            ));
        } else if let Some(s) = self.slot {
            format!(
                "requests the job did not send took its slot {s} (another client of the server, or a restart)"
            )
        } else if shared {
            "another job shared the slot".to_string()
        } else {
            "another client's requests took the slot".to_string()
        };
        let fix = if router.is_some_and(|r| !r.lost.is_empty()) {
            ": start that replica again (new jobs come back to it once the router's health check passes)"
        } else if self.slot.is_some() {
            ": give the job's server to localagents alone, or start it with more --parallel slots than all its clients use"
        } else if llama_cpp {
            ": start llama-server with --slot-prompt-similarity 0.9 and --parallel at least the number of jobs you run at once"
        } else {
            ""
        };
        Some(format!(
            "lost its cache on {} of {} turns: {} tokens re-processed; {cause}{fix}",
            self.slot_losses,
            self.cache_ratio_per_turn.len(),
            thousands(self.reprocessed_tokens)
        ))
    }

    /// "held slot 1: 5 of 5 later turns found their prefix in its cache".
    fn pinned_note(&self, slot: u64) -> String {
        match self.cache_ratio_per_turn.len().saturating_sub(1) {
            0 => format!("held slot {slot}"),
            later => format!(
                "held slot {slot}: {} of {later} later turns found their prefix in its cache",
                self.prefix_hits
            ),
        }
    }

    /// The compact form for summaries.
    pub fn short(&self) -> MetricsShort {
        let mean_ratio = if self.cache_ratio_per_turn.len() > 1 {
            let tail = &self.cache_ratio_per_turn[1..];
            Some(round3(tail.iter().sum::<f64>() / tail.len() as f64))
        } else {
            None
        };
        MetricsShort {
            requests: self.requests,
            slot_losses: self.slot_losses,
            reprocessed_tokens: self.reprocessed_tokens,
            cache_ratio_turn2_on: mean_ratio,
            mean_ttft_ms: self.mean_ttft_ms.map(f64::round),
            server: self.server.as_ref().map(|s| ServerShort {
                hit_ratio: s.hit_ratio,
                prompt_tok_s: s.prompt_tok_s.map(f64::round),
                gen_tok_s: s.gen_tok_s.map(f64::round),
                shared: s.shared,
            }),
        }
    }
}

/// Sum up a job's `requests.jsonl`.
pub fn from_log(dir: &Path) -> JobMetrics {
    let mut m = JobMetrics::default();
    let records = crate::wire::read_requests(
        &super::dir::JobDir::at(dir).requests(),
        crate::wire::READ_CAP,
    )
    .unwrap_or_default();
    let mut ttfts = Vec::new();
    // The previous turn's prompt, and whether the backend reports cached
    // tokens at all (a server that never does loses nothing we can see).
    let mut prev: Option<u64> = None;
    let mut reports_cache = false;
    for r in &records {
        if !r.is_messages() {
            continue;
        }
        m.requests += 1;
        m.faults.add(r);
        m.slot = m.slot.or(r.slot);
        let (i, c, o) = (r.usage.input, r.usage.cache_read, r.usage.output);
        m.usage.input += i;
        m.usage.cache_read += c;
        m.usage.output += o;
        if m.first_turn.is_none() {
            m.first_turn = Some(FirstTurn {
                prompt_tokens: i + c,
                cached_tokens: c,
                ms: r.ttft_ms.unwrap_or(r.ms),
            });
        }
        if i + c > 0 {
            m.cache_ratio_per_turn
                .push(round3(c as f64 / (i + c) as f64));
            if let Some(p) = prev
                && reports_cache
                && let Some(again) = context_lost(p, i + c, c)
            {
                m.slot_losses += 1;
                m.reprocessed_tokens += again;
            } else if let Some(p) = prev
                && i + c >= p
                && p.saturating_sub(c) < MIN_LOST_TOKENS
            {
                m.prefix_hits += 1;
            }
            reports_cache |= c > 0;
            prev = Some(i + c);
        }
        if let Some(t) = r.ttft_ms {
            ttfts.push(t as f64);
        }
    }
    if !ttfts.is_empty() {
        m.mean_ttft_ms = Some(ttfts.iter().sum::<f64>() / ttfts.len() as f64);
    }
    m
}

/// Lost slots on one endpoint over recent jobs: what `status`, `doctor`
/// and `list_models` say, since llama-server does not report its
/// similarity threshold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SlotLosses {
    pub endpoint: String,
    /// Jobs that lost their cache at least once.
    pub jobs: u64,
    pub turns: u64,
    pub reprocessed_tokens: u64,
}

impl SlotLosses {
    /// "jobs on `gpu1` lost their slot's cache on 12 turns in the last 7
    /// days (3 jobs, 15,900 tokens re-processed): …the fix".
    pub fn line(&self, days: i64) -> String {
        format!(
            "jobs on `{}` lost their slot's cache on {} {} in the last {days} days ({} {}, {} tokens re-processed): another request took their slot; for llama-server, start it with --slot-prompt-similarity 0.9 and --parallel at least the number of jobs you run at once",
            self.endpoint,
            self.turns,
            if self.turns == 1 { "turn" } else { "turns" },
            self.jobs,
            if self.jobs == 1 { "job" } else { "jobs" },
            thousands(self.reprocessed_tokens)
        )
    }
}

/// Lost slots per endpoint over the jobs of the last `days` days, the
/// endpoints with any, in the order first seen (newest job first). Jobs
/// pinned to their slot (the chat wire) are left out: `-sps` would not
/// have helped them, and each one's own note says what took its slot.
pub fn recent_slot_losses(recent: &[super::index::Entry]) -> Vec<SlotLosses> {
    let mut out: Vec<SlotLosses> = Vec::new();
    for b in recent {
        if b.slot_losses == 0 || b.slot.is_some() {
            continue;
        }
        let at = match out.iter().position(|l| l.endpoint == b.endpoint) {
            Some(i) => i,
            None => {
                out.push(SlotLosses {
                    endpoint: b.endpoint.clone(),
                    jobs: 0,
                    turns: 0,
                    reprocessed_tokens: 0,
                });
                out.len() - 1
            }
        };
        let l = &mut out[at];
        l.jobs += 1;
        l.turns += b.slot_losses;
        l.reprocessed_tokens += b.reprocessed_tokens;
    }
    out
}

/// Runaway answers per endpoint over recent jobs, with the newest one's
/// sentence (the likely cause and the fix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Runaways {
    pub endpoint: String,
    /// Jobs with at least one runaway answer.
    pub jobs: u64,
    /// Answers cut off.
    pub answers: u64,
    pub why: String,
}

impl Runaways {
    /// "jobs on `gpu1` ran away 4 times in the last 7 days (2 jobs): the
    /// model writes its end-of-turn marker … ; start llama-server with …".
    pub fn line(&self, days: i64) -> String {
        format!(
            "jobs on `{}` ran away {} {} in the last {days} days ({} {}): {}",
            self.endpoint,
            self.answers,
            if self.answers == 1 { "time" } else { "times" },
            self.jobs,
            if self.jobs == 1 { "job" } else { "jobs" },
            self.why.trim_start_matches("runaway output: ")
        )
    }
}

/// Runaways per endpoint over the jobs of the last `days` days, the
/// endpoints with any, newest job first.
pub fn recent_runaways(recent: &[super::index::Entry]) -> Vec<Runaways> {
    let mut out: Vec<Runaways> = Vec::new();
    for b in recent.iter().filter(|b| b.runaways > 0) {
        match out.iter_mut().find(|l| l.endpoint == b.endpoint) {
            Some(l) => {
                l.jobs += 1;
                l.answers += b.runaways;
            }
            None => out.push(Runaways {
                endpoint: b.endpoint.clone(),
                jobs: 1,
                answers: b.runaways,
                why: b.runaway_why.clone(),
            }),
        }
    }
    out
}

/// The days [`recent_slot_losses`] looks back in `status` and `doctor`.
pub const SLOT_LOSS_DAYS: i64 = 7;

fn ratio(num: Option<f64>, den: Option<f64>) -> Option<f64> {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => Some(round3(n / d)),
        _ => None,
    }
}

/// Behind a vLLM router: the `/metrics` delta of the replica that served
/// the job, never of another. That replica is the one whose counters
/// moved by at least the job's own prompt tokens (`prompt`, from its
/// answers' `usage`); when no replica or more than one fits (other jobs
/// ran on both), there is no server delta (the job's own figures, from
/// `usage`, stand). `shared`: other jobs of this endpoint overlapped.
pub fn router_delta(
    before: &[crate::probe::Replica],
    after: &[crate::probe::Replica],
    prompt: u64,
    shared: bool,
) -> Option<ServerDelta> {
    let fits: Vec<(String, ServerDelta)> = before
        .iter()
        .filter_map(|b| {
            let a = after.iter().find(|a| a.url == b.url)?;
            let d = server_delta(b.counters.as_ref()?, a.counters.as_ref()?, shared);
            let moved = d.prompt_processed.unwrap_or(0.0) + d.prompt_cached.unwrap_or(0.0);
            (moved > 0.0 && moved >= prompt as f64).then(|| (b.url.clone(), d))
        })
        .collect();
    match fits.as_slice() {
        [(url, d)] => Some(ServerDelta {
            replica: Some(url.clone()),
            ..d.clone()
        }),
        _ => None,
    }
}

/// What a job saw of a router's replicas: how many at its start, and
/// which went down by its end.
pub fn router_view(
    before: &[crate::probe::Replica],
    after: &[crate::probe::Replica],
    session_header: Option<&str>,
) -> Option<RouterView> {
    if before.is_empty() {
        return None;
    }
    let lost = before
        .iter()
        .filter(|b| b.up)
        .filter(|b| !after.iter().any(|a| a.url == b.url && a.up))
        .map(|b| b.url.clone())
        .collect();
    Some(RouterView {
        replicas: before.len() as u64,
        session_header: session_header.map(str::to_string),
        lost,
    })
}

/// The server-wide delta of two `/metrics` scrapes (llama.cpp or vLLM).
pub fn server_delta(before: &Counters, after: &Counters, shared: bool) -> ServerDelta {
    let processed = delta(
        before,
        after,
        &["llamacpp:prompt_tokens_total", "vllm:prompt_tokens_total"],
    );
    let cached_llama = delta(before, after, &["llamacpp:prompt_tokens_cached_total"]);
    let (cached, hit_ratio) = match cached_llama {
        Some(c) => (Some(c), ratio(Some(c), processed.map(|p| p + c))),
        None => {
            let hits = delta(before, after, &["vllm:prefix_cache_hits_total"]);
            let queries = delta(before, after, &["vllm:prefix_cache_queries_total"]);
            (hits, ratio(hits, queries))
        }
    };
    let prompt_s = delta(before, after, &["llamacpp:prompt_seconds_total"]);
    let generated = delta(
        before,
        after,
        &[
            "llamacpp:tokens_predicted_total",
            "vllm:generation_tokens_total",
        ],
    );
    let gen_s = delta(before, after, &["llamacpp:tokens_predicted_seconds_total"]);
    let drafted = delta(
        before,
        after,
        &[
            "llamacpp:spec_decode_num_draft_tokens_total",
            "vllm:spec_decode_num_draft_tokens_total",
        ],
    );
    let accepted = delta(
        before,
        after,
        &[
            "llamacpp:spec_decode_num_accepted_tokens_total",
            "vllm:spec_decode_num_accepted_tokens_total",
        ],
    );
    ServerDelta {
        prompt_processed: processed,
        prompt_cached: cached,
        hit_ratio,
        prompt_tok_s: ratio(processed, prompt_s),
        gen_tok_s: ratio(generated, gen_s),
        spec_acceptance: ratio(accepted, drafted),
        shared,
        replica: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replica(url: &str, up: bool, processed: f64, cached: f64) -> crate::probe::Replica {
        crate::probe::Replica {
            url: url.into(),
            up,
            healthy: Some(up),
            load: None,
            error: None,
            error_kind: None,
            latency_ms: None,
            backend: "llama.cpp".into(),
            models: Vec::new(),
            slots: None,
            counters: Some(
                [
                    ("llamacpp:prompt_tokens_total".into(), processed),
                    ("llamacpp:prompt_tokens_cached_total".into(), cached),
                ]
                .into(),
            ),
        }
    }

    /// Behind a router the delta is the replica's that served the job:
    /// the one whose counters moved by at least the job's prompt tokens;
    /// none when two could have (never a random replica's).
    #[test]
    fn a_routers_delta_is_the_jobs_replica_or_none() {
        let before = [
            replica("http://a", true, 0.0, 0.0),
            replica("http://b", true, 0.0, 0.0),
        ];
        // The job's 5,000 prompt tokens went to b; a served 300 of another.
        let after = [
            replica("http://a", true, 300.0, 0.0),
            replica("http://b", true, 1000.0, 4000.0),
        ];
        let d = router_delta(&before, &after, 5000, true).unwrap();
        assert_eq!(d.replica.as_deref(), Some("http://b"));
        assert_eq!(
            (d.prompt_processed, d.prompt_cached),
            (Some(1000.0), Some(4000.0))
        );
        assert!(d.shared);
        // Both moved by more than the job: which one served it is unknown.
        let after = [
            replica("http://a", true, 6000.0, 0.0),
            replica("http://b", true, 1000.0, 4000.0),
        ];
        assert_eq!(router_delta(&before, &after, 5000, false), None);
        // Nothing moved (a server without /metrics counts nothing).
        assert_eq!(router_delta(&before, &before, 5000, false), None);
    }

    /// A replica up at the start and down at the end is named, and the
    /// cache note says what that cost and the fix; without the header the
    /// note names the header.
    #[test]
    fn a_lost_replica_and_a_missing_header_are_said_in_the_cache_note() {
        let before = [
            replica("http://a", true, 0.0, 0.0),
            replica("http://b", true, 0.0, 0.0),
        ];
        let after = [
            replica("http://a", true, 0.0, 0.0),
            replica("http://b", false, 0.0, 0.0),
        ];
        let view = router_view(&before, &after, Some("X-Session-ID")).unwrap();
        assert_eq!(view.replicas, 2);
        assert_eq!(view.lost, ["http://b"]);
        assert_eq!(router_view(&[], &after, Some("X-Session-ID")), None);
        let m = JobMetrics {
            cache_ratio_per_turn: vec![0.0, 0.95, 0.1, 0.96],
            slot_losses: 1,
            reprocessed_tokens: 9000,
            router: Some(view),
            ..JobMetrics::default()
        };
        assert_eq!(
            m.cache_note(true).unwrap(),
            "lost its cache on 1 of 4 turns: 9,000 tokens re-processed; replica http://b went down during the job, and the router sent its later turns to another replica, which processed the conversation again: start that replica again (new jobs come back to it once the router's health check passes)"
        );
        let m = JobMetrics {
            router: router_view(&before, &before, None),
            ..m
        };
        assert!(
            m.cache_note(true)
                .unwrap()
                .contains("the endpoint sends no session header (`session_header: \"\"`)"),
            "{:?}",
            m.cache_note(true)
        );
    }

    #[test]
    fn llama_delta() {
        let b: Counters = [
            ("llamacpp:prompt_tokens_total".into(), 1000.0),
            ("llamacpp:prompt_tokens_cached_total".into(), 0.0),
            ("llamacpp:prompt_seconds_total".into(), 1.0),
        ]
        .into();
        let a: Counters = [
            ("llamacpp:prompt_tokens_total".into(), 1500.0),
            ("llamacpp:prompt_tokens_cached_total".into(), 4500.0),
            ("llamacpp:prompt_seconds_total".into(), 2.0),
        ]
        .into();
        let d = server_delta(&b, &a, false);
        assert_eq!(
            FirstTurn {
                prompt_tokens: 4485,
                cached_tokens: 4259,
                ms: 780
            }
            .line(),
            "first turn: 226 new tokens, 4,259 from cache, 0.8 s"
        );
        assert_eq!(thousands(21715), "21,715");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
        assert_eq!(d.prompt_processed, Some(500.0));
        assert_eq!(d.prompt_cached, Some(4500.0));
        assert_eq!(d.hit_ratio, Some(0.9));
        assert_eq!(d.prompt_tok_s, Some(500.0));
    }

    /// A job's request log, a line a turn: (new, cached) prompt tokens.
    fn log(turns: &[(u64, u64)]) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        let lines: String = turns
            .iter()
            .map(|(i, c)| {
                format!(
                    "{{\"path\":\"/v1/messages\",\"usage\":{{\"input\":{i},\"cache_read\":{c},\"output\":40}}}}\n"
                )
            })
            .collect();
        std::fs::write(tmp.path().join("requests.jsonl"), lines).unwrap();
        tmp
    }

    #[test]
    fn a_turn_that_falls_back_to_the_shared_prefix_lost_its_cache() {
        // The shape measured on the real llama-server with two jobs
        // interleaved on one slot (issue 24): a 5,006-token shared prefix,
        // and later turns that re-process the conversation after it.
        let tmp = log(&[(226, 5006), (180, 5300), (2601, 5006), (2890, 5006)]);
        let m = from_log(tmp.path());
        assert_eq!(m.slot_losses, 2);
        // Turn 3 had 5,480 tokens before it, 5,006 cached: 474 again;
        // turn 4 had 7,607 before it: 2,601 again.
        assert_eq!(m.reprocessed_tokens, 474 + 2601);
        assert_eq!(
            m.cache_note(true).unwrap(),
            "lost its cache on 2 of 4 turns: 3,075 tokens re-processed; another client's requests took the slot: start llama-server with --slot-prompt-similarity 0.9 and --parallel at least the number of jobs you run at once"
        );
        let short = serde_json::to_value(m.short()).unwrap();
        assert_eq!(
            (
                short["slot_losses"].as_u64(),
                short["reprocessed_tokens"].as_u64()
            ),
            (Some(2), Some(3075))
        );
    }

    /// A job pinned to its slot (the chat wire): the note says which slot
    /// and how many later turns found their prefix; a loss there names
    /// what else can take a pinned slot, not `-sps`.
    #[test]
    fn a_pinned_job_says_its_slot_and_its_hits() {
        let pinned = |turns: &[(u64, u64)]| {
            let tmp = tempfile::tempdir().unwrap();
            let lines: String = turns
                .iter()
                .map(|(i, c)| format!("{{\"path\":\"/v1/messages\",\"slot\":1,\"usage\":{{\"input\":{i},\"cache_read\":{c},\"output\":40}}}}\n"))
                .collect();
            std::fs::write(tmp.path().join("requests.jsonl"), lines).unwrap();
            from_log(tmp.path())
        };
        let kept = pinned(&[(5232, 0), (150, 5232), (120, 5382)]);
        assert_eq!((kept.slot, kept.prefix_hits, kept.slot_losses), (Some(1), 2, 0));
        assert_eq!(
            kept.cache_note(true).unwrap(),
            "held slot 1: 2 of 2 later turns found their prefix in its cache"
        );
        assert_eq!(pinned(&[(5232, 0)]).cache_note(true).unwrap(), "held slot 1");
        let lost = pinned(&[(226, 5006), (180, 5300), (2601, 5006)]);
        assert_eq!((lost.prefix_hits, lost.slot_losses), (1, 1));
        let note = lost.cache_note(true).unwrap();
        assert!(note.contains("took its slot 1") && !note.contains("similarity"), "{note}");
    }

    #[test]
    fn a_kept_cache_a_compaction_and_a_server_without_cache_figures_lose_nothing() {
        // Each turn reads the whole previous prompt from the cache.
        let kept = from_log(log(&[(226, 5006), (150, 5232), (120, 5382)]).path());
        // A compaction: the prompt shrinks, so nothing is lost.
        let compacted = from_log(log(&[(226, 5006), (150, 9000), (900, 5006)]).path());
        // A backend that never reports cached tokens.
        let blind = from_log(log(&[(5200, 0), (5400, 0), (5600, 0)]).path());
        for m in [&kept, &compacted, &blind] {
            assert_eq!((m.slot_losses, m.reprocessed_tokens), (0, 0));
            assert_eq!(m.cache_note(true), None);
            let short = serde_json::to_value(m.short()).unwrap();
            assert!(short.get("slot_losses").is_none(), "{short}");
        }
        assert_eq!(
            context_lost(5480, 5600, 5300),
            None,
            "under 256 tokens again"
        );
        assert_eq!(context_lost(5480, 5400, 5006), None, "the prompt shrank");
        assert_eq!(context_lost(7607, 7896, 5006), Some(2601));
        assert_eq!(context_lost(12000, 12100, 5006), Some(6994));
    }
}
