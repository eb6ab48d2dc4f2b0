//! Data flows one way: cli, mcp → api → jobs → {runner, shim, worktree} →
//! registry → probe → config → paths. A module may use what sits below it,
//! never what sits above. This reads `crate::…` paths out of the sources,
//! so an upward `use` fails here before it becomes a cycle.

use std::path::Path;

/// Each top-level module and its layer (higher uses lower).
const LAYERS: &[(&str, u8)] = &[
    ("paths", 0),
    ("fmt", 0),
    ("error", 0),
    ("process", 0),
    ("signals", 0),
    ("config", 1),
    ("context", 2),
    ("probe", 3),
    ("registry", 4),
    ("session_env", 4),
    ("wire", 4),
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
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let module = rel
                .components()
                .next()
                .unwrap()
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string();
            if module == "lib" || module == "main" {
                continue;
            }
            let own = layer(&module).unwrap_or_else(|| {
                panic!("module `{module}` has no layer in tests/it/layering.rs")
            });
            let text = std::fs::read_to_string(&p).unwrap();
            for (line, used) in uses(&text) {
                if let Some(l) = layer(&used)
                    && l > own
                {
                    bad.push(format!(
                        "{}:{line}: `{module}` uses `crate::{used}`, which sits above it",
                        rel.display()
                    ));
                }
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
