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
//! (With 2.1.328's one constant entry, hoisting would keep one session's
//! prefix too; but that entry is the environment block, with the job's
//! working directory, and hoisting it into `system` would put job-specific
//! text ahead of the tool schemas, so no job could reuse the previous one's
//! cached `system` and `tools`. Folded, it sits in `messages`, after them.)
//!
//! The folded block is `<system>\n{text}\n</system>`. The same entry arrives
//! as a list of text blocks on the first request and as a plain string later;
//! [`system_text`] renders both to identical bytes.

use std::collections::HashMap;

use indexmap::IndexMap;
use serde_json::value::RawValue;
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

/// Where one system entry goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dest {
    /// Appended to the user message at this index.
    Append(usize),
    /// Prepended to the user message at this index (no user before it).
    Prepend(usize),
    /// No user message at all: the top-level `system`.
    Top,
}

/// For each message role, where each system entry goes, in order.
fn plan(roles: &[Option<&str>]) -> Vec<(usize, Dest)> {
    let mut out = Vec::new();
    let mut pending = Vec::new();
    let mut last_user = None;
    for (i, r) in roles.iter().enumerate() {
        match *r {
            Some("system") => match last_user {
                Some(u) => out.push((i, Dest::Append(u))),
                None => pending.push(i),
            },
            Some("user") => {
                out.extend(pending.drain(..).map(|p| (p, Dest::Prepend(i))));
                last_user = Some(i);
            }
            _ => {}
        }
    }
    out.extend(pending.into_iter().map(|p| (p, Dest::Top)));
    out
}

/// Apply a plan to a user message: prepended blocks, its own, appended.
fn apply_to_user(msg: &mut Value, pre: Vec<Value>, post: Vec<Value>) {
    if let Some(blocks) = blocks_of(msg) {
        let own = std::mem::take(blocks);
        blocks.extend(pre);
        blocks.extend(own);
        blocks.extend(post);
    }
}

/// Fold every in-`messages` system entry of a Messages (or count_tokens)
/// body, in place. Bodies that are not objects, or have no `messages` list,
/// are left alone. This is the reference implementation; the shim uses
/// [`fold_raw`], which gives the same result without parsing what it does
/// not change.
pub fn fold(body: &mut Value) -> FoldStats {
    let mut stats = FoldStats::default();
    let Some(obj) = body.as_object_mut() else {
        return stats;
    };
    stats.billing_dropped = drop_billing(obj);
    let Some(Value::Array(messages)) = obj.get_mut("messages") else {
        return stats;
    };
    let roles: Vec<Option<&str>> = messages.iter().map(role).collect();
    let plan = plan(&roles);
    if plan.is_empty() {
        return stats;
    }
    stats.folded = plan.len();
    let mut pre: HashMap<usize, Vec<Value>> = HashMap::new();
    let mut post: HashMap<usize, Vec<Value>> = HashMap::new();
    let mut top = Vec::new();
    for (i, dest) in &plan {
        let block = folded_block(messages[*i].get("content").unwrap_or(&Value::Null));
        match dest {
            Dest::Append(u) => post.entry(*u).or_default().push(block),
            Dest::Prepend(u) => pre.entry(*u).or_default().push(block),
            Dest::Top => top.push(block),
        }
    }
    let taken = std::mem::take(messages);
    for (i, mut msg) in taken.into_iter().enumerate() {
        if role(&msg) == Some("system") {
            continue;
        }
        if pre.contains_key(&i) || post.contains_key(&i) {
            apply_to_user(
                &mut msg,
                pre.remove(&i).unwrap_or_default(),
                post.remove(&i).unwrap_or_default(),
            );
        }
        messages.push(msg);
    }
    for block in top {
        append_to_top_system(obj, block);
    }
    stats
}

/// Facts about a request that the shim logs and acts on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    pub stats: FoldStats,
    pub model: Option<String>,
    pub stream: bool,
    pub messages: usize,
    pub tools: usize,
    pub max_tokens: Option<u64>,
    /// Where the `tools` array sits in the outgoing body (byte range), so
    /// the answer's repair can read the offered tools without a copy.
    pub tools_range: Option<(usize, usize)>,
    /// What the loop guard found.
    pub loops: super::loops::Scan,
    /// The turn budget's note placed first in this request, if any.
    pub turn_note: Option<String>,
    /// Thinking blocks dropped from the history (`thinking: drop`).
    pub thinking_dropped: usize,
    /// Images moved out of tool results ([`super::fold_images`]).
    pub images_lifted: usize,
}

/// What the shim adds to a fold besides the system entries.
#[derive(Debug, Clone, Copy, Default)]
pub struct Extras<'a> {
    /// The job's loop guard and its limit (0: off).
    pub loops: Option<(&'a super::loops::Marks, u32)>,
    /// Drop `thinking` and `redacted_thinking` blocks from assistant turns.
    pub drop_thinking: bool,
    /// The job's turn budget ([`super::turns`]).
    pub turns: Option<&'a super::turns::TurnBudget>,
    /// Move images out of tool results ([`super::fold_images`]).
    pub lift_images: bool,
}

/// Thinking blocks of an assistant message, removed; how many. A message
/// left with no block at all keeps an empty text block, so the turns still
/// alternate.
fn drop_thinking_blocks(msg: &mut Value) -> usize {
    let Some(blocks) = msg.get_mut("content").and_then(Value::as_array_mut) else {
        return 0;
    };
    let before = blocks.len();
    blocks.retain(|b| {
        !matches!(
            b.get("type").and_then(Value::as_str),
            Some("thinking" | "redacted_thinking")
        )
    });
    let n = before - blocks.len();
    if n > 0 && blocks.is_empty() {
        blocks.push(json!({"type": "text", "text": ""}));
    }
    n
}

/// Could this raw assistant message hold a thinking block? (A cheap look
/// before parsing it.)
fn may_think(raw: &str) -> bool {
    raw.contains("\"thinking\"") || raw.contains("\"redacted_thinking\"")
}

#[derive(serde::Deserialize)]
struct RoleOnly<'a> {
    #[serde(borrow)]
    role: Option<std::borrow::Cow<'a, str>>,
}

/// The `role` of a raw message. Claude Code writes `role` first, so the
/// common case is read off the front without another scan of the content.
fn role_of_raw(m: &str) -> Option<String> {
    const HEAD: &str = "{\"role\":\"";
    if let Some(rest) = m.strip_prefix(HEAD)
        && let Some(end) = rest.find('"')
        && !rest[..end].contains('\\')
    {
        return Some(rest[..end].to_string());
    }
    serde_json::from_str::<RoleOnly>(m)
        .ok()
        .and_then(|r| r.role.map(|c| c.into_owned()))
}

fn raw(v: &impl serde::Serialize) -> Result<Box<RawValue>, serde_json::Error> {
    serde_json::value::to_raw_value(v)
}

/// The shim's fast path: fold, set `model`, cap `max_tokens`, working on
/// the raw JSON. Fields it does not change are copied byte for byte, and only
/// the messages that receive a fold are parsed into a tree.
pub fn fold_raw(
    body: &[u8],
    model: Option<&str>,
    max_tokens_cap: Option<u64>,
) -> Result<(Vec<u8>, Facts), serde_json::Error> {
    fold_raw_with(body, model, max_tokens_cap, Extras::default())
}

/// [`fold_raw`] with the loop guard's notes and the thinking policy.
pub fn fold_raw_with(
    body: &[u8],
    model: Option<&str>,
    max_tokens_cap: Option<u64>,
    extras: Extras<'_>,
) -> Result<(Vec<u8>, Facts), serde_json::Error> {
    let top: IndexMap<String, &RawValue> = serde_json::from_slice(body)?;
    let mut facts = Facts::default();
    let tools = top.get("tools").is_some_and(|t| t.get().trim() != "[]");
    let mut out_fields: Vec<(String, Piece<'_>)> = Vec::with_capacity(top.len() + 1);
    let mut top_blocks: Vec<Value> = Vec::new();
    for (k, v) in &top {
        let piece = if k == "messages" {
            fold_messages(v, extras, tools, &mut facts, &mut top_blocks)?.map(Piece::Bytes)
        } else {
            top_field(k, v, model, max_tokens_cap, &mut facts)?.map(Piece::Owned)
        };
        out_fields.push((k.clone(), piece.unwrap_or(Piece::Borrowed(v))));
    }
    if model.is_some() && !top.contains_key("model") {
        out_fields.push(("model".into(), Piece::Owned(raw(&model)?)));
    }
    if !top_blocks.is_empty() {
        add_to_top_system(&mut out_fields, top_blocks)?;
    }
    write_object(&out_fields, body.len(), &mut facts).map(|out| (out, facts))
}

/// The `messages` array folded: system entries moved into the user turns
/// (or the top `system`, into `top_blocks`), the loop note added, old
/// thinking dropped. `None` when nothing changes (the bytes pass as they
/// came); the facts of the array either way.
fn fold_messages(
    v: &RawValue,
    extras: Extras<'_>,
    tools: bool,
    facts: &mut Facts,
    top_blocks: &mut Vec<Value>,
) -> Result<Option<Vec<u8>>, serde_json::Error> {
    let Ok(msgs) = serde_json::from_str::<Vec<&RawValue>>(v.get()) else {
        return Ok(None);
    };
    facts.messages = msgs.len();
    let roles_owned: Vec<Option<String>> = msgs.iter().map(|m| role_of_raw(m.get())).collect();
    let roles: Vec<Option<&str>> = roles_owned.iter().map(|r| r.as_deref()).collect();
    let plan = plan(&roles);
    if let Some((marks, limit)) = extras.loops {
        facts.loops = marks.scan(&msgs, &roles, limit);
    }
    let thinking: Vec<usize> = (0..msgs.len())
        .filter(|&i| {
            (extras.drop_thinking && roles[i] == Some("assistant") && may_think(msgs[i].get()))
                || (extras.lift_images
                    && roles[i] == Some("user")
                    && super::fold_images::may_hold(msgs[i].get()))
        })
        .collect();
    let turns = extras
        .turns
        .map(|t| t.scan(&msgs, &roles, tools))
        .unwrap_or_default();
    facts.turn_note = turns.new_note;
    if plan.is_empty() && facts.loops.notes.is_empty() && thinking.is_empty() && turns.notes.is_empty()
    {
        return Ok(None);
    }
    facts.stats.folded = plan.len();
    let mut moved = Moved::default();
    for (i, dest) in &plan {
        let entry: Value = serde_json::from_str(msgs[*i].get())?;
        let block = folded_block(entry.get("content").unwrap_or(&Value::Null));
        match dest {
            Dest::Append(u) => moved.post.entry(*u).or_default().push(block),
            Dest::Prepend(u) => moved.pre.entry(*u).or_default().push(block),
            Dest::Top => top_blocks.push(block),
        }
    }
    // The loop note goes after everything else of its user message, on
    // every request alike.
    if let Some((_, limit)) = extras.loops {
        for u in &facts.loops.notes {
            moved
                .post
                .entry(*u)
                .or_default()
                .push(folded_block(&Value::String(super::loops::note_text(limit))));
        }
    }
    for p in turns.notes {
        moved
            .inside
            .entry(p.index)
            .or_default()
            .push((p.tool_use_id, p.text));
    }
    write_messages(&msgs, &roles, moved, &thinking, v.get().len(), facts).map(Some)
}

/// The blocks that go before and after what a user message holds, by its
/// index.
#[derive(Default)]
struct Moved {
    pre: HashMap<usize, Vec<Value>>,
    post: HashMap<usize, Vec<Value>>,
    /// Notes appended inside a tool result: (its call's id, the text).
    inside: HashMap<usize, Vec<(String, String)>>,
}

/// Append `text` to the tool result of `id` in a user message: to a string
/// result after a blank line, to a block list as one more text block.
fn append_to_result(msg: &mut Value, id: &str, text: &str) {
    let Some(blocks) = msg.get_mut("content").and_then(Value::as_array_mut) else {
        return;
    };
    let Some(result) = blocks.iter_mut().find(|b| {
        b.get("type").and_then(Value::as_str) == Some("tool_result")
            && b.get("tool_use_id").and_then(Value::as_str) == Some(id)
    }) else {
        return;
    };
    let Some(obj) = result.as_object_mut() else {
        return;
    };
    match obj.get_mut("content") {
        Some(Value::String(s)) => {
            s.push_str("\n\n");
            s.push_str(text);
        }
        Some(Value::Array(a)) => a.push(json!({"type": "text", "text": text})),
        _ => {
            obj.insert("content".into(), Value::String(text.to_string()));
        }
    }
}

/// The folded array: system entries left out, a user message with moved
/// blocks or an assistant message with thinking to drop rewritten, every
/// other message's bytes as they came.
fn write_messages(
    msgs: &[&RawValue],
    roles: &[Option<&str>],
    mut moved: Moved,
    thinking: &[usize],
    size: usize,
    facts: &mut Facts,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut buf = Vec::with_capacity(size);
    buf.push(b'[');
    let mut first = true;
    for (i, m) in msgs.iter().enumerate() {
        if roles[i] == Some("system") {
            continue;
        }
        if !first {
            buf.push(b',');
        }
        first = false;
        if moved.pre.contains_key(&i)
            || moved.post.contains_key(&i)
            || moved.inside.contains_key(&i)
        {
            let mut msg: Value = serde_json::from_str(m.get())?;
            for (id, text) in moved.inside.remove(&i).unwrap_or_default() {
                append_to_result(&mut msg, &id, &text);
            }
            if moved.pre.contains_key(&i) || moved.post.contains_key(&i) {
                apply_to_user(
                    &mut msg,
                    moved.pre.remove(&i).unwrap_or_default(),
                    moved.post.remove(&i).unwrap_or_default(),
                );
            }
            if thinking.contains(&i) {
                facts.images_lifted += super::fold_images::lift(&mut msg);
            }
            serde_json::to_writer(&mut buf, &msg)?;
        } else if thinking.contains(&i) {
            let mut msg: Value = serde_json::from_str(m.get())?;
            if roles[i] == Some("user") {
                facts.images_lifted += super::fold_images::lift(&mut msg);
            } else {
                facts.thinking_dropped += drop_thinking_blocks(&mut msg);
            }
            serde_json::to_writer(&mut buf, &msg)?;
        } else {
            buf.extend_from_slice(m.get().as_bytes());
        }
    }
    buf.push(b']');
    // Built from valid JSON pieces: no need to re-check.
    Ok(buf)
}

/// A top-level field other than `messages`: its facts, and its new value
/// when it changes (the billing line dropped from `system`, the model
/// named, `max_tokens` capped).
fn top_field(
    k: &str,
    v: &RawValue,
    model: Option<&str>,
    max_tokens_cap: Option<u64>,
    facts: &mut Facts,
) -> Result<Option<Box<RawValue>>, serde_json::Error> {
    match k {
        "system" if v.get().contains(BILLING_PREFIX) => {
            let sys: Value = serde_json::from_str(v.get())?;
            let mut holder = Map::new();
            holder.insert("system".into(), sys);
            facts.stats.billing_dropped = drop_billing(&mut holder);
            return raw(&holder.remove("system").unwrap_or(Value::Null)).map(Some);
        }
        "model" => {
            facts.model = serde_json::from_str::<String>(v.get()).ok();
            if let Some(m) = model
                && facts.model.as_deref() != Some(m)
            {
                return raw(&m).map(Some);
            }
        }
        "max_tokens" => {
            facts.max_tokens = serde_json::from_str::<u64>(v.get()).ok();
            if let (Some(cap), Some(m)) = (max_tokens_cap, facts.max_tokens)
                && m > cap
            {
                return raw(&cap).map(Some);
            }
        }
        "stream" => facts.stream = serde_json::from_str::<bool>(v.get()).unwrap_or(false),
        "tools" => {
            facts.tools =
                serde_json::from_str::<Vec<serde::de::IgnoredAny>>(v.get()).map_or(0, |t| t.len());
        }
        _ => {}
    }
    Ok(None)
}

/// The system entries folded to the top appended to the top `system`
/// (made when there is none).
fn add_to_top_system(
    out_fields: &mut Vec<(String, Piece<'_>)>,
    top_blocks: Vec<Value>,
) -> Result<(), serde_json::Error> {
    let existing = out_fields.iter().position(|(k, _)| k == "system");
    let mut holder = Map::new();
    if let Some(i) = existing {
        holder.insert(
            "system".into(),
            serde_json::from_slice(out_fields[i].1.bytes())?,
        );
    }
    for b in top_blocks {
        append_to_top_system(&mut holder, b);
    }
    let sys = Piece::Owned(raw(&holder.remove("system").unwrap_or(Value::Null))?);
    match existing {
        Some(i) => out_fields[i].1 = sys,
        None => out_fields.push(("system".into(), sys)),
    }
    Ok(())
}

/// The body's object from its fields, in order; where the `tools` bytes
/// sit goes into the facts (the prefix check compares them).
fn write_object(
    out_fields: &[(String, Piece<'_>)],
    size: usize,
    facts: &mut Facts,
) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = Vec::with_capacity(size + 256);
    out.push(b'{');
    for (i, (k, v)) in out_fields.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, k)?;
        out.push(b':');
        let at = out.len();
        out.extend_from_slice(v.bytes());
        if k == "tools" {
            facts.tools_range = Some((at, out.len()));
        }
    }
    out.push(b'}');
    Ok(out)
}

/// One top-level value of the outgoing body.
enum Piece<'a> {
    Borrowed(&'a RawValue),
    Owned(Box<RawValue>),
    Bytes(Vec<u8>),
}

impl Piece<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Borrowed(r) => r.get().as_bytes(),
            Piece::Owned(r) => r.get().as_bytes(),
            Piece::Bytes(b) => b,
        }
    }
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
    fn raw_path_keeps_untouched_bytes_and_sets_model_and_cap() {
        let body = br#"{"model":"claude-x","temperature":1.0e0,"metadata":{"user_id":"\u00e9"},"max_tokens":32000,"stream":true,"tools":[{"name":"a"},{"name":"b"}],"messages":[{"role":"user","content":"hi"},{"role":"system","content":"env"}]}"#;
        let (out, facts) = fold_raw(body, Some("served"), Some(16384)).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with(r#"{"model":"served","temperature":1.0e0,"metadata":{"user_id":"\u00e9"},"max_tokens":16384,"stream":true,"#), "{text}");
        assert_eq!(facts.model.as_deref(), Some("claude-x"));
        assert_eq!(facts.max_tokens, Some(32000));
        assert!(facts.stream);
        assert_eq!(facts.tools, 2);
        assert_eq!(facts.messages, 2);
        assert_eq!(facts.stats.folded, 1);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["messages"][0]["content"][1]["text"],
            "<system>\nenv\n</system>"
        );
    }

    #[test]
    fn raw_path_without_user_uses_top_system_and_rejects_non_objects() {
        // `content` before `role`: the slow path reads the role.
        let (out, facts) = fold_raw(
            br#"{"messages":[{"content":"s", "role" : "system"}]}"#,
            None,
            None,
        )
        .unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["system"], json!([sys_block("s")]));
        assert_eq!(facts.stats.folded, 1);
        assert!(fold_raw(b"[1,2]", None, None).is_err());
        assert!(fold_raw(b"{not json", None, None).is_err());
        let (out, _) = fold_raw(br#"{"messages":5,"system":7}"#, None, None).unwrap();
        assert_eq!(out, br#"{"messages":5,"system":7}"#);
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
