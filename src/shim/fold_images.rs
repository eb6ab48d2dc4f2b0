//! Images inside tool results, lifted out for the servers that cannot
//! take them there: a part of the fold's rewrite of a request's bytes
//! ([`super::fold`] calls it on the user messages that hold one).
//!
//! Claude Code's Read of a picture answers with a `tool_result` whose
//! content holds an `image` block. LM Studio refuses the request ("Only
//! text tool_result blocks are supported when tool_result.content is an
//! array", lmstudio-bug-tracker #1590 on 0.4.6, #1878 on 0.4.12); Lemonade,
//! LocalAI, vllm-mlx and exo drop the image without a word
//! (docs/servers/), so the model answers about a picture it never saw.
//! Each of them takes an image in a user message's own content, so the
//! image moves there: right after the tool result it belonged to, which
//! keeps a note of where it went. The request stays append-only: every
//! turn lifts the same images the same way.

use serde_json::{Value, json};

/// Could this raw user message hold an image inside a tool result? (A
/// cheap look before parsing it.)
pub fn may_hold(raw: &str) -> bool {
    raw.contains("\"tool_result\"") && raw.contains("\"image\"")
}

/// Move each image out of the tool results of a user message, to just
/// after its tool result; how many moved.
pub fn lift(msg: &mut Value) -> usize {
    let Some(blocks) = msg.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let mut out = Vec::with_capacity(blocks.len());
    let mut moved = 0;
    for mut block in blocks.drain(..) {
        let mut images = Vec::new();
        if block.get("type").and_then(Value::as_str) == Some("tool_result")
            && let Some(parts) = block.get_mut("content").and_then(Value::as_array_mut)
        {
            let (imgs, rest): (Vec<Value>, Vec<Value>) = parts
                .drain(..)
                .partition(|p| p.get("type").and_then(Value::as_str) == Some("image"));
            *parts = rest;
            if !imgs.is_empty() {
                parts.push(json!({"type": "text", "text": format!(
                    "[{} image{} of this result follow{} it]",
                    imgs.len(),
                    if imgs.len() == 1 { "" } else { "s" },
                    if imgs.len() == 1 { "s" } else { "" },
                )}));
            }
            images = imgs;
        }
        moved += images.len();
        out.push(block);
        out.extend(images);
    }
    *blocks = out;
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Claude Code 2.1.328's Read of a PNG: a tool result holding an image.
    #[test]
    fn an_image_in_a_tool_result_moves_after_it() {
        let img = json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}});
        let mut msg = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [img.clone()]},
            {"type": "text", "text": "what is in it?"}
        ]});
        assert!(may_hold(&msg.to_string()));
        assert_eq!(lift(&mut msg), 1);
        assert_eq!(
            msg["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [
                    {"type": "text", "text": "[1 image of this result follows it]"}]},
                img,
                {"type": "text", "text": "what is in it?"}
            ])
        );
        // Lifted again (the next turn sends the same message): the same.
        let again = msg.clone();
        assert_eq!(lift(&mut msg), 0);
        assert_eq!(msg, again);
    }
}
