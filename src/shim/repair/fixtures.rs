//! Model output copied verbatim from the servers' own parser tests (each
//! with its source), run through [`super::parse::find`]. These are the strings the
//! servers' parsers are built for; when a parser misses one, it reaches the
//! shim as text, and the shim must make the same call of it, or none.

use serde_json::{Value, json};

use crate::shim::repair::parse::{Form, Found, ToolSet, find};

/// The tools the upstream tests declare.
fn tools() -> ToolSet {
    ToolSet::from_raw(
        json!([
            // llama.cpp tests/test-chat.cpp `special_function_tool`.
            {"name": "special_function", "input_schema": {"type": "object",
                "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}},
            {"name": "special_function_with_opt", "input_schema": {"type": "object",
                "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}, "required": ["arg1"]}},
            // vLLM tests/tool_parsers/*: their weather and arithmetic tools.
            {"name": "get_current_weather", "input_schema": {"type": "object",
                "properties": {"city": {"type": "string"}, "state": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"]}},
            {"name": "final_answer", "input_schema": {"type": "object",
                "properties": {"trigger": {"type": "boolean"}}, "required": ["trigger"]}},
            {"name": "get_weather", "input_schema": {"type": "object",
                "properties": {"city": {"type": "string"}}, "required": ["city"]}},
            {"name": "search", "input_schema": {"type": "object",
                "properties": {"q": {"type": "string"}}, "required": ["q"]}},
            {"name": "add", "input_schema": {"type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}},
            {"name": "calculate_area", "input_schema": {"type": "object",
                "properties": {"shape": {"type": "string"}, "dimensions": {"type": "object"}, "precision": {"type": "integer"}},
                "required": ["shape"]}},
            {"name": "get_db_config", "input_schema": {"type": "object",
                "properties": {"param": {"type": "string"}}, "required": ["param"]}}
        ])
        .to_string()
        .as_bytes(),
    )
}

fn expect(text: &str, form: Form, prefix: &str, want: &[(&str, Value)]) {
    match find(text, &tools()) {
        Found::Calls {
            prefix: p,
            calls,
            form: f,
        } => {
            assert_eq!(f, form, "{text}");
            assert_eq!(p, prefix, "{text}");
            let got: Vec<(String, Value)> = calls.into_iter().map(|c| (c.name, c.input)).collect();
            let want: Vec<(String, Value)> = want
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect();
            assert_eq!(got, want, "{text}");
        }
        other => panic!("{text:?} gave {other:?}"),
    }
}

fn stays_text(text: &str) {
    let f = find(text, &tools());
    assert!(!matches!(f, Found::Calls { .. }), "{text:?} gave {f:?}");
}

#[test]
fn hermes() {
    // vllm-project/vllm tests/tool_parsers/test_hermes_tool_parser.py@0eb73d6a,
    // test_hermes_parser_non_streaming_tool_call_between_tags
    expect(
        "<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}}\n</tool_call>",
        Form::Hermes,
        "",
        &[("final_answer", json!({"trigger": true}))],
    );
    // ... test_hermes_parser_non_streaming_tool_call_until_eos (no closing tag)
    expect(
        "<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}}",
        Form::Hermes,
        "",
        &[("final_answer", json!({"trigger": true}))],
    );
    // ... test_hermes_parser_non_streaming_tool_call_invalid_json (not a call)
    stays_text("<tool_call>\n{\"name\": \"final_answer\", \"arguments\": {\"trigger\": true}");
    // ... test_hermes_streaming_content_then_tool_call_with_stream_interval
    expect(
        "Sure, let me check the weather.<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"NYC\"}}</tool_call>",
        Form::Hermes,
        "Sure, let me check the weather.",
        &[("get_weather", json!({"city": "NYC"}))],
    );
    // ... test_hermes_streaming_multiple_tool_calls_with_stream_interval
    expect(
        "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"cats\"}}</tool_call><tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"dogs\"}}</tool_call>",
        Form::Hermes,
        "",
        &[
            ("search", json!({"q": "cats"})),
            ("search", json!({"q": "dogs"})),
        ],
    );
    // ... test_hermes_parser_non_streaming_serialized_arguments (Granite 4)
    expect(
        "<tool_call>\n{\"name\": \"get_db_config\", \"arguments\": \"{\\\"param\\\": \\\"max_connections\\\"}\"}\n</tool_call>",
        Form::Hermes,
        "",
        &[("get_db_config", json!({"param": "max_connections"}))],
    );
    // ggml-org/llama.cpp tests/test-chat.cpp@4290ad93, Hermes 2 Pro block
    // (no newline before </tool_call>), and the content-first variant.
    expect(
        "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>",
        Form::Hermes,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
    expect(
        "Hello, world!\nWhat's up?<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call>",
        Form::Hermes,
        "Hello, world!\nWhat's up?",
        &[("special_function", json!({"arg1": 1}))],
    );
    // ... Reka-Edge parallel calls
    expect(
        "<tool_call>\n{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}</tool_call><tool_call>\n{\"name\": \"special_function_with_opt\", \"arguments\": {\"arg1\": 1, \"arg2\": 2}}</tool_call>",
        Form::Hermes,
        "",
        &[
            ("special_function", json!({"arg1": 1})),
            ("special_function_with_opt", json!({"arg1": 1, "arg2": 2})),
        ],
    );
}

#[test]
fn qwen3_coder_xml() {
    // vllm-project/vllm tests/tool_parsers/test_qwen3coder_tool_parser.py@049d8df2,
    // test_extract_tool_calls[single_tool]
    expect(
        "<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
        Form::QwenXml,
        "",
        &[(
            "get_current_weather",
            json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"}),
        )],
    );
    // ... [single_tool_with_content]
    expect(
        "Sure! Let me check the weather for you.<tool_call>\n<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n<parameter=unit>\nfahrenheit\n</parameter>\n</function>\n</tool_call>",
        Form::QwenXml,
        "Sure! Let me check the weather for you.",
        &[(
            "get_current_weather",
            json!({"city": "Dallas", "state": "TX", "unit": "fahrenheit"}),
        )],
    );
    // ... [single_tool_multiline_param] (the space after `10,` is theirs)
    expect(
        "<tool_call>\n<function=calculate_area>\n<parameter=shape>\nrectangle\n</parameter>\n<parameter=dimensions>\n{\"width\": 10, \n \"height\": 20}\n</parameter>\n<parameter=precision>\n2\n</parameter>\n</function>\n</tool_call>",
        Form::QwenXml,
        "",
        &[(
            "calculate_area",
            json!({"shape": "rectangle", "dimensions": {"width": 10, "height": 20}, "precision": 2}),
        )],
    );
    // ... test_extract_tool_calls_fallback_no_tags
    expect(
        "<function=get_current_weather>\n<parameter=city>\nDallas\n</parameter>\n<parameter=state>\nTX\n</parameter>\n</function>",
        Form::QwenXml,
        "",
        &[(
            "get_current_weather",
            json!({"city": "Dallas", "state": "TX"}),
        )],
    );
    // ggml-org/llama.cpp tests/test-chat.cpp@4290ad93, Qwen3-Coder block
    expect(
        "<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n</function>\n</tool_call>",
        Form::QwenXml,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
}

#[test]
fn mistral() {
    // vllm-project/vllm tests/tool_parsers/test_mistral_tool_parser.py@002d5731,
    // test_extract_tool_calls_pre_v11_tokenizer
    expect(
        "[TOOL_CALLS][{\"name\": \"add\", \"arguments\":{\"a\": 3.5, \"b\": 4}}]",
        Form::Mistral,
        "",
        &[("add", json!({"a": 3.5, "b": 4}))],
    );
    expect(
        "[TOOL_CALLS] [{\"arguments\":{\"city\": \"San Francisco\", \"state\": \"CA\", \"unit\": \"celsius\"}, \"name\": \"get_current_weather\"}]",
        Form::Mistral,
        "",
        &[(
            "get_current_weather",
            json!({"city": "San Francisco", "state": "CA", "unit": "celsius"}),
        )],
    );
    expect(
        "Hello[TOOL_CALLS] [{\"name\": \"add\", \"arguments\":{\"a\": 1, \"b\": 2}}]",
        Form::Mistral,
        "Hello",
        &[("add", json!({"a": 1, "b": 2}))],
    );
    // ... "[TOOL_CALLS] not json at all" is not a call.
    stays_text("[TOOL_CALLS] not json at all");
    // ggml-org/llama.cpp tests/test-chat.cpp@4290ad93: Mistral Nemo (an id
    // field), Devstral ([ARGS]), Mistral Small 3.2 ([CALL_ID]).
    expect(
        "[TOOL_CALLS][{\"name\": \"special_function\", \"arguments\": {\"arg1\": 1}, \"id\": \"123456789\"}]",
        Form::Mistral,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
    expect(
        "Hello, world!\nWhat's up?[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}",
        Form::Mistral,
        "Hello, world!\nWhat's up?",
        &[("special_function", json!({"arg1": 1}))],
    );
    expect(
        "[TOOL_CALLS]special_function[ARGS]{\"arg1\": 1}[TOOL_CALLS]special_function_with_opt[ARGS]{\"arg1\": 1, \"arg2\": 2}",
        Form::Mistral,
        "",
        &[
            ("special_function", json!({"arg1": 1})),
            ("special_function_with_opt", json!({"arg1": 1, "arg2": 2})),
        ],
    );
    expect(
        "[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{\"arg1\": 1}",
        Form::Mistral,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
    // vLLM test_extract_tool_calls (v11 tokenizer: [ARGS] is not in the text)
    expect(
        "[TOOL_CALLS]get_current_weather{\"city\": \"San Francisco\", \"state\": \"CA\", \"unit\": \"celsius\"}",
        Form::Mistral,
        "",
        &[(
            "get_current_weather",
            json!({"city": "San Francisco", "state": "CA", "unit": "celsius"}),
        )],
    );
}

#[test]
fn bare_json() {
    // ggml-org/llama.cpp tests/test-chat.cpp@92f7da00, Llama 3.1 / 3.2 blocks
    expect(
        "{\"name\": \"special_function\", \"parameters\": {\"arg1\": 1}}",
        Form::BareJson,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
    // ... Hermes 2 Pro block's bare object with `arguments` and a newline
    expect(
        "{\n  \"name\": \"special_function\", \"arguments\": {\"arg1\": 1}}",
        Form::BareJson,
        "",
        &[("special_function", json!({"arg1": 1}))],
    );
    // ... an unknown function name stays content.
    stays_text("{\"name\": \"unknown_function\", \"arguments\": {\"arg1\": 1}}");
    // ... the generic format's plain response object is not a call.
    assert_eq!(
        find(
            "{\n  \"response\": \"Hello, world!\\nWhat's up?\"\n}",
            &tools()
        ),
        Found::Nothing
    );
}
