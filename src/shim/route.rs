//! One job's route: where its traffic goes ([`Route`]), what is done about
//! the model's faults on it ([`Policy`]) and what the shim saw of them
//! ([`Guard`]: a failing backend, dropped thinking, the loop and runaway
//! notes).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::config::{Backend, ClearToolResults, Endpoint, Thinking};
use crate::probe::ServerKind;
use crate::shim::chat::{self, Wire};
use crate::shim::clear;
use crate::shim::log::{self, RequestLog};
use crate::shim::loops;
use crate::shim::runaway;
use crate::shim::truncation::{self, Ledger, Read, Sent, Truncation};
use crate::shim::turns;

/// Where one job's traffic goes.
#[derive(Debug)]
pub struct Route {
    /// Job id, or `standalone`.
    pub label: String,
    /// The session identity sent in the endpoint's `session_header` on each
    /// request (a job's id, a batch lane's); `None`: no header.
    pub session: Option<String>,
    pub endpoint: Endpoint,
    /// The backend kind (configured or detected).
    pub backend: Backend,
    /// The id sent as `model`.
    pub served_id: String,
    /// Per-slot window: `max_tokens` is never sent larger.
    pub window: Option<u64>,
    pub log: RequestLog,
    /// Longest silence tolerated inside a stream.
    pub idle_timeout: Duration,
    /// Longest wait for a streamed answer's response headers
    /// (`defaults.first_byte_timeout_s`, else [`first_byte_timeout`]).
    pub first_byte_timeout: Duration,
    /// What is done about the model's faults on this route.
    pub guard: Guard,
    /// The wire its `/v1/messages` requests take ([`chat::choose`]).
    pub wire: Wire,
}

/// What the shim does about a model's faults on one route, and what it saw.
#[derive(Debug, Default)]
pub struct Guard {
    pub policy: Policy,
    /// Where the loop notes of this route's conversation sit.
    pub marks: loops::Marks,
    /// The first failure that no retry can mend (a chat template or grammar
    /// the server cannot build, a model stuck in a loop): the sentence the
    /// job ends with.
    pub fatal: Mutex<Option<String>>,
    /// The server refused thinking blocks once (`thinking: auto`): they are
    /// dropped from then on.
    pub thinking_refused: AtomicBool,
    /// Answers the runaway guard stopped on this route.
    pub runaways: AtomicU32,
    /// `/v1/messages` requests on this route so far (a job's turns).
    pub turns: AtomicU64,
    /// The truncation guard's chains of append-only requests.
    pub ledger: Mutex<Ledger>,
    /// Whether the backend's last answers were faults, since when.
    health: Mutex<Health>,
    /// Old tool results this route sends as stubs ([`clear`]).
    pub clearing: clear::Clearing,
    /// The session's turn count and the budget notes placed ([`turns`]).
    pub turn_budget: turns::TurnBudget,
    /// The server refused the chat wire once ([`chat::refused`]): this
    /// route's requests go to `/v1/messages` from then on.
    pub chat_refused: AtomicBool,
}

/// The backend's faults in a row on one route (hung, reset, slow, 5xx, a
/// stream cut short): since when, how many, and the shim's last sentence.
#[derive(Debug, Default)]
pub(crate) struct Health {
    failing_since: Option<Instant>,
    tries: u32,
    last: Option<String>,
}

/// The backend's run of faults on a route: how long every request has
/// failed, and the shim's sentence for the last one, with the tries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failing {
    pub for_: Duration,
    pub why: String,
}

impl Guard {
    pub fn new(policy: Policy) -> Guard {
        Guard {
            policy,
            ..Guard::default()
        }
    }

    /// The first fatal sentence, if one was seen.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// Are thinking blocks dropped from this route's requests now?
    pub fn drops_thinking(&self) -> bool {
        match self.policy.thinking {
            Thinking::Keep => false,
            Thinking::Drop => true,
            Thinking::Auto => self.thinking_refused.load(Ordering::Relaxed),
        }
    }

    /// The backend failed a request; `why` is the shim's sentence for it.
    pub fn backend_failed(&self, why: &str) {
        if let Ok(mut h) = self.health.lock() {
            h.failing_since.get_or_insert_with(Instant::now);
            h.tries = h.tries.saturating_add(1);
            h.last = Some(why.to_string());
        }
    }

    /// The backend answered a request: its run of faults is over.
    pub fn backend_answered(&self) {
        if let Ok(mut h) = self.health.lock() {
            *h = Health::default();
        }
    }

    /// Has every request failed since the last answer (at least one)?
    pub fn backend_failing(&self) -> Option<Failing> {
        let h = self.health.lock().ok()?;
        let since = h.failing_since?;
        let last = h.last.as_deref()?;
        let tries = match h.tries {
            1 => "1 try".to_string(),
            n => format!("{n} tries"),
        };
        Some(Failing {
            for_: since.elapsed(),
            why: format!("{} ({tries})", last.trim_end_matches('.')),
        })
    }

    /// Count a runaway and decide the answer: a retryable error (type
    /// `api_error`) while under `runaway_limit`, then the fatal sentence
    /// (`invalid_request_error`), which ends the job.
    pub fn runaway(&self, found: &mut runaway::Found, llama_cpp: bool) -> (&'static str, String) {
        let n = self
            .runaways
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let sentence = found.sentence(llama_cpp);
        found.why = sentence.clone();
        let limit = self.policy.runaway_limit;
        if n >= limit {
            self.set_fatal(&sentence);
            ("invalid_request_error", sentence)
        } else {
            (
                "api_error",
                format!(
                    "{sentence} (the shim stopped the answer: runaway {n} of defaults.runaway_limit {limit})"
                ),
            )
        }
    }

    pub(crate) fn set_fatal(&self, why: &str) {
        if let Ok(mut f) = self.fatal.lock()
            && f.is_none()
        {
            *f = Some(why.to_string());
        }
    }
}

/// The per-route settings of the [`Guard`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `defaults.loop_limit` (0: no guard).
    pub loop_limit: u32,
    /// `defaults.runaway_limit`: runaways before the route's fatal answer
    /// (0: no runaway guard).
    pub runaway_limit: u32,
    /// Thinking blocks in the history (`defaults.thinking`).
    pub thinking: Thinking,
    /// Turn text-form tool calls into `tool_use` blocks.
    pub repair: bool,
    /// After a fatal answer, answer every later request the same way
    /// without sending it (a job's route; not the standalone shim, whose
    /// one route serves any session).
    pub stop_on_fatal: bool,
    /// Replace old tool results with stubs once the prompt fills the
    /// window ([`clear`]; `defaults.clear_tool_results`).
    pub clear: ClearToolResults,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            loop_limit: loops::DEFAULT_LIMIT,
            runaway_limit: runaway::DEFAULT_LIMIT,
            thinking: Thinking::Auto,
            repair: true,
            stop_on_fatal: false,
            clear: ClearToolResults::Off,
        }
    }
}

/// One request as the truncation guard knows it: its turn and what was
/// sent.
#[derive(Debug, Clone)]
pub struct Sending {
    pub turn: u64,
    pub sent: Sent,
}

impl Route {
    /// The truncation guard on a 2xx answer: `read` is what the server
    /// said it read (`None` for the window sign, checked before any of
    /// the answer). A sign makes the route's fatal sentence; a request
    /// that passes is kept in its chain.
    pub fn truncation(&self, s: &Sending, read: Option<Read>) -> Option<(Truncation, String)> {
        let mut detail = String::new();
        let sign = match read {
            None => truncation::over_window(&s.sent, self.window),
            Some(r) => truncation::read_less(&s.sent, r).or_else(|| {
                let c = r.tokens.filter(|c| *c > 0)?;
                let mut l = self.guard.ledger.lock().ok()?;
                let (sign, d) = l.append(s.turn, &s.sent, c)?;
                detail = d;
                Some(sign)
            }),
        }?;
        let t = Truncation {
            sign,
            turn: s.turn,
            bytes_sent: s.sent.bytes,
            lower_bound: s.sent.lower_bound,
            read: read.and_then(|r| r.tokens),
            window: self.window,
        };
        let why = truncation::sentence(
            &t,
            self.backend.as_str(),
            &self.endpoint.base_url,
            &self.served_id,
            &detail,
        );
        self.guard.set_fatal(&why);
        Some((t, why))
    }

    /// A route to `t`'s endpoint and model, told `window` (the target's,
    /// or what a load found), with the config's timeouts: the first-byte
    /// budget for that window, then `defaults.stream_idle_timeout_s`. Its
    /// session identity is `label` (a job's id).
    pub fn for_target(
        label: String,
        t: &crate::registry::Target,
        window: Option<u64>,
        log: log::RequestLog,
        policy: Policy,
    ) -> Route {
        let d = &t.config.defaults;
        Route {
            session: Some(label.clone()),
            label,
            endpoint: t.endpoint.clone(),
            backend: t.backend,
            served_id: t.resolved.served_id.clone(),
            window,
            log,
            idle_timeout: Duration::from_secs(d.stream_idle_timeout_s),
            first_byte_timeout: first_byte_timeout(d.first_byte_timeout_s, window),
            guard: Guard::new(policy),
            wire: chat::choose(t.backend, t.endpoint.wire, None),
        }
    }

    /// The route of a job that holds `slot` (its lease) on a server of
    /// `kind`: the wire chosen again, now that the slot is known; a slot
    /// that is not one server's ([`chat::pinnable`]) is not pinned.
    pub fn pinned(mut self, slot: Option<u64>, kind: Option<ServerKind>) -> Route {
        let slot = slot.filter(|_| chat::pinnable(kind, self.endpoint.vllm_router));
        self.wire = chat::choose(self.backend, self.endpoint.wire, slot);
        self
    }

    /// The slot this route's requests are pinned to on llama.cpp, whose
    /// slot can be saved and restored.
    pub fn pinned_slot(&self) -> Option<u64> {
        match self.wire {
            Wire::Chat(pin) if self.backend == Backend::LlamaCpp => pin.slot,
            _ => None,
        }
    }

    /// The wire the next request takes: the chosen one, unless the
    /// server refused the chat wire.
    pub fn wire_now(&self) -> Wire {
        match self.wire {
            Wire::Chat(_) if self.guard.chat_refused.load(Ordering::Relaxed) => Wire::Messages,
            w => w,
        }
    }

    /// The longest the shim waits on a silent stream before it answers
    /// with an error event: the first-byte budget until the first event
    /// (a long prefill), the idle timeout after it.
    pub fn longest_silence(&self) -> Duration {
        self.first_byte_timeout.max(self.idle_timeout)
    }
}

/// How long a streamed request may wait for the backend's response
/// headers: long enough for a prompt that fills the whole window at 100
/// tokens/s (a 27B partly offloaded to the CPU, cold), at least 5 minutes,
/// at most an hour. A non-streamed request has `idle_timeout` for all of it.
/// `configured` (`defaults.first_byte_timeout_s`) wins when set.
pub fn first_byte_timeout(configured: Option<u64>, window: Option<u64>) -> Duration {
    Duration::from_secs(
        configured.unwrap_or_else(|| (window.unwrap_or(131_072) / 100).clamp(300, 3600)),
    )
}
