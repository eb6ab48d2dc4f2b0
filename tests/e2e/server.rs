//! Starting an extra real llama-server for one test or benchmark run, with
//! the model and strict template that scripts/e2e-real.sh provisioned.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// An environment variable the e2e script sets.
pub fn need(var: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("{var} is not set: run this with scripts/e2e-real.sh"))
}

/// A llama-server on a loopback port; killed on drop.
pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start llama-server with gemma3-270m, the strict template, `--slots
/// --metrics` and `extra`; wait until `/health` answers.
pub fn start(extra: &[&str]) -> Server {
    let model = need("LOCALAGENTS_E2E_MODEL");
    let mut args = vec!["-m", model.as_str(), "--alias", "gemma3-270m", "--slots"];
    args.extend_from_slice(extra);
    launch(&args)
}

/// Start llama-server with gemma3-270m and the GGUF's own chat template
/// (ChatML, not Gemma's turn markers: the model writes and loops past its
/// turns), `--slots --metrics` and `extra`.
#[allow(dead_code)] // The benches share this file.
pub fn start_own_template(extra: &[&str]) -> Server {
    let model = need("LOCALAGENTS_E2E_MODEL");
    let mut args = vec!["-m", model.as_str(), "--alias", "gemma3-270m", "--slots"];
    args.extend_from_slice(extra);
    launch_with(&args, false)
}

/// Start llama-server in router mode over `models_dir` (models load on
/// demand), with the strict template passed through to its instances.
#[allow(dead_code)] // The benches share this file and start no router.
pub fn start_router(models_dir: &std::path::Path, extra: &[&str]) -> Server {
    let dir = models_dir.display().to_string();
    let mut args = vec!["--models-dir", dir.as_str()];
    args.extend_from_slice(extra);
    launch(&args)
}

fn launch(extra: &[&str]) -> Server {
    launch_with(extra, true)
}

fn launch_with(extra: &[&str], strict: bool) -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let log =
        std::fs::File::create(std::env::temp_dir().join(format!("llama-e2e-{port}.log"))).unwrap();
    let template = need("LOCALAGENTS_E2E_TEMPLATE");
    let child = Command::new(need("LOCALAGENTS_E2E_SERVER"))
        .arg("--jinja")
        .args(if strict {
            vec!["--chat-template-file", template.as_str()]
        } else {
            vec![]
        })
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--metrics",
        ])
        .args(extra)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    // Owned by the guard at once: a failed start still kills it.
    let server = Server {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    crate::support::until_blocking(
        &format!("llama-server {extra:?} starts"),
        Duration::from_secs(90),
        || {
            Command::new("curl")
                .args(["-fsS", &format!("{}/health", server.url)])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        },
    );
    server
}
