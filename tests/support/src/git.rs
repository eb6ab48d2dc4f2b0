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

/// A committed repository of `files` small Python files in 200 folders
/// (a monorepo's shape), packed into one pack file, made once and kept
/// under the target's temp dir for every later test and bench run. A test
/// takes its own copy with [`clone_no_checkout`] (the pack is hard-linked).
pub fn large_repo(files: usize) -> std::path::PathBuf {
    let root = crate::target_tmp().join(format!("large-repo-{files}"));
    if root.join(".git/localagents-ready").exists() {
        return root;
    }
    // Built beside, then renamed into place: two processes making it at
    // once both finish, and one rename wins.
    let tmp = crate::target_tmp().join(format!("large-repo-{files}.{}.tmp", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).unwrap();
    let folders = 200.min(files.max(1));
    for i in 0..files {
        let dir = tmp.join(format!("pkg{:03}", i % folders));
        if i < folders {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(
            dir.join(format!("mod{:05}.py", i / folders)),
            format!(
                "# module {i}\n\ndef f{i}(x):\n    return x * {} + {}\n",
                i % 97,
                i / folders
            ),
        )
        .unwrap();
    }
    git(&tmp, &["init", "-q", "-b", "main"]);
    git(&tmp, &["config", "user.email", "t@example.com"]);
    git(&tmp, &["config", "user.name", "t"]);
    git(&tmp, &["add", "."]);
    git(&tmp, &["commit", "-qm", "a large tree"]);
    git(&tmp, &["repack", "-adq"]);
    git(&tmp, &["prune"]);
    std::fs::write(tmp.join(".git/localagents-ready"), "").unwrap();
    if std::fs::rename(&tmp, &root).is_err() {
        // Another process made it first.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    assert!(root.join(".git/localagents-ready").exists());
    root
}

/// `git clone --local --no-checkout src dst`: the repository's history
/// (its pack hard-linked), no files checked out. A worktree job needs
/// only HEAD, so this is a large repository's copy in milliseconds.
pub fn clone_no_checkout(src: &Path, dst: &Path) {
    let ok = Command::new("git")
        .args(["clone", "-q", "--local", "--no-checkout"])
        .arg(src)
        .arg(dst)
        .status()
        .unwrap()
        .success();
    assert!(ok, "git clone {} {}", src.display(), dst.display());
    git(dst, &["config", "user.email", "t@example.com"]);
    git(dst, &["config", "user.name", "t"]);
}

/// Does branch `name` exist in the repository at `dir`?
pub fn has_branch(dir: &Path, name: &str) -> bool {
    let out = Command::new("git")
        .args(["branch", "--list", name])
        .current_dir(dir)
        .output()
        .unwrap();
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}
