//! The docs that are generated or checked.
//!
//! The references under `docs/reference/` and the skill's
//! `skills/local-agents/reference.md` are printed by the plain functions
//! below from the code itself: the clap definitions (`Cli::command()`), the
//! rmcp tool router (`mcp::tools()`), the config module's own key lists and
//! types (read through `config::parse_text`) with `Defaults::default()`,
//! and the JSON schema of the status object. The texts a person wrote
//! (what a key means, help the code does not carry) live in
//! `docs/reference/prose.yaml`, which this reads, and the generator fails when the code has a key, field or tool they do not
//! cover, or they name one the code does not have.
//!
//! `the_references_are_generated` compares each file byte for byte;
//! `LOCALAGENTS_BLESS=1` (`scripts/gen-docs.sh`) writes them instead.
//! `every_link_resolves` checks every relative link and `#anchor` of the
//! hand-written docs; `the_architecture_matches_the_code` checks the code
//! map's modules, layers and named tests.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use serde_json::{Map, Value, json};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The first line of every generated file.
fn banner(from: &str) -> String {
    format!(
        "<!-- Generated from {from} by tests/it/docs.rs. Do not edit: run scripts/gen-docs.sh. -->\n\n"
    )
}

/// Every generated file and what the code says it holds now.
pub fn generated() -> Vec<(&'static str, String)> {
    vec![
        ("docs/reference/cli.md", cli_md()),
        ("docs/reference/mcp-tools.md", mcp_tools_md()),
        ("docs/reference/config.md", config_md()),
        ("docs/reference/status-json.md", status_json_md()),
        ("skills/local-agents/reference.md", skill_reference_md()),
    ]
}

// --- small text helpers ------------------------------------------------------

/// One line of text for a table cell: white space folded, `|` escaped.
fn cell(s: &str) -> String {
    s.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// A sentence ends with a full stop (clap drops the one of a summary).
fn sentence(s: &str) -> String {
    let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match s.chars().last() {
        None => s,
        Some('.' | '!' | '?' | ':') => s,
        Some(_) => format!("{s}."),
    }
}

/// Prose reflowed to 76 columns, paragraph by paragraph (a heading line
/// stays a line of its own).
fn prose(text: &str) -> String {
    let mut out = Vec::new();
    for para in text.split("\n\n") {
        if para.trim().is_empty() {
            continue;
        }
        if para.starts_with('#') {
            out.push(para.trim().to_string());
            continue;
        }
        let mut lines: Vec<String> = Vec::new();
        let mut line = String::new();
        for word in para.split_whitespace() {
            if !line.is_empty() && line.len() + 1 + word.len() > 76 {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
        out.push(lines.join("\n"));
    }
    out.join("\n\n") + "\n\n"
}

fn code(s: &str) -> String {
    format!("`{s}`")
}

// --- CLI ---------------------------------------------------------------------

/// How one argument is written on the command line.
fn arg_form(a: &clap::Arg) -> String {
    let names: Vec<String> = match a.get_value_names() {
        Some(v) => v.iter().map(|n| n.to_string()).collect(),
        None => vec![a.get_id().as_str().to_uppercase()],
    };
    let many = a.get_num_args().is_some_and(|n| n.max_values() > 1);
    let dots = if many { "..." } else { "" };
    if a.is_positional() {
        let name = names.join(" ");
        return if a.is_required_set() {
            format!("<{name}>{dots}")
        } else {
            format!("[{name}]{dots}")
        };
    }
    let value = format!("<{}>{dots}", names.join("> <"));
    let mut flag = String::new();
    if let Some(s) = a.get_short() {
        flag.push_str(&format!("-{s}, "));
    }
    flag.push_str(&format!(
        "--{}",
        a.get_long().unwrap_or(a.get_id().as_str())
    ));
    if a.get_num_args().is_some_and(|n| n.takes_values()) {
        flag.push(' ');
        flag.push_str(&value);
    }
    flag
}

/// What an argument's table row says after its help: default, choices, env.
fn arg_notes(a: &clap::Arg) -> String {
    let mut notes = Vec::new();
    let choices: Vec<String> = a
        .get_possible_values()
        .iter()
        .filter(|p| !p.is_hide_set())
        .map(|p| code(p.get_name()))
        .collect();
    // A plain flag's possible values are true and false: nothing to say.
    let is_flag = matches!(a.get_action(), clap::ArgAction::SetTrue);
    if !choices.is_empty() && !is_flag {
        notes.push(format!("One of {}.", choices.join(", ")));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|d| code(&d.to_string_lossy()))
        .collect();
    if !defaults.is_empty() && !is_flag {
        notes.push(format!("Default {}.", defaults.join(", ")));
    }
    if let Some(env) = a.get_env() {
        notes.push(format!(
            "Env {}.",
            code(&format!("${}", env.to_string_lossy()))
        ));
    }
    if a.is_required_set() && !a.is_positional() {
        notes.push("Required.".into());
    }
    notes.join(" ")
}

fn arg_help(cmd: &str, a: &clap::Arg) -> String {
    let own = a.get_long_help().or(a.get_help());
    let fallback = PROSE
        .arg_help
        .iter()
        .find(|(c, id, _)| c == cmd && id == a.get_id().as_str())
        .map(|(_, _, h)| h.as_str());
    if let (Some(_), Some(_)) = (own, fallback) {
        panic!(
            "`{cmd}` {} has help in the code now: remove its entry under `cli.args` in docs/reference/prose.yaml",
            a.get_id()
        );
    }
    let help = own
        .map(|h| sentence(&h.to_string()))
        .or(fallback.map(str::to_string))
        .unwrap_or_default();
    let notes = arg_notes(a);
    match (help.is_empty(), notes.is_empty()) {
        (_, true) => help,
        (true, false) => notes,
        (false, false) => format!("{help} {notes}"),
    }
}

/// The arguments a command shows in its table: no help/version flags, and
/// the global options only once, at the top.
fn own_args(cmd: &clap::Command, top: bool) -> Vec<&clap::Arg> {
    cmd.get_arguments()
        .filter(|a| {
            !matches!(
                a.get_action(),
                clap::ArgAction::Help
                    | clap::ArgAction::HelpShort
                    | clap::ArgAction::HelpLong
                    | clap::ArgAction::Version
            )
        })
        .filter(|a| top || !a.is_global_set())
        .filter(|a| !a.is_hide_set())
        .collect()
}

fn arg_table(out: &mut String, cmd: &str, args: &[&clap::Arg]) {
    if args.is_empty() {
        return;
    }
    out.push_str("| argument | what it does |\n|---|---|\n");
    for a in args {
        let _ = writeln!(
            out,
            "| {} | {} |",
            cell(&code(&arg_form(a))),
            cell(&arg_help(cmd, a))
        );
    }
    out.push('\n');
}

/// The user-facing commands: clap's own `help` is left out.
fn subcommands(cmd: &mut clap::Command) -> Vec<&mut clap::Command> {
    cmd.get_subcommands_mut()
        .filter(|c| c.get_name() != "help")
        .collect()
}

fn command_section(out: &mut String, cmd: &mut clap::Command, depth: usize) {
    let path = cmd
        .get_bin_name()
        .map(str::to_string)
        .unwrap_or_else(|| cmd.get_name().to_string());
    let _ = writeln!(out, "{} `{path}`\n", "#".repeat(depth));
    if cmd.is_hide_set() {
        out.push_str("Hidden from `--help`.\n\n");
    }
    if let Some(about) = cmd.get_long_about().or(cmd.get_about()) {
        let _ = writeln!(out, "{}\n", sentence(&about.to_string()));
    }
    let usage = cmd.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let _ = writeln!(out, "```\n{usage}\n```\n");
    arg_table(out, &path, &own_args(cmd, false));
    for sub in subcommands(cmd) {
        command_section(out, sub, depth + 1);
    }
}

/// `docs/reference/cli.md`.
pub fn cli_md() -> String {
    let mut cli = localagents::cli::Cli::command();
    cli.build();
    let mut out = banner("the clap definitions in src/cli/mod.rs");
    out.push_str("# CLI reference\n\n");
    if let Some(about) = cli.get_about() {
        let _ = writeln!(out, "{}\n", sentence(&about.to_string()));
    }
    let usage = cli.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim().to_string();
    let _ = writeln!(out, "```\n{usage}\n```\n");
    out.push_str(&PROSE.cli_intro);
    out.push_str("## Global options\n\nEvery command takes them.\n\n");
    arg_table(&mut out, "localagents", &own_args(&cli, true));
    out.push_str("## Commands\n\n| command | what it does |\n|---|---|\n");
    let rows: Vec<(String, String)> = subcommands(&mut cli)
        .into_iter()
        .map(|c| {
            let about = c.get_about().map(|a| a.to_string()).unwrap_or_default();
            (c.get_name().to_string(), sentence(&about))
        })
        .collect();
    for (name, about) in rows {
        let title = format!("localagents {name}");
        let _ = writeln!(
            out,
            "| [{}](#{}) | {} |",
            code(&title),
            slug(&title),
            cell(&about)
        );
    }
    out.push('\n');
    for sub in subcommands(&mut cli) {
        command_section(&mut out, sub, 2);
    }
    out.trim_end().to_string() + "\n"
}

// --- JSON schema rendering (MCP tools, status object) ------------------------

/// The definition a `$ref` points at.
fn deref<'a>(s: &'a Value, defs: &'a Value) -> &'a Value {
    match s.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.rsplit('/').next().unwrap_or(r);
            defs.get(name)
                .unwrap_or_else(|| panic!("schema: no definition for {r}"))
        }
        None => s,
    }
}

/// The schema without its `null` alternative, and whether it had one.
fn non_null<'a>(s: &'a Value, defs: &'a Value) -> (&'a Value, bool) {
    if let Some(any) = s.get("anyOf").and_then(Value::as_array) {
        let rest: Vec<&Value> = any
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            .collect();
        if rest.len() == 1 && rest.len() < any.len() {
            return (deref(rest[0], defs), true);
        }
    }
    if let Some(types) = s.get("type").and_then(Value::as_array)
        && types.iter().any(|t| t == "null")
    {
        return (deref(s, defs), true);
    }
    (deref(s, defs), false)
}

/// The values of a closed set (`enum`, or `oneOf` constants).
fn choices(s: &Value) -> Option<Vec<String>> {
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        return Some(
            e.iter()
                .filter(|v| !v.is_null())
                .map(|v| v.as_str().map(str::to_string).unwrap_or(v.to_string()))
                .collect(),
        );
    }
    let one = s.get("oneOf").and_then(Value::as_array)?;
    one.iter()
        .map(|o| o.get("const").and_then(Value::as_str).map(str::to_string))
        .collect()
}

/// A type as a reader wants it: `string`, `integer[]`, `` `a` \| `b` ``.
fn type_name(s: &Value, defs: &Value) -> String {
    let (s, _) = non_null(s, defs);
    if let Some(c) = choices(s) {
        return c.iter().map(|v| code(v)).collect::<Vec<_>>().join(" | ");
    }
    if let Some(c) = s.get("const").and_then(Value::as_str) {
        return code(c);
    }
    let ty = match s.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .filter(|t| *t != "null")
            .collect::<Vec<_>>()
            .join(" or "),
        _ if s.get("properties").is_some() => "object".into(),
        _ => "any".into(),
    };
    if ty == "array" {
        let items = s.get("items").map(|i| type_name(i, defs));
        return format!("{}[]", items.unwrap_or_else(|| "any".into()));
    }
    ty
}

/// The object schema a field holds, directly or as the items of a list.
fn object_of<'a>(s: &'a Value, defs: &'a Value) -> Option<(&'a Value, bool)> {
    let (s, _) = non_null(s, defs);
    if s.get("properties").is_some() {
        return Some((s, false));
    }
    if s.get("type").and_then(Value::as_str) == Some("array")
        && let Some(items) = s.get("items")
    {
        let (i, _) = non_null(items, defs);
        if i.get("properties").is_some() {
            return Some((i, true));
        }
    }
    None
}

/// One row of a schema table.
struct Field {
    path: String,
    ty: String,
    nullable: bool,
    required: bool,
    description: String,
}

/// Every field of an object schema, nested objects flattened as `a.b` and
/// lists of objects as `a[].b`, in schema order.
fn fields(obj: &Value, defs: &Value, prefix: &str, out: &mut Vec<Field>) {
    let required: BTreeSet<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = obj.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, s) in props {
        let (inner, nullable) = non_null(s, defs);
        let description = s
            .get("description")
            .or(inner.get("description").filter(|_| s.get("$ref").is_none()))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let path = format!("{prefix}{name}");
        let sub = object_of(s, defs);
        out.push(Field {
            path: match sub {
                Some((_, true)) => format!("{path}[]"),
                _ => path.clone(),
            },
            ty: match sub {
                Some((_, true)) => "object[]".into(),
                Some((_, false)) => "object".into(),
                None => type_name(s, defs),
            },
            nullable,
            required: required.contains(name.as_str()),
            description: description.split_whitespace().collect::<Vec<_>>().join(" "),
        });
        if let Some((o, list)) = sub {
            let p = if list {
                format!("{path}[].")
            } else {
                format!("{path}.")
            };
            fields(o, defs, &p, out);
        }
    }
}

// --- MCP tools ---------------------------------------------------------------

fn tools() -> Vec<Value> {
    localagents::mcp::tools()
        .iter()
        .map(|t| serde_json::to_value(t).expect("a tool serialises"))
        .collect()
}

fn tool_fields(tool: &Value) -> Vec<Field> {
    let schema = &tool["inputSchema"];
    let defs = schema.get("$defs").cloned().unwrap_or(json!({}));
    let mut out = Vec::new();
    fields(schema, &defs, "", &mut out);
    out
}

/// `name(a, b?, c?)`: the required parameters, then the optional ones.
fn signature(tool: &Value) -> String {
    let params: Vec<String> = tool_fields(tool)
        .iter()
        .filter(|f| !f.path.contains('.'))
        .map(|f| {
            let name = f.path.trim_end_matches("[]");
            if f.required {
                name.to_string()
            } else {
                format!("{name}?")
            }
        })
        .collect();
    format!("{}({})", tool["name"].as_str().unwrap(), params.join(", "))
}

fn param_description(tool: &str, f: &Field) -> String {
    let fallback = PROSE
        .param_help
        .iter()
        .find(|(t, p, _)| t == tool && *p == f.path)
        .map(|(_, _, d)| d.as_str());
    match (f.description.is_empty(), fallback) {
        (false, Some(_)) => panic!(
            "`{tool}` `{}` has a description in the code now: remove its entry under `mcp_tools.params` in docs/reference/prose.yaml",
            f.path
        ),
        (true, Some(d)) => d.to_string(),
        _ => f.description.clone(),
    }
}

/// `docs/reference/mcp-tools.md`.
pub fn mcp_tools_md() -> String {
    let mut out = banner("the rmcp tool router in src/mcp.rs (`localagents::mcp::tools()`)");
    out.push_str("# MCP tools\n\n");
    out.push_str(&prose(
        "What `localagents serve` offers over MCP, as `tools/list` gives it. How the tools \
         fit together, and how errors come back, is in the \
         [guide](../guide.md#mcp-tools).\n\n",
    ));
    out.push_str("What Claude reads about the server (its instructions):\n\n");
    let _ = writeln!(out, "> {}\n", localagents::mcp::INSTRUCTIONS);
    let tools = tools();
    out.push_str("| tool | what it does |\n|---|---|\n");
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let first = t["description"]
            .as_str()
            .unwrap_or_default()
            .split_inclusive(". ")
            .next()
            .unwrap_or_default()
            .trim()
            .to_string();
        let _ = writeln!(
            out,
            "| [{}](#{}) | {} |",
            code(name),
            slug(name),
            cell(&first)
        );
    }
    out.push('\n');
    for t in &tools {
        let name = t["name"].as_str().unwrap();
        let _ = writeln!(out, "## `{name}`\n");
        let _ = writeln!(out, "```\n{}\n```\n", signature(t));
        if let Some(d) = t["description"].as_str() {
            let _ = writeln!(out, "{}\n", sentence(d));
        }
        let fields = tool_fields(t);
        if fields.is_empty() {
            out.push_str("No parameters.\n\n");
            continue;
        }
        out.push_str("| parameter | type | required | description |\n|---|---|---|---|\n");
        for f in fields {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                code(&f.path),
                cell(&f.ty),
                if f.required { "yes" } else { "no" },
                cell(&param_description(name, &f))
            );
        }
        out.push('\n');
    }
    out.push_str(&error_kinds_md());
    out.trim_end().to_string() + "\n"
}

/// The error kinds, from `localagents::error::Kind`'s schema (its doc
/// comments).
fn error_kinds_md() -> String {
    let mut out = String::from("## Errors\n\n");
    out.push_str(&prose(
        "A failed call is a tool result with `isError`. Its text is the sentence that \
         names the fix (for `model_unavailable`, a JSON object: the model, whom to ask, \
         what is served); its structured content is `{\"kind\", \"error\"}` with the \
         same sentence (for `model_unavailable`, `kind` beside that object's fields). \
         The kinds:\n\n",
    ));
    out.push_str("| kind | what failed |\n|---|---|\n");
    let schema = serde_json::to_value(schemars::schema_for!(localagents::error::Kind)).unwrap();
    let variants = schema["oneOf"].as_array().expect("Kind's schema has oneOf");
    for v in variants {
        let name = v["const"]
            .as_str()
            .or_else(|| v["enum"][0].as_str())
            .expect("a kind's name");
        let what = v["description"]
            .as_str()
            .expect("every kind has a doc comment");
        let _ = writeln!(out, "| {} | {} |", code(name), cell(&sentence(what)));
    }
    out.push('\n');
    out
}

// --- the skill's reference ---------------------------------------------------

/// What each tool is for, as the skill tells Claude, in the order it reads
/// them. The signature comes from the tool's schema.
fn skill_notes() -> Vec<(&'static str, String)> {
    let wait = localagents::api::MAX_WAIT.as_secs();
    vec![
        (
            "list_models",
            "endpoints: `up`, `error` (one sentence with the fix), `models[{id, context}]` (window per slot), `slots{total,busy,free}`, `load` (vLLM); `models` menu with `running_on`".into(),
        ),
        (
            "run_agent",
            format!(
                "starts a job (loading an `unloaded` model first); `force` loads even if that may swap out a running job's model, only when the user says so; `acceptance` is run by localagents in the job's tree, with up to `fix_rounds` (2) fix rounds in the same session; `wait_s` up to {wait}"
            ),
        ),
        (
            "wait_job",
            format!("waits up to {wait} s; `still_running` tells whether to wait again"),
        ),
        (
            "job_status",
            "summary: status, result, error, files_changed, files_touched, worktree, metrics".into(),
        ),
        ("list_jobs", "newest first".into()),
        (
            "job_log",
            "`transcript` (default), `requests`, `events`; page with `next_offset`".into(),
        ),
        ("job_diff", "full diff incl. untracked files".into()),
        (
            "cancel_job",
            "stops the job and everything it started, a running acceptance command too".into(),
        ),
        (
            "cleanup_jobs",
            "a dry run unless `dry_run: false`; keeps worktrees with uncommitted or unmerged work (listed under `kept`); `force: true` only when the user says to drop that work".into(),
        ),
        (
            "local_complete",
            "one answer, no tools: `text`, `usage`, `ms`; a prompt that cannot fit the window is refused before it is sent (\"prompt is about N tokens; M has W per slot\")".into(),
        ),
        (
            "local_batch",
            "`items[{prompt, system?, files?}]`; results in input order, each `ok` with `text` or `error`; past `wait_s` it is a job: `wait_job(job_id)` returns the results".into(),
        ),
        (
            "local_review",
            "give `job_id` or `diff`; `verdict` (`looks_right`, `problems`, `unparsed`), `findings[{file, line, what}]`, `summary`; advice, not a gate".into(),
        ),
        (
            "register_endpoint",
            "adds a server the user names (written to models.local.yaml); a key is never set this way: the user adds `api_key_env` to their own models.yaml".into(),
        ),
    ]
}

/// `skills/local-agents/reference.md`.
pub fn skill_reference_md() -> String {
    let tools = tools();
    let notes = skill_notes();
    let named: BTreeSet<&str> = notes.iter().map(|(n, _)| *n).collect();
    let offered: BTreeSet<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    if let Some(missing) = offered.difference(&named).next() {
        panic!("the tool `{missing}` has no note in tests/it/docs.rs (skill_notes): add one");
    }
    if let Some(gone) = named.difference(&offered).next() {
        panic!("skill_notes in tests/it/docs.rs names `{gone}`, which is no tool: remove it");
    }
    let mut out = banner("the rmcp tool router in src/mcp.rs");
    out.push_str("# localagents reference\n\n## Tools\n\n| tool | use |\n|---|---|\n");
    for (name, note) in &notes {
        let tool = tools.iter().find(|t| t["name"] == *name).unwrap();
        let _ = writeln!(out, "| {} | {} |", cell(&code(&signature(tool))), note);
    }
    out.push('\n');
    out.push_str(&PROSE.skill_rest);
    out
}

// --- the status object -------------------------------------------------------

fn schema_table(out: &mut String, fields: &[Field], notes: &[(String, String)]) {
    out.push_str("| field | type | present | meaning |\n|---|---|---|---|\n");
    for f in fields {
        let note = notes
            .iter()
            .find(|(p, _)| *p == f.path)
            .map(|(_, n)| n.as_str());
        let meaning = match (f.description.is_empty(), note) {
            (false, _) => f.description.clone(),
            (true, Some(n)) => n.to_string(),
            (true, None) => String::new(),
        };
        let ty = if f.nullable {
            format!("{} or null", f.ty)
        } else {
            f.ty.clone()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&f.path),
            cell(&ty),
            if f.required { "always" } else { "when set" },
            cell(&meaning)
        );
    }
    out.push('\n');
}

/// `docs/reference/status-json.md`.
pub fn status_json_md() -> String {
    // What is serialised: a field is missing only when it is skipped.
    let generator = || {
        schemars::generate::SchemaSettings::default()
            .for_serialize()
            .into_generator()
    };
    let status =
        serde_json::to_value(generator().into_root_schema_for::<localagents::registry::Report>())
            .unwrap();
    let json =
        serde_json::to_value(generator().into_root_schema_for::<localagents::api::StatusReport>())
            .unwrap();
    let report =
        serde_json::to_value(generator().into_root_schema_for::<localagents::api::ModelsReport>())
            .unwrap();
    let defs = |s: &Value| s.get("$defs").cloned().unwrap_or(json!({}));
    let mut status_fields = Vec::new();
    fields(&status, &defs(&status), "", &mut status_fields);
    let mut json_fields = Vec::new();
    fields(&json, &defs(&json), "", &mut json_fields);
    let mut report_fields = Vec::new();
    fields(&report, &defs(&report), "", &mut report_fields);
    let known: BTreeSet<String> = status_fields
        .iter()
        .chain(&json_fields)
        .chain(&report_fields)
        .map(|f| f.path.clone())
        .collect();
    for (p, _) in &PROSE.status_notes {
        assert!(
            known.contains(p),
            "`status_json.notes` in docs/reference/prose.yaml names `{p}`, which the status object does not have: remove it"
        );
    }
    let in_status: BTreeSet<&str> = status_fields.iter().map(|f| f.path.as_str()).collect();
    let beyond = |fields: Vec<Field>| -> Vec<Field> {
        fields
            .into_iter()
            .filter(|f| !in_status.contains(f.path.as_str()))
            .collect()
    };
    let (json_extra, extra) = (beyond(json_fields), beyond(report_fields));

    let mut out = banner(
        "the JSON schema of `registry::Report`, `api::StatusReport` and `api::ModelsReport` (schemars)",
    );
    out.push_str("# `status --json` and `list_models`\n\n");
    out.push_str(&prose(
        "`localagents status --json` prints one stable object: the status object and \
         what the text of `localagents status` prints under the endpoints (the second \
         table). The `list_models` tool returns the status object plus the fields in the \
         third table. Nested fields are written `a.b`, the objects of a list `a[].b`. \
         \"when set\": the field is left out when there is nothing to say.\n\n",
    ));
    out.push_str("## The status object\n\n");
    schema_table(&mut out, &status_fields, &PROSE.status_notes);
    out.push_str("## What `status --json` adds\n\n");
    schema_table(&mut out, &json_extra, &PROSE.status_notes);
    out.push_str("## What `list_models` adds\n\n");
    schema_table(&mut out, &extra, &PROSE.status_notes);
    out.push_str(&prose(
        "Each endpoint that is down carries one sentence in `error`; the \
         [guide](../guide.md#probe-failures) lists them.\n",
    ));
    out
}

// --- the config --------------------------------------------------------------

/// Parse a config text on its own (nothing is read from disk).
fn parse(text: &str) -> Result<Vec<String>, String> {
    localagents::config::parse_text(Path::new("docs.yaml"), text)
        .map(|(_, w)| w)
        .map_err(|e| e.to_string())
}

/// The keys a section accepts, as the config module lists them for a key it
/// does not know.
fn keys_of(prefix: &str, suffix: &str) -> Vec<String> {
    let unknown = "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz";
    let warnings =
        parse(&format!("{prefix}{unknown}: 1{suffix}\n")).expect("an unknown key is a warning");
    let w = warnings.first().expect("an unknown key gets a warning");
    let list = w
        .split_once("(valid keys: ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .unwrap_or_else(|| panic!("no key list in {w:?}"))
        .0;
    list.split(", ").map(str::to_string).collect()
}

/// A key's type, from the config module's own type error for a wrong value.
fn type_of(prefix: &str, key: &str, suffix: &str) -> String {
    let expected = |value: &str| -> Option<String> {
        let e = parse(&format!("{prefix}{key}: {value}{suffix}\n")).err()?;
        let tail = e.split_once(", expected ")?.1;
        Some(tail.split(';').next().unwrap_or(tail).trim().to_string())
    };
    let plain = |t: &str| -> String {
        match t {
            "u8" | "u16" | "u32" | "u64" | "usize" | "i32" | "i64" => "integer".into(),
            "f32" | "f64" => "number".into(),
            "a string" => "string".into(),
            "a boolean" => "boolean".into(),
            "a map" => "mapping".into(),
            "a sequence" => "list".into(),
            t if t.starts_with("struct ") => "mapping".into(),
            other => other.to_string(),
        }
    };
    match expected("[]") {
        Some(t) => plain(&t),
        None => match expected("[[]]") {
            Some(item) => format!("list of {}s", plain(&item)),
            None => "list".into(),
        },
    }
}

/// A default as the file would say it.
fn yaml_value(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) => code(s),
        Value::Array(a) if a.is_empty() => code("[]"),
        Value::Array(a) => code(&format!(
            "[{}]",
            a.iter()
                .map(|x| x.as_str().map(str::to_string).unwrap_or(x.to_string()))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Value::Object(o) if o.is_empty() => code("{}"),
        other => code(&other.to_string()),
    }
}

/// One key of a section: its default when the code's is none (`None`
/// here: the code's default is shown), and what it means.
type Meaning = (String, Option<String>, String);

/// `docs/reference/prose.yaml`: the texts a person wrote, read in file
/// order.
struct Prose {
    cli_intro: String,
    /// (command, argument id, help)
    arg_help: Vec<(String, String, String)>,
    /// (tool, field path, description)
    param_help: Vec<(String, String, String)>,
    /// (field path, note)
    status_notes: Vec<(String, String)>,
    config_top: Vec<Meaning>,
    config_endpoint: Vec<Meaning>,
    config_model: Vec<Meaning>,
    config_defaults: Vec<Meaning>,
    config_prices: Vec<Meaning>,
    skill_rest: String,
}

const PROSE_FILE: &str = "docs/reference/prose.yaml";

static PROSE: std::sync::LazyLock<Prose> = std::sync::LazyLock::new(|| {
    let text = std::fs::read_to_string(root().join(PROSE_FILE))
        .unwrap_or_else(|e| panic!("{PROSE_FILE}: {e}"));
    prose_from(&text).unwrap_or_else(|e| panic!("{PROSE_FILE}: {e}"))
});

fn prose_from(text: &str) -> Result<Prose, String> {
    use serde_yaml_ng::{Mapping, Value as Y};
    let root: Y = serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?;
    let get = |m: &Y, path: &str| -> Result<Y, String> {
        let mut v = m;
        for k in path.split('.') {
            v = v.get(k).ok_or_else(|| format!("no `{path}`"))?;
        }
        Ok(v.clone())
    };
    let text_of = |v: &Y, at: &str| -> Result<String, String> {
        v.as_str()
            .map(str::to_string)
            .ok_or_else(|| format!("`{at}` is not text"))
    };
    let map_of = |v: &Y, at: &str| -> Result<Mapping, String> {
        v.as_mapping()
            .cloned()
            .ok_or_else(|| format!("`{at}` is not a map"))
    };
    let pairs = |path: &str| -> Result<Vec<(String, Y)>, String> {
        map_of(&get(&root, path)?, path)?
            .into_iter()
            .map(|(k, v)| Ok((text_of(&k, path)?, v)))
            .collect()
    };
    let nested = |path: &str| -> Result<Vec<(String, String, String)>, String> {
        let mut out = Vec::new();
        for (outer, inner) in pairs(path)? {
            for (k, v) in map_of(&inner, &outer)? {
                let at = format!("{path}.{outer}");
                out.push((outer.clone(), text_of(&k, &at)?, text_of(&v, &at)?));
            }
        }
        Ok(out)
    };
    let meanings = |path: &str| -> Result<Vec<Meaning>, String> {
        pairs(path)?
            .into_iter()
            .map(|(k, v)| {
                let at = format!("{path}.{k}");
                Ok(match v {
                    Y::String(m) => (k, None, m),
                    v => (
                        k,
                        Some(text_of(&get(&v, "default")?, &at)?),
                        text_of(&get(&v, "meaning")?, &at)?,
                    ),
                })
            })
            .collect()
    };
    Ok(Prose {
        cli_intro: text_of(&get(&root, "cli.intro")?, "cli.intro")?,
        arg_help: nested("cli.args")?,
        param_help: nested("mcp_tools.params")?,
        status_notes: pairs("status_json.notes")?
            .into_iter()
            .map(|(k, v)| Ok((k.clone(), text_of(&v, &k)?)))
            .collect::<Result<_, String>>()?,
        config_top: meanings("config.top")?,
        config_endpoint: meanings("config.endpoint")?,
        config_model: meanings("config.model")?,
        config_defaults: meanings("config.defaults")?,
        config_prices: meanings("config.prices")?,
        skill_rest: text_of(&get(&root, "skill_reference.rest")?, "skill_reference.rest")?,
    })
}

/// The keys a project's own `models.yaml` may set in a section.
fn project_may(section: &str, key: &str) -> bool {
    use localagents::config::trust::{PROJECT_DEFAULT_KEYS, PROJECT_MODEL_KEYS};
    match section {
        "models" => PROJECT_MODEL_KEYS.contains(&key),
        "defaults" => PROJECT_DEFAULT_KEYS.contains(&key),
        "top" => key == "models",
        _ => false,
    }
}

/// The defaults an endpoint gets when the file gives only its `base_url`,
/// from the config module's own build of one.
fn endpoint_defaults() -> Map<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("models.yaml");
    std::fs::write(
        &file,
        "endpoints:\n  e:\n    base_url: http://127.0.0.1:1\n",
    )
    .unwrap();
    let loaded = localagents::config::load(&localagents::config::Discovery::standard(Some(file)))
        .expect("a one-endpoint config loads");
    let localagents::config::Endpoint {
        name: _,
        base_url: _,
        backend,
        host,
        notes,
        env,
        api_key_env,
        allow_insecure_key,
        session_header,
        vllm_router: _,
        wire,
        window,
    } = loaded.config.endpoints[0].clone();
    let mut m = Map::new();
    m.insert("backend".into(), json!(backend.map(|b| b.as_str())));
    m.insert("host".into(), json!(host));
    m.insert("notes".into(), json!(notes));
    m.insert("env".into(), json!(env));
    m.insert("api_key_env".into(), json!(api_key_env));
    m.insert("allow_insecure_key".into(), json!(allow_insecure_key));
    m.insert("session_header".into(), json!(session_header));
    m.insert("wire".into(), json!(wire.map(|w| w.as_str())));
    m.insert("window".into(), json!(window));
    m
}

/// A section's table. `defaults`: the code's defaults by key (`None`: the
/// section has no default column).
fn key_table(
    out: &mut String,
    (section, what): (&str, &str),
    keys: &[String],
    types: impl Fn(&str) -> String,
    defaults: Option<&Map<String, Value>>,
    meanings: &[Meaning],
    below: &mut Vec<(String, String)>,
) {
    let documented: BTreeSet<&str> = meanings.iter().map(|m| m.0.as_str()).collect();
    for k in keys {
        assert!(
            documented.contains(k.as_str()),
            "the config key `{what}.{k}` has no meaning in docs/reference/prose.yaml: add one"
        );
    }
    for (k, _, _) in meanings {
        assert!(
            keys.iter().any(|x| x == k),
            "docs/reference/prose.yaml documents `{what}.{k}`, which the config does not have: remove it"
        );
    }
    let project_column = matches!(section, "top" | "models" | "defaults");
    let mut head = vec!["key", "type"];
    if defaults.is_some() {
        head.push("default");
    }
    head.push("meaning");
    if project_column {
        head.push("in a project's file");
    }
    let _ = writeln!(
        out,
        "| {} |\n|{}",
        head.join(" | "),
        "---|".repeat(head.len())
    );
    for k in keys {
        let (_, note_default, meaning) = meanings.iter().find(|m| m.0 == *k).unwrap();
        let mut row = vec![code(k), types(k)];
        if let Some(d) = defaults {
            let v = d.get(k.as_str()).cloned().unwrap_or(Value::Null);
            let shown = match (&v, note_default) {
                (Value::Null, Some(n)) => n.to_string(),
                (Value::Null, None) => String::new(),
                (_, Some(_)) => panic!(
                    "docs/reference/prose.yaml gives `{what}.{k}` a default in words, but the code has one ({v}): drop the words"
                ),
                (Value::String(s), None) if s.len() > 60 => {
                    let heading = format!("The default `{what}.{k}`");
                    let link = format!("[below](#{})", slug(&heading));
                    below.push((heading, s.clone()));
                    link
                }
                (_, None) => yaml_value(&v),
            };
            row.push(shown);
        }
        row.push(meaning.to_string());
        if project_column {
            let may = match (section, k.as_str()) {
                ("top", "defaults") => "only `defaults.model`",
                ("top", "trusted_projects") => "never",
                _ if project_may(section, k) => "yes",
                _ => "trusted only",
            };
            row.push(may.into());
        }
        let _ = writeln!(
            out,
            "| {} |",
            row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | ")
        );
    }
    out.push('\n');
}

/// `docs/reference/config.md`.
pub fn config_md() -> String {
    let mut below = Vec::new();
    let mut out = banner(
        "the config module's key lists and types (`config::parse_text`), `config::Defaults::default()` and a loaded endpoint",
    );
    out.push_str("# Configuration reference (`models.yaml`)\n\n");
    out.push_str(&prose(
        "Every key of `models.yaml`, section by section. The keys and their types are the \
         config module's own; the defaults are what it fills in. Where the files are, how \
         they merge, what a project's file may set, and how model names resolve: \
         [the guide](../guide.md#configuration-modelsyaml). An unknown key is a warning \
         naming the nearest valid key, and is ignored.\n\n",
    ));
    out.push_str(&prose(
        "\"in a project's file\": whether a project's own `./models.yaml` may set the key \
         (\"trusted only\": only after `localagents trust`; \"never\": not even then).\n\n",
    ));

    out.push_str("## Top level\n\n");
    let top = keys_of("", "");
    key_table(
        &mut out,
        ("top", "models.yaml"),
        &top,
        |k| type_of("", k, ""),
        None,
        &PROSE.config_top,
        &mut below,
    );

    out.push_str(&prose(
        "## `endpoints.<name>`\n\nThe name: letters, digits, `_ . -`. Config order is \
         priority order.\n\n",
    ));
    let ep = keys_of("endpoints: {e: {", "}}");
    let ep_defaults = endpoint_defaults();
    key_table(
        &mut out,
        ("endpoints", "endpoints.<name>"),
        &ep,
        |k| type_of("endpoints: {e: {", k, "}}"),
        Some(&ep_defaults),
        &PROSE.config_endpoint,
        &mut below,
    );

    out.push_str(&prose(
        "## `models.<name>`\n\nA menu of names. A name needs nothing but `notes` and maybe \
         `host`.\n\n",
    ));
    let models = keys_of("models: {m: {", "}}");
    key_table(
        &mut out,
        ("models", "models.<name>"),
        &models,
        |k| type_of("models: {m: {", k, "}}"),
        None,
        &PROSE.config_model,
        &mut below,
    );

    out.push_str("## `defaults`\n\n");
    let defaults = keys_of("defaults: {", "}");
    let Value::Object(code_defaults) =
        serde_json::to_value(localagents::config::Defaults::default()).unwrap()
    else {
        panic!("Defaults serialises to an object");
    };
    let mut d_keys: Vec<&String> = code_defaults.keys().collect();
    d_keys.sort();
    let mut s_keys: Vec<&String> = defaults.iter().collect();
    s_keys.sort();
    assert_eq!(
        d_keys, s_keys,
        "Defaults::default() and the defaults section name different keys"
    );
    key_table(
        &mut out,
        ("defaults", "defaults"),
        &defaults,
        |k| type_of("defaults: {", k, "}"),
        Some(&code_defaults),
        &PROSE.config_defaults,
        &mut below,
    );

    out.push_str(&prose(
        "## `prices.<model>`\n\nUSD per million tokens; adds or overrides a list price for \
         the ledger.\n\n",
    ));
    let prices: Vec<String> = PROSE.config_prices.iter().map(|m| m.0.clone()).collect();
    for k in &prices {
        let t = type_of("prices: {m: {", k, "}}");
        assert_ne!(
            t, "list",
            "`prices.<model>.{k}` takes any value: it is no price key (docs/reference/prose.yaml)"
        );
    }
    key_table(
        &mut out,
        ("prices", "prices.<model>"),
        &prices,
        |k| type_of("prices: {m: {", k, "}}"),
        Some(&Map::new()),
        &PROSE.config_prices,
        &mut below,
    );

    for (key, text) in below {
        let _ = writeln!(out, "## {key}\n\n> {text}\n");
    }
    out.trim_end().to_string() + "\n"
}

// --- the test ----------------------------------------------------------------

/// The first line where two texts differ, for the failure message.
fn first_difference(want: &str, have: &str) -> String {
    let (mut w, mut h) = (want.lines(), have.lines());
    for n in 1.. {
        match (w.next(), h.next()) {
            (None, None) => return "they differ only in line endings".into(),
            (a, b) if a == b => continue,
            (a, b) => {
                return format!(
                    "line {n}: the code generates {:?}, the file has {:?}",
                    a.unwrap_or("(end of file)"),
                    b.unwrap_or("(end of file)")
                );
            }
        }
    }
    unreachable!()
}

#[test]
fn the_references_are_generated() {
    let bless = std::env::var("LOCALAGENTS_BLESS").is_ok_and(|v| v == "1");
    let mut stale = Vec::new();
    for (path, text) in generated() {
        let file = root().join(path);
        if bless {
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
                std::fs::write(&file, &text).unwrap();
                eprintln!("docs: wrote {path}");
            }
            continue;
        }
        let have = std::fs::read_to_string(&file).unwrap_or_default();
        if have != text {
            stale.push(format!(
                "{path} is not what the code generates: run scripts/gen-docs.sh\n  ({})",
                first_difference(&text, &have)
            ));
        }
    }
    assert!(stale.is_empty(), "{}", stale.join("\n"));
}

// --- links -------------------------------------------------------------------

/// GitHub's anchor for a heading: lowercase, punctuation other than `-` and
/// `_` dropped, spaces to `-`.
pub fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// A heading's text as GitHub renders it: links become their text.
fn heading_text(raw: &str) -> String {
    let mut out = String::new();
    let mut rest = raw;
    while let Some(i) = rest.find('[') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        match tail
            .find("](")
            .and_then(|j| tail[j..].find(')').map(|k| (j, j + k)))
        {
            Some((j, end)) => {
                out.push_str(&tail[..j]);
                rest = &tail[end + 1..];
            }
            None => {
                out.push('[');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out.trim_end_matches('#').trim().to_string()
}

/// The lines of a Markdown file outside fenced code blocks, numbered.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fence: Option<&str> = None;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| t.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(f), Some(m)) if f == m => fence = None,
            (None, None) => out.push((n + 1, line)),
            _ => {}
        }
    }
    out
}

/// Every anchor of a Markdown file's headings (GitHub numbers repeats).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&heading_text(&line[hashes..]));
        let mut s = base.clone();
        let mut i = 1;
        while seen.contains(&s) {
            s = format!("{base}-{i}");
            i += 1;
        }
        seen.insert(s);
    }
    seen
}

/// A line without its inline code spans.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for part in line.split('`') {
        if !in_code {
            out.push_str(part);
        }
        in_code = !in_code;
    }
    out
}

/// The link targets of a Markdown text: `[text](target)` and
/// `[label]: target`, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in prose_lines(text) {
        let line = without_code(line);
        let t = line.trim_start();
        if t.starts_with('[')
            && let Some((_, target)) = t.split_once("]: ")
        {
            out.push((n, target.trim().to_string()));
            continue;
        }
        let mut rest = line.as_str();
        while let Some(i) = rest.find("](") {
            let tail = &rest[i + 2..];
            let Some(end) = tail.find(')') else { break };
            let target = tail[..end].split_whitespace().next().unwrap_or_default();
            out.push((n, target.trim_matches(['<', '>']).to_string()));
            rest = &tail[end..];
        }
    }
    out
}

/// The hand-written and generated docs the link check reads.
fn doc_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = [
        "README.md",
        "ARCHITECTURE.md",
        "CONTRIBUTING.md",
        "CHANGELOG.md",
    ]
    .iter()
    .map(|f| root().join(f))
    .collect();
    let mut stack = vec![root().join("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "md") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// What is wrong with one link of `file`, if anything.
fn check_link(file: &Path, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let dest = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(abs) = path.strip_prefix('/') {
        root().join(abs)
    } else {
        file.parent().unwrap().join(path)
    };
    if !dest.exists() {
        return Some(format!("{} does not exist", rel(&dest)));
    }
    let anchor = anchor?;
    if dest.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "#{anchor} points into {}, which is no Markdown file",
            rel(&dest)
        ));
    }
    let text = std::fs::read_to_string(&dest).unwrap();
    if anchors(&text).contains(anchor) {
        return None;
    }
    Some(format!(
        "{} has no heading whose anchor is #{anchor}",
        rel(&dest)
    ))
}

#[test]
fn every_link_resolves() {
    let mut bad = Vec::new();
    let mut checked = 0;
    for file in doc_files() {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", rel(&file)));
        for (line, target) in links(&text) {
            checked += 1;
            if let Some(why) = check_link(&file, &target) {
                bad.push(format!("{}:{line}: ({target}) {why}", rel(&file)));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} links found: the link reader is broken"
    );
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_link_check_catches_a_bad_anchor_and_a_missing_file() {
    let text = "# Top\n\n## `status --json` (and `list_models`)\n\n```\n# not a heading\n```\n";
    let a = anchors(text);
    assert!(
        a.contains("top") && a.contains("status---json-and-list_models"),
        "{a:?}"
    );
    assert!(!a.contains("not-a-heading"));
    let readme = root().join("README.md");
    assert!(check_link(&readme, "#no-such-heading").is_some());
    assert!(check_link(&readme, "docs/no-such-file.md").is_some());
    assert!(check_link(&readme, "LICENSE").is_none());
    assert!(check_link(&readme, "https://example.com/#x").is_none());
    let found = links("see [a](b.md#c) and `[not](a-link)` and [d]( e.md )\n[f]: g.md\n");
    let targets: Vec<&str> = found.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(targets, ["b.md#c", "e.md", "g.md"]);
}

// --- ARCHITECTURE.md ---------------------------------------------------------

/// The layers of tests/it/layering.rs, top first, as one line.
fn layer_line() -> String {
    let text = std::fs::read_to_string(root().join("tests/it/layering.rs")).unwrap();
    let mut layers: Vec<(u8, Vec<String>)> = Vec::new();
    for line in text.lines() {
        let t = line.trim();
        let Some(inner) = t.strip_prefix("(\"").and_then(|s| s.strip_suffix("),")) else {
            continue;
        };
        let Some((name, n)) = inner.split_once("\", ") else {
            continue;
        };
        let n: u8 = n.parse().unwrap();
        match layers.iter_mut().find(|(l, _)| *l == n) {
            Some((_, names)) => names.push(name.to_string()),
            None => layers.push((n, vec![name.to_string()])),
        }
    }
    layers.sort_by_key(|l| std::cmp::Reverse(l.0));
    layers
        .iter()
        .map(|(_, names)| names.join(", "))
        .collect::<Vec<_>>()
        .join("  →  ")
}

/// Where the test a dotted name points at lives, and its function name.
fn test_file(name: &str) -> (PathBuf, String) {
    let segs: Vec<&str> = name.split("::").collect();
    let func = segs.last().unwrap().to_string();
    if let Some(i) = segs.iter().position(|s| *s == "tests") {
        let module = segs[..i].join("/");
        let file = root().join(format!("src/{module}.rs"));
        let file = if file.exists() {
            file
        } else {
            root().join(format!("src/{module}/mod.rs"))
        };
        return (file, func);
    }
    if segs[0] == "e2e" {
        return (root().join("tests/e2e/main.rs"), func);
    }
    (root().join(format!("tests/it/{}.rs", segs[0])), func)
}

#[test]
fn the_architecture_matches_the_code() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let line = layer_line();
    assert!(
        arch.contains(&line),
        "ARCHITECTURE.md does not show the layers of tests/it/layering.rs; the line is:\n{line}"
    );
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    for m in lib.lines().filter_map(|l| l.strip_prefix("pub mod ")) {
        let m = m.trim_end_matches(';');
        let file = format!("`src/{m}.rs`");
        let dir = format!("`src/{m}/`");
        assert!(
            arch.contains(&file) || arch.contains(&dir),
            "ARCHITECTURE.md's code map lacks the module {m} ({file} or {dir})"
        );
    }
    // Every test the invariants table names (its last column) exists.
    let start = arch
        .find("## Invariants")
        .expect("ARCHITECTURE.md has ## Invariants");
    let section = &arch[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    let mut named = 0;
    for row in section.lines().filter(|l| l.starts_with('|')) {
        let last = row
            .trim_end_matches('|')
            .rsplit('|')
            .next()
            .unwrap_or_default();
        for span in last.split('`').skip(1).step_by(2) {
            if !span.contains("::") {
                continue;
            }
            let (file, func) = test_file(span);
            let text = std::fs::read_to_string(&file).unwrap_or_else(|_| {
                panic!(
                    "ARCHITECTURE.md names the test {span}, but {} does not exist",
                    rel(&file)
                )
            });
            assert!(
                text.contains(&format!("fn {func}(")),
                "ARCHITECTURE.md names the test {span}, but {} has no fn {func}",
                rel(&file)
            );
            named += 1;
        }
    }
    assert!(
        named >= 10,
        "ARCHITECTURE.md's invariants name only {named} tests"
    );
}

/// The code map's rows: the path of the first cell (`src/shim/`,
/// `src/mcp.rs`) and the row's whole text.
fn code_map(arch: &str) -> Vec<(String, String)> {
    let start = arch
        .find("## Code map")
        .expect("ARCHITECTURE.md has ## Code map");
    let section = &arch[start..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |e| e + 3)];
    section
        .lines()
        .filter_map(|row| {
            let first = row.strip_prefix("| `")?;
            let (path, _) = first.split_once('`')?;
            path.starts_with("src/")
                .then(|| (path.to_string(), row.to_string()))
        })
        .collect()
}

/// The files of `files` (paths from the repository root) that no row of
/// the code map names: a row's own path, or a row of a directory (or of
/// `src/x.rs` for the files under `src/x/`) that names the file in
/// backticks, by its path under that directory or by its name (a `mod.rs`
/// by its directory, `repair/`). `src/cli/commands/` is one row.
fn unnamed_in_map(rows: &[(String, String)], files: &[String]) -> Vec<String> {
    let named = |file: &str| {
        if file.starts_with("src/cli/commands/") {
            return rows.iter().any(|(_, row)| row.contains("`commands/`"));
        }
        rows.iter().any(|(path, row)| {
            if path == file {
                return true;
            }
            let dir = match path.strip_suffix(".rs") {
                Some(stem) => format!("{stem}/"),
                None => path.clone(),
            };
            let Some(under) = file.strip_prefix(&dir) else {
                return false;
            };
            let name = under.rsplit('/').next().unwrap_or(under);
            let mut forms = vec![under.to_string(), name.to_string()];
            if name == "mod.rs" && under != "mod.rs" {
                forms = vec![under.trim_end_matches("mod.rs").to_string()];
            }
            let full = format!("{}{under}", dir.trim_start_matches("src/"));
            forms.push(full);
            forms.iter().any(|f| row.contains(&format!("`{f}`")))
        })
    };
    files.iter().filter(|f| !named(f)).cloned().collect()
}

/// Every file under `src/`, from the repository root, sorted.
fn src_files() -> Vec<String> {
    crate::layering::rs_files(&root().join("src"))
        .into_iter()
        .map(|(rel, _)| format!("src/{rel}"))
        .collect()
}

/// ARCHITECTURE.md's code map names every source file (issue 43), so a new
/// file comes with its line.
#[test]
fn the_code_map_names_every_source_file() {
    let arch = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let missing = unnamed_in_map(&code_map(&arch), &src_files());
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md's code map does not name these files; add each to its module's row: {missing:#?}"
    );
}

#[test]
fn the_code_map_check_catches_an_unnamed_file() {
    let arch = "## Code map\n\n| module | what |\n|---|---|\n| `src/shim/` | errors (`errors.rs`), repair (`repair/`: `parse.rs`) |\n| `src/mcp.rs` | params (`mcp/params.rs`) |\n| `src/cli/` | one file per command (`commands/`) |\n\n## Invariants\n| `src/late.rs` | not in the map |\n";
    let files: Vec<String> = [
        "src/shim/errors.rs",
        "src/shim/repair/parse.rs",
        "src/shim/repair/mod.rs",
        "src/shim/sse.rs",
        "src/mcp.rs",
        "src/mcp/params.rs",
        "src/mcp/tasks.rs",
        "src/cli/commands/run.rs",
        "src/late.rs",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(
        unnamed_in_map(&code_map(arch), &files),
        ["src/shim/sse.rs", "src/mcp/tasks.rs", "src/late.rs"]
    );
}

/// A wrong shape in `docs/reference/prose.yaml` is an error that names
/// where, not a panic deep in the generator or an empty cell.
#[test]
fn the_prose_file_names_a_wrong_shape() {
    let good = std::fs::read_to_string(root().join(PROSE_FILE)).unwrap();
    assert!(prose_from(&good).is_ok());
    let cases = [
        ("cli: 3\n", "no `cli.intro`"),
        (
            &good.replacen("  intro: |+", "  intro:\n    - a list\n  was: |+", 1) as &str,
            "`cli.intro` is not text",
        ),
        (
            &good.replacen("  defaults:\n", "  defaults: 7\n  was:\n", 1) as &str,
            "`config.defaults` is not a map",
        ),
    ];
    for (text, want) in cases {
        match prose_from(text) {
            Err(e) => assert!(e.contains(want), "{e} (wanted {want})"),
            Ok(_) => panic!("read a wrong shape as prose: wanted {want}"),
        }
    }
}

/// Issue 56: the README states the Claude Code versions localagents is
/// tested with, as `doctor` reads them (src/runner.rs `TESTED_CLAUDE`),
/// and the pin scripts/install-claude.sh installs is the newest of them.
#[test]
fn the_readme_and_the_pin_state_the_tested_claude_versions() {
    let (lo, hi) = localagents::runner::TESTED_CLAUDE;
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let said = format!("tested with Claude Code {lo} to {hi}");
    assert!(
        readme.replace('\n', " ").contains(&said),
        "the README does not say {said:?}"
    );
    let script = std::fs::read_to_string(root().join("scripts/install-claude.sh")).unwrap();
    assert!(
        script.contains(&format!("VERSION=\"${{CLAUDE_CODE_VERSION:-{hi}}}\"")),
        "scripts/install-claude.sh does not pin {hi}"
    );
    assert_eq!(crate::support::claude::PINNED, hi, "the test kit's pin");
}
