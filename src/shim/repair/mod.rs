//! Tool calls that came back as text, turned back into `tool_use` blocks.
//!
//! When a server's tool-call parser misses a call (a template it does not
//! know, a model that drifts near the end of its window), the call arrives
//! inside the assistant's text. Claude Code sees a text answer and ends the
//! session: the job "succeeds" with nothing done. The forms seen in the
//! servers' trackers and tests:
//!
//! - Hermes / Qwen JSON: `<tool_call>{"name": …, "arguments": {…}}</tool_call>`;
//! - Qwen3-Coder XML: `<tool_call><function=Edit><parameter=file_path>…`
//!   `</parameter></function></tool_call>` (the wrapper is sometimes missing);
//! - Mistral / Devstral: `[TOOL_CALLS][{"name": …, "arguments": …}]` and the
//!   newer `[TOOL_CALLS]name[ARGS]{…}`;
//! - a bare JSON object `{"name": …, "arguments"|"parameters": {…}}` as the
//!   whole text.
//!
//! A repair happens only when every call found names a tool offered in that
//! request and its input is an object with the schema's required keys, and
//! when nothing but white space stands between and after the calls. Anything
//! else stays text, as it came: a call is never invented from prose. What
//! looked like an attempt but failed those checks is reported as
//! `unparsed_tool_text`, so the job can say the model is at fault.
//!
//! Streams are handled by [`StreamRepair`], which the SSE relay feeds one
//! event at a time: a text block is held back only from the point where a
//! call could begin (a marker, or a `{` opening the whole block), so prose
//! still streams as it comes and a normal `tool_use` answer is not touched.
//!
//! The parser is [`parse`], the whole-answer repair [`message`], the
//! stream's state machine [`stream`]; this file only re-exports them.

pub mod message;
pub mod parse;
pub mod stream;

pub use message::*;
pub use parse::*;
pub use stream::*;

#[cfg(test)]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> ToolSet {
        ToolSet::from_raw(
            json!([
                {"name": "Edit", "input_schema": {"type": "object", "properties": {
                    "file_path": {"type": "string"}, "old_string": {"type": "string"},
                    "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
                    "required": ["file_path", "old_string", "new_string"]}},
                {"name": "Bash", "input_schema": {"type": "object", "properties": {
                    "command": {"type": "string"}, "timeout": {"type": "number"}},
                    "required": ["command"]}},
                {"name": "Read", "input_schema": {"type": "object", "properties": {
                    "file_path": {"type": "string"}, "limit": {"type": "integer"}},
                    "required": ["file_path"]}}
            ])
            .to_string()
            .as_bytes(),
        )
    }

    fn calls(f: Found) -> (String, Vec<Call>, Form) {
        match f {
            Found::Calls {
                prefix,
                calls,
                form,
            } => (prefix, calls, form),
            other => panic!("no calls: {other:?}"),
        }
    }

    #[test]
    fn the_markers_split_anywhere_are_seen() {
        assert_eq!(partial_marker_len("see <tool_"), 6);
        assert_eq!(partial_marker_len("a [TOOL"), 5);
        assert_eq!(partial_marker_len("x <"), 1);
        assert_eq!(partial_marker_len("no marker"), 0);
        assert_eq!(
            partial_marker_len("<tool_call>"),
            0,
            "a whole marker is not partial"
        );
    }

    #[test]
    fn xml_values_take_the_schema_types() {
        let (_, c, form) = calls(find(
            "<tool_call>\n<function=Read>\n<parameter=file_path>\n/a.txt\n</parameter>\n<parameter=limit>\n20\n</parameter>\n</function>\n</tool_call>",
            &tools(),
        ));
        assert_eq!(form, Form::QwenXml);
        assert_eq!(c[0].input, json!({"file_path": "/a.txt", "limit": 20}));
    }

    #[test]
    fn a_string_value_keeps_its_inner_newlines() {
        let (_, c, _) = calls(find(
            "<function=Edit>\n<parameter=file_path>\nx.py\n</parameter>\n<parameter=old_string>\na\nb\n</parameter>\n<parameter=new_string>\n\nc\n\n</parameter>\n</function>",
            &tools(),
        ));
        assert_eq!(c[0].input["old_string"], "a\nb");
        assert_eq!(c[0].input["new_string"], "\nc\n");
    }

    #[test]
    fn refusals_leave_text() {
        let t = tools();
        assert!(matches!(
            find(
                "<tool_call>\n{\"name\": \"Deploy\", \"arguments\": {}}\n</tool_call>",
                &t
            ),
            Found::Unparsed { .. }
        ));
        assert!(matches!(
            find(
                "<tool_call>\n{\"name\": \"Edit\", \"arguments\": {\"file_path\": \"a\"}}\n</tool_call>",
                &t
            ),
            Found::Unparsed { .. }
        ));
        assert_eq!(
            find("Use the `<tool_call>` tag to call tools.", &t),
            Found::Nothing
        );
        assert_eq!(
            find(
                "<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}",
                &t
            ),
            Found::Unparsed {
                form: Form::Hermes,
                why: "the JSON inside <tool_call> does not parse".into()
            }
        );
        assert_eq!(find("{\"answer\": 42}", &t), Found::Nothing);
        assert_eq!(find("plain prose", &t), Found::Nothing);
        // Text after the call: not a clean call.
        assert!(matches!(
            find(
                "<tool_call>{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls\"}}</tool_call> and then I will",
                &t
            ),
            Found::Unparsed { .. }
        ));
    }

    #[test]
    fn xml_closers_end_values_and_a_key_given_twice_is_no_call() {
        let (_, c, _) = calls(find(
            "<tool_call><function=Bash><parameter=command>ls -la</function></tool_call>",
            &tools(),
        ));
        assert_eq!(c[0].input, json!({"command": "ls -la"}));
        assert!(matches!(
            find(
                "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n<parameter=command>\nrm -rf /tmp/x\n</parameter>\n</function>\n</tool_call>",
                &tools()
            ),
            Found::Unparsed { .. }
        ));
        // A Write whose content holds a parameter of its own: refused, not
        // sent to another path.
        assert!(matches!(
            find(
                "<function=Edit>\n<parameter=file_path>\na\n</parameter>\n<parameter=old_string>\nx\n</parameter>\n<parameter=new_string>\nline1\n<parameter=file_path>\n/etc/evil\n</parameter>\n</function>",
                &tools()
            ),
            Found::Unparsed { .. }
        ));
        // An unclosed value is no call.
        assert!(!matches!(
            find(
                "<tool_call>\n<function=Bash>\n<parameter=command>\nls",
                &tools()
            ),
            Found::Calls { .. }
        ));
    }

    #[test]
    fn arguments_encoded_twice_are_read() {
        let (_, c, f) = calls(find(
            r#"{"name": "Bash", "arguments": "{\"command\": \"ls\"}"}"#,
            &tools(),
        ));
        assert_eq!(
            (f, c[0].input.clone()),
            (Form::BareJson, json!({"command": "ls"}))
        );
    }

    #[test]
    fn mistral_forms() {
        let (_, c, f) = calls(find(
            r#"[TOOL_CALLS]Bash[ARGS]{"command": "ls"}[TOOL_CALLS]Read[ARGS]{"file_path": "a"}"#,
            &tools(),
        ));
        assert_eq!(f, Form::Mistral);
        assert_eq!(c.len(), 2);
        assert_eq!(c[1].name, "Read");
        let (_, c, _) = calls(find(
            r#"[TOOL_CALLS]Bash[CALL_ID]abc123def[ARGS]{"command": "ls"}"#,
            &tools(),
        ));
        assert_eq!(c[0].input["command"], "ls");
    }

    #[test]
    fn a_non_streamed_answer_is_rewritten() {
        let mut msg = json!({"content": [{"type": "text", "text": "I will list it.\n<tool_call>\n{\"name\": \"Bash\", \"arguments\": {\"command\": \"ls\"}}\n</tool_call>"}], "stop_reason": "end_turn"});
        let r = repair_message(&mut msg, &tools());
        assert_eq!(r.calls(), 1);
        assert_eq!(msg["stop_reason"], "tool_use");
        assert_eq!(msg["content"][0]["text"], "I will list it.\n");
        assert_eq!(msg["content"][1]["type"], "tool_use");
        assert_eq!(msg["content"][1]["input"], json!({"command": "ls"}));
        // Cut by max_tokens: left alone.
        let mut cut = json!({"content": [{"type": "text", "text": "<tool_call>{\"name\":\"Bash\",\"arguments\":{\"command\":\"ls\"}}</tool_call>"}], "stop_reason": "max_tokens"});
        assert_eq!(repair_message(&mut cut, &tools()).calls(), 0);
    }
}
