//! Folding `role:"system"` entries of `messages` into user messages, in
//! place, so strict chat templates accept the request and the prompt stays
//! append-only.
//!
//! Claude Code puts `role:"system"` entries inside `messages` (2.1.328: the
//! environment block at index 1; older versions added more every turn).
//! Strict templates (Qwen 3.x and others) raise "System message must be at
//! the beginning". Hoisting them into the top-level `system` would change the
//! start of the prompt whenever a new one appears and throw away the server's
//! KV-cache prefix. Folding each into the *nearest preceding* user message
//! (else the next one, else the top-level `system`) keeps every earlier
//! token where it was: Claude Code only ever appends after the last user
//! message, so a new system entry lands in the last or a newer user message.
//!
//! The folded block is `<system>\n{text}\n</system>`. The same entry arrives
//! as a list of text blocks on the first request and as a plain string later;
//! [`system_text`] renders both to identical bytes.

use serde_json::{Map, Value, json};

/// What folding did to one body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FoldStats {
    /// System entries folded out of `messages`.
    pub folded: usize,
    /// Attribution/billing blocks dropped from the top-level `system`.
    pub billing_dropped: usize,
}

/// The marker Claude Code puts at the start of its per-request attribution
/// block. The block changes every request and breaks prefix caching.
pub const BILLING_PREFIX: &str = "x-anthropic-billing-header";

/// The text of a system entry's content: a string as is, a list of blocks as
/// their `text` fields joined by a newline (non-text blocks are skipped).
pub fn system_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                Value::Object(o) => o.get("text").and_then(Value::as_str),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The `cache_control` of the last block that has one, if the content is a
/// block list.
fn cache_control(content: &Value) -> Option<Value> {
    content
        .as_array()?
        .iter()
        .rev()
        .find_map(|b| b.get("cache_control").cloned())
}

fn folded_block(content: &Value) -> Value {
    let mut block = Map::new();
    block.insert("type".into(), Value::String("text".into()));
    block.insert(
        "text".into(),
        Value::String(format!("<system>\n{}\n</system>", system_text(content))),
    );
    if let Some(cc) = cache_control(content) {
        block.insert("cache_control".into(), cc);
    }
    Value::Object(block)
}

/// Turn a message's content into a block list (a string becomes one text
/// block) and return it for editing.
fn blocks_of(msg: &mut Value) -> Option<&mut Vec<Value>> {
    let obj = msg.as_object_mut()?;
    let content = obj.entry("content").or_insert(Value::Array(Vec::new()));
    if let Value::String(s) = content {
        *content = json!([{"type": "text", "text": std::mem::take(s)}]);
    }
    if content.is_null() {
        *content = Value::Array(Vec::new());
    }
    content.as_array_mut()
}

fn role(msg: &Value) -> Option<&str> {
    msg.get("role").and_then(Value::as_str)
}

/// Drop attribution/billing blocks from the top-level `system`.
fn drop_billing(body: &mut Map<String, Value>) -> usize {
    match body.get_mut("system") {
        Some(Value::Array(blocks)) => {
            let before = blocks.len();
            blocks.retain(|b| {
                !b.get("text")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.trim_start().starts_with(BILLING_PREFIX))
            });
            before - blocks.len()
        }
        Some(Value::String(s)) if s.trim_start().starts_with(BILLING_PREFIX) => {
            // The whole system string is the header line plus the rest.
            let rest = s.trim_start().split_once('\n').map(|(_, r)| r.to_string());
            *s = rest.unwrap_or_default();
            1
        }
        _ => 0,
    }
}

fn append_to_top_system(body: &mut Map<String, Value>, block: Value) {
    match body.get_mut("system") {
        Some(Value::Array(blocks)) => blocks.push(block),
        Some(Value::String(s)) => {
            let mut blocks = Vec::new();
            if !s.is_empty() {
                blocks.push(json!({"type": "text", "text": std::mem::take(s)}));
            }
            blocks.push(block);
            body.insert("system".into(), Value::Array(blocks));
        }
        _ => {
            body.insert("system".into(), Value::Array(vec![block]));
        }
    }
}

/// Fold every in-`messages` system entry of a Messages (or count_tokens)
/// body, in place. Bodies that are not objects, or have no `messages` list,
/// are left alone.
pub fn fold(body: &mut Value) -> FoldStats {
    let mut stats = FoldStats::default();
    let Some(obj) = body.as_object_mut() else {
        return stats;
    };
    stats.billing_dropped = drop_billing(obj);
    let Some(Value::Array(messages)) = obj.get_mut("messages") else {
        return stats;
    };
    if !messages.iter().any(|m| role(m) == Some("system")) {
        return stats;
    }
    let taken = std::mem::take(messages);
    let mut out: Vec<Value> = Vec::with_capacity(taken.len());
    // System entries seen before any user message, waiting for the next one.
    let mut pending: Vec<Value> = Vec::new();
    let mut last_user: Option<usize> = None;
    for msg in taken {
        match role(&msg) {
            Some("system") => {
                stats.folded += 1;
                let block = folded_block(msg.get("content").unwrap_or(&Value::Null));
                match last_user {
                    Some(i) => {
                        if let Some(blocks) = blocks_of(&mut out[i]) {
                            blocks.push(block);
                        }
                    }
                    None => pending.push(block),
                }
            }
            Some("user") => {
                out.push(msg);
                let i = out.len() - 1;
                if !pending.is_empty()
                    && let Some(blocks) = blocks_of(&mut out[i])
                {
                    let rest = std::mem::take(blocks);
                    blocks.append(&mut pending);
                    blocks.extend(rest);
                }
                last_user = Some(i);
            }
            _ => out.push(msg),
        }
    }
    *messages = out;
    for block in pending {
        append_to_top_system(obj, block);
    }
    stats
}

/// A body flattened to `(role, block)` items with `cache_control` removed:
/// the prompt "in content terms". Used to check the append-only property.
pub fn content_items(body: &Value) -> Vec<(String, Value)> {
    let strip = |b: &Value| -> Value {
        let mut b = match b {
            Value::String(s) => json!({"type": "text", "text": s}),
            other => other.clone(),
        };
        if let Some(o) = b.as_object_mut() {
            o.remove("cache_control");
        }
        b
    };
    let mut items = Vec::new();
    match body.get("system") {
        Some(Value::String(s)) => items.push(("system".into(), strip(&Value::String(s.clone())))),
        Some(Value::Array(a)) => items.extend(a.iter().map(|b| ("system".to_string(), strip(b)))),
        _ => {}
    }
    if let Some(Value::Array(msgs)) = body.get("messages") {
        for m in msgs {
            let r = role(m).unwrap_or("?").to_string();
            match m.get("content") {
                Some(Value::Array(a)) => items.extend(a.iter().map(|b| (r.clone(), strip(b)))),
                Some(c) => items.push((r, strip(c))),
                None => {}
            }
        }
    }
    items
}

/// True when `a`'s content items are a prefix of `b`'s.
pub fn is_content_prefix(a: &Value, b: &Value) -> bool {
    let (a, b) = (content_items(a), content_items(b));
    a.len() <= b.len() && a.iter().zip(&b).all(|(x, y)| x == y)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sys_block(text: &str) -> Value {
        json!({"type": "text", "text": format!("<system>\n{text}\n</system>")})
    }

    #[test]
    fn string_content_after_user_is_appended_to_it() {
        let mut b = json!({"messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "env"}
        ]});
        let s = fold(&mut b);
        assert_eq!(s.folded, 1);
        assert_eq!(
            b["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}, sys_block("env")]}])
        );
    }

    #[test]
    fn block_content_keeps_order_and_cache_control() {
        let mut b = json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": [{"type": "text", "text": "env", "cache_control": {"type": "ephemeral"}}]}
        ]});
        fold(&mut b);
        let blocks = b["messages"][0]["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks[0]["text"], "a");
        assert_eq!(blocks[1]["cache_control"], json!({"type": "ephemeral"}));
        assert_eq!(blocks[2]["text"], "<system>\nenv\n</system>");
        assert_eq!(blocks[2]["cache_control"], json!({"type": "ephemeral"}));
    }

    #[test]
    fn block_list_and_string_fold_to_identical_text() {
        let text =
            "# Environment\nYou have been invoked in the following environment: \n - cwd: /x\n";
        let mut first = json!({"messages": [{"role": "user", "content": "go"}, {"role": "system", "content": [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}]});
        let mut later = json!({"messages": [{"role": "user", "content": "go"}, {"role": "system", "content": text}]});
        fold(&mut first);
        fold(&mut later);
        assert_eq!(
            first["messages"][0]["content"][1]["text"],
            later["messages"][0]["content"][1]["text"]
        );
        assert!(is_content_prefix(&first, &later) && is_content_prefix(&later, &first));
    }

    #[test]
    fn leading_system_goes_to_the_start_of_the_next_user_message() {
        let mut b = json!({"messages": [
            {"role": "system", "content": "s1"},
            {"role": "system", "content": "s2"},
            {"role": "user", "content": [{"type": "text", "text": "q"}]}
        ]});
        assert_eq!(fold(&mut b).folded, 2);
        let blocks = b["messages"][0]["content"].as_array().unwrap();
        assert_eq!(
            blocks,
            &vec![
                sys_block("s1"),
                sys_block("s2"),
                json!({"type": "text", "text": "q"})
            ]
        );
    }

    #[test]
    fn several_after_assistant_go_to_the_preceding_user_in_order() {
        let mut b = json!({"messages": [
            {"role": "user", "content": "u0"},
            {"role": "assistant", "content": [{"type": "text", "text": "a1"}]},
            {"role": "system", "content": "s2"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]},
            {"role": "system", "content": "s4"},
            {"role": "system", "content": "s5"}
        ]});
        assert_eq!(fold(&mut b).folded, 3);
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0]["content"][1], sys_block("s2"));
        assert_eq!(m[2]["content"][1], sys_block("s4"));
        assert_eq!(m[2]["content"][2], sys_block("s5"));
        assert!(m.iter().all(|x| x["role"] != "system"));
    }

    #[test]
    fn no_user_message_goes_to_top_level_system() {
        let mut b = json!({"system": "top", "messages": [{"role": "system", "content": "s"}]});
        fold(&mut b);
        assert_eq!(b["messages"], json!([]));
        assert_eq!(
            b["system"],
            json!([{"type": "text", "text": "top"}, sys_block("s")])
        );
        let mut b = json!({"messages": [{"role": "system", "content": "s"}]});
        fold(&mut b);
        assert_eq!(b["system"], json!([sys_block("s")]));
    }

    #[test]
    fn billing_block_is_dropped() {
        let mut b = json!({"system": [
            {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328.abc; cc_entrypoint=sdk-cli;"},
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ], "messages": [{"role": "user", "content": "hi"}]});
        let s = fold(&mut b);
        assert_eq!(s.billing_dropped, 1);
        assert_eq!(s.folded, 0);
        assert_eq!(b["system"].as_array().unwrap().len(), 1);
        assert_eq!(
            b["messages"][0]["content"], "hi",
            "untouched when nothing to fold"
        );
    }

    #[test]
    fn non_object_and_odd_shapes_do_not_panic() {
        for mut v in [
            json!(null),
            json!([1, 2]),
            json!({"messages": 5}),
            json!({"messages": [{"role": "system"}, 7, {"role": "user", "content": null}]}),
        ] {
            fold(&mut v);
        }
    }
}
