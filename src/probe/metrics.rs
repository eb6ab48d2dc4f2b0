//! Prometheus text from `/metrics`, reduced to the few numbers we use.
//!
//! Both llama.cpp (`llamacpp:*`) and vLLM (`vllm:*`, labelled per model)
//! expose Prometheus text. We sum samples of the same name across labels,
//! which is what "server-wide" means for both.

use std::collections::BTreeMap;

/// Metric name → value, summed over label sets. Histogram and summary
/// buckets are skipped; `_sum`/`_count` keep their suffix.
pub type Counters = BTreeMap<String, f64>;

/// Parse Prometheus text. Lines that do not parse are skipped: a partial
/// scrape is more useful than none.
pub fn parse(text: &str) -> Counters {
    use prom_text_format_parser::{Type, ValueType};
    let (metrics, _err) = prom_text_format_parser::parse_scrape(text);
    let mut out = Counters::new();
    for m in metrics {
        for s in &m.samples {
            let suffix = match (m.kind, s.value.value_type) {
                (Type::Histogram | Type::Summary, ValueType::Sample) => continue,
                (_, ValueType::Sum) => "_sum",
                (_, ValueType::Count) => "_count",
                _ => "",
            };
            let Ok(v) = s.value.value.as_str().parse::<f64>() else {
                continue;
            };
            if !v.is_finite() {
                continue;
            }
            *out.entry(format!("{}{suffix}", m.name)).or_insert(0.0) += v;
        }
    }
    out
}

/// The first of `names` that is present.
pub fn first(c: &Counters, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| c.get(*n).copied())
}

/// How much the first of `names` that `after` has grew since `before`
/// (a counter missing before counts from 0; a reset is no growth).
pub fn delta(before: &Counters, after: &Counters, names: &[&str]) -> Option<f64> {
    let a = first(after, names)?;
    let b = first(before, names).unwrap_or(0.0);
    Some((a - b).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_labels_and_keeps_colons() {
        let text = "# HELP vllm:num_requests_running Running.\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"a\"} 2.0\nvllm:num_requests_running{model_name=\"b\"} 1.0\n# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1234\n";
        let c = parse(text);
        assert_eq!(c.get("vllm:num_requests_running"), Some(&3.0));
        assert_eq!(c.get("llamacpp:prompt_tokens_total"), Some(&1234.0));
    }

    #[test]
    fn garbage_gives_empty_not_panic() {
        let c = parse("<html>not metrics</html>\n\u{0}\u{1}");
        assert!(c.is_empty());
    }
}
