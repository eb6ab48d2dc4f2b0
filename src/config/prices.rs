//! List prices of Anthropic models, for the ledger's "what these local
//! tokens would have cost" figure.
//!
//! A small built-in table (Anthropic's pricing page,
//! platform.claude.com/docs/en/about-claude/pricing, read 2026-11-30) that
//! the user's `prices.<model>` entries override or extend. The figure is a
//! list-price equivalent, not a bill: fresh input at the input price,
//! tokens the local server had cached at the cache-read price (what
//! Anthropic's prompt caching would have charged for them), output at the
//! output price.

use serde::{Deserialize, Serialize};

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Price {
    pub input: f64,
    pub output: f64,
    pub cache_read: f64,
}

impl Price {
    /// The list-price equivalent of these token counts, in USD.
    pub fn usd(&self, input: u64, cache_read: u64, output: u64) -> f64 {
        (input as f64 * self.input
            + cache_read as f64 * self.cache_read
            + output as f64 * self.output)
            / 1_000_000.0
    }
}

/// The reference model when the config names none.
pub const DEFAULT_REFERENCE_MODEL: &str = "claude-sonnet-4.5";

/// Built-in list prices (USD per million tokens), read 2026-11-30.
pub const BUILTIN: &[(&str, Price)] = &[
    (
        "claude-sonnet-4.5",
        Price {
            input: 3.0,
            output: 15.0,
            cache_read: 0.30,
        },
    ),
    (
        "claude-sonnet-5",
        Price {
            input: 2.0,
            output: 10.0,
            cache_read: 0.20,
        },
    ),
    (
        "claude-sonnet-5.5",
        Price {
            input: 2.0,
            output: 10.0,
            cache_read: 0.20,
        },
    ),
    (
        "claude-opus-4.5",
        Price {
            input: 5.0,
            output: 25.0,
            cache_read: 0.50,
        },
    ),
    (
        "claude-opus-5",
        Price {
            input: 5.0,
            output: 25.0,
            cache_read: 0.50,
        },
    ),
    (
        "claude-haiku-4.5",
        Price {
            input: 1.0,
            output: 5.0,
            cache_read: 0.10,
        },
    ),
];

/// The price of `model`: the user's table first, then the built-in one.
pub fn lookup(user: &indexmap::IndexMap<String, Price>, model: &str) -> Option<Price> {
    user.get(model)
        .copied()
        .or_else(|| BUILTIN.iter().find(|(m, _)| *m == model).map(|(_, p)| *p))
}

/// The price table's name for an API model id: without a trailing
/// `-YYYYMMDD` date, the version's `-4-5` as `-4.5`.
pub fn table_name(model: &str) -> String {
    let mut m = model;
    if let Some((head, date)) = m.rsplit_once('-')
        && date.len() == 8
        && date.bytes().all(|b| b.is_ascii_digit())
    {
        m = head;
    }
    if let Some((head, minor)) = m.rsplit_once('-')
        && !minor.is_empty()
        && minor.bytes().all(|b| b.is_ascii_digit())
        && let Some((name, major)) = head.rsplit_once('-')
        && !major.is_empty()
        && major.bytes().all(|b| b.is_ascii_digit())
    {
        return format!("{name}-{major}.{minor}");
    }
    m.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_model_ids_find_their_table_name() {
        assert_eq!(
            table_name("claude-sonnet-4-5-20250929"),
            "claude-sonnet-4.5"
        );
        assert_eq!(table_name("claude-opus-4-6"), "claude-opus-4.6");
        assert_eq!(table_name("claude-sonnet-5"), "claude-sonnet-5");
        assert_eq!(table_name("gemma3-270m"), "gemma3-270m");
    }

    #[test]
    fn the_formula_and_the_override() {
        let p = lookup(&Default::default(), "claude-sonnet-4.5").unwrap();
        // 1 M fresh, 10 M cached, 0.1 M out: 3 + 3 + 1.5.
        assert!((p.usd(1_000_000, 10_000_000, 100_000) - 7.5).abs() < 1e-9);
        let mut user = indexmap::IndexMap::new();
        user.insert(
            "claude-sonnet-4.5".to_string(),
            Price {
                input: 1.0,
                output: 2.0,
                cache_read: 0.5,
            },
        );
        assert_eq!(lookup(&user, "claude-sonnet-4.5").unwrap().input, 1.0);
        assert!(lookup(&user, "gpt-9").is_none());
    }
}
