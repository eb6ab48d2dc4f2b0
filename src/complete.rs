//! One-shot completions: one `/v1/messages` request to a local model, with
//! no tools and no session.
//!
//! Not every chore needs a Claude Code session: a commit message, a
//! docstring or a regex is one answer, and a session costs thousands of
//! prompt tokens and a window far bigger than a small slot's 4k. A
//! completion goes through the shim's own request path (the same error
//! sentences, overflow translation and request log as a job), after two
//! checks of its own: attached files are capped, and the prompt is counted
//! against the model's window before anything is sent, so a prompt that
//! cannot fit is a sentence naming both numbers and costs the server
//! nothing. Everything is logged under `<state>/complete/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::anthropic::{ErrorBody, Reply, TokenCount};
use crate::registry::Target;
use crate::shim::log::RequestLog;
use crate::shim::{self, Route};
use crate::wire::Usage;

/// At most this much of one attached file.
pub const MAX_FILE_BYTES: u64 = 256 * 1024;
/// At most this much of all attached files together.
pub const MAX_FILES_BYTES: u64 = 1024 * 1024;
/// Output tokens when none are asked for (what fits is less, when less).
pub const DEFAULT_MAX_TOKENS: u64 = 2048;
/// Fewer output tokens than this left in the window: the prompt does not fit.
const MIN_OUTPUT: u64 = 16;

/// One completion to make.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
pub struct Ask {
    /// The prompt.
    pub prompt: String,
    /// A system prompt.
    #[serde(default)]
    pub system: Option<String>,
    /// Files to attach as text, each named in the prompt.
    #[serde(default)]
    pub files: Vec<PathBuf>,
}

/// Options shared by every completion of a call.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Completion {
    pub text: String,
    /// Tokens as the server counted them.
    #[schemars(with = "Value")]
    pub usage: Usage,
    /// Wall time of the request, in milliseconds.
    pub ms: u64,
    /// The id the server answered for.
    pub model: String,
    pub endpoint: String,
    pub stop_reason: Option<String>,
}

/// Why a completion was not made.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum CompleteError {
    /// The request itself is wrong (empty prompt, a file too big, a
    /// prompt that cannot fit): nothing was sent.
    #[error("{0}")]
    Invalid(String),
    /// The server answered with an error (the shim's sentence).
    #[error("{0}")]
    Backend(String),
}

/// Read the attached files within the caps; `base` resolves relative paths.
pub fn read_files(files: &[PathBuf], base: &Path) -> Result<Vec<(String, String)>, CompleteError> {
    let mut total = 0u64;
    let mut out = Vec::new();
    for f in files {
        let path = if f.is_absolute() {
            f.clone()
        } else {
            base.join(f)
        };
        let name = f.display().to_string();
        let meta = std::fs::metadata(&path).map_err(|e| {
            CompleteError::Invalid(format!(
                "cannot read file {name} ({e}): pass an existing file"
            ))
        })?;
        if !meta.is_file() {
            return Err(CompleteError::Invalid(format!(
                "{name} is not a regular file: attach files, not directories"
            )));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(CompleteError::Invalid(format!(
                "{name} is {} KiB; one attached file may be at most {} KiB: attach the part that matters",
                meta.len() / 1024,
                MAX_FILE_BYTES / 1024
            )));
        }
        total += meta.len();
        if total > MAX_FILES_BYTES {
            return Err(CompleteError::Invalid(format!(
                "the attached files come to more than {} KiB together: attach fewer",
                MAX_FILES_BYTES / 1024
            )));
        }
        let bytes = std::fs::read(&path).map_err(|e| {
            CompleteError::Invalid(format!(
                "cannot read file {name} ({e}): pass a readable file"
            ))
        })?;
        if bytes.contains(&0) {
            return Err(CompleteError::Invalid(format!(
                "{name} looks binary (it holds NUL bytes): attach text files only"
            )));
        }
        out.push((name, String::from_utf8_lossy(&bytes).into_owned()));
    }
    Ok(out)
}

/// A completion's `/v1/messages` body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Request {
    pub model: String,
    pub max_tokens: u64,
    pub stream: bool,
    pub messages: Vec<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// One message of a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: &'static str,
    pub content: Vec<TextBlock>,
}

/// A text block of a [`Message`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TextBlock {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

impl TextBlock {
    fn new(text: String) -> Self {
        TextBlock { kind: "text", text }
    }
}

/// What `/v1/messages/count_tokens` is asked (`system` is `null` when
/// there is none).
#[derive(Debug, Serialize)]
struct CountRequest<'a> {
    model: &'a str,
    messages: &'a [Message],
    system: Option<&'a str>,
}

/// The `/v1/messages` body: each file a text block naming it, then the
/// prompt. `max_tokens` is filled in once the prompt is counted.
pub fn body(ask: &Ask, files: &[(String, String)], model: &str, o: &Options) -> Request {
    let mut content: Vec<TextBlock> = files
        .iter()
        .map(|(name, text)| TextBlock::new(format!("<file path=\"{name}\">\n{text}\n</file>")))
        .collect();
    content.push(TextBlock::new(ask.prompt.clone()));
    Request {
        model: model.to_string(),
        max_tokens: o.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        stream: false,
        messages: vec![Message {
            role: "user",
            content,
        }],
        system: ask
            .system
            .clone()
            .filter(|s| !s.trim().is_empty()),
        temperature: o.temperature,
    }
}

/// A conservative token estimate of the body's prompt (a completion has
/// no tools): [`shim::estimate_tokens`].
pub fn estimate(body: &Request) -> u64 {
    shim::estimate_tokens(&serde_json::to_value(body).unwrap_or_default())
}

/// The prompt's size: the server's own count where it answers
/// (`/v1/messages/count_tokens`), else [`estimate`]. True when counted.
pub async fn count(target: &Target, body: &Request) -> (u64, bool) {
    let req = crate::probe::client::request(
        crate::probe::http_client(),
        &target.endpoint,
        reqwest::Method::POST,
        "/v1/messages/count_tokens",
    )
    .timeout(Duration::from_secs(10))
    .json(&CountRequest {
        model: &body.model,
        messages: &body.messages,
        system: body.system.as_deref(),
    });
    if let Ok(r) = req.send().await
        && r.status().is_success()
        && let Ok(bytes) = r.bytes().await
        && let Some(n) = TokenCount::parse(&bytes).and_then(|c| c.tokens())
    {
        return (n, true);
    }
    (estimate(body), false)
}

/// Fit `max_tokens` to the window, or say why the prompt cannot fit.
pub fn fit(
    body: &mut Request,
    prompt_tokens: u64,
    counted: bool,
    window: Option<u64>,
    model: &str,
) -> Result<(), CompleteError> {
    let Some(w) = window else {
        return Ok(());
    };
    let room = w.saturating_sub(prompt_tokens);
    if room < MIN_OUTPUT {
        return Err(CompleteError::Invalid(format!(
            "prompt is {}{} tokens; {model} has {} per slot: shorten it or attach less",
            if counted { "" } else { "about " },
            crate::fmt::thousands(prompt_tokens),
            crate::fmt::thousands(w)
        )));
    }
    body.max_tokens = body.max_tokens.min(room);
    Ok(())
}

/// The route a completion uses: the target's endpoint, logged under `log_dir`.
pub fn route(target: &Target, log_dir: &Path) -> Route {
    // No tools and no conversation: nothing to repair or guard, but the
    // history's thinking is handled as for a job.
    let policy = shim::Policy {
        loop_limit: 0,
        runaway_limit: target.config.defaults.runaway_limit,
        thinking: target.config.defaults.thinking,
        repair: false,
        stop_on_fatal: false,
        clear: crate::config::ClearToolResults::Off,
    };
    let mut route = Route::for_target(
        "complete".into(),
        target,
        target.resolved.context,
        RequestLog::new(log_dir, false),
        policy,
    );
    // Not streamed: this is the whole request's budget, so it covers a
    // long prompt (or a load) before the first token plus the answer.
    route.idle_timeout += route.first_byte_timeout;
    // A one-shot has no conversation to keep on one replica.
    route.session = None;
    route
}

/// Make one completion on `target` (files already read), logged in
/// `log_dir/requests.jsonl`. `session`: the identity sent in the
/// endpoint's session header (a batch lane's, so the lane's items stay on
/// one replica behind a router and share its cached prefix); a one-shot
/// call sends none, and a router spreads such calls as it likes.
pub async fn run(
    target: &Target,
    log_dir: &Path,
    ask: &Ask,
    files: &[(String, String)],
    o: &Options,
    session: Option<String>,
) -> Result<Completion, CompleteError> {
    if ask.prompt.trim().is_empty() {
        return Err(CompleteError::Invalid(
            "prompt is empty: say what to answer".into(),
        ));
    }
    let served = &target.resolved.served_id;
    let mut b = body(ask, files, served, o);
    let (n, counted) = count(target, &b).await;
    fit(&mut b, n, counted, target.resolved.context, served)?;
    let started = Instant::now();
    let bytes = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
    let mut route = route(target, log_dir);
    route.session = session;
    let resp = shim::relay_messages(Arc::new(route), bytes).await;
    let status = resp.status().as_u16();
    let out = axum::body::to_bytes(resp.into_body(), 64 * 1024 * 1024)
        .await
        .map_err(|e| CompleteError::Backend(format!("the answer broke off: {e}")))?;
    if status != 200 {
        let msg = ErrorBody::parse(&out)
            .message()
            .unwrap_or_else(|| crate::fmt::cut(&String::from_utf8_lossy(&out), 300));
        return Err(CompleteError::Backend(msg));
    }
    let Some(reply) = Reply::parse(&out).filter(|r| r.content.is_some()) else {
        return Err(CompleteError::Backend(not_api_json(
            &target.resolved.endpoint,
            &target.endpoint.base_url,
            &out,
        )));
    };
    let mut usage = Usage::default();
    if let Some(u) = &reply.usage {
        usage.update(u);
    }
    Ok(Completion {
        text: reply.text(),
        usage,
        ms: started.elapsed().as_millis() as u64,
        model: reply.model.unwrap_or_else(|| served.to_string()),
        endpoint: target.resolved.endpoint.clone(),
        stop_reason: reply.stop_reason,
    })
}

/// The sentence for a 200 whose body is not a Messages response (a
/// proxy's login page, a web server on the port, an OpenAI-only route):
/// its first bytes quoted, and where to look.
fn not_api_json(endpoint: &str, base_url: &str, body: &[u8]) -> String {
    let head = String::from_utf8_lossy(&body[..body.len().min(400)]);
    format!(
        "the backend at {base_url} answered 200 with a body that is not the API's JSON: {:?}; check that endpoint {endpoint}'s base_url in models.yaml is the model server itself, not a proxy or a web page",
        crate::fmt::one_line(&head, 60)
    )
}

/// One line of `<state>/complete/completions.jsonl`.
#[derive(Debug, Serialize)]
struct LogLine<'a> {
    ts: String,
    endpoint: &'a str,
    model: &'a str,
    files: Vec<&'a str>,
    prompt_chars: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Completion>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Append what a completion did to `<dir>/completions.jsonl`.
pub fn log_result(
    dir: &Path,
    target: &Target,
    ask: &Ask,
    result: &Result<Completion, CompleteError>,
) {
    let line = LogLine {
        ts: crate::shim::log::now_ts(),
        endpoint: &target.resolved.endpoint,
        model: &target.resolved.served_id,
        files: ask.files.iter().filter_map(|f| f.to_str()).collect(),
        prompt_chars: ask.prompt.chars().count(),
        result: result.as_ref().ok(),
        error: result.as_ref().err().map(|e| e.to_string()),
    };
    if let Ok(mut bytes) = serde_json::to_vec(&line) {
        bytes.push(b'\n');
        let _ = crate::paths::private_dir_all(dir);
        if let Ok(mut f) = crate::paths::append_private(&dir.join("completions.jsonl")) {
            use std::io::Write;
            let _ = f.write_all(&bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_named_and_the_prompt_comes_last() {
        let ask = Ask {
            prompt: "Write a commit message.".into(),
            system: Some("Be brief.".into()),
            files: vec![],
        };
        let b = body(
            &ask,
            &[("src/a.rs".into(), "fn a() {}".into())],
            "m",
            &Options::default(),
        );
        let c = &b.messages[0].content;
        assert_eq!(c.len(), 2);
        assert!(c[0].text.starts_with("<file path=\"src/a.rs\">"));
        assert_eq!(c[1].text, "Write a commit message.");
        assert_eq!(b.system.as_deref(), Some("Be brief."));
        assert_eq!(b.max_tokens, DEFAULT_MAX_TOKENS);
        // As sent: the same bytes the `json!` body had.
        let v = serde_json::to_string(&b).unwrap();
        assert!(
            v.starts_with(r#"{"model":"m","max_tokens":2048,"stream":false,"messages":[{"role":"user","content":[{"type":"text","text":"<file"#),
            "{v}"
        );
        assert!(v.ends_with(r#""system":"Be brief."}"#), "{v}");
    }

    #[test]
    fn a_prompt_that_cannot_fit_is_refused_with_both_numbers() {
        let mut b = body(&Ask::default(), &[], "m", &Options::default());
        let e = fit(&mut b, 9100, false, Some(4096), "gemma3-270m").unwrap_err();
        assert_eq!(
            e.to_string(),
            "prompt is about 9,100 tokens; gemma3-270m has 4,096 per slot: shorten it or attach less"
        );
        let e = fit(&mut b, 4090, true, Some(4096), "g").unwrap_err();
        assert!(e.to_string().starts_with("prompt is 4,090 tokens"), "{e}");
        fit(&mut b, 3000, true, Some(4096), "g").unwrap();
        assert_eq!(b.max_tokens, 1096, "output fitted into what is left");
        fit(&mut b, 1_000_000, true, None, "g").unwrap();
    }

    #[test]
    fn file_caps_and_binary_files_are_sentences() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("big"),
            vec![b'a'; MAX_FILE_BYTES as usize + 1],
        )
        .unwrap();
        std::fs::write(d.path().join("bin"), b"a\0b").unwrap();
        std::fs::write(d.path().join("ok.txt"), "fine").unwrap();
        let e = read_files(&["big".into()], d.path()).unwrap_err();
        assert!(e.to_string().contains("at most 256 KiB"), "{e}");
        let e = read_files(&["bin".into()], d.path()).unwrap_err();
        assert!(e.to_string().contains("binary"), "{e}");
        let e = read_files(&["nope".into()], d.path()).unwrap_err();
        assert!(e.to_string().contains("cannot read file nope"), "{e}");
        let ok = read_files(&["ok.txt".into()], d.path()).unwrap();
        assert_eq!(ok, vec![("ok.txt".to_string(), "fine".to_string())]);
    }
}
