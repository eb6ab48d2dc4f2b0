//! The MCP server on stdio (rmcp): tool schemas and thin handlers.
//!
//! stdout belongs to the protocol; nothing else may write there. Handlers
//! only translate between MCP and [`crate::api`]. A failure the caller can
//! act on comes back as a tool result with `isError` and a sentence that says
//! what to do, never as a protocol error that Claude Code would render as
//! "internal error".

use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use crate::api::{self, ApiError, Context};

/// What Claude reads about this server in its system prompt.
pub const INSTRUCTIONS: &str = "localagents runs coding tasks on a model served from the user's own llama.cpp or vLLM server, through a full headless Claude Code session. The loop: (1) list_models to see what is up, each endpoint's served ids, per-slot window and free slots; (2) run_agent with a self-contained brief (files, interface, acceptance command, constraints); (3) wait_job, or leave it running and poll job_status later; (4) review what it changed before accepting it. If the model you need is not running, do not retry: tell the user its name and host and ask them to start it. register_endpoint adds a server the user tells you about.";

/// Arguments of `register_endpoint`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct RegisterEndpointParams {
    /// Endpoint name: letters, digits, `_`, `.` or `-` (e.g. `gpu-box`).
    pub name: String,
    /// Base URL of the server, http or https, without `/v1` (e.g. `http://10.0.0.5:8080`).
    pub base_url: String,
    /// `llama.cpp`, `vllm` or `other`. Leave out to detect it.
    #[serde(default)]
    pub backend: Option<String>,
    /// A label for the machine, used when asking the user to start a model there.
    #[serde(default)]
    pub host: Option<String>,
    /// Free text: what runs there and how to start it.
    #[serde(default)]
    pub notes: Option<String>,
    /// NAME of an environment variable that holds the server's API key. Never the key itself.
    #[serde(default)]
    pub api_key_env: Option<String>,
}

/// The localagents MCP server.
#[derive(Clone)]
pub struct Server {
    ctx: Arc<Context>,
    tool_router: ToolRouter<Self>,
}

fn ok(v: Value) -> Result<CallToolResult, ErrorData> {
    let text = serde_json::to_string(&v).unwrap_or_else(|_| "{}".into());
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]))
}

fn fail(e: ApiError) -> Result<CallToolResult, ErrorData> {
    Ok(CallToolResult::error(vec![ContentBlock::text(
        e.to_string(),
    )]))
}

#[tool_router]
impl Server {
    pub fn new(ctx: Context) -> Self {
        Server {
            ctx: Arc::new(ctx),
            tool_router: Self::tool_router(),
        }
    }

    /// Live view of every configured endpoint: up or down (with the fix), served model ids, per-slot context window, slots busy/free, load, plus the menu of model names and where each is running. Call this before run_agent.
    #[tool(name = "list_models")]
    async fn list_models(&self) -> Result<CallToolResult, ErrorData> {
        match api::list_models(&self.ctx).await {
            Ok(v) => ok(v),
            Err(e) => fail(e),
        }
    }

    /// Add a server the user told you about. Writes only the sidecar models.local.yaml next to the active config (the hand-written file is never touched) and returns a live probe of the new endpoint.
    #[tool(name = "register_endpoint")]
    async fn register_endpoint(
        &self,
        Parameters(p): Parameters<RegisterEndpointParams>,
    ) -> Result<CallToolResult, ErrorData> {
        let args = api::RegisterArgs {
            name: p.name,
            base_url: p.base_url,
            backend: p.backend,
            host: p.host,
            notes: p.notes,
            api_key_env: p.api_key_env,
        };
        match api::register_endpoint(&self.ctx, args).await {
            Ok(v) => ok(v),
            Err(e) => fail(e),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "localagents",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }
}

/// Serve MCP on stdin/stdout until the client disconnects.
pub async fn serve_stdio(ctx: Context) -> anyhow::Result<()> {
    let service = Server::new(ctx)
        .serve(rmcp::transport::stdio())
        .await
        .map_err(|e| anyhow::anyhow!("MCP initialisation failed: {e}"))?;
    service.waiting().await?;
    Ok(())
}
