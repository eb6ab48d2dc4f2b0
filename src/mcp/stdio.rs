//! The MCP server's stdio: every line that comes in gets an answer.
//!
//! rmcp's own stdio transport drops a line that is not JSON, not UTF-8,
//! nested deeper than 128 or longer than 16 MiB without a reply (the request
//! waits out the client's timeout), answers an invalid request without its
//! `id`, and reads stdin on Tokio's blocking pool, where a read cannot be
//! cancelled (a signal could not end `serve` while stdin stayed open). So
//! stdin is read here, on a thread of its own, a bounded line at a time: a
//! line that does not parse gets a JSON-RPC parse error (`-32700`, `"id":
//! null`) written straight back, an invalid request gets `-32600` with its
//! `id`, and rmcp gets only the messages that parse. Every write to stdout,
//! rmcp's and ours, goes through one writer thread, a whole line at a time.

use std::io::{self, BufRead, Write};

use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::anthropic::present;

/// The longest line read; the rest of a longer one is discarded (rmcp's
/// own limit, `DEFAULT_MAX_LINE_LENGTH`).
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// JSON-RPC's "Parse error".
const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "Invalid Request".
const INVALID_REQUEST: i64 = -32600;

/// One line for the writer thread, and who waits for it to be written.
struct Outgoing {
    line: Vec<u8>,
    done: Option<tokio::sync::oneshot::Sender<io::Result<()>>>,
}

/// rmcp's transport over a reader and a writer of ours (stdin and stdout in
/// `serve`).
pub struct LineTransport {
    incoming: tokio::sync::mpsc::Receiver<RxJsonRpcMessage<RoleServer>>,
    out: std::sync::mpsc::Sender<Outgoing>,
}

/// The transport over this process's stdin and stdout.
pub fn stdio() -> LineTransport {
    let input = io::BufReader::with_capacity(64 * 1024, io::stdin());
    LineTransport::new(input, io::stdout(), MAX_LINE_BYTES)
}

impl LineTransport {
    /// Read `input` and write `output` on threads of their own (neither
    /// holds up the runtime's shutdown); lines over `max_line` bytes get a
    /// parse error.
    pub fn new<R, W>(mut input: R, mut output: W, max_line: usize) -> Self
    where
        R: BufRead + Send + 'static,
        W: Write + Send + 'static,
    {
        let (out, lines) = std::sync::mpsc::channel::<Outgoing>();
        std::thread::spawn(move || {
            for Outgoing { mut line, done } in lines {
                line.push(b'\n');
                let r = output.write_all(&line).and_then(|()| output.flush());
                let failed = r.is_err();
                if let Some(done) = done {
                    let _ = done.send(r);
                }
                if failed {
                    return;
                }
            }
        });
        let (tx, incoming) = tokio::sync::mpsc::channel(16);
        let replies = out.clone();
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            loop {
                let verdict = match read_line(&mut input, &mut buf, max_line) {
                    Ok(Line::Eof) | Err(_) => return,
                    Ok(Line::TooLong) => Verdict::Reply(error_reply(
                        PARSE_ERROR,
                        &format!("Parse error: a line longer than {max_line} bytes was discarded"),
                        Value::Null,
                    )),
                    Ok(Line::Whole) => judge(&buf),
                };
                match verdict {
                    Verdict::Skip => {}
                    Verdict::Message(m) => {
                        if tx.blocking_send(*m).is_err() {
                            return;
                        }
                    }
                    Verdict::Reply(v) => {
                        let line = v.to_string().into_bytes();
                        if replies.send(Outgoing { line, done: None }).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        Self { incoming, out }
    }
}

impl Transport<RoleServer> for LineTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let out = self.out.clone();
        async move {
            let line = serde_json::to_vec(&item).map_err(io::Error::other)?;
            let (done, written) = tokio::sync::oneshot::channel();
            let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "stdout is closed");
            out.send(Outgoing {
                line,
                done: Some(done),
            })
            .map_err(|_| closed())?;
            written.await.map_err(|_| closed())?
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.incoming.close();
        Ok(())
    }
}

/// What [`read_line`] found.
#[derive(Debug, PartialEq)]
enum Line {
    /// A whole line (without its `\n`) is in the buffer; the last line
    /// without a newline counts too.
    Whole,
    /// A line over the limit, read to its end and discarded.
    TooLong,
    Eof,
}

/// Read one line into `buf`, keeping at most `max` bytes of it: a longer
/// line is read to its end and dropped, so memory stays bounded.
fn read_line(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> io::Result<Line> {
    buf.clear();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok(match (any, too_long) {
                (false, _) => Line::Eof,
                (true, true) => Line::TooLong,
                (true, false) => Line::Whole,
            });
        }
        any = true;
        let newline = chunk.iter().position(|b| *b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        if !too_long {
            if buf.len() + part.len() > max {
                too_long = true;
                *buf = Vec::new();
            } else {
                buf.extend_from_slice(part);
            }
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        r.consume(used);
        if newline.is_some() {
            return Ok(if too_long { Line::TooLong } else { Line::Whole });
        }
    }
}

/// What to do with one line.
#[derive(Debug)]
enum Verdict {
    /// A message for rmcp.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// An error reply we write ourselves.
    Reply(Value),
    /// Nothing: a blank line, or a notification nobody answers.
    Skip,
}

fn error_reply(code: i64, message: &str, id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// The JSON-RPC keys of a line rmcp could not read: each one there
/// (`null` too) is `Some`.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Envelope {
    #[serde(deserialize_with = "present")]
    id: Option<Value>,
    #[serde(deserialize_with = "present")]
    method: Option<Value>,
    #[serde(deserialize_with = "present")]
    result: Option<Value>,
    #[serde(deserialize_with = "present")]
    error: Option<Value>,
}

/// Parse one line as rmcp would, and answer what rmcp would not.
fn judge(line: &[u8]) -> Verdict {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    if line.iter().all(u8::is_ascii_whitespace) {
        return Verdict::Skip;
    }
    if std::str::from_utf8(line).is_err() {
        return Verdict::Reply(error_reply(
            PARSE_ERROR,
            "Parse error: the line is not valid UTF-8",
            Value::Null,
        ));
    }
    let e = match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
        Ok(m) => return Verdict::Message(Box::new(m)),
        Err(e) => e,
    };
    // Valid JSON of the wrong shape parses as a `Value`; anything else
    // (bad syntax, cut short, nested deeper than 128) does not.
    let value = match serde_json::from_slice::<Value>(line) {
        Ok(v) => v,
        Err(parse) => {
            return Verdict::Reply(error_reply(
                PARSE_ERROR,
                &format!("Parse error: {parse}"),
                Value::Null,
            ));
        }
    };
    let env = match &value {
        Value::Object(_) => Envelope::deserialize(&value).unwrap_or_default(),
        _ => Envelope::default(),
    };
    match env.id {
        // A notification (no id) gets no reply, by JSON-RPC's rule; rmcp
        // ignores the ones it does not know.
        None if env.method.is_some() => Verdict::Skip,
        // A reply of the client's that we cannot read: nothing to answer.
        None | Some(Value::Null) if env.result.is_some() || env.error.is_some() => {
            Verdict::Skip
        }
        Some(id @ (Value::String(_) | Value::Number(_))) => Verdict::Reply(error_reply(
            INVALID_REQUEST,
            &format!("Invalid request: {e}"),
            id,
        )),
        _ => Verdict::Reply(error_reply(
            INVALID_REQUEST,
            &format!("Invalid request: {e}"),
            Value::Null,
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<Result<Vec<u8>, Line>> {
        let mut r = io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            match read_line(&mut r, &mut buf, max).unwrap() {
                Line::Eof => return out,
                Line::Whole => out.push(Ok(buf.clone())),
                other => out.push(Err(other)),
            }
        }
    }

    #[test]
    fn an_over_long_line_is_discarded_and_the_next_one_read() {
        assert_eq!(
            lines(b"abc\n0123456789\nde\nlast", 5),
            vec![
                Ok(b"abc".to_vec()),
                Err(Line::TooLong),
                Ok(b"de".to_vec()),
                Ok(b"last".to_vec()),
            ]
        );
        assert_eq!(lines(b"0123456789", 5), vec![Err(Line::TooLong)]);
        assert_eq!(lines(b"", 5), vec![]);
    }

    fn reply(line: &[u8]) -> Value {
        match judge(line) {
            Verdict::Reply(v) => v,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn each_bad_line_gets_its_error() {
        for bad in [
            b"{\"jsonrpc\":".to_vec(),
            b"{\"a\":\"\xff\"}".to_vec(),
            format!("{}{}", "[".repeat(200), "]".repeat(200)).into_bytes(),
        ] {
            let r = reply(&bad);
            assert_eq!(r["error"]["code"], PARSE_ERROR, "{r}");
            assert_eq!(r["id"], Value::Null, "{r}");
            assert!(r.as_object().unwrap().contains_key("id"));
        }
        let r = reply(br#"{"jsonrpc":"2.0","id":"x","method":5}"#);
        assert_eq!(
            (&r["error"]["code"], &r["id"]),
            (&json!(INVALID_REQUEST), &json!("x"))
        );
        let r = reply(br#"{"hello":1}"#);
        assert_eq!(
            (&r["error"]["code"], &r["id"]),
            (&json!(INVALID_REQUEST), &Value::Null)
        );
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            Verdict::Message(_)
        ));
        assert!(matches!(judge(b"  \r"), Verdict::Skip));
        assert!(matches!(
            judge(br#"{"jsonrpc":"2.0","method":"$/lsp"}"#),
            Verdict::Skip | Verdict::Message(_)
        ));
    }
}
