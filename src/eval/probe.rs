//! The capability probe: what a served model does with the requests a
//! delegate sends, in a few seconds, before any task runs.
//!
//! The model-facing requests go through the shim's own request path
//! ([`crate::shim::relay_messages`]), as a job's do, so a tool call the
//! shim had to repair from text counts as a fault, not a success. Speeds
//! come from the server's own counters (`/metrics` before and after each
//! request: llama.cpp's `prompt_seconds_total` and
//! `tokens_predicted_seconds_total`, vLLM's prefill and decode time
//! histograms), never from wall time, which includes the HTTP hops.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::anthropic::{ErrorBody, Reply, TokenCount};
use crate::probe::metrics::{Counters, delta};
use crate::registry::Target;
use crate::shim::{self, Route};

/// What the probe found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// The forced single-tool call: `tool_use` (valid, as the server sent
    /// it), `repaired` (the call came as text; the shim mended it), `text`
    /// (no call), or `error: …`.
    pub tool_call: String,
    /// A conversation with a system entry in the middle, folded by the
    /// shim, was answered.
    pub folded_system_accepted: bool,
    /// What the server said when it was not (first 300 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folded_system_error: Option<String>,
    /// `POST /v1/messages/count_tokens` answers.
    pub count_tokens: bool,
    /// Prompt tokens per second over a fresh prompt of about 4k tokens.
    pub prefill_tok_s: Option<f64>,
    pub prefill_tokens: Option<u64>,
    /// Generated tokens per second over up to 128 tokens.
    pub gen_tok_s: Option<f64>,
    pub gen_tokens: Option<u64>,
    /// Where the speeds come from (`metrics`), or why there are none.
    pub speed_source: String,
    /// The real per-slot window.
    pub window: Option<u64>,
    /// The model sent thinking blocks.
    pub thinking: bool,
    /// The runaway guard cut off an answer of the probe: the sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runaway: Option<String>,
}

/// The prompt of the prefill measurement: about 11 tokens a sentence in
/// the tokenizers tried (gemma, qwen), so 370 sentences are about 4k.
fn long_prompt(sentences: usize) -> String {
    let nonce = crate::shim::new_token().unwrap_or_default();
    let mut s = format!("Reference {nonce}.\n");
    for i in 0..sentences {
        s.push_str(&format!(
            "Item {i} of the inventory is a box of {} screws. ",
            i % 97
        ));
    }
    s.push_str("\nHow many items are listed? Answer with a number.");
    s
}

/// `GET /metrics` as counters (None when the server has none).
async fn counters(target: &Target) -> Option<Counters> {
    let req = crate::probe::client::request(
        crate::probe::http_client(),
        &target.endpoint,
        reqwest::Method::GET,
        "/metrics",
    )
    .timeout(Duration::from_secs(5));
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let text = resp.text().await.ok()?;
    let c = crate::probe::metrics::parse(&text);
    (!c.is_empty()).then_some(c)
}

/// Tokens and seconds of one kind of work between two scrapes.
type Spent = (Option<f64>, Option<f64>);

/// Tokens and seconds spent on prompts and on generation between two
/// scrapes.
fn spent(before: &Counters, after: &Counters) -> (Spent, Spent) {
    let prompt_n = delta(
        before,
        after,
        &["llamacpp:prompt_tokens_total", "vllm:prompt_tokens_total"],
    );
    let prompt_s = delta(
        before,
        after,
        &[
            "llamacpp:prompt_seconds_total",
            "vllm:request_prefill_time_seconds_sum",
        ],
    );
    let gen_n = delta(
        before,
        after,
        &[
            "llamacpp:tokens_predicted_total",
            "vllm:generation_tokens_total",
        ],
    );
    let gen_s = delta(
        before,
        after,
        &[
            "llamacpp:tokens_predicted_seconds_total",
            "vllm:request_decode_time_seconds_sum",
        ],
    );
    ((prompt_n, prompt_s), (gen_n, gen_s))
}

fn rate(n: Option<f64>, s: Option<f64>) -> Option<f64> {
    match (n, s) {
        (Some(n), Some(s)) if n > 0.0 && s > 0.0 => Some((n / s * 10.0).round() / 10.0),
        _ => None,
    }
}

/// Send one Messages body through the shim's path; (status, body).
async fn ask(route: &std::sync::Arc<Route>, body: &Value) -> (u16, bytes::Bytes) {
    let resp = shim::relay_messages(route.clone(), bytes::Bytes::from(body.to_string())).await;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    (status, bytes)
}

fn has_block(body: &[u8], typ: &str) -> bool {
    Reply::parse(body).is_some_and(|r| r.has(typ))
}

/// An error answer's message, else the body as JSON (`null` when it is
/// not JSON).
fn error_text(body: &[u8]) -> String {
    ErrorBody::parse(body)
        .message()
        .unwrap_or_else(|| {
            serde_json::from_slice(body)
                .unwrap_or(Value::Null)
                .to_string()
        })
        .chars()
        .take(300)
        .collect()
}

/// Run the probe on `target`, logging its requests under `log_dir`.
pub async fn run(target: &Target, log_dir: &std::path::Path) -> Capabilities {
    let mut caps = measure(target, log_dir).await;
    caps.runaway = crate::jobs::metrics::from_log(log_dir)
        .faults
        .runaway_output
        .map(|r| r.why);
    caps
}

async fn measure(target: &Target, log_dir: &std::path::Path) -> Capabilities {
    let mut route = crate::complete::route(target, log_dir);
    // As a job's route: text-form calls are repaired (and counted).
    route.guard = shim::Guard::new(shim::Policy {
        repair: true,
        ..route.guard.policy
    });
    let route = std::sync::Arc::new(route);
    let served = &target.resolved.served_id;
    let window = target.resolved.context;
    let mut caps = Capabilities {
        window,
        ..Default::default()
    };

    // 1. A forced single-tool call.
    let tool = json!({"name": "get_weather", "description": "Get the current weather for a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"}}, "required": ["city"]}});
    let body = json!({"model": served, "max_tokens": 256, "temperature": 0,
        "tools": [tool], "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]});
    let repaired_before = repaired_so_far(log_dir);
    let (status, v) = ask(&route, &body).await;
    caps.thinking |= has_block(&v, "thinking");
    caps.tool_call = if status != 200 {
        format!("error: {}", error_text(&v))
    } else if has_block(&v, "tool_use") {
        if repaired_so_far(log_dir) > repaired_before {
            "repaired".into()
        } else {
            "tool_use".into()
        }
    } else {
        "text".into()
    };

    // 2. A system entry in the middle of the conversation (folded).
    let body = json!({"model": served, "max_tokens": 8, "temperature": 0, "messages": [
        {"role": "user", "content": "Hello."},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "system", "content": "The user prefers short answers."},
        {"role": "user", "content": "Say ok."}
    ]});
    let (status, v) = ask(&route, &body).await;
    caps.folded_system_accepted = status == 200;
    if status != 200 {
        caps.folded_system_error = Some(error_text(&v));
    }

    // 3. count_tokens, asked of the server itself (the shim would estimate).
    let req = crate::probe::client::request(
        crate::probe::http_client(),
        &target.endpoint,
        reqwest::Method::POST,
        "/v1/messages/count_tokens",
    )
    .timeout(Duration::from_secs(10))
    .json(&json!({"model": served, "messages": [{"role": "user", "content": "Hello."}]}));
    caps.count_tokens = match req.send().await {
        Ok(r) if r.status().is_success() => r
            .bytes()
            .await
            .is_ok_and(|b| TokenCount::parse(&b).is_some()),
        _ => false,
    };

    // 4. Speeds from the server's own counters.
    let sentences = match window {
        Some(w) if w < 8192 => (w as usize / 2 / 11).max(10),
        _ => 370,
    };
    let Some(before) = counters(target).await else {
        caps.speed_source = "none: the server has no /metrics (llama-server --metrics)".into();
        return caps;
    };
    let body = json!({"model": served, "max_tokens": 1, "temperature": 0,
        "messages": [{"role": "user", "content": long_prompt(sentences)}]});
    let _ = ask(&route, &body).await;
    let Some(mid) = counters(target).await else {
        caps.speed_source = "none: /metrics stopped answering".into();
        return caps;
    };
    let ((pn, ps), _) = spent(&before, &mid);
    caps.prefill_tok_s = rate(pn, ps);
    caps.prefill_tokens = pn.map(|n| n as u64);
    let body = json!({"model": served, "max_tokens": 128, "temperature": 0,
        "messages": [{"role": "user", "content": "Count from one to one hundred in words, separated by commas."}]});
    let (_, v) = ask(&route, &body).await;
    caps.thinking |= has_block(&v, "thinking");
    if let Some(after) = counters(target).await {
        let (_, (gn, gs)) = spent(&mid, &after);
        caps.gen_tok_s = rate(gn, gs);
        caps.gen_tokens = gn.map(|n| n as u64);
    }
    caps.speed_source = "metrics".into();
    caps
}

/// How many calls the shim repaired so far on this log.
fn repaired_so_far(dir: &std::path::Path) -> u64 {
    crate::jobs::metrics::from_log(dir)
        .faults
        .repaired_tool_calls
}
