//! Runaway model output copied from real runs and threads, each with its
//! source in `tests/fixtures/runaway/SOURCES.md`, and normal texts that
//! must not trip the guard.

/// The tiny Gemma (gemma-3-270m Q4_K_M) on llama-server 11434: four lines
/// over and over (real output of this repository's real tier).
pub const GEMMA_LOOP: &str = include_str!("../../tests/fixtures/runaway/gemma3-270m-loop.txt");

/// A Llama 2 fine-tune writing ChatML markers turn after turn
/// (ggml-org/llama.cpp#19585).
pub const LLAMA2_CHATML: &str =
    include_str!("../../tests/fixtures/runaway/llama2-chatml-markers.txt");

/// Llama 3 8B looping a short span (ggml-org/llama.cpp#6762).
pub const LLAMA3_SPAN: &str = include_str!("../../tests/fixtures/runaway/llama3-span.txt");

/// Long normal texts.
pub const NORMAL: &[(&str, &str)] = &[
    (
        "guide",
        include_str!("../../tests/fixtures/runaway/normal-report.txt"),
    ),
    (
        "code",
        include_str!("../../tests/fixtures/runaway/normal-code.txt"),
    ),
];
