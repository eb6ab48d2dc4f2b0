//! Test support: fake backends that answer with exactly the shapes real
//! llama.cpp and vLLM servers send (see shared/reference/backends.md), plus
//! small helpers. Shared by the integration tests and the benchmarks.
#![allow(dead_code)]

pub mod bench;
pub mod claude;
pub mod fake_llama;
pub mod fake_vllm;
pub mod git;
pub mod net;
pub mod script;
pub mod stats;
