//! Installing the plugin as a user does, with the real Claude Code CLI in a
//! temporary HOME (issue 22): a clean copy of the checkout, the npm
//! packages `scripts/npm-pack.sh` packs, the lockfile
//! `scripts/npm-lock.mjs` generates, and a marketplace added the way a user
//! adds it, `claude plugin marketplace add localagents/localagents`: git,
//! told by the temporary HOME's `.gitconfig` (`url.<file>.insteadOf
//! https://github.com/`), clones a local bare repository instead. (A
//! marketplace in a local folder would not do: Claude Code runs such a
//! plugin from the folder itself, while its npm install goes to the cache
//! copy, so node_modules is never where the plugin runs.) Nothing is
//! published: the npm cache is seeded with `npm cache add`, or a local
//! registry serves the tarball. Shared by tests/it/npm.rs and the plugin
//! bench.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::transport::{ConfigureCommandExt, TokioChildProcess};
use serde_json::Value;

/// The package's version, read from its Cargo.toml (this crate's own
/// `CARGO_PKG_VERSION` is the test kit's).
fn version() -> String {
    let toml = std::fs::read_to_string(crate::repo_root().join("Cargo.toml")).expect("Cargo.toml");
    toml.lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("the package's version in Cargo.toml")
        .to_string()
}

pub fn claude_cmd(home: &Path) -> Command {
    let mut c = Command::new(super::claude::binary());
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    c
}

/// A checkout as a fresh clone has it: the files git knows, no `target/`,
/// but never `package-lock.json`: a released one pins packages on the real
/// registry, which a test must not fetch (and with it, every first-contact
/// test would take the npm route). The npm tests write their own
/// (`market`).
pub fn clean_checkout(dest: &Path) {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(crate::repo_root())
        .output()
        .unwrap();
    for rel in out.stdout.split(|b| *b == 0).filter(|r| !r.is_empty()) {
        let rel = std::str::from_utf8(rel).unwrap();
        if rel == "package-lock.json" {
            continue;
        }
        let (from, to) = (crate::repo_root().join(rel), dest.join(rel));
        if from.is_file() {
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&from, &to).unwrap();
        }
    }
}

/// The binary to pack: the release build scripts/test.sh names
/// (`LOCALAGENTS_PACK_BIN`, the one .ci/run builds), else this build's.
pub fn pack_bin() -> PathBuf {
    std::env::var_os("LOCALAGENTS_PACK_BIN")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(crate::bin)
}

pub fn check(o: &std::process::Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The four platforms of the npm packages (`scripts/npm-pack.sh`), as
/// `<os>-<cpu>`.
pub const PLATFORMS: [&str; 4] = ["linux-x64", "linux-arm64", "darwin-x64", "darwin-arm64"];

/// This machine's npm platform, the package npm installs here
/// (`@localagents/cli-<platform>`): what the launcher
/// (`scripts/npm/localagents.js`, its `PLATFORMS`) picks from node's
/// `process.platform` and `process.arch`, here from Rust's names for the
/// same (linux/macos, x86_64/aarch64).
pub fn platform() -> &'static str {
    use std::env::consts::{ARCH, OS};
    match (OS, ARCH) {
        ("linux", "x86_64") => "linux-x64",
        ("linux", "aarch64") => "linux-arm64",
        ("macos", "x86_64") => "darwin-x64",
        ("macos", "aarch64") => "darwin-arm64",
        _ => panic!(
            "no localagents npm package is built for {OS}-{ARCH} (scripts/npm/localagents.js: PLATFORMS)"
        ),
    }
}

/// The directory of the `node` this process's own PATH finds first.
fn node_dir() -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(&std::env::var_os("PATH")?)
        .filter(|d| d.is_absolute())
        .find(|d| {
            std::fs::metadata(d.join("node"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// A PATH of symlinks to every program in /usr/bin and /bin but those
/// named in `without` (and never cargo, rustup or localagents): the
/// system's programs and nothing a user installed. Node.js is the one
/// addition: where /usr/bin has no `node`, `npm` or `npx` (macOS, whose
/// /usr/bin has none and cannot be written; a Linux whose node is not
/// Debian's), each one is linked from the directory of the `node` on this
/// process's PATH, that program alone, never the rest of that directory
/// (say a Homebrew bin/ that also holds cargo).
pub fn path_without(dir: &Path, without: &[&str]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let never = ["cargo", "rustup", "rustc", "localagents"];
    for sys in ["/usr/bin", "/bin"] {
        let Ok(rd) = std::fs::read_dir(sys) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if without.contains(&name.as_str()) || never.contains(&name.as_str()) {
                continue;
            }
            let _ = std::os::unix::fs::symlink(e.path(), dir.join(&name));
        }
    }
    if let Some(node_dir) = node_dir() {
        for name in ["node", "npm", "npx"] {
            let (from, to) = (node_dir.join(name), dir.join(name));
            if without.contains(&name) || to.symlink_metadata().is_ok() || !from.is_file() {
                continue;
            }
            std::os::unix::fs::symlink(&from, &to).unwrap();
        }
    }
    dir.display().to_string()
}

/// The tarballs of one pack: this machine's platform package
/// ([`platform`]) and the meta package.
pub struct Packed {
    pub platform: PathBuf,
    pub meta: PathBuf,
}

pub fn pack(out: &Path, bin: &Path) -> Packed {
    pack_with(out, bin, false)
}

/// `pack`, and with `all`, the other three platforms too, each with a
/// stand-in binary (a script; npm-pack.sh runs only this host's binary),
/// so the lockfile pins four packages as a release's does.
pub fn pack_with(out: &Path, bin: &Path, all: bool) -> Packed {
    use std::os::unix::fs::PermissionsExt;
    let here = platform();
    let mut c = Command::new(crate::repo_root().join("scripts/npm-pack.sh"));
    c.arg(out).arg(format!("{here}={}", bin.display()));
    if all {
        std::fs::create_dir_all(out).unwrap();
        for p in PLATFORMS.into_iter().filter(|p| *p != here) {
            let stub = out.join(format!("stub-{p}"));
            std::fs::write(
                &stub,
                format!("#!/bin/sh\necho 'not for this machine: {p}'\n"),
            )
            .unwrap();
            std::fs::set_permissions(&stub, std::fs::Permissions::from_mode(0o755)).unwrap();
            c.arg(format!("{p}={}", stub.display()));
        }
    }
    let o = c.output().unwrap();
    check(&o, "npm-pack.sh");
    let version = version();
    let platform = out.join(format!("localagents-cli-{here}-{version}.tgz"));
    let meta = out.join(format!("localagents-cli-{version}.tgz"));
    assert!(platform.is_file() && meta.is_file(), "{}", text(&o));
    Packed { platform, meta }
}

/// `scripts/npm-lock.mjs TARBALLS OUT [--registry URL]`.
pub fn lock(tarballs: &Path, out: &Path, registry: Option<&str>) -> std::process::Output {
    let mut c = Command::new("node");
    c.arg(crate::repo_root().join("scripts/npm-lock.mjs"))
        .arg(tarballs)
        .arg(out);
    if let Some(r) = registry {
        c.args(["--registry", r]);
    }
    c.output().unwrap()
}

pub fn npm_cache_add(cache: &Path, tgz: &Path) {
    let o = Command::new("npm")
        .args(["cache", "add"])
        .arg(tgz)
        .env("npm_config_cache", cache)
        .output()
        .unwrap();
    check(&o, "npm cache add");
}

/// A plugin checkout with the generated package files, published as the
/// bare repository `gh/localagents/localagents.git` that `home`'s git
/// config puts in place of GitHub's.
pub struct Market {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub home: PathBuf,
    pub cache: PathBuf,
    pub data: PathBuf,
    /// The registry the lockfile's URLs are on, when not npm's own: npm's
    /// config names it (Claude Code takes an http link only on the
    /// configured registry's host).
    pub registry: Option<String>,
}

pub fn market(tarballs: &Path, registry: Option<&str>) -> Market {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().canonicalize().unwrap();
    let (src, home, cache) = (dir.join("src"), dir.join("home"), dir.join("npm-cache"));
    std::fs::create_dir_all(&home).unwrap();
    clean_checkout(&src);
    assert!(!src.join("target").exists() && !src.join("node_modules").exists());
    let o = lock(tarballs, &src, registry);
    check(&o, "npm-lock.mjs");
    let git = |args: &[&str], cwd: &Path| {
        let o = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t.invalid",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .current_dir(cwd)
            .env("HOME", &home)
            .output()
            .unwrap();
        check(&o, &format!("git {args:?}"));
    };
    git(&["init", "-q"], &src);
    git(&["add", "-A"], &src);
    git(&["commit", "-q", "-m", "plugin"], &src);
    let gh = dir.join("gh/localagents");
    std::fs::create_dir_all(&gh).unwrap();
    git(
        &[
            "clone",
            "-q",
            "--bare",
            src.to_str().unwrap(),
            "localagents.git",
        ],
        &gh,
    );
    std::fs::write(
        home.join(".gitconfig"),
        format!(
            "[url \"file://{}/gh/\"]\n\tinsteadOf = https://github.com/\n",
            dir.display()
        ),
    )
    .unwrap();
    let data = home.join(".claude/plugins/data/localagents-localagents");
    Market {
        tmp,
        dir,
        home,
        cache,
        data,
        registry: registry.map(str::to_string),
    }
}

impl Market {
    pub fn claude(&self, path: &str) -> Command {
        let mut c = claude_cmd(&self.home);
        c.env("PATH", path)
            .env("npm_config_cache", &self.cache)
            .env("npm_config_update_notifier", "false");
        if let Some(r) = &self.registry {
            // npm retries a download that fails its integrity check after
            // 10 s, then 60 s: once is enough here.
            c.env("npm_config_registry", r)
                .env("npm_config_fetch_retries", "0");
        }
        c
    }

    /// `claude plugin marketplace add localagents/localagents` + `claude
    /// plugin install localagents@localagents`: the two outputs, the time
    /// both took, and the plugin's install path.
    pub fn install(&self, path: &str) -> (String, Duration, PathBuf) {
        let t = Instant::now();
        let add = self
            .claude(path)
            .args(["plugin", "marketplace", "add", "localagents/localagents"])
            .output()
            .unwrap();
        check(&add, "marketplace add");
        let inst = self
            .claude(path)
            .args(["plugin", "install", "localagents@localagents"])
            .output()
            .unwrap();
        let took = t.elapsed();
        check(&inst, "plugin install");
        let list = self
            .claude(path)
            .args(["plugin", "list", "--json"])
            .output()
            .unwrap();
        let entry = installed_entry(&list.stdout)
            .unwrap_or_else(|| panic!("not installed: {}", text(&list)));
        assert!(
            entry.get("readFromFolder").is_none_or(Value::is_null),
            "a git marketplace runs from the cache copy: {entry}"
        );
        let root = PathBuf::from(entry["installPath"].as_str().unwrap());
        (format!("{}{}", text(&add), text(&inst)), took, root)
    }

    /// The launcher as Claude Code runs it for the installed plugin.
    pub fn launcher(&self, root: &Path, path: &str, args: &[&str]) -> Command {
        let mut c = Command::new(root.join("plugin/localagents"));
        c.args(args)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("CLAUDE_PLUGIN_ROOT", root)
            .env("CLAUDE_PLUGIN_DATA", &self.data)
            .env("npm_config_cache", &self.cache)
            .env("npm_config_update_notifier", "false")
            .env("LOCALAGENTS_STATE_DIR", self.dir.join("state"))
            .current_dir(&self.dir);
        if let Some(r) = &self.registry {
            // npm retries a download that fails its integrity check after
            // 10 s, then 60 s: once is enough here.
            c.env("npm_config_registry", r)
                .env("npm_config_fetch_retries", "0");
        }
        c
    }

    /// `tools/list` through the launcher's `serve`, by rmcp's client: the
    /// tool names and the time from spawn to the answer.
    pub async fn tools(&self, root: &Path, path: &str, cfg: &Path) -> (Vec<String>, Duration) {
        let std = self.launcher(root, path, &["serve"]);
        let mut cmd = tokio::process::Command::from(std);
        cmd.env("LOCALAGENTS_CONFIG", cfg);
        let t = Instant::now();
        let transport = TokioChildProcess::new(cmd.configure(|_| {})).expect("spawn the launcher");
        let client = ().serve(transport).await.expect("initialize");
        let mut names: Vec<String> = client
            .list_all_tools()
            .await
            .unwrap()
            .iter()
            .map(|t| t.name.to_string())
            .collect();
        let took = t.elapsed();
        names.sort();
        let _ = client.cancel().await;
        (names, took)
    }
}

pub fn installed_platforms(root: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root.join("node_modules/@localagents"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The `localagents@localagents` entry of `claude plugin list --json`.
pub fn installed_entry(list_json: &[u8]) -> Option<Value> {
    let v: Value = serde_json::from_slice(list_json).ok()?;
    v.as_array()?
        .iter()
        .find(|p| p["id"] == "localagents@localagents")
        .cloned()
}

/// A models.yaml with one llama.cpp endpoint `box` at `url`.
pub fn endpoint_config(dir: &Path, url: &str) -> PathBuf {
    let cfg = dir.join("models.yaml");
    std::fs::write(
        &cfg,
        format!("endpoints:\n  box:\n    base_url: {url}\n    backend: llama.cpp\n"),
    )
    .unwrap();
    cfg
}
