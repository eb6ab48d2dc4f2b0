//! Data flows one way: cli, mcp → api → jobs → {runner, shim, worktree} →
//! registry → probe → config → paths. A module may use what sits below it,
//! never what sits above. This reads `crate::…` paths out of the sources,
//! so an upward `use` fails here before it becomes a cycle.
//!
//! Two more rules of the same kind (issue 36): inside `src/jobs`, `src/ui`
//! and `src/shim` the files have an order, leaves first and the
//! directory's `mod.rs` last, and a file uses only those before it (so no
//! two files import each other, however indirectly); and cli, mcp and ui
//! reach jobs and the shim only through `api`, the one door.
//!
//! And one about who writes (issue 43): a job record's fields stay
//! private to `src/jobs/record.rs`, so the compiler holds that only its
//! named methods change a record.

use std::path::Path;

/// Each top-level module and its layer (higher uses lower).
const LAYERS: &[(&str, u8)] = &[
    ("paths", 0),
    ("fmt", 0),
    ("error", 0),
    ("process", 0),
    ("signals", 0),
    ("anthropic", 0),
    ("config", 1),
    ("context", 2),
    ("probe", 3),
    ("registry", 4),
    ("budget", 4),
    ("session_env", 4),
    ("wire", 4),
    ("otel", 4),
    ("runner", 5),
    ("shim", 5),
    ("worktree", 5),
    ("prefix", 6),
    ("complete", 6),
    ("jobs", 6),
    ("api", 7),
    ("hook", 7),
    ("ledger", 7),
    ("eval", 7),
    ("session_start", 7),
    ("setup", 8),
    ("mcp", 8),
    ("ui", 8),
    ("cli", 9),
];

fn layer(module: &str) -> Option<u8> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// `crate::x` paths used on the non-comment lines of `text`.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            let tail = &rest[i + 7..];
            let name: String = tail
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push((n + 1, name));
            }
            rest = tail;
        }
        // `use crate::{a, b}` lists several modules at once.
        if let Some(i) = line.find("crate::{") {
            for part in line[i + 8..].split([',', '}']) {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push((n + 1, name));
                }
            }
        }
    }
    out
}

/// Every violation in the source tree under `src`.
fn violations(src: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, text) in rs_files(src) {
        let module = rel
            .split('/')
            .next()
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" || module == "main" {
            continue;
        }
        let own = layer(&module)
            .unwrap_or_else(|| panic!("module `{module}` has no layer in tests/it/layering.rs"));
        for (line, used) in uses(&text) {
            if let Some(l) = layer(&used)
                && l > own
            {
                bad.push(format!(
                    "{rel}:{line}: `{module}` uses `crate::{used}`, which sits above it"
                ));
            }
        }
    }
    bad.sort();
    bad
}

#[test]
fn no_module_imports_upward() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

#[test]
fn the_check_catches_an_upward_import() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("jobs")).unwrap();
    std::fs::write(
        src.join("jobs/manager.rs"),
        "use crate::api::{self, Context};\n",
    )
    .unwrap();
    std::fs::write(src.join("mcp.rs"), "use crate::{cli, api};\n").unwrap();
    std::fs::write(
        src.join("registry.rs"),
        "// see crate::api\nuse crate::probe;\n",
    )
    .unwrap();
    let bad = violations(src);
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(bad[0].contains("`jobs` uses `crate::api`"), "{bad:?}");
    assert!(bad[1].contains("`mcp` uses `crate::cli`"), "{bad:?}");
}

// --- inside a directory -------------------------------------------------------

/// The files of `src/jobs`, `src/ui` and `src/shim` in the order they may
/// use each other: a file uses only those before it, so no two import each
/// other, however indirectly. `mod` (the directory's mod.rs, its face to the
/// rest of the crate) comes last: a sibling names the module that defines an
/// item, never the re-export. A subdirectory (`run/`) counts as one file.
const ORDERS: &[(&str, &[&str])] = &[("jobs", JOBS_ORDER), ("ui", UI_ORDER), ("shim", SHIM_ORDER)];

const JOBS_ORDER: &[&str] = &[
    "pending", "window", "limits", "lease", "saved", "accept", "faults", "status", "dir", "review",
    "daylog", "book", "index", "metrics", "record", "store", "keeper", "evict", "args", "policy",
    "plan", "job", "runtime", "admit", "prewarm", "run", "batch", "summary", "manager", "mod",
];
const UI_ORDER: &[&str] = &["html", "chart", "page", "mod"];
const SHIM_ORDER: &[&str] = &[
    "turns",
    "clear",
    "errors",
    "loops",
    "repair",
    "runaway",
    "truncation",
    "fold_images",
    "fold",
    "sse",
    "log",
    "chat",
    "route",
    "pipeline",
    "count",
    "reply",
    "server",
    "mod",
];

/// The code of a file without its unit-test module and comments.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate().peekable();
    while let Some((n, line)) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|(_, next)| next.starts_with("mod ") && next.ends_with('{'))
        {
            break;
        }
        let t = line.trim_start();
        if t.starts_with("//") {
            continue;
        }
        out.push((n + 1, line));
    }
    out
}

/// The names a path segment list after `prefix` reaches: `prefix::a` gives
/// `a`, `prefix::{a, b::c}` gives `a` and `b`.
fn names_after<'a>(line: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        // `x::super::` is not a path that starts here.
        let starts =
            i == 0 || !rest[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
        let tail = &rest[i + prefix.len()..];
        rest = tail;
        if !starts {
            continue;
        }
        if let Some(list) = tail.strip_prefix('{') {
            let list = &list[..list.find('}').unwrap_or(list.len())];
            for part in list.split(',') {
                let name = part.trim().split("::").next().unwrap_or("").trim();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if end > 0 {
                out.push(&tail[..end]);
            }
        }
    }
    out
}

/// Each file of `src/<dir>` that uses a file at or after its own place in
/// `order`, or is missing from it.
fn order_violations(src: &Path, dir: &str, order: &[&str]) -> Vec<String> {
    let root = src.join(dir);
    let mut bad = Vec::new();
    let place = |unit: &str| order.iter().position(|u| *u == unit);
    let mut stack = vec![root.clone()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = p.strip_prefix(&root).unwrap();
            let depth = rel.components().count();
            let first = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy();
            let unit = if rel == Path::new("mod.rs") {
                "mod".to_string()
            } else {
                first.trim_end_matches(".rs").to_string()
            };
            if unit.ends_with("_fixtures") {
                continue; // test data, compiled under cfg(test) only
            }
            let Some(own) = place(&unit) else {
                bad.push(format!(
                    "src/{dir}/{}: `{unit}` has no place in the order of src/{dir} in tests/it/layering.rs",
                    rel.display()
                ));
                continue;
            };
            let text = std::fs::read_to_string(&p).unwrap();
            // `super::` from a file directly in the directory is the
            // directory; from a file of a subdirectory, `super::super::` is.
            let up = if depth == 1 {
                "super::".to_string()
            } else {
                "super::".repeat(depth)
            };
            for (line, code) in code_lines(&text) {
                let mut used: Vec<&str> = names_after(code, &format!("crate::{dir}::"));
                if unit != "mod" {
                    used.extend(names_after(code, &up));
                } else {
                    // mod.rs reaches its submodules by their bare names.
                    used.extend(order.iter().copied().filter(|u| {
                        code.contains(&format!("{u}::")) || code.contains(&format!("mod {u};"))
                    }));
                }
                for name in used {
                    // An item of mod.rs (not a submodule) is `mod`.
                    let target = if place(name).is_some() { name } else { "mod" };
                    if target == unit {
                        continue;
                    }
                    if place(target).is_some_and(|t| t > own) || (target == "mod" && unit != "mod")
                    {
                        bad.push(format!(
                            "src/{dir}/{}:{line}: `{unit}` uses `{target}`, which comes after it in the order of src/{dir}",
                            rel.display()
                        ));
                    }
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

#[test]
fn no_file_of_jobs_ui_or_shim_uses_one_after_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad: Vec<String> = ORDERS
        .iter()
        .flat_map(|(dir, order)| order_violations(&src, dir, order))
        .collect();
    assert!(
        bad.is_empty(),
        "imports against the order:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_order_check_catches_a_circle_and_a_reexport() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("jobs/run")).unwrap();
    std::fs::write(
        src.join("jobs/mod.rs"),
        "pub mod a;\npub mod b;\npub mod run;\npub use a::Thing;\n",
    )
    .unwrap();
    // a -> b (after it), b -> a (fine), run/x.rs -> mod's re-export.
    std::fs::write(
        src.join("jobs/a.rs"),
        "use super::b::Other;\n// use super::run::Gone;\n",
    )
    .unwrap();
    std::fs::write(src.join("jobs/b.rs"), "use super::{a::Thing, a};\n").unwrap();
    std::fs::write(src.join("jobs/run/mod.rs"), "mod x;\n").unwrap();
    std::fs::write(
        src.join("jobs/run/x.rs"),
        "use super::super::Thing;\nuse crate::jobs::b;\n",
    )
    .unwrap();
    std::fs::write(src.join("jobs/stray.rs"), "\n").unwrap();
    let bad = order_violations(src, "jobs", &["a", "b", "run", "mod"]);
    assert_eq!(bad.len(), 3, "{bad:#?}");
    assert!(
        bad[0].contains("src/jobs/a.rs:1: `a` uses `b`, which comes after it"),
        "{bad:#?}"
    );
    assert!(
        bad[1].contains("src/jobs/run/x.rs:1: `run` uses `mod`"),
        "{bad:#?}"
    );
    assert!(
        bad[2].contains("`stray` has no place in the order"),
        "{bad:#?}"
    );
}

// --- the one door ---------------------------------------------------------------

/// The frontends reach jobs and the shim only through `api`.
const FRONTENDS: &[&str] = &["cli", "mcp.rs", "mcp", "ui"];

fn door_violations(src: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let mut stack: Vec<std::path::PathBuf> = FRONTENDS.iter().map(|f| src.join(f)).collect();
    while let Some(p) = stack.pop() {
        if p.is_dir() {
            for e in std::fs::read_dir(&p).unwrap().flatten() {
                stack.push(e.path());
            }
            continue;
        }
        if p.extension().is_none_or(|e| e != "rs") || !p.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for (line, code) in code_lines(&text) {
            for m in ["jobs", "shim"] {
                if !names_after(code, &format!("crate::{m}")).is_empty()
                    || code.contains(&format!("crate::{m}::"))
                    || code.contains(&format!("crate::{m};"))
                {
                    bad.push(format!(
                        "{}:{line}: names `crate::{m}`; go through `crate::api`",
                        p.strip_prefix(src).unwrap().display()
                    ));
                }
            }
        }
    }
    bad.sort();
    bad
}

#[test]
fn cli_mcp_and_ui_reach_jobs_and_shim_only_through_api() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = door_violations(&src);
    assert!(bad.is_empty(), "past the door:\n{}", bad.join("\n"));
}

#[test]
fn the_door_check_catches_a_frontend_that_names_jobs() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path();
    std::fs::create_dir_all(src.join("cli/commands")).unwrap();
    std::fs::write(
        src.join("cli/commands/run.rs"),
        "use crate::api;\nuse crate::jobs::Manager;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("mcp.rs"),
        "// crate::shim is below\nfn f() { crate::shim::start(); }\n",
    )
    .unwrap();
    let bad = door_violations(src);
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(
        bad[0].starts_with("cli/commands/run.rs:2: names `crate::jobs`"),
        "{bad:#?}"
    );
    assert!(
        bad[1].starts_with("mcp.rs:2: names `crate::shim`"),
        "{bad:#?}"
    );
}

// --- one writer of a job record ------------------------------------------------

/// The fields of `pub struct NAME` in `text` that are visible outside its
/// file: `pub`, `pub(crate)`, `pub(super)`, … (a `pub(crate)` field can
/// still be written anywhere in the crate).
fn visible_fields(text: &str, name: &str) -> Vec<String> {
    let head = format!("pub struct {name} {{");
    let Some(start) = text.find(&head) else {
        panic!("no `{head}` in the text")
    };
    let body = &text[start + head.len()..];
    let body = &body[..body.find("\n}").expect("the struct ends")];
    body.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("pub ") || l.starts_with("pub("))
        .map(|l| l.split(':').next().unwrap_or(l).to_string())
        .collect()
}

/// A job record changes only by its named methods in `jobs::record`
/// (issue 43): its fields are private there, so the compiler refuses a
/// write anywhere else. This holds that they stay private.
#[test]
fn the_job_record_has_no_field_visible_outside_its_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/jobs/record.rs");
    let text = std::fs::read_to_string(path).unwrap();
    let visible = visible_fields(&text, "JobRecord");
    assert!(
        visible.is_empty(),
        "JobRecord's fields are private to src/jobs/record.rs (one writer: its named methods); these are not: {visible:?}"
    );
}

#[test]
fn the_field_check_catches_a_pub_and_a_pub_crate_field() {
    let text = "pub struct JobRecord {\n    id: String,\n    /// The state.\n    pub(crate) status: Status,\n    #[serde(default)]\n    pub reaped: bool,\n}\n\npub struct Other {\n    pub x: u8,\n}\n";
    assert_eq!(
        visible_fields(text, "JobRecord"),
        ["pub(crate) status", "pub reaped"]
    );
}

// --- text is cut in one place ---------------------------------------------------

/// Every `.rs` file under `dir`, with its path relative to it (`/`
/// between parts) and its text, sorted: the one walk of a source tree of
/// these checks and of the docs test.
pub fn rs_files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let rel = p.strip_prefix(dir).unwrap().to_string_lossy();
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((rel.replace('\\', "/"), text));
            }
        }
    }
    out.sort();
    out
}

/// Every `.rs` file under the repository's `src`.
fn src_files() -> Vec<(String, String)> {
    rs_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The lines of `files` (outside their tests) that cut text by hand.
fn hand_cuts(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(rel, _)| rel != "fmt.rs")
        .flat_map(|(rel, text)| {
            code_lines(text)
                .into_iter()
                .filter(|(_, l)| l.contains(".chars().take("))
                .map(move |(n, _)| format!("{rel}:{n}"))
        })
        .collect()
}

/// A sentence shows a long text in part one way (issue 43): `fmt::cut`,
/// which cuts on a character boundary and marks the cut with `…`.
#[test]
fn text_is_cut_only_by_fmt() {
    let bad = hand_cuts(&src_files());
    assert!(
        bad.is_empty(),
        "cut text with crate::fmt::cut (or fmt::first_chars for a stored field), not by hand: {bad:?}"
    );
}

#[test]
fn the_cut_check_catches_a_hand_cut() {
    let files = [
        ("fmt.rs".to_string(), "fn cut() { s.chars().take(n) }\n".to_string()),
        (
            "shim/x.rs".to_string(),
            "fn f() {\n    let s: String = t.chars().take(9).collect();\n}\n#[cfg(test)]\nmod tests {\n    fn g() { t.chars().take(2); }\n}\n"
                .to_string(),
        ),
    ];
    assert_eq!(hand_cuts(&files), ["shim/x.rs:2"]);
}

// --- nothing too long -----------------------------------------------------------

/// The longest a function in src may be, in lines from its `fn` to its
/// closing brace (issue 43): a longer one is split by named steps.
const MAX_FN_LINES: usize = 100;

/// The longest a file in src may be before its `#[cfg(test)]` module.
const MAX_FILE_LINES: usize = 800;

/// Functions that are data tables, exempt from [`MAX_FN_LINES`]: the body
/// is essentially one literal list of data, and splitting it would only
/// scatter the table. Each with why.
const DATA_TABLES: &[(&str, &str)] = &[(
    "eval::tasks::all",
    "the eval's task set: one vec! of Task literals, a row per task",
)];

/// The module path of a file under src: `jobs/run/finish.rs` is
/// `jobs::run::finish`, `probe/mod.rs` is `probe`, `lib.rs` is ``.
fn module_of(rel: &str) -> String {
    let rel = rel.trim_end_matches(".rs").replace('\\', "/");
    let mut parts: Vec<&str> = rel.split('/').collect();
    if matches!(parts.last(), Some(&"mod" | &"lib" | &"main")) {
        parts.pop();
    }
    parts.join("::")
}

/// Whether `attrs` hold `#[cfg(test)]` or `#[test]`: test code, which the
/// length rules leave alone.
fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg") && a.parse_args::<syn::Ident>().is_ok_and(|i| i == "test"))
    })
}

/// Walks one file and notes each function's qualified name and length.
struct FnLengths {
    path: Vec<String>,
    found: Vec<(String, usize, usize)>,
}

impl FnLengths {
    fn note(&mut self, name: &syn::Ident, sig: &syn::Signature, block: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = block.brace_token.span.close().end().line;
        let mut qualified = self.path.clone();
        qualified.push(name.to_string());
        let qualified = qualified
            .into_iter()
            .filter(|p| !p.is_empty())
            .collect::<Vec<_>>()
            .join("::");
        self.found.push((qualified, start, end + 1 - start));
    }

    fn within<T>(&mut self, segment: String, walk: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(segment);
        let out = walk(self);
        self.path.pop();
        out
    }
}

impl<'ast> syn::visit::Visit<'ast> for FnLengths {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            self.within(m.ident.to_string(), |v| syn::visit::visit_item_mod(v, m));
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.note(&f.sig.ident, &f.sig, &f.block);
        // A nested fn is named inside its parent.
        self.within(f.sig.ident.to_string(), |v| syn::visit::visit_item_fn(v, f));
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test(&i.attrs) {
            return;
        }
        let ty = match &*i.self_ty {
            syn::Type::Path(p) => p
                .path
                .segments
                .last()
                .map_or(String::new(), |s| s.ident.to_string()),
            _ => String::new(),
        };
        self.within(ty, |v| syn::visit::visit_item_impl(v, i));
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test(&f.attrs) {
            return;
        }
        self.note(&f.sig.ident, &f.sig, &f.block);
        self.within(f.sig.ident.to_string(), |v| {
            syn::visit::visit_impl_item_fn(v, f)
        });
    }

    fn visit_item_trait(&mut self, t: &'ast syn::ItemTrait) {
        if !is_test(&t.attrs) {
            self.within(t.ident.to_string(), |v| syn::visit::visit_item_trait(v, t));
        }
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default
            && !is_test(&f.attrs)
        {
            self.note(&f.sig.ident, &f.sig, block);
        }
        self.within(f.sig.ident.to_string(), |v| {
            syn::visit::visit_trait_item_fn(v, f)
        });
    }
}

/// Every function (items, methods, trait defaults, nested fns) of the
/// non-test code of `files`: qualified name, `file:line`, length in lines.
fn fn_lengths(files: &[(String, String)]) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let file = syn::parse_file(text).unwrap_or_else(|e| panic!("src/{rel}: {e}"));
        let mut v = FnLengths {
            path: vec![module_of(rel)],
            found: Vec::new(),
        };
        syn::visit::Visit::visit_file(&mut v, &file);
        for (name, line, len) in v.found {
            out.push((name, format!("src/{rel}:{line}"), len));
        }
    }
    out
}

/// The functions of `files` over [`MAX_FN_LINES`] that are neither a data
/// table nor pending elsewhere, longest first.
fn long_fns(files: &[(String, String)]) -> Vec<String> {
    let mut long: Vec<(String, String, usize)> = fn_lengths(files)
        .into_iter()
        .filter(|(name, _, len)| *len > MAX_FN_LINES && !DATA_TABLES.iter().any(|(t, _)| t == name))
        .collect();
    long.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    long.into_iter()
        .map(|(name, at, len)| format!("{name} ({at}): {len} lines"))
        .collect()
}

/// The lines of `text` before its unit-test module (all of them if none):
/// the first top-level item that is `#[cfg(test)]`.
fn lines_before_tests(text: &str) -> usize {
    let file = syn::parse_file(text).expect("the file parses");
    file.items
        .iter()
        .find_map(|item| match item {
            syn::Item::Mod(m) if is_test(&m.attrs) => {
                let first = m
                    .attrs
                    .first()
                    .map_or(m.mod_token.span, |a| a.pound_token.span);
                Some(first.start().line - 1)
            }
            _ => None,
        })
        .unwrap_or_else(|| text.lines().count())
}

/// The files of `files` over [`MAX_FILE_LINES`] before their tests.
fn long_files(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .map(|(rel, text)| (rel, lines_before_tests(text)))
        .filter(|(_, n)| *n > MAX_FILE_LINES)
        .map(|(rel, n)| format!("src/{rel}: {n} lines before its tests"))
        .collect()
}

/// Every function in src is at most 100 lines, a data table aside
/// (issue 43): split by named steps, never by line count alone.
#[test]
fn no_function_is_over_100_lines() {
    let files = src_files();
    let all = fn_lengths(&files);
    for (table, why) in DATA_TABLES {
        assert!(
            all.iter().any(|(name, _, _)| name == table),
            "DATA_TABLES names {table} ({why}), which is not in src"
        );
    }
    let long = long_fns(&files);
    println!(
        "functions over {MAX_FN_LINES} lines: {} ({} data tables exempt)",
        long.len(),
        DATA_TABLES.len()
    );
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines; split each by named steps:\n{}",
        long.join("\n")
    );
}

/// No file in src is over 800 lines before its tests (issue 43).
#[test]
fn no_file_is_over_800_lines_before_its_tests() {
    let long = long_files(&src_files());
    println!("files over {MAX_FILE_LINES} lines: {}", long.len());
    assert!(
        long.is_empty(),
        "files over {MAX_FILE_LINES} lines before their tests; split each by what it owns:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_checks_catch_a_long_fn_and_a_long_file() {
    let body = |n: usize| "    let _ = 1;\n".repeat(n);
    // 102 lines: `fn`, 100 lines of body, `}`; the test module's and the
    // #[test] fn's length do not count, and a nested fn is named inside.
    let code = format!(
        "//! A file.\nstruct S;\nimpl S {{\n    fn long(&self) {{\n{}    }}\n}}\nfn short() {{\n{}}}\nfn outer() {{\n    fn inner() {{\n{}    }}\n}}\n#[test]\nfn a_test() {{\n{}}}\n#[cfg(test)]\nmod tests {{\n    fn helper() {{\n{}    }}\n}}\n",
        body(100),
        body(98),
        body(99),
        body(200),
        body(200),
    );
    let files = [("jobs/x.rs".to_string(), code.clone())];
    let long = long_fns(&files);
    assert_eq!(
        long,
        [
            "jobs::x::outer (src/jobs/x.rs:207): 103 lines",
            "jobs::x::S::long (src/jobs/x.rs:4): 102 lines",
            "jobs::x::outer::inner (src/jobs/x.rs:208): 101 lines",
        ],
        "{long:#?}"
    );
    // A short file passes; one with 801 lines before its tests does not.
    assert!(long_files(&files).is_empty());
    let big = format!(
        "{}#[cfg(test)]\nmod tests {{}}\n",
        "fn f() {}\n".repeat(801)
    );
    let files = [("worktree.rs".to_string(), big)];
    assert_eq!(
        long_files(&files),
        ["src/worktree.rs: 801 lines before its tests"]
    );
    // The data table is exempt by its qualified name.
    let table = format!("pub fn all() {{\n{}}}\n", body(150));
    assert!(long_fns(&[("eval/tasks.rs".to_string(), table.clone())]).is_empty());
    assert_eq!(long_fns(&[("eval/other.rs".to_string(), table)]).len(), 1);
}

// --- JSON read typed ------------------------------------------------------------

/// Lines that the key-read pattern hits but that read no JSON by key: a
/// Python source in a string, a JSON schema written as a `json!` literal,
/// a constant list of names. Each with the text that makes it so.
const NOT_KEY_READS: &[[&str; 2]] = &[
    ["eval/tasks.rs", "os.environ[\"PYTHONDONTWRITEBYTECODE\"]"],
    ["eval/probe.rs", "\"required\": [\"city\"]"],
    ["config/trust.rs", "pub const PROJECT_DEFAULT_KEYS"],
];

/// The lines of `files` (outside their tests) that read JSON by key
/// (`["key"]`, `.get("key")`, `.pointer(`), the fold and the repair aside:
/// they rewrite a request's bytes on their way through.
fn key_reads(files: &[(String, String)]) -> Vec<String> {
    let hit = |l: &str| {
        l.contains(".pointer(")
            || l.contains(".get(\"")
            || l.match_indices("[\"").any(|(i, _)| {
                let rest = &l[i + 2..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                !name.is_empty() && rest[name.len()..].starts_with("\"]")
            })
    };
    files
        .iter()
        .filter(|(rel, _)| !rel.starts_with("shim/fold") && !rel.starts_with("shim/repair/"))
        .flat_map(|(rel, text)| {
            code_lines(text)
                .into_iter()
                .filter(|(_, l)| hit(l))
                .filter(move |(_, l)| {
                    !NOT_KEY_READS
                        .iter()
                        .any(|[file, mark]| file == rel && l.contains(mark))
                })
                .map(move |(n, l)| format!("{rel}:{n}: {}", l.trim()))
        })
        .collect()
}

/// What a server answers is read through `crate::anthropic`'s types and the
/// config through its own (issue 43): no JSON read by key in src, outside
/// the byte-rewriting fold and repair.
#[test]
fn json_is_read_typed_outside_the_fold_and_the_repair() {
    let bad = key_reads(&src_files());
    assert!(
        bad.is_empty(),
        "read JSON through a typed struct (crate::anthropic for what a server answers; its lenient rule for a field of the wrong type), not by key:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_key_read_check_catches_each_form() {
    let files = [
        (
            "complete.rs".to_string(),
            "fn f(v: &Value) {\n    let a = v[\"content\"].as_array();\n    let b = v.get(\"usage\");\n    let c = v.pointer(\"/error/message\");\n    let d = xs[\"not a key\"];\n}\n#[cfg(test)]\nmod tests {\n    fn g() { v[\"x\"]; }\n}\n"
                .to_string(),
        ),
        ("shim/fold.rs".to_string(), "fn f() { v[\"role\"]; }\n".to_string()),
        (
            "config/trust.rs".to_string(),
            "pub const PROJECT_DEFAULT_KEYS: &[&str] = &[\"model\"];\n".to_string(),
        ),
    ];
    let bad = key_reads(&files);
    assert_eq!(
        bad.iter()
            .map(|b| b.split(": ").next().unwrap())
            .collect::<Vec<_>>(),
        ["complete.rs:2", "complete.rs:3", "complete.rs:4"],
        "{bad:#?}"
    );
}
