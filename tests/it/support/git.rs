//! Small git repositories for tests and benchmarks.

use std::path::Path;
use std::process::Command;

/// Run git in `dir`; panics on failure.
pub fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .args(args)
        .current_dir(dir)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?} in {}", dir.display());
}

/// A repository on `main` with one commit (a README, plus `files`).
pub fn repo_with(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    git(dir, &["config", "user.email", "t@example.com"]);
    git(dir, &["config", "user.name", "t"]);
    std::fs::write(dir.join("README.md"), "project\n").unwrap();
    for (path, text) in files {
        let p = dir.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(dir, &["add", "."]);
    git(dir, &["commit", "-qm", "init"]);
}

/// A repository on `main` with one commit (a README).
pub fn repo(dir: &Path) {
    repo_with(dir, &[]);
}
