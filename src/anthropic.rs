//! What a Messages server answers, read once and typed: the reply
//! ([`Reply`], its [`Block`]s and [`Usage`]), the stream's events
//! ([`StreamEvent`]) and the error body ([`ErrorBody`]).
//!
//! The shim, one-shot completions, eval's probe, the review and the
//! ledger's transcript reader all read these shapes; each used to pick
//! keys out of a `serde_json::Value` on its own, with its own idea of
//! which key comes first. Here they are read one way. What the shim
//! passes on is still bytes (or the `Value` it rewrites): these types
//! are how it looks, not what it forwards.
//!
//! The servers behind the shim (llama.cpp, vLLM, routers, proxies) differ
//! and change across versions, so every field follows the crate's one
//! lenient rule ([`lenient`], [`read`]): a field of the wrong type reads
//! as absent, and the rest of the body still reads. Block and event types
//! this build does not know pass as `Unknown`; unknown fields are ignored.
//! The rule is the crate's, not only this module's: the request log
//! ([`crate::wire`]), the delegate's events ([`crate::runner`]) and the
//! probe's answers ([`crate::probe`]) read their fields by it too.

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::{Map, Value};

// --- the lenient rule ---------------------------------------------------------

/// The one lenient rule: `v` as `T`, or none when it is of another shape
/// (a field of the wrong type reads as absent).
pub fn read<T: DeserializeOwned>(v: Value) -> Option<T> {
    serde_json::from_value(v).ok()
}

/// [`read`] for a field (`#[serde(default, deserialize_with = "lenient")]`):
/// a value of the wrong type reads as `T`'s default (`None` for an
/// `Option`).
pub fn lenient<'de, D: Deserializer<'de>, T: DeserializeOwned + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(read(Value::deserialize(d)?).unwrap_or_default())
}

/// A field that is there, whatever its value (`null` too), is `Some`.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A JSON object as `T`, kept whole beside its typed reading: for what is
/// looked at and also passed on (a streamed message's fields, put
/// together into the collected answer). Not an object: of the wrong type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Raw<T> {
    pub typed: T,
    pub raw: Map<String, Value>,
}

impl<'de, T: DeserializeOwned + Default> Deserialize<'de> for Raw<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match Value::deserialize(d)? {
            Value::Object(raw) => {
                let v = Value::Object(raw);
                let typed = T::deserialize(&v).unwrap_or_default();
                let raw = match v {
                    Value::Object(raw) => raw,
                    _ => Map::new(),
                };
                Ok(Raw { typed, raw })
            }
            other => Err(serde::de::Error::custom(format!(
                "expected an object, not {other}"
            ))),
        }
    }
}

// --- the reply ----------------------------------------------------------------

/// `usage`, in a reply or a stream event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Usage {
    #[serde(deserialize_with = "lenient")]
    pub input_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub output_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub cache_read_input_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub cache_creation_input_tokens: Option<u64>,
}

/// One content block. A type this build does not know, or a block that
/// is not an object, is `Unknown`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        #[serde(default, deserialize_with = "lenient")]
        text: Option<String>,
    },
    Thinking {
        #[serde(default, deserialize_with = "lenient")]
        thinking: Option<String>,
    },
    ToolUse {
        #[serde(default, deserialize_with = "lenient")]
        id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        name: Option<String>,
        /// A tool's input has the tool's own shape.
        #[serde(default)]
        input: Value,
    },
    ToolResult {
        #[serde(default, deserialize_with = "lenient")]
        tool_use_id: Option<String>,
        #[serde(default, deserialize_with = "lenient")]
        is_error: Option<bool>,
        /// A string, or a list of content blocks.
        #[serde(default)]
        content: Value,
    },
    #[serde(other)]
    Unknown,
}

/// A `content` field's blocks (each one that does not read is
/// [`Block::Unknown`]); `None` when `content` is not a list (a user
/// message's plain string, say).
pub fn blocks<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<Block>>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Array(a) => Some(
            a.into_iter()
                .map(|b| read(b).unwrap_or(Block::Unknown))
                .collect(),
        ),
        _ => None,
    })
}

/// A Messages reply (`POST /v1/messages` without streaming, or the
/// `message` of a stream's `message_start`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Reply {
    #[serde(deserialize_with = "lenient")]
    pub id: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub model: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub role: Option<String>,
    /// `None` when the reply has no list of blocks.
    #[serde(deserialize_with = "blocks")]
    pub content: Option<Vec<Block>>,
    #[serde(deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub usage: Option<Usage>,
}

impl Reply {
    /// A body as a reply: none when it is not a JSON object.
    pub fn parse(body: &[u8]) -> Option<Reply> {
        match serde_json::from_slice::<Value>(body).ok()? {
            v @ Value::Object(_) => Reply::deserialize(&v).ok(),
            _ => None,
        }
    }

    /// Its blocks (none without a list).
    pub fn blocks(&self) -> &[Block] {
        self.content.as_deref().unwrap_or_default()
    }

    /// Its text blocks' text, joined.
    pub fn text(&self) -> String {
        self.blocks()
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => text.as_deref(),
                _ => None,
            })
            .collect()
    }

    /// Does it hold a block of this type (`"text"`, `"thinking"`,
    /// `"tool_use"` or `"tool_result"`; the types [`Block`] reads)?
    pub fn has(&self, typ: &str) -> bool {
        self.blocks().iter().any(|b| {
            matches!(
                (b, typ),
                (Block::Text { .. }, "text")
                    | (Block::Thinking { .. }, "thinking")
                    | (Block::ToolUse { .. }, "tool_use")
                    | (Block::ToolResult { .. }, "tool_result")
            )
        })
    }
}

/// A `POST /v1/messages/count_tokens` answer.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct TokenCount {
    /// `Some(None)`: there, of the wrong type.
    #[serde(deserialize_with = "present")]
    input_tokens: Option<Value>,
}

impl TokenCount {
    /// A body as a count: none when it is not a JSON object with
    /// `input_tokens` (of any type).
    pub fn parse(body: &[u8]) -> Option<TokenCount> {
        let c: TokenCount = match serde_json::from_slice::<Value>(body).ok()? {
            v @ Value::Object(_) => TokenCount::deserialize(&v).ok()?,
            _ => return None,
        };
        c.input_tokens.is_some().then_some(c)
    }

    /// The count, when it is a whole number.
    pub fn tokens(&self) -> Option<u64> {
        self.input_tokens.as_ref().and_then(Value::as_u64)
    }
}

// --- the stream ---------------------------------------------------------------

/// The `delta` of a `content_block_delta`: text, thinking, a signature or
/// a piece of a tool call's input JSON.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct Delta {
    #[serde(rename = "type", deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub text: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub thinking: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub signature: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub partial_json: Option<String>,
}

/// The `delta` of a `message_delta`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MessageChange {
    #[serde(deserialize_with = "lenient")]
    pub stop_reason: Option<String>,
}

/// `message_start`: the reply's fields, its content still empty.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MessageStart {
    #[serde(deserialize_with = "lenient")]
    pub message: Option<Raw<Reply>>,
}

/// `content_block_start`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BlockStart {
    #[serde(deserialize_with = "lenient")]
    pub index: Option<u64>,
    /// The block as sent (`null` when absent), passed on whole.
    pub content_block: Value,
}

/// `content_block_delta`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BlockDelta {
    #[serde(deserialize_with = "lenient")]
    pub index: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub delta: Option<Delta>,
}

/// `content_block_stop`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct BlockStop {
    #[serde(deserialize_with = "lenient")]
    pub index: Option<u64>,
}

/// `message_delta`: the reply's changed fields and its usage so far.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct MessageDelta {
    #[serde(deserialize_with = "lenient")]
    pub delta: Option<Raw<MessageChange>>,
    #[serde(deserialize_with = "lenient")]
    pub usage: Option<Raw<Usage>>,
}

/// One event of a streamed reply, named by its SSE `event:` line or, in a
/// data-only event, by its JSON `type`.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    MessageStart(MessageStart),
    ContentBlockStart(BlockStart),
    ContentBlockDelta(BlockDelta),
    ContentBlockStop(BlockStop),
    MessageDelta(MessageDelta),
    MessageStop,
    Ping,
    /// In Anthropic's shape or a server's own (llama.cpp's mid-stream
    /// `{code, message, type}`).
    Error(ErrorBody),
    /// An event type this build does not know.
    Unknown,
}

/// A data-only event's `type`.
#[derive(Deserialize)]
struct Kind {
    #[serde(rename = "type", default, deserialize_with = "lenient")]
    kind: Option<String>,
}

impl StreamEvent {
    /// The name of a data-only event: its JSON `type` (empty when it has
    /// none).
    pub fn name_of(data: &str) -> String {
        serde_json::from_str::<Kind>(data)
            .ok()
            .and_then(|k| k.kind)
            .unwrap_or_default()
    }

    /// The event `name` (its SSE `event:` name, else [`Self::name_of`]
    /// its data) with `data`. A body that does not read gives the event's
    /// defaults (no fields).
    pub fn read(name: Option<&str>, data: &str) -> StreamEvent {
        fn body<T: DeserializeOwned + Default>(data: &str) -> T {
            serde_json::from_str(data).unwrap_or_default()
        }
        let owned;
        let name = match name {
            Some(n) => n,
            None => {
                owned = Self::name_of(data);
                &owned
            }
        };
        match name {
            "message_start" => StreamEvent::MessageStart(body(data)),
            "content_block_start" => StreamEvent::ContentBlockStart(body(data)),
            "content_block_delta" => StreamEvent::ContentBlockDelta(body(data)),
            "content_block_stop" => StreamEvent::ContentBlockStop(body(data)),
            "message_delta" => StreamEvent::MessageDelta(body(data)),
            "message_stop" => StreamEvent::MessageStop,
            "ping" => StreamEvent::Ping,
            "error" => StreamEvent::Error(ErrorBody::parse(data.as_bytes())),
            _ => StreamEvent::Unknown,
        }
    }
}

// --- the error body -----------------------------------------------------------

/// An error body: Anthropic's `{"type": "error", "error": {type,
/// message}}`, llama.cpp's and OpenAI's `{"error": {message, type,
/// code}}`, llama.cpp's mid-stream `{code, message, type}`, vLLM's
/// `{"object": "error", message, type}`, FastAPI's `{"detail"}`, or
/// `{"error": "text"}`. A body that is not a JSON object has none of
/// these (its text is the caller's to quote).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ErrorBody {
    #[serde(rename = "type", deserialize_with = "lenient")]
    pub kind: Option<String>,
    pub error: ErrorField,
    #[serde(deserialize_with = "lenient")]
    pub message: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub detail: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub n_prompt_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub n_ctx: Option<u64>,
}

/// An error body's `error`: an object, a sentence, or neither.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ErrorField {
    #[default]
    Absent,
    Object(ErrorDetail),
    Text(String),
}

impl<'de> Deserialize<'de> for ErrorField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            v @ Value::Object(_) => ErrorField::Object(read(v).unwrap_or_default()),
            Value::String(s) => ErrorField::Text(s),
            _ => ErrorField::Absent,
        })
    }
}

/// The object of an error body's `error`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ErrorDetail {
    #[serde(rename = "type", deserialize_with = "lenient")]
    pub kind: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub message: Option<String>,
    #[serde(deserialize_with = "lenient")]
    pub n_prompt_tokens: Option<u64>,
    #[serde(deserialize_with = "lenient")]
    pub n_ctx: Option<u64>,
}

impl ErrorBody {
    /// A body's bytes as an error body (none of the fields when it is not
    /// a JSON object).
    pub fn parse(body: &[u8]) -> ErrorBody {
        serde_json::from_slice::<Value>(body)
            .map(|v| Self::of(&v))
            .unwrap_or_default()
    }

    /// A parsed body as an error body.
    pub fn of(v: &Value) -> ErrorBody {
        match v {
            Value::Object(_) => ErrorBody::deserialize(v).unwrap_or_default(),
            _ => ErrorBody::default(),
        }
    }

    fn detail(&self) -> Option<&ErrorDetail> {
        match &self.error {
            ErrorField::Object(d) => Some(d),
            _ => None,
        }
    }

    /// The message: the first of `error.message`, `message`, `detail`
    /// and `error` (as a sentence) that is there as a string.
    pub fn message(&self) -> Option<String> {
        let text = match &self.error {
            ErrorField::Text(t) => Some(t),
            _ => None,
        };
        self.detail()
            .and_then(|d| d.message.as_ref())
            .or(self.message.as_ref())
            .or(self.detail.as_ref())
            .or(text)
            .cloned()
    }

    /// The error's type: `error.type` when `error` is an object, else the
    /// body's own `type` (llama.cpp's mid-stream shape).
    pub fn kind(&self) -> Option<&str> {
        match self.detail() {
            Some(d) => d.kind.as_deref(),
            None => self.kind.as_deref(),
        }
    }

    /// Prompt tokens and window, where llama.cpp gives them as fields.
    pub fn counts(&self) -> (Option<u64>, Option<u64>) {
        match self.detail() {
            Some(d) => (d.n_prompt_tokens, d.n_ctx),
            None => (self.n_prompt_tokens, self.n_ctx),
        }
    }

    /// Already Anthropic's shape: `type: "error"` and a typed `error`.
    pub fn is_anthropic(&self) -> bool {
        self.kind.as_deref() == Some("error") && self.detail().is_some_and(|d| d.kind.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // Bodies as servers sent them (the shim's tests hold the same).
    const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"qwen","stop_reason":null,"usage":{"input_tokens":12,"output_tokens":0,"cache_read_input_tokens":3}}}"#;

    #[test]
    fn each_event_type_reads() {
        let StreamEvent::MessageStart(s) = StreamEvent::read(None, START) else {
            panic!("not a start");
        };
        let m = s.message.unwrap();
        assert_eq!(m.typed.id.as_deref(), Some("msg_1"));
        assert_eq!(m.typed.usage.unwrap().input_tokens, Some(12));
        assert_eq!(m.typed.usage.unwrap().cache_read_input_tokens, Some(3));
        assert!(m.raw.contains_key("stop_reason"), "kept whole");
        let e = StreamEvent::read(
            Some("content_block_start"),
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t","name":"Read","input":{}}}"#,
        );
        let StreamEvent::ContentBlockStart(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!(b.index, Some(1));
        assert_eq!(b.content_block["name"], "Read");
        let e = StreamEvent::read(
            None,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        );
        let StreamEvent::ContentBlockDelta(d) = e else {
            panic!("{e:?}")
        };
        let d = d.delta.unwrap();
        assert_eq!(
            (d.kind.as_deref(), d.text.as_deref()),
            (Some("text_delta"), Some("Hi"))
        );
        let e = StreamEvent::read(
            None,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}"#,
        );
        let StreamEvent::ContentBlockDelta(d) = e else {
            panic!("{e:?}")
        };
        assert_eq!(d.delta.unwrap().partial_json.as_deref(), Some("{\"a\""));
        assert_eq!(
            StreamEvent::read(None, r#"{"type":"content_block_stop","index":2}"#),
            StreamEvent::ContentBlockStop(BlockStop { index: Some(2) })
        );
        let e = StreamEvent::read(
            None,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":7}}"#,
        );
        let StreamEvent::MessageDelta(d) = e else {
            panic!("{e:?}")
        };
        assert_eq!(d.delta.unwrap().typed.stop_reason.as_deref(), Some("end_turn"));
        assert_eq!(d.usage.unwrap().typed.output_tokens, Some(7));
        assert_eq!(
            StreamEvent::read(None, r#"{"type":"message_stop"}"#),
            StreamEvent::MessageStop
        );
        assert_eq!(
            StreamEvent::read(Some("ping"), r#"{"type": "ping"}"#),
            StreamEvent::Ping
        );
        let e = StreamEvent::read(
            Some("error"),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        let StreamEvent::Error(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!(
            (b.kind(), b.message().as_deref()),
            (Some("overloaded_error"), Some("Overloaded"))
        );
    }

    #[test]
    fn an_event_type_this_build_does_not_know_passes_as_unknown() {
        assert_eq!(
            StreamEvent::read(None, r#"{"type":"citations_delta_v9","index":0}"#),
            StreamEvent::Unknown
        );
        assert_eq!(StreamEvent::read(Some("new_event"), "{}"), StreamEvent::Unknown);
        let r = Reply::parse(br#"{"content":[{"type":"server_tool_use","id":"x"},3,{"type":"text","text":"a"}]}"#)
            .unwrap();
        assert_eq!(
            r.blocks(),
            [
                Block::Unknown,
                Block::Unknown,
                Block::Text {
                    text: Some("a".into())
                }
            ]
        );
    }

    #[test]
    fn a_field_of_the_wrong_type_reads_as_absent() {
        let r = Reply::parse(
            br#"{"id":7,"model":"m","content":[{"type":"text","text":5}],"stop_reason":["x"],"usage":{"input_tokens":"12","output_tokens":4}}"#,
        )
        .unwrap();
        assert_eq!(r.id, None);
        assert_eq!(r.model.as_deref(), Some("m"));
        assert_eq!(r.blocks(), [Block::Text { text: None }]);
        assert_eq!(r.stop_reason, None);
        let u = r.usage.unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (None, Some(4)));
        // The rule itself, for any field.
        assert_eq!(read::<u64>(json!("3")), None);
        assert_eq!(read::<u64>(json!(3)), Some(3));
        // The fallback goes on past a message of the wrong type.
        let b = ErrorBody::parse(br#"{"error": {"message": 5}, "message": "x"}"#);
        assert_eq!(b.message().as_deref(), Some("x"));
        assert!(Reply::parse(b"[1]").is_none());
    }

    #[test]
    fn each_error_body_shape_gives_its_message() {
        let anthropic = ErrorBody::parse(
            br#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
        );
        assert_eq!(anthropic.message().as_deref(), Some("slow down"));
        assert_eq!(anthropic.kind(), Some("rate_limit_error"));
        assert!(anthropic.is_anthropic());
        let llama = ErrorBody::parse(
            br#"{"error":{"code":400,"type":"exceed_context_size_error","message":"request (40123 tokens) exceeds the available context size (32768 tokens), try increasing it","n_prompt_tokens":40123,"n_ctx":32768}}"#,
        );
        assert_eq!(llama.kind(), Some("exceed_context_size_error"));
        assert!(llama.message().unwrap().starts_with("request (40123 tokens)"));
        assert_eq!(llama.counts(), (Some(40123), Some(32768)));
        assert!(!llama.is_anthropic());
        let mid_stream = ErrorBody::parse(
            br#"{"code":500,"message":"Context size has been exceeded.","type":"server_error"}"#,
        );
        assert_eq!(
            mid_stream.message().as_deref(),
            Some("Context size has been exceeded.")
        );
        assert_eq!(mid_stream.kind(), Some("server_error"));
        let plain = ErrorBody::parse(b"<html>bad gateway</html>");
        assert_eq!(plain, ErrorBody::default());
        assert_eq!(plain.message(), None);
        let detail = ErrorBody::parse(br#"{"detail": "d", "error": "e"}"#);
        assert_eq!(detail.message().as_deref(), Some("d"));
        let text = ErrorBody::parse(br#"{"error": "e"}"#);
        assert_eq!(text.message().as_deref(), Some("e"));
        assert_eq!(ErrorBody::parse(br#"{"error": ["e"]}"#).message(), None);
    }
}
