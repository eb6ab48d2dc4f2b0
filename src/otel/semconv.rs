//! The names exported, as the OpenTelemetry semantic conventions 1.42.0
//! give them (GenAI: `gen_ai.*`; `server.*`, `http.*`, `error.type`), and
//! ours under `localagents.*`. Written here rather than taken from the
//! `opentelemetry-semantic-conventions` crate, which marks every GenAI
//! name deprecated (they moved to their own repository) and would add a
//! crate for a few strings.
//!
//! `gen_ai.provider.name` is the backend kind as `models.yaml` writes it:
//! `llama.cpp`, `vllm`, `ollama`, `lmstudio` or `other` (the convention
//! lists none of them; a custom value is allowed).
//!
//! `gen_ai.usage.input_tokens` counts cached tokens, as the convention
//! says: it is `input_tokens + cache_read_input_tokens` of the Anthropic
//! answer (llama.cpp and vLLM leave cache reads out of `input_tokens`;
//! Ollama counts them in and reports no cache reads, so the sum is its
//! `input_tokens`).

pub const OPERATION_NAME: &str = "gen_ai.operation.name";
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
pub const AGENT_NAME: &str = "gen_ai.agent.name";
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
pub const RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
pub const TOKEN_TYPE: &str = "gen_ai.token.type";
pub const SERVER_ADDRESS: &str = "server.address";
pub const SERVER_PORT: &str = "server.port";
pub const HTTP_STATUS: &str = "http.response.status_code";
pub const ERROR_TYPE: &str = "error.type";

pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
pub const TIME_TO_FIRST_CHUNK: &str = "gen_ai.client.operation.time_to_first_chunk";

pub const JOB_ID: &str = "localagents.job.id";
pub const JOB_STATUS: &str = "localagents.job.status";
pub const JOB_TURNS: &str = "localagents.job.turns";
pub const JOB_TOOL_CALLS: &str = "localagents.job.tool_calls";
pub const JOB_FAULTS: &str = "localagents.job.faults";
pub const JOB_SLOT_LOSSES: &str = "localagents.job.slot_losses";

/// The convention's advised buckets for `gen_ai.client.token.usage`.
pub const TOKEN_BUCKETS: &[f64] = &[
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// The convention's advised buckets for the duration histograms, in s.
pub const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];
