//! Notes: an axum app with its own sign-in and an MCP server (rmcp) whose
//! agents connect through Portcullis. `app.rs` is the app as it was; this
//! file is the whole integration (see README.md for the line count).
//!
//! `cargo run -p notes-app`, then give an MCP client the printed MCP URL.

mod app;
mod transport;

use std::sync::LazyLock;
use std::time::Duration;

use app::{App, NewNote};
use axum::http::request::Parts;
use axum::response::Response;
// glue:begin
use portcullis_axum::rmcp::Call;
use portcullis_axum::{
    Agent, Effect, Host, Portcullis, RedbStore, SignedIn, see_other, url_encode,
};
// glue:end
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResponse, CallToolResult, ServerCapabilities, ServerConfig};
use rmcp::{ErrorData, ServerHandler, tool, tool_handler, tool_router};
use serde_json::json;

// glue:begin
/// Who is signed in: the app's own session; signed out: its own sign-in.
impl Host for App {
    async fn signed_in(&self, parts: &Parts) -> Option<SignedIn> {
        let (session, user) = self.session_user(&parts.headers)?;
        Some(SignedIn::new(user).in_session(session))
    }

    fn sign_in(&self, return_to: &str) -> Response {
        see_other(&format!("/login?next={}", url_encode(return_to)))
    }
}
// glue:end

/// The MCP server: one read tool, one write tool the server performs.
#[derive(Clone)]
struct NotesMcp {
    app: App,
    // glue:begin
    portcullis: Portcullis<RedbStore>,
    // glue:end
}

#[tool_router]
impl NotesMcp {
    #[tool(description = "List your notes.", annotations(read_only_hint = true))]
    // glue:begin
    async fn list_notes(&self, agent: Agent) -> Result<CallToolResult, ErrorData> {
        agent.require("notes:read")?;
        // glue:end
        let notes = self.app.notes(agent.subject());
        Ok(CallToolResult::structured(json!({ "notes": notes })))
    }

    #[tool(
        description = "Add a note. The user approves each one: the call waits for the \
        approval (on approval_pending, call again with the same requestId)."
    )]
    async fn add_note(
        &self,
        Parameters(note): Parameters<NewNote>,
        // glue:begin
        agent: Agent,
        call: Call, // bound to the note whatever the order of the arguments
                    // glue:end
    ) -> Result<CallToolResponse, ErrorData> {
        // glue:begin
        let action =
            portcullis_axum::rmcp::action(Effect::Write, "add_note", "notes:write", &note)?;
        let (app, user) = (self.app.clone(), agent.subject().to_owned());
        call.run(&self.portcullis, &agent, action, move || async move {
            Ok(app.add_note(&user, note))
        })
        .await
        // glue:end
    }
}

/// The tools' router, built once: rmcp's `#[tool_handler]` otherwise
/// builds it, and checks every tool's name, on every request.
static TOOLS: LazyLock<ToolRouter<NotesMcp>> = LazyLock::new(NotesMcp::tool_router);

#[tool_handler(router = TOOLS)]
impl ServerHandler for NotesMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(app::setting("RUST_LOG", "info"))
        .init();
    let (listener, public_url) = app::listen().await?;
    let db = app::setting("NOTES_DB", "notes.redb");
    let app = App::default();

    // glue:begin
    let mut policy = portcullis_axum::Policy::default();
    policy.access_token_ttl =
        Duration::from_secs(app::setting("NOTES_TOKEN_TTL_SECS", "300").parse()?);
    // The key file: NOTES_KEYS, else the user's state directory (never
    // beside the database, which may sit in a source tree).
    let key_file = match std::env::var_os("NOTES_KEYS") {
        Some(path) => path.into(),
        None => portcullis_axum::keys::default_path("notes-app")?,
    };
    let portcullis = Portcullis::builder(
        RedbStore::open(&db)?,
        portcullis_axum::keys::load_or_create(&key_file)?,
    )
    .public_url(&public_url)
    .site("notes", "Notes")
    .scope("notes:read", "read your notes")
    .scope("notes:write", "add notes (you approve each one)")
    .endpoint_scope("notes:read")
    .policy(policy)
    .build(app.clone())
    .await?;
    // glue:end

    let tools = NotesMcp {
        app: app.clone(),
        portcullis: portcullis.clone(), // glue
    };
    // Stateless, JSON answers (see transport.rs).
    let mcp = transport::streamable(tools);
    // glue:begin
    // The MCP route behind the bearer check, as a layer of its own router;
    // `routes()` brings discovery, sign-in and consent, token, and the
    // approvals and connected-agents pages.
    let mcp_route = axum::Router::new()
        .route_service(&portcullis.mcp_route(), mcp)
        .route_layer(portcullis.layer());
    let router = app.router().merge(portcullis.routes()).merge(mcp_route);
    app::serve(listener, router, &portcullis.mcp_url()).await?;
    // glue:end
    Ok(())
}
