//! How a `harness = false` benchmark was asked to run.

/// Full run, smoke check, or the README table only.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Full,
    Smoke,
    Markdown,
}

/// `cargo bench --bench NAME [-- --smoke | --markdown]` (cargo adds
/// `--bench` itself for `harness = false` targets). `smoke`: whether this
/// bench has a smoke mode. A bad argument exits 2 with the usage.
pub fn mode(name: &str, smoke: bool) -> Mode {
    let usage = if smoke {
        format!("cargo bench --bench {name} [-- --smoke | --markdown]")
    } else {
        format!("cargo bench --bench {name} [-- --markdown]")
    };
    let mut mode = Mode::Full;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--bench" => {}
            "--smoke" if smoke && mode == Mode::Full => mode = Mode::Smoke,
            "--markdown" if mode == Mode::Full => mode = Mode::Markdown,
            _ => {
                eprintln!("{name} bench: unexpected argument {a:?}; usage: {usage}");
                std::process::exit(2);
            }
        }
    }
    mode
}
