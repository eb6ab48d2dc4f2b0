//! The append-only property of folding, over generated multi-turn sessions
//! shaped like Claude Code's: the folded body of turn k is a prefix, in
//! content terms, of the folded body of turn k+1.

use localagents::shim::fold::{self, is_content_prefix};
use proptest::prelude::*;
use serde_json::{Value, json};

/// One turn: how many system entries appear where, and content shapes.
#[derive(Debug, Clone)]
struct TurnSpec {
    sys_between: usize,
    sys_after: usize,
    user_as_string: bool,
    text: String,
}

#[derive(Debug, Clone)]
enum Item {
    User {
        text: String,
        as_string: bool,
        tool_result: bool,
    },
    Assistant(String),
    System(String),
}

fn turn() -> impl Strategy<Value = TurnSpec> {
    (0usize..3, 0usize..3, any::<bool>(), "[a-z ]{0,12}").prop_map(|(b, a, s, t)| TurnSpec {
        sys_between: b,
        sys_after: a,
        user_as_string: s,
        text: t,
    })
}

/// Render the conversation as Claude Code would send it at the end of
/// `upto` items: system entries new in this request are block lists with
/// `cache_control`, older ones are plain strings; the cache marker sits on
/// the last user message only.
fn render(items: &[Item], upto: usize, new_from: usize, billing: bool) -> Value {
    let mut messages = Vec::new();
    for (i, it) in items[..upto].iter().enumerate() {
        let m = match it {
            Item::User {
                text,
                as_string,
                tool_result,
            } => {
                if *tool_result {
                    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": format!("t{i}"), "content": text}]})
                } else if *as_string {
                    json!({"role": "user", "content": text})
                } else {
                    json!({"role": "user", "content": [{"type": "text", "text": text}]})
                }
            }
            Item::Assistant(t) => {
                json!({"role": "assistant", "content": [{"type": "tool_use", "id": format!("t{}", i + 1), "name": "Bash", "input": {"command": t}}]})
            }
            Item::System(t) if i >= new_from => {
                json!({"role": "system", "content": [{"type": "text", "text": t, "cache_control": {"type": "ephemeral"}}]})
            }
            Item::System(t) => json!({"role": "system", "content": t}),
        };
        messages.push(m);
    }
    if let Some(last_user) = messages.iter_mut().rev().find(|m| m["role"] == "user")
        && let Some(blocks) = last_user["content"].as_array_mut()
        && let Some(b) = blocks.last_mut()
    {
        b["cache_control"] = json!({"type": "ephemeral"});
    }
    let mut system = vec![
        json!({"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}),
    ];
    if billing {
        system.insert(0, json!({"type": "text", "text": format!("x-anthropic-billing-header: cc_version=2.1.328.{upto}; cc_entrypoint=sdk-cli;")}));
    }
    json!({"model": "m", "max_tokens": 32000, "stream": true, "system": system, "messages": messages})
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn folded_turns_are_append_only(
        lead_sys in 0usize..2,
        first_sys in 0usize..3,
        first_as_string in any::<bool>(),
        turns in proptest::collection::vec(turn(), 1..8),
        billing in any::<bool>(),
    ) {
        let mut items = Vec::new();
        let mut ends = Vec::new(); // (end index, first new index) per request
        let mut n = 0;
        for _ in 0..lead_sys { items.push(Item::System(format!("lead {n}"))); n += 1; }
        items.push(Item::User { text: "do the task".into(), as_string: first_as_string, tool_result: false });
        for _ in 0..first_sys { items.push(Item::System(format!("env {n}"))); n += 1; }
        ends.push((items.len(), 0));
        for t in &turns {
            let start = items.len();
            items.push(Item::Assistant(t.text.clone()));
            for _ in 0..t.sys_between { items.push(Item::System(format!("between {n}"))); n += 1; }
            items.push(Item::User { text: t.text.clone(), as_string: t.user_as_string, tool_result: !t.user_as_string });
            for _ in 0..t.sys_after { items.push(Item::System(format!("reminder {n}"))); n += 1; }
            ends.push((items.len(), start));
        }
        let mut folded = Vec::new();
        for (end, new_from) in &ends {
            let mut body = render(&items, *end, *new_from, billing);
            let raw_in = serde_json::to_vec(&body).unwrap();
            let stats = fold::fold(&mut body);
            // The shim's raw fast path gives the same body.
            let (raw_out, facts) = fold::fold_raw(&raw_in, Some("m"), None).unwrap();
            let raw_val: Value = serde_json::from_slice(&raw_out).unwrap();
            prop_assert_eq!(&raw_val, &body);
            prop_assert_eq!(facts.stats, stats);
            let in_msgs = items[..*end].iter().filter(|i| matches!(i, Item::System(_))).count();
            prop_assert_eq!(stats.folded, in_msgs);
            prop_assert!(body["messages"].as_array().unwrap().iter().all(|m| m["role"] != "system"));
            folded.push(body);
        }
        for k in 0..folded.len() - 1 {
            prop_assert!(
                is_content_prefix(&folded[k], &folded[k + 1]),
                "turn {} is not a prefix of turn {}:\n{}\n---\n{}",
                k, k + 1, folded[k], folded[k + 1]
            );
        }
    }
}

/// The property has teeth: hoisting system entries to the top breaks it as
/// soon as a new one arrives.
#[test]
fn hoisting_breaks_the_prefix() {
    let hoist = |body: &mut Value| {
        let msgs = body["messages"].as_array().cloned().unwrap();
        let (sys, rest): (Vec<Value>, Vec<Value>) =
            msgs.into_iter().partition(|m| m["role"] == "system");
        let sys_array = body["system"].as_array_mut().unwrap();
        for s in sys {
            sys_array.push(json!({"type": "text", "text": fold::system_text(&s["content"])}));
        }
        body["messages"] = Value::Array(rest);
    };
    let items = vec![
        Item::User {
            text: "go".into(),
            as_string: true,
            tool_result: false,
        },
        Item::System("env".into()),
        Item::Assistant("ls".into()),
        Item::User {
            text: "out".into(),
            as_string: false,
            tool_result: true,
        },
        Item::System("reminder".into()),
    ];
    let (mut a, mut b) = (render(&items, 2, 0, false), render(&items, 5, 2, false));
    hoist(&mut a);
    hoist(&mut b);
    assert!(!is_content_prefix(&a, &b));
    let (mut a, mut b) = (render(&items, 2, 0, false), render(&items, 5, 2, false));
    fold::fold(&mut a);
    fold::fold(&mut b);
    assert!(is_content_prefix(&a, &b));
}
