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
//! image moves there: after the message's last tool result (tool results
//! stay first, as Anthropic's order and strict converters want), and the
//! result it came from keeps a note that says so. The request stays
//! append-only: every turn lifts the same images the same way.

use serde_json::{Value, json};

/// Could this raw user message hold an image inside a tool result? (A
/// cheap look before parsing it.)
pub fn may_hold(raw: &str) -> bool {
    raw.contains("\"tool_result\"") && raw.contains("\"image\"")
}

/// Move each image out of the tool results of a user message, to after
/// its last tool result, in order; how many moved.
pub fn lift(msg: &mut Value) -> usize {
    let Some(blocks) = msg.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let is_result = |b: &Value| b.get("type").and_then(Value::as_str) == Some("tool_result");
    let Some(last) = blocks.iter().rposition(is_result) else {
        return 0;
    };
    let mut out = Vec::with_capacity(blocks.len());
    let mut lifted = Vec::new();
    for (i, mut block) in blocks.drain(..).enumerate() {
        if is_result(&block)
            && let Some(parts) = block.get_mut("content").and_then(Value::as_array_mut)
        {
            let (imgs, rest): (Vec<Value>, Vec<Value>) = parts
                .drain(..)
                .partition(|p| p.get("type").and_then(Value::as_str) == Some("image"));
            *parts = rest;
            if !imgs.is_empty() {
                parts.push(json!({"type": "text", "text": format!(
                    "[{} image{} of this result follow{} the tool results]",
                    imgs.len(),
                    if imgs.len() == 1 { "" } else { "s" },
                    if imgs.len() == 1 { "s" } else { "" },
                )}));
            }
            lifted.extend(imgs);
        }
        out.push(block);
        if i == last {
            out.append(&mut lifted.clone());
        }
    }
    *blocks = out;
    lifted.len()
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
                    {"type": "text", "text": "[1 image of this result follows the tool results]"}]},
                img,
                {"type": "text", "text": "what is in it?"}
            ])
        );
        // Lifted again (the next turn sends the same message): the same.
        let again = msg.clone();
        assert_eq!(lift(&mut msg), 0);
        assert_eq!(msg, again);
    }

    /// Parallel Reads of two pictures: both results first, then both
    /// images, in order.
    #[test]
    fn two_results_keep_their_place_and_the_images_follow_both() {
        let img = |d: &str| json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": d}});
        let mut msg = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "a", "content": [img("A")]},
            {"type": "tool_result", "tool_use_id": "b", "content": [{"type": "text", "text": "b.png"}, img("B")]}
        ]});
        assert_eq!(lift(&mut msg), 2);
        let kinds: Vec<&str> = msg["content"].as_array().unwrap().iter().map(|b| b["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["tool_result", "tool_result", "image", "image"]);
        assert_eq!(msg["content"][2], img("A"));
        assert_eq!(msg["content"][3], img("B"));
        assert_eq!(msg["content"][1]["content"][0]["text"], "b.png");
    }
}
