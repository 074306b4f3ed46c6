//! How Notes serves its MCP server over HTTP: rmcp's streamable HTTP
//! transport, stateless, JSON answers. Nothing here knows about Portcullis
//! (this file is not counted as glue); `benches/overhead.rs` serves its
//! unprotected twin through this same function, so the two servers it
//! compares are configured alike.

use std::sync::Arc;

use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

/// `server` as an HTTP service: one clone of it per request. Every request
/// carries a bearer token and the guard checks its Origin, so rmcp's
/// loopback-only Host list is lifted.
pub(crate) fn streamable<S>(server: S) -> StreamableHttpService<S, NeverSessionManager>
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(Vec::<String>::new());
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
