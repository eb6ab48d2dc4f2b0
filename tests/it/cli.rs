//! The binary's exit codes and output, as a person or script sees them.

use std::process::Command;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_localagents"));
    c.env_remove("LOCALAGENTS_CONFIG")
        .env_remove("XDG_CONFIG_HOME");
    c
}

#[test]
fn status_exits_0_when_down_and_2_on_config_error() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("models.yaml");
    let addr = crate::support::net::refused_addr();
    std::fs::write(
        &cfg,
        format!("endpoints:\n  gone:\n    base_url: http://{addr}\n"),
    )
    .unwrap();
    let out = bin()
        .arg("--config")
        .arg(&cfg)
        .arg("status")
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("gone") && text.contains("down") && text.contains("nothing listens"),
        "{text}"
    );
    assert!(
        !text.contains('\u{1b}'),
        "no colour when stdout is not a terminal"
    );

    std::fs::write(&cfg, "endpoints: [\n").unwrap();
    let out = bin()
        .arg("--config")
        .arg(&cfg)
        .args(["status", "--json"])
        .env("HOME", tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("models.yaml:") && err.contains("config error"),
        "{err}"
    );
}

#[test]
fn config_path_lists_user_then_project_with_sidecars() {
    let tmp = tempfile::tempdir().unwrap();
    let proj = tmp.path().join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("models.yaml"), "models: {}\n").unwrap();
    let out = bin()
        .args(["config", "path"])
        .env("HOME", tmp.path())
        .current_dir(&proj)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].ends_with(".config/localagents/models.yaml") && lines[0].starts_with("absent"),
        "{text}"
    );
    assert!(
        lines[1].ends_with(".config/localagents/models.local.yaml"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("read") && lines[2].ends_with("proj/models.yaml"),
        "{text}"
    );
    assert!(lines[3].ends_with("proj/models.local.yaml"), "{text}");
    assert!(
        lines[4].contains("register_endpoint writes")
            && lines[4].ends_with("proj/models.local.yaml"),
        "{text}"
    );
}
