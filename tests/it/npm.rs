//! The prebuilt binary through npm (issue 22): the packages
//! `scripts/npm-pack.sh` packs, the plugin's lockfile
//! `scripts/npm-lock.mjs` generates from them, and what the real Claude
//! Code CLI does with both at `claude plugin install`, with no Rust and no
//! localagents on PATH (the machinery: `support::plugin_install`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::first_contact::mcp_status;
use crate::support::harness::Harness;
use crate::support::plugin_install::{
    PLATFORMS, check, endpoint_config, installed_platforms, lock, market, npm_cache_add, pack,
    pack_bin, pack_with, path_without, platform, text,
};
use crate::support::{claude, fake_llama, script};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Wait until the launcher's npm install in the plugin data dir `data`
/// has ended: its lock is gone and its status written (120 s at most).
fn npm_ended(data: &Path) {
    crate::support::until_blocking("npm", Duration::from_secs(120), || {
        !data.join("npm.lock").exists() && data.join("npm.status").exists()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_installs_its_prebuilt_binary_with_no_rust() {
    // A lockfile that pins all four platforms, as a release's does.
    let packs = tempfile::tempdir().unwrap();
    let packed = pack_with(packs.path(), &pack_bin(), true);
    let m = market(packs.path(), None);
    npm_cache_add(&m.cache, &packed.platform);
    let path = path_without(&m.dir.join("path"), &[]);

    let (said, took, root) = m.install(&path);
    eprintln!(
        "figure: marketplace add + plugin install with the seeded cache: {:.2} s (package {} bytes)",
        took.as_secs_f64(),
        std::fs::metadata(&packed.platform).unwrap().len()
    );
    assert!(!said.contains("warning"), "{said}");
    // The lockfile pins four; only this platform's package is installed,
    // the packed bytes.
    let pinned = std::fs::read_to_string(root.join("package-lock.json")).unwrap();
    for p in PLATFORMS {
        assert!(
            pinned.contains(&format!("node_modules/@localagents/cli-{p}\"")),
            "{pinned}"
        );
    }
    let here = format!("cli-{}", platform());
    assert_eq!(installed_platforms(&root), [here.as_str()]);
    let bin = root.join(format!("node_modules/@localagents/{here}/bin/localagents"));
    assert_eq!(
        std::fs::read(&bin).unwrap(),
        std::fs::read(pack_bin()).unwrap()
    );

    let top = fake_llama::spawn(fake_llama::LlamaOpts {
        alias: "top-model".into(),
        ..Default::default()
    })
    .await;
    top.set_script(script::text("ok"));
    let cfg = endpoint_config(&m.dir, top.url());
    // The MCP server answers tools/list through the launcher.
    let (names, first) = m.tools(&root, &path, &cfg).await;
    eprintln!(
        "figure: the first tools/list through the launcher: {:.0} ms",
        first.as_secs_f64() * 1000.0
    );
    assert!(names.iter().any(|n| n == "run_agent"), "{names:?}");
    // The SessionStart hook says nothing about building or installing.
    let hook = m
        .launcher(&root, &path, &["hook", "session-start"])
        .env("LOCALAGENTS_CONFIG", &cfg)
        .output()
        .unwrap();
    check(&hook, "hook session-start");
    assert_eq!(String::from_utf8_lossy(&hook.stdout), "", "{}", text(&hook));
    assert!(!m.data.join("build.log").exists() && !m.data.join("npm.log").exists());

    // And a real session: Claude Code starts the MCP server through the
    // launcher, and its SessionStart hook prints nothing.
    let work = m.dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let env: Vec<(String, String)> = vec![
        ("PATH".into(), path.clone()),
        ("ANTHROPIC_BASE_URL".into(), top.url().to_string()),
        ("LOCALAGENTS_CONFIG".into(), cfg.display().to_string()),
        (
            "LOCALAGENTS_STATE_DIR".into(),
            m.dir.join("state").display().to_string(),
        ),
        ("MCP_TIMEOUT".into(), "10000".into()),
    ];
    let run = claude::run(
        claude::command(
            &m.home,
            &work,
            &env,
            &["--model", "top-model", "--include-hook-events"],
            "hi",
        ),
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(mcp_status(&run), "connected", "{}", run.stderr);
    let hook_out: Vec<String> = run
        .events
        .iter()
        .filter(|e| e["subtype"] == "hook_response" && e["hook_event"] == "SessionStart")
        .map(|e| format!("{}{}", e["stdout"], e["output"]))
        .collect();
    assert_eq!(hook_out.len(), 1, "{:?}", run.events);
    assert!(
        !hook_out[0].contains("build") && !hook_out[0].contains("install"),
        "{hook_out:?}"
    );
    drop(m.tmp);
}

/// A registry on loopback that serves `body` for every path, counting the
/// requests.
async fn registry(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let body = Arc::new(body);
    let app = axum::Router::new().fallback(move || {
        let (h, body) = (h.clone(), body.clone());
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            (
                [("content-type", "application/octet-stream")],
                body.as_ref().clone(),
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, hits)
}

/// This platform's package again, its binary replaced by a script.
fn tampered(out: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = out.join("stage");
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    let good = out
        .parent()
        .unwrap()
        .join(format!("localagents-cli-{}-{VERSION}.tgz", platform()));
    let pj = Command::new("tar")
        .arg("-xzOf")
        .arg(&good)
        .arg("package/package.json")
        .output()
        .unwrap();
    check(&pj, "tar");
    std::fs::write(dir.join("package.json"), &pj.stdout).unwrap();
    let exe = dir.join("bin/localagents");
    std::fs::write(
        &exe,
        format!("#!/bin/sh\necho 'localagents {VERSION}'\necho tampered >&2\n"),
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let o = Command::new("npm")
        .args(["pack", "--silent", "--pack-destination"])
        .arg(out)
        .current_dir(&dir)
        .output()
        .unwrap();
    check(&o, "npm pack");
    out.join(format!("localagents-cli-{}-{VERSION}.tgz", platform()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_tarball_is_refused_and_the_launcher_says_so() {
    let packs = tempfile::tempdir().unwrap();
    let packed = pack(packs.path(), &pack_bin());
    let bad_dir = packs.path().join("tampered");
    std::fs::create_dir_all(&bad_dir).unwrap();
    let bad = tampered(&bad_dir);
    assert_ne!(
        std::fs::read(&bad).unwrap(),
        std::fs::read(&packed.platform).unwrap()
    );
    // The registry serves the tampered bytes at the lockfile's URL; the
    // lockfile pins the packed ones.
    let (url, hits) = registry(std::fs::read(&bad).unwrap()).await;
    let m = market(packs.path(), Some(&url));
    let path = path_without(&m.dir.join("path"), &[]);
    let (said, _, root) = m.install(&path);
    assert!(
        hits.load(Ordering::SeqCst) >= 1,
        "npm asked the registry: {said}"
    );
    // Refused: no package in the plugin (npm leaves an empty scope folder).
    assert!(installed_platforms(&root).is_empty(), "{said}");
    // serve: nothing to run; first contact tries npm again, which refuses
    // the same bytes, and the launcher says so with its line.
    let serve = m.launcher(&root, &path, &["serve"]).output().unwrap();
    assert_eq!(serve.status.code(), Some(127), "{}", text(&serve));
    let err = String::from_utf8_lossy(&serve.stderr);
    assert!(
        err.contains("the localagents binary is not installed") && err.contains("npm: see "),
        "{err}"
    );
    npm_ended(&m.data);
    let log = std::fs::read_to_string(m.data.join("npm.log")).unwrap();
    // npm's own words for a download that is not the lockfile's sha512.
    assert!(
        log.contains("seems to be corrupted")
            && log.contains("npm installed no localagents binary"),
        "{log}"
    );
    assert_ne!(
        std::fs::read_to_string(m.data.join("npm.status"))
            .unwrap()
            .trim(),
        "0"
    );
    let hook = m
        .launcher(&root, &path, &["hook", "session-start"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&hook.stdout);
    assert!(
        line.contains("npm could not install the prebuilt binary")
            && line.contains("cargo is not on PATH"),
        "{line}"
    );
    assert!(!m.data.join("npm/node_modules").exists());
    // A failure counts for the lockfile it tried: a plugin update with
    // another lockfile is tried again.
    let lockfile = root.join("package-lock.json");
    let mut changed = std::fs::read_to_string(&lockfile).unwrap();
    changed.push('\n');
    std::fs::write(&lockfile, changed).unwrap();
    let again = m
        .launcher(&root, &path, &["hook", "session-start"])
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&again.stdout);
    assert!(
        line.contains("installing the prebuilt localagents binary with npm in the background"),
        "{line}"
    );
    npm_ended(&m.data);

    // The check bypassed: a lockfile that pins the tampered bytes installs
    // them, and the launcher runs them.
    let (url2, _) = registry(std::fs::read(&bad).unwrap()).await;
    let m2 = market(&bad_dir, Some(&url2));
    let (_, _, root2) = m2.install(&path);
    assert_eq!(installed_platforms(&root2), [format!("cli-{}", platform())]);
    let ran = m2.launcher(&root2, &path, &["--version"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&ran.stderr).contains("tampered"),
        "{}",
        text(&ran)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_npm_at_install_the_first_session_installs_it_into_plugin_data() {
    let packs = tempfile::tempdir().unwrap();
    let packed = pack(packs.path(), &pack_bin());
    let m = market(packs.path(), None);
    npm_cache_add(&m.cache, &packed.platform);
    let no_npm = path_without(&m.dir.join("path-no-npm"), &["npm", "npx"]);
    let (said, _, root) = m.install(&no_npm);
    assert!(!root.join("node_modules").exists(), "{said}");
    // Later npm is there: the first session start installs into
    // ${CLAUDE_PLUGIN_DATA}/npm, in the background, and says so.
    let path = path_without(&m.dir.join("path"), &[]);
    let hook = m
        .launcher(&root, &path, &["hook", "session-start"])
        .output()
        .unwrap();
    check(&hook, "hook");
    let line = String::from_utf8_lossy(&hook.stdout);
    assert!(
        line.contains("installing the prebuilt localagents binary with npm in the background"),
        "{line}"
    );
    let status = m.data.join("npm.status");
    npm_ended(&m.data);
    let log = std::fs::read_to_string(m.data.join("npm.log")).unwrap();
    assert_eq!(
        std::fs::read_to_string(&status).unwrap().trim(),
        "0",
        "{log}"
    );
    let bin = m.data.join(format!(
        "npm/node_modules/@localagents/cli-{}/bin/localagents",
        platform()
    ));
    assert!(bin.is_file(), "{log}");
    // The MCP server now runs it, still with no cargo on PATH.
    let cfg = endpoint_config(&m.dir, "http://127.0.0.1:9");
    let (names, _) = m.tools(&root, &no_npm, &cfg).await;
    assert!(names.iter().any(|n| n == "run_agent"), "{names:?}");
    let v = m.launcher(&root, &no_npm, &["--version"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("localagents {VERSION}")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_waits_for_the_npm_install_it_starts() {
    // No session start ran: the MCP server itself installs the binary and
    // answers, within one start.
    let packs = tempfile::tempdir().unwrap();
    let packed = pack(packs.path(), &pack_bin());
    let m = market(packs.path(), None);
    npm_cache_add(&m.cache, &packed.platform);
    let no_npm = path_without(&m.dir.join("path-no-npm"), &["npm", "npx"]);
    let (_, _, root) = m.install(&no_npm);
    assert!(!root.join("node_modules").exists());
    let path = path_without(&m.dir.join("path"), &[]);
    let cfg = endpoint_config(&m.dir, "http://127.0.0.1:9");
    let (names, _) = m.tools(&root, &path, &cfg).await;
    assert!(names.iter().any(|n| n == "run_agent"), "{names:?}");
    assert_eq!(
        std::fs::read_to_string(m.data.join("npm.status"))
            .unwrap()
            .trim(),
        "0"
    );
}

#[test]
fn a_global_install_gives_a_working_localagents() {
    // What `npm install -g @localagents/cli` (and `npx -y`) give, from the
    // packed tarballs, offline: the platform package and the meta package
    // named together (the registry would resolve the meta's optional
    // dependency itself).
    let packs = tempfile::tempdir().unwrap();
    let packed = pack(packs.path(), &pack_bin());
    let tmp = tempfile::tempdir().unwrap();
    let (cache, prefix) = (tmp.path().join("cache"), tmp.path().join("global"));
    npm_cache_add(&cache, &packed.platform);
    npm_cache_add(&cache, &packed.meta);
    let o = Command::new("npm")
        .args(["install", "-g", "--offline", "--no-audit", "--no-fund"])
        .arg("--prefix")
        .arg(&prefix)
        .arg(&packed.platform)
        .arg(&packed.meta)
        .env("npm_config_cache", &cache)
        .output()
        .unwrap();
    check(&o, "npm install -g");
    let exe = prefix.join("bin/localagents");
    // The installed command, as a shell with nothing of ours runs it.
    let installed = Harness::new().bin(&exe).no_config().no_state_dir();
    let v = installed.command(["--version"]).output().unwrap();
    check(&v, "localagents --version");
    assert_eq!(
        String::from_utf8_lossy(&v.stdout).trim(),
        format!("localagents {VERSION}")
    );
    // The exit status comes through.
    let bad = installed.command(["--no-such-flag"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad));
    let mods = prefix.join("lib/node_modules/@localagents");
    let mut got: Vec<String> = std::fs::read_dir(&mods)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    got.sort();
    assert_eq!(got, ["cli".to_string(), format!("cli-{}", platform())]);
}

/// What a plugin package.json / package-lock.json pair must say for the
/// crate `version`: the platform packages at that version, each lock entry
/// at its registry URL with a sha512 integrity and its os/cpu.
fn pins(pkg: &Value, lock: Option<&Value>, version: &str) -> Result<(), String> {
    if pkg["private"] != true || pkg["version"] != version {
        return Err(format!("package.json is not private at {version}: {pkg}"));
    }
    let deps = pkg["optionalDependencies"]
        .as_object()
        .ok_or("package.json has no optionalDependencies")?;
    for (name, v) in deps {
        let plat = name
            .strip_prefix("@localagents/cli-")
            .filter(|p| PLATFORMS.contains(p))
            .ok_or(format!("{name} is not a platform package"))?;
        if v != version {
            return Err(format!("{name} is pinned at {v}, not {version}"));
        }
        let Some(lock) = lock else { continue };
        if lock["version"] != version
            || lock["packages"][""]["optionalDependencies"] != pkg["optionalDependencies"]
        {
            return Err(format!(
                "package-lock.json's root is not package.json's at {version}"
            ));
        }
        let e = &lock["packages"][format!("node_modules/{name}")];
        let url = format!("https://registry.npmjs.org/{name}/-/cli-{plat}-{version}.tgz");
        let (os, cpu) = plat.split_once('-').unwrap();
        if e["version"] != version
            || e["resolved"] != url.as_str()
            || !e["integrity"]
                .as_str()
                .is_some_and(|i| i.starts_with("sha512-"))
            || e["os"] != serde_json::json!([os])
            || e["cpu"] != serde_json::json!([cpu])
            || e["optional"] != true
        {
            return Err(format!(
                "the lock entry of {name} is not {url} with a sha512 integrity: {e}"
            ));
        }
    }
    if let Some(lock) = lock {
        let n = lock["packages"].as_object().map_or(0, |p| p.len());
        if n != deps.len() + 1 {
            return Err(format!(
                "package-lock.json has {n} entries for {} packages",
                deps.len()
            ));
        }
    }
    Ok(())
}

#[test]
fn the_committed_package_files_pin_the_crate_version() {
    let read = |f: &str| -> Option<Value> {
        std::fs::read(Path::new(ROOT).join(f))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap_or_else(|e| panic!("{f}: {e}")))
    };
    let pkg = read("package.json").expect("the plugin's package.json");
    // All four platforms, at the crate's version.
    let mut names: Vec<&String> = pkg["optionalDependencies"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    names.sort();
    let mut want: Vec<String> = PLATFORMS
        .iter()
        .map(|p| format!("@localagents/cli-{p}"))
        .collect();
    want.sort();
    assert_eq!(names, want.iter().collect::<Vec<_>>());
    // The lockfile comes with the first release (the release workflow
    // commits it); when it is there, it pins this version.
    let lock = read("package-lock.json");
    pins(&pkg, lock.as_ref(), VERSION).unwrap();
    // package.json is the generator's, byte for byte.
    let generated = tempfile::tempdir().unwrap();
    let o = Command::new("node")
        .arg(format!("{ROOT}/scripts/npm-lock.mjs"))
        .arg("--package-json")
        .arg(generated.path())
        .output()
        .unwrap();
    check(&o, "npm-lock.mjs --package-json");
    assert_eq!(
        std::fs::read_to_string(generated.path().join("package.json")).unwrap(),
        std::fs::read_to_string(Path::new(ROOT).join("package.json")).unwrap(),
        "package.json is not what `node scripts/npm-lock.mjs --package-json .` writes"
    );
    let ignored = Command::new("git")
        .args(["check-ignore", "-q", "node_modules"])
        .current_dir(ROOT)
        .status()
        .unwrap();
    assert!(ignored.success(), "node_modules is in .gitignore");
}

#[test]
fn a_generated_lockfile_pins_and_a_version_bump_without_one_fails() {
    let packs = tempfile::tempdir().unwrap();
    pack(packs.path(), &pack_bin());
    let out = tempfile::tempdir().unwrap();
    check(&lock(packs.path(), out.path(), None), "npm-lock.mjs");
    let read = |f: &str| -> Value {
        serde_json::from_slice(&std::fs::read(out.path().join(f)).unwrap()).unwrap()
    };
    let (pkg, lockv) = (read("package.json"), read("package-lock.json"));
    pins(&pkg, Some(&lockv), VERSION).unwrap();
    // The integrity is the tarball's sha512.
    let entry = format!("node_modules/@localagents/cli-{}", platform());
    let integrity = lockv["packages"][&entry]["integrity"]
        .as_str()
        .unwrap()
        .to_string();
    let sha = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "set -e; openssl dgst -sha512 -binary '{}' | openssl base64 -A",
            packs
                .path()
                .join(format!("localagents-cli-{}-{VERSION}.tgz", platform()))
                .display()
        ))
        .output()
        .unwrap();
    check(&sha, "openssl");
    assert_eq!(
        integrity,
        format!("sha512-{}", String::from_utf8_lossy(&sha.stdout))
    );
    // A crate version bump with this lockfile: refused, naming it.
    let err = pins(&pkg, Some(&lockv), "9.9.9").unwrap_err();
    assert!(err.contains("9.9.9"), "{err}");
    // --check: the files match their tarballs, and not once one changed.
    let ok = Command::new("node")
        .arg(format!("{ROOT}/scripts/npm-lock.mjs"))
        .arg(packs.path())
        .arg(out.path())
        .arg("--check")
        .output()
        .unwrap();
    check(&ok, "--check");
    let mut l = lockv.clone();
    l["packages"][&entry]["integrity"] = "sha512-AAAA".into();
    std::fs::write(out.path().join("package-lock.json"), l.to_string()).unwrap();
    let bad = Command::new("node")
        .arg(format!("{ROOT}/scripts/npm-lock.mjs"))
        .arg(packs.path())
        .arg(out.path())
        .arg("--check")
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(
        text(&bad).contains("the committed lockfile sha512-AAAA"),
        "{}",
        text(&bad)
    );
    // --all wants every platform: it names the first one missing (in
    // npm-lock.mjs's order, PLATFORMS's) first.
    let missing = PLATFORMS.iter().find(|p| **p != platform()).unwrap();
    let all = Command::new("node")
        .arg(format!("{ROOT}/scripts/npm-lock.mjs"))
        .arg(packs.path())
        .arg(out.path())
        .arg("--all")
        .output()
        .unwrap();
    assert!(
        !all.status.success() && text(&all).contains(&format!("no tarball for {missing}")),
        "{}",
        text(&all)
    );
}

#[test]
fn a_prebuilt_binary_of_another_version_is_passed_over() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap().join("plugin-root");
    crate::plugin::launcher_copy(&root);
    let exe = root.join(format!(
        "node_modules/@localagents/cli-{}/bin/localagents",
        platform()
    ));
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    std::fs::write(
        &exe,
        "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'localagents 0.0.1'; exit 0; }\necho ran-the-old-one\n",
    )
    .unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = crate::plugin::launcher_env(&root.join("plugin/localagents"), &root)
        .command(["serve"])
        .env("PATH", "/usr/bin:/bin")
        .env("CLAUDE_PLUGIN_ROOT", &root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("ran-the-old-one"));
    assert!(
        err.contains(&format!(
            "Passed over: {} says 'localagents 0.0.1' to --version, not 'localagents {VERSION}'",
            exe.display()
        )),
        "{err}"
    );
    // At the plugin's version it runs.
    std::fs::write(
        &exe,
        format!("#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'localagents {VERSION}'; exit 0; }}\necho ran-it\n"),
    )
    .unwrap();
    let out = crate::plugin::launcher_env(&root.join("plugin/localagents"), &root)
        .command(["serve"])
        .env("PATH", "/usr/bin:/bin")
        .env("CLAUDE_PLUGIN_ROOT", &root)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ran-it",
        "{}",
        text(&out)
    );
}
