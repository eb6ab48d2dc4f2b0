//! The ledger (issue 12): what delegation kept local and its list-price
//! equivalent, checked against the shim's own request logs and the price
//! formula, and carried by the hook line and the status line.

use serde_json::{Value, json};

use crate::jobs::strict_fake_opts;
use crate::support::harness::{Harness, localagents};
use crate::support::{fake_llama, script};

/// Sum of a job's `/v1/messages` usage in its requests.jsonl.
fn logged(e: &Harness, id: &str) -> [u64; 3] {
    let text = std::fs::read_to_string(e.state_dir().join("jobs").join(id).join("requests.jsonl"))
        .unwrap();
    let mut s = [0u64; 3];
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["path"] == "/v1/messages" {
            for (i, k) in ["input", "cache_read", "output"].iter().enumerate() {
                s[i] += v["usage"][k].as_u64().unwrap();
            }
        }
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savings_add_up_the_request_logs_at_the_configured_prices() {
    let fake = fake_llama::spawn(strict_fake_opts()).await;
    fake.set_script(script::write_then_report("a.txt", "a\n"));
    let e = Harness::with_fake(fake.url());
    let mut cfg = std::fs::read_to_string(e.config_path()).unwrap();
    cfg = cfg.replace("defaults:\n", "defaults:\n  reference_model: my-ref\n");
    cfg.push_str("prices:\n  my-ref:\n    input: 4\n    output: 20\n    cache_read: 0.5\n");
    std::fs::write(e.config_path(), cfg).unwrap();

    let mut ids = Vec::new();
    for task in ["Create a.txt", "Create a.txt again"] {
        let out = localagents(&e, &["run", "--model", "gemma-3-270m", "--json", task]).await;
        let rec: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(rec["status"], "succeeded", "{rec}");
        ids.push(rec["id"].as_str().unwrap().to_string());
    }
    let sums: Vec<[u64; 3]> = ids.iter().map(|id| logged(&e, id)).collect();
    let want = [0, 1, 2].map(|i| sums[0][i] + sums[1][i]);
    assert!(want[0] + want[1] > 0 && want[2] > 0, "{want:?}");

    let out = localagents(&e, &["savings", "--json"]).await;
    let s: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(s["jobs"], 2, "{s}");
    assert_eq!(s["since"], "7d");
    assert_eq!(s["reference_model"], "my-ref");
    assert_eq!(
        s["tokens"],
        json!({"input": want[0], "cache_read": want[1], "output": want[2]}),
        "{s}"
    );
    let formula = (want[0] as f64 * 4.0 + want[1] as f64 * 0.5 + want[2] as f64 * 20.0) / 1e6;
    let got = s["equivalent_usd"].as_f64().unwrap();
    assert!((got - formula).abs() < 0.0001, "{got} vs {formula}");
    assert_eq!(s["by_model"][0]["endpoint"], "box");
    assert_eq!(s["by_model"][0]["jobs"], 2);
    assert!(s["meaning"].as_str().unwrap().contains("not a bill"));
    // Per week and per day: both jobs ran today, in this week (UTC).
    let today = chrono::Utc::now().date_naive();
    let monday = today
        - chrono::Duration::days(i64::from(
            chrono::Datelike::weekday(&today).num_days_from_monday(),
        ));
    for (key, start) in [("by_week", monday), ("by_day", today)] {
        let p = &s[key];
        assert_eq!(p.as_array().map(Vec::len), Some(1), "{key}: {s}");
        assert_eq!(p[0]["start"], start.format("%Y-%m-%d").to_string(), "{p}");
        assert_eq!(p[0]["jobs"], 2, "{p}");
        assert_eq!(p[0]["tokens"], s["tokens"], "{p}");
        assert_eq!(p[0]["equivalent_usd"], s["equivalent_usd"], "{p}");
    }
    let out = localagents(&e, &["savings"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("week of {}  2 jobs", monday.format("%Y-%m-%d"))),
        "{text}"
    );

    // Each job carries its own figure; the hook line says it.
    let rec: Value = serde_json::from_slice(
        &std::fs::read(e.state_dir().join("jobs").join(&ids[1]).join("job.json")).unwrap(),
    )
    .unwrap();
    let own = (sums[1][0] as f64 * 4.0 + sums[1][1] as f64 * 0.5 + sums[1][2] as f64 * 20.0) / 1e6;
    assert!(
        (rec["equivalent_usd"].as_f64().unwrap() - own).abs() < 0.0001,
        "{rec}"
    );
    let text = crate::support::harness::hook_line(&e).await;
    let total: u64 = sums[1].iter().sum();
    assert!(
        text.contains(&format!(
            "{} tokens local ≈ $",
            localagents::fmt::thousands(total)
        )) && text.contains("at my-ref list prices"),
        "{text}"
    );

    // The status line (what /local-status expands) and --since all.
    let out = localagents(&e, &["status"]).await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("last 7 days: 2 jobs, ") && text.contains("at my-ref list prices"),
        "{text}"
    );
    // `status --json` carries what the text prints under the endpoints:
    // each model's eval line, the notes and the savings line (issue 43).
    let st = crate::support::harness::localagents_json(&e, &["status", "--json"]).await;
    assert!(st["endpoints"][0]["up"].as_bool().unwrap(), "{st:#}");
    let savings = st["savings"].as_str().unwrap();
    assert!(savings.starts_with("last 7 days: 2 jobs, "), "{st:#}");
    let evals = st["evals"].as_array().unwrap();
    assert!(!evals.is_empty(), "a served model has an eval line: {st:#}");
    let mut printed: Vec<String> = evals
        .iter()
        .map(|v| {
            format!(
                "{} on `{}`: {}",
                v["model"].as_str().unwrap(),
                v["endpoint"].as_str().unwrap(),
                v["line"].as_str().unwrap()
            )
        })
        .collect();
    printed.extend(
        st["notes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string()),
    );
    printed.push(savings.to_string());
    printed.push(st["retention_line"].as_str().unwrap().to_string());
    let tail: Vec<&str> = text
        .lines()
        .rev()
        .take(printed.len())
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    assert_eq!(
        tail, printed,
        "the text's last lines are the JSON's evals, notes, savings and retention"
    );
    let out = localagents(&e, &["savings", "--since", "all", "--json"]).await;
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(all["tokens"], s["tokens"]);
    let out = localagents(&e, &["savings", "--since", "week"]).await;
    assert_eq!(out.status.code(), Some(2), "a bad period is a usage error");
}
