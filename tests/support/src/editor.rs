//! The edit-heavy job of issue 45: many Edits, each followed by a test
//! run whose output is long, as a model fixing one function after another
//! works (edit, run the checks, read what they say, next).
//!
//! The tree: `calc.py` with `functions` functions `f_N(x)` returning
//! `x + N`, and `check.sh`, which prints one line a function (its name, and
//! whether it is fixed yet) and a summary: about 25 tokens a function a
//! run.
//!
//! The model decides from the tree itself and the request's last result,
//! so it goes on correctly whatever Claude Code compacted or the shim
//! cleared: it Reads `calc.py` first (and again whenever an Edit is
//! refused because the file was not read, or changed since), Edits the
//! first function still returning `x + N` to return `x * N`, runs
//! `sh check.sh` after each Edit, and reports once every function is
//! fixed and checked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};

use super::script::{Reply, Script};

/// The brief of the edit-heavy job.
pub fn brief(functions: usize) -> String {
    format!(
        "In calc.py each of the {functions} functions f_0 to f_{} must return x * N instead of \
         x + N. Fix them one at a time, and run `sh check.sh` after each fix.",
        functions - 1
    )
}

/// Write the tree into `dir` (a git repository is the caller's).
pub fn write_tree(dir: &Path, functions: usize) {
    let mut src = String::new();
    for n in 0..functions {
        src.push_str(&format!(
            "def f_{n}(x):\n    \"\"\"Function {n} of the calculator.\"\"\"\n    return x + {n}\n\n\n"
        ));
    }
    std::fs::write(dir.join("calc.py"), src).expect("calc.py");
    let check = "#!/bin/sh\n# One line a function, then a summary.\nfixed=0\ntotal=0\nfor f in $(grep -o 'def f_[0-9]*' calc.py | cut -c5-); do\n  total=$((total+1))\n  n=${f#f_}\n  if grep -q \"return x \\* $n\\$\" calc.py; then\n    fixed=$((fixed+1)); echo \"PASS $f: returns x * $n as the specification of the calculator requires\"\n  else\n    echo \"FAIL $f: expected x * $n, the function still returns x + $n (see calc.py)\"\n  fi\ndone\necho \"$fixed of $total functions fixed\"\n";
    std::fs::write(dir.join("check.sh"), check).expect("check.sh");
}

/// The first function of `calc.py` in `dir` not fixed yet.
fn next_unfixed(dir: &Path, functions: usize) -> Option<usize> {
    let src = std::fs::read_to_string(dir.join("calc.py")).unwrap_or_default();
    (0..functions).find(|n| src.contains(&format!("    return x + {n}\n")))
}

/// The text of the last message's tool result, if it holds one.
fn last_result(req: &Value) -> Option<String> {
    let last = req["messages"].as_array()?.last()?;
    let b = last["content"]
        .as_array()?
        .iter()
        .find(|b| b["type"] == "tool_result")?;
    Some(match &b["content"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}

/// The model of the edit-heavy job over the tree in `dir`.
pub fn script(dir: &Path, functions: usize) -> Script {
    let dir: PathBuf = dir.to_path_buf();
    Arc::new(move |req| answer(&dir, functions, req))
}

fn answer(dir: &Path, functions: usize, req: &Value) -> Reply {
    let last = req["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m.to_string())
        .unwrap_or_default();
    if last.contains(super::reader::COMPACTION_ASK) {
        return Reply::Text(format!(
            "<summary>\nFixing calc.py one function at a time; {} of {functions} still to fix.\n</summary>",
            next_unfixed(dir, functions).map_or(0, |n| functions - n)
        ));
    }
    if req.get("tools").is_none() {
        return Reply::Text("ok".into());
    }
    let calc = dir.join("calc.py").display().to_string();
    let result = last_result(req);
    let read = || Reply::Tool {
        name: "Read".into(),
        input: json!({"file_path": calc}),
    };
    let check = || Reply::Tool {
        name: "Bash".into(),
        input: json!({"command": "sh check.sh", "description": "run the checks"}),
    };
    // The first turn, or a continued session: the file first.
    let Some(result) = result else {
        return read();
    };
    if result.contains("has not been read yet") || result.contains("modified since") {
        return read();
    }
    let checked = result.contains("functions fixed");
    match next_unfixed(dir, functions) {
        None if checked => Reply::Text(format!(
            "Fixed all {functions} functions in calc.py; `sh check.sh` says {functions} of {functions} functions fixed."
        )),
        None => check(),
        Some(_) if !checked && result.contains("has been updated") => check(),
        Some(n) => Reply::TextThen {
            text: format!("Next: f_{n}."),
            then: Box::new(Reply::Tool {
                name: "Edit".into(),
                input: json!({
                    "file_path": calc,
                    "old_string": format!("    return x + {n}\n"),
                    "new_string": format!("    return x * {n}\n"),
                }),
            }),
        },
    }
}
