//! The servers localagents knows, and what each one means for a job: the
//! name `backend:` takes, the API it speaks, what its answers count, and
//! its own fix for a window that is too small.
//!
//! One table, so that every place that names a server (the probe's
//! sentences, the shim's wire, doctor, the guide's table, the skill's
//! description) reads the same facts. The facts come from each server's
//! source, cited in `tests/support/src/fake_others.rs` beside the
//! stand-in that answers as it does.

use serde::Serialize;

/// Which kind of server an endpoint is. `None` in
/// [`super::Endpoint::backend`] means "detect it".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Backend {
    #[serde(rename = "llama.cpp")]
    LlamaCpp,
    #[serde(rename = "vllm")]
    Vllm,
    /// Ollama (`ollama serve`, default port 11434).
    #[serde(rename = "ollama")]
    Ollama,
    /// LM Studio's server (`lms server start`, default port 1234).
    #[serde(rename = "lmstudio")]
    LmStudio,
    /// SGLang (`python -m sglang.launch_server`, port 30000).
    #[serde(rename = "sglang")]
    Sglang,
    /// exo, one model spread over several machines (port 52415).
    #[serde(rename = "exo")]
    Exo,
    /// Docker Model Runner (port 12434), llama.cpp or vLLM underneath.
    #[serde(rename = "docker-model-runner")]
    DockerModelRunner,
    /// Lemonade, AMD's server (port 13305; 8000 before 10.1).
    #[serde(rename = "lemonade")]
    Lemonade,
    /// LocalAI (port 8080).
    #[serde(rename = "localai")]
    LocalAi,
    /// llamafile (port 8080): llama.cpp's server in one file.
    #[serde(rename = "llamafile")]
    Llamafile,
    /// Jan's local API server (port 1337), llama.cpp underneath.
    #[serde(rename = "jan")]
    Jan,
    /// vllm-mlx on Apple Silicon (port 8000).
    #[serde(rename = "vllm-mlx")]
    VllmMlx,
    /// Apple's `mlx_lm.server` (port 8080): chat completions only.
    #[serde(rename = "mlx-lm")]
    MlxLm,
    /// TabbyAPI with ExLlamaV3 (port 5000): chat completions only.
    #[serde(rename = "tabbyapi")]
    TabbyApi,
    /// KoboldCpp (port 5001).
    #[serde(rename = "koboldcpp")]
    KoboldCpp,
    /// Any OpenAI chat-completions server, reached through the chat wire.
    #[serde(rename = "openai")]
    OpenAi,
    /// Anything else that speaks `/v1/messages` (a gateway, a relay).
    #[serde(rename = "other")]
    Other,
}

/// The API a job's requests take to a server, unless its `wire:` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Speaks {
    /// Anthropic's `/v1/messages`, as Claude Code sends them.
    Messages,
    /// OpenAI's `/v1/chat/completions`, through the chat wire.
    Chat,
}

/// What a server's answers count of the prompt it read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counts {
    /// The prompt it read, cached part included: the truncation guard
    /// compares it with what was sent, every turn.
    Read,
    /// The prompt it read, but no cached tokens: a job's cache is unknown
    /// (not zero).
    NoCache,
    /// No count in a stream (0 where the count goes), and Claude Code
    /// streams: the guard can check only that a request fits the window.
    None,
}

impl Backend {
    /// Every backend, in the order the guide's table lists them.
    pub const ALL: [Backend; 17] = [
        Backend::LlamaCpp,
        Backend::Vllm,
        Backend::Ollama,
        Backend::LmStudio,
        Backend::Sglang,
        Backend::Exo,
        Backend::DockerModelRunner,
        Backend::Lemonade,
        Backend::LocalAi,
        Backend::Llamafile,
        Backend::Jan,
        Backend::VllmMlx,
        Backend::MlxLm,
        Backend::TabbyApi,
        Backend::KoboldCpp,
        Backend::OpenAi,
        Backend::Other,
    ];

    pub fn parse(s: &str) -> Option<Backend> {
        let s = s.trim().to_ascii_lowercase().replace(['_', ' '], "-");
        Some(match s.as_str() {
            "llama.cpp" | "llamacpp" | "llama-cpp" | "llama-server" => Backend::LlamaCpp,
            "vllm" => Backend::Vllm,
            "ollama" => Backend::Ollama,
            "lmstudio" | "lm-studio" | "lms" => Backend::LmStudio,
            "sglang" => Backend::Sglang,
            "exo" => Backend::Exo,
            "docker-model-runner" | "docker" | "dmr" => Backend::DockerModelRunner,
            "lemonade" => Backend::Lemonade,
            "localai" | "local-ai" => Backend::LocalAi,
            "llamafile" => Backend::Llamafile,
            "jan" => Backend::Jan,
            "vllm-mlx" => Backend::VllmMlx,
            "mlx-lm" | "mlx-lm.server" | "mlx" => Backend::MlxLm,
            "tabbyapi" | "tabby" | "exllamav3" => Backend::TabbyApi,
            "koboldcpp" | "kobold" => Backend::KoboldCpp,
            "openai" | "openai-compatible" => Backend::OpenAi,
            "other" | "anthropic" => Backend::Other,
            _ => return None,
        })
    }

    /// The name `backend:` takes, and `status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::LlamaCpp => "llama.cpp",
            Backend::Vllm => "vllm",
            Backend::Ollama => "ollama",
            Backend::LmStudio => "lmstudio",
            Backend::Sglang => "sglang",
            Backend::Exo => "exo",
            Backend::DockerModelRunner => "docker-model-runner",
            Backend::Lemonade => "lemonade",
            Backend::LocalAi => "localai",
            Backend::Llamafile => "llamafile",
            Backend::Jan => "jan",
            Backend::VllmMlx => "vllm-mlx",
            Backend::MlxLm => "mlx-lm",
            Backend::TabbyApi => "tabbyapi",
            Backend::KoboldCpp => "koboldcpp",
            Backend::OpenAi => "openai",
            Backend::Other => "other",
        }
    }

    /// The server's own name, for sentences.
    pub fn title(self) -> &'static str {
        match self {
            Backend::LlamaCpp => "llama.cpp",
            Backend::Vllm => "vLLM",
            Backend::Ollama => "Ollama",
            Backend::LmStudio => "LM Studio",
            Backend::Sglang => "SGLang",
            Backend::Exo => "exo",
            Backend::DockerModelRunner => "Docker Model Runner",
            Backend::Lemonade => "Lemonade",
            Backend::LocalAi => "LocalAI",
            Backend::Llamafile => "llamafile",
            Backend::Jan => "Jan",
            Backend::VllmMlx => "vllm-mlx",
            Backend::MlxLm => "mlx_lm.server",
            Backend::TabbyApi => "TabbyAPI",
            Backend::KoboldCpp => "KoboldCpp",
            Backend::OpenAi => "the OpenAI-compatible server",
            Backend::Other => "the server",
        }
    }

    /// The API a job's requests take unless `wire:` says: the chat wire
    /// on a server that has nothing else ([`Backend::has_messages`]), and
    /// on two whose Anthropic endpoint loses what their chat endpoint
    /// keeps: vllm-mlx counts no input tokens in a `/v1/messages` stream
    /// (`message_start` says 0, `message_delta` only output) but does in
    /// a chat stream; exo's `/v1/messages` answers a mid-conversation
    /// system message with a 422 (exo#2193), drops text beside a tool
    /// result and counts no input in a stream, while its chat stream
    /// carries `prompt_tokens` and `cached_tokens` (docs/servers/).
    pub fn speaks(self) -> Speaks {
        match self {
            Backend::MlxLm
            | Backend::TabbyApi
            | Backend::OpenAi
            | Backend::Exo
            | Backend::VllmMlx => Speaks::Chat,
            _ => Speaks::Messages,
        }
    }

    /// Whether it serves `/v1/messages` at all (a job may be sent there
    /// when `wire: messages` says, or when its chat endpoint refuses).
    pub fn has_messages(self) -> bool {
        !matches!(self, Backend::MlxLm | Backend::TabbyApi | Backend::OpenAi)
    }

    /// What its streamed answers count on its default wire (Claude Code
    /// streams).
    pub fn counts(self) -> Counts {
        match self {
            // llama.cpp's own usage (DMR, Jan and llamafile forward it);
            // chat streams with `prompt_tokens_details.cached_tokens`.
            Backend::LlamaCpp
            | Backend::DockerModelRunner
            | Backend::Jan
            | Backend::Llamafile
            | Backend::LmStudio
            | Backend::MlxLm
            | Backend::Exo
            | Backend::Sglang
            | Backend::Other
            | Backend::OpenAi => Counts::Read,
            Backend::Vllm
            | Backend::Ollama
            | Backend::Lemonade
            | Backend::TabbyApi
            | Backend::VllmMlx => Counts::NoCache,
            // LocalAI sends input_tokens 0 in a /v1/messages stream, and
            // so does KoboldCpp when it fakes a stream for a request with
            // tools (koboldcpp.py:7192 at 1.116.1), which is every one of
            // Claude Code's unless it runs with `--jinja --jinja_tools`.
            Backend::LocalAi | Backend::KoboldCpp => Counts::None,
        }
    }

    /// What it does with a prompt over its window, when that is not a
    /// refusal: how a sentence says it.
    pub fn over_window(self) -> Option<&'static str> {
        match self {
            Backend::Ollama | Backend::LmStudio | Backend::KoboldCpp => {
                Some("truncates a longer prompt without an error")
            }
            Backend::Exo | Backend::VllmMlx | Backend::MlxLm => {
                Some("checks no window and runs a longer prompt as far as the model goes")
            }
            Backend::OpenAi => Some("may cut or run a longer prompt without an error"),
            _ => None,
        }
    }

    /// Whether no job starts on a model whose window is under the least a
    /// delegate needs ([`crate::probe::MIN_WINDOW`]). llama.cpp and vLLM
    /// refuse a prompt too long with an error the shim translates, and a
    /// gateway (`other`) says nothing of its window; on every other server
    /// a job under that window cannot work and is not started.
    pub fn refuses_small_window(self) -> bool {
        !matches!(self, Backend::LlamaCpp | Backend::Vllm | Backend::Other)
    }

    /// Whether a job needs a known window to start: the servers that load
    /// on demand learn theirs at load (Ollama, LM Studio, Lemonade, whose
    /// `/api/v1/slots` answers for the loaded model only), llama.cpp and
    /// vLLM always say theirs, a gateway may not know; on every other
    /// server the window budget and the truncation guard need one, from
    /// the server or from `window:`.
    pub fn needs_window(self) -> bool {
        !matches!(
            self,
            Backend::LlamaCpp
                | Backend::Vllm
                | Backend::Ollama
                | Backend::LmStudio
                | Backend::Lemonade
                | Backend::Other
        )
    }

    /// Whether an image inside a `tool_result` reaches the model: LM
    /// Studio refuses it ("Only text tool_result blocks are supported when
    /// tool_result.content is an array", lmstudio-bug-tracker #1590,
    /// #1878); Lemonade, LocalAI, vllm-mlx and exo drop it without a word.
    pub fn images_in_tool_results(self) -> bool {
        !matches!(
            self,
            Backend::LmStudio | Backend::Lemonade | Backend::LocalAi | Backend::VllmMlx | Backend::Exo
        )
    }

    /// The server's own fix for a window too small for `served_id`.
    pub fn window_fix(self, served_id: &str) -> String {
        match self {
            Backend::LlamaCpp => "restart llama-server with a larger `-c`, or fewer `--parallel` slots (each slot gets `-c` divided by `--parallel`; 65536 a slot is comfortable)".into(),
            Backend::Vllm => "restart vLLM with a larger `--max-model-len` (65536 is comfortable)".into(),
            Backend::Ollama => "restart Ollama with `OLLAMA_CONTEXT_LENGTH=65536 ollama serve`, or set `PARAMETER num_ctx 65536` in the model's Modelfile".into(),
            Backend::LmStudio => format!(
                "load the model with a larger context length: `lms load {served_id} --context-length 65536` (or the app's model settings)"
            ),
            Backend::Sglang => "restart SGLang with a larger `--context-length` (65536 is comfortable; past the model's own length it also needs SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)".into(),
            Backend::Exo => "exo gives a model the window of its model card and has no setting for it: serve a model whose card allows 65536 tokens".into(),
            Backend::DockerModelRunner => format!(
                "`docker model configure --context-size 65536 {served_id}`"
            ),
            Backend::Lemonade => format!(
                "`lemonade load {served_id} --ctx-size 65536 --save-options` (or `lemonade config set ctx_size=65536`)"
            ),
            Backend::LocalAi => "set `context_size: 65536` in the model's YAML in LocalAI's models directory, then restart LocalAI".into(),
            Backend::Llamafile => "restart llamafile with a larger `-c` (65536 is comfortable)".into(),
            Backend::Jan => "raise the model's Context Size in Jan's model settings (65536 is comfortable), then restart Jan's local API server".into(),
            Backend::VllmMlx => "vllm-mlx checks no window: serve a model whose context is 65536 tokens or more, and set `window:` to it".into(),
            Backend::MlxLm => "mlx_lm.server checks no window: serve a model whose context is 65536 tokens or more, and set `window:` to it".into(),
            Backend::TabbyApi => "raise `max_seq_len` and `cache_size` in TabbyAPI's config.yml (or start it with `--max-seq-len 65536 --cache-size 65536`)".into(),
            Backend::KoboldCpp => "restart KoboldCpp with a larger `--contextsize` (65536 is comfortable)".into(),
            Backend::OpenAi | Backend::Other => "give the model a larger window on its server (65536 tokens is comfortable), and set `window:` to it".into(),
        }
    }

    /// The backend names `backend:` takes, for a sentence.
    pub fn names() -> String {
        let mut names: Vec<&str> = Backend::ALL.iter().map(|b| b.as_str()).collect();
        names.insert(2, "vllm-router");
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_backend_parses_from_its_own_name() {
        for b in Backend::ALL {
            assert_eq!(Backend::parse(b.as_str()), Some(b), "{b:?}");
            assert_eq!(
                serde_json::to_value(b).unwrap(),
                serde_json::json!(b.as_str())
            );
        }
        assert_eq!(Backend::parse("mlx_lm.server"), Some(Backend::MlxLm));
        assert_eq!(Backend::parse("Docker Model Runner"), Some(Backend::DockerModelRunner));
        assert_eq!(Backend::parse("anthropic"), Some(Backend::Other));
        assert_eq!(Backend::parse("tgi"), None);
    }

    #[test]
    fn the_chat_only_servers_need_a_window_and_refuse_a_small_one() {
        for b in [Backend::MlxLm, Backend::TabbyApi, Backend::OpenAi] {
            assert_eq!(b.speaks(), Speaks::Chat, "{b:?}");
            assert!(!b.has_messages(), "{b:?}");
            assert!(b.needs_window() && b.refuses_small_window(), "{b:?}");
        }
        for b in [Backend::LlamaCpp, Backend::Vllm, Backend::Other] {
            assert!(!b.refuses_small_window() && !b.needs_window(), "{b:?}");
        }
    }
}
