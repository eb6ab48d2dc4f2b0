//! LM Studio (issue 44), against the stand-in in
//! tests/support/src/fake_lmstudio.rs: recognised from its 200-with-error
//! answers and its model lists, with the window of the loaded instance.

use std::time::Duration;

use crate::ollama::{by_id, env, status};
use crate::support::fake_lmstudio::{self, LModel};

pub(crate) fn model(key: &str, context: u64, loaded: bool) -> LModel {
    LModel {
        key: key.into(),
        context,
        parallel: 4,
        loaded,
        load: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmstudio_is_recognised_from_its_200_errors_and_model_list() {
    let fake = fake_lmstudio::spawn(vec![
        model("qwen3-coder-30b", 65536, true),
        model("gemma-3-12b", 4096, false),
    ])
    .await;
    for backend in [None, Some("lmstudio")] {
        let e = env(fake.url(), backend);
        let (ep, took) = status(&e).await;
        assert_eq!(ep["up"], true, "{ep}");
        assert_eq!(ep["backend"], "lmstudio", "{ep}");
        assert_eq!(ep["backend_detected"], backend.is_none(), "{ep}");
        assert_eq!(ep["kind"], "lmstudio", "{ep}");
        let q = by_id(&ep, "qwen3-coder-30b");
        assert_eq!(q["context"], 65536, "{ep}");
        assert_eq!(
            q["context_source"], "loaded_instances.config.context_length",
            "{ep}"
        );
        assert_eq!(q["state"], "loaded", "{ep}");
        let g = by_id(&ep, "gemma-3-12b");
        assert_eq!(g["state"], "unloaded", "{ep}");
        assert!(g["context"].is_null(), "{ep}");
        assert_eq!(ep["slots"]["total"], 4, "{ep}");
        assert!(
            ep["warnings"]
                .to_string()
                .contains("gemma-3-12b: loads on first use; its window is known only once it is loaded (the model allows up to 262144)"),
            "{ep}"
        );
        eprintln!(
            "probe figures: lmstudio, backend {}: status --json took {} ms (latency_ms {})",
            backend.unwrap_or("undeclared"),
            took.as_millis(),
            ep["latency_ms"]
        );
    }
    // Declared, the probe asks none of llama.cpp's paths (each would be an
    // error line in LM Studio's log).
    let hits = fake.hits();
    let declared = &hits[hits.len() - 2..];
    assert!(
        declared.iter().all(|h| h.ends_with("/v1/models")),
        "{hits:?}"
    );
    assert!(fake.loads().is_empty(), "{:?}", fake.loads());
}
