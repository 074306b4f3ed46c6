//! Resources through the gateway: `resources/list`,
//! `resources/templates/list` and `resources/read` of every source, under
//! the core's mapping (MCP "Resources"; the MCP Apps extension's `ui://`
//! resources among them), each answered in the client's protocol revision.
//!
//! * The listings are served from the gateway's cache (the supervisor
//!   reads each source's lists, within their caps): the entries of every
//!   source that is connected now, in source order, every `uri` and
//!   `uriTemplate` already mapped, as one page. A source that is down is
//!   left out; nothing waits on a source.
//! * A read decodes the gateway URI to exactly one `(source, uri)`, reads it
//!   there, and maps the contents' URIs; in text contents every whole
//!   occurrence of one of the source's own resource URIs becomes its gateway
//!   URI (so an HTML app's self-references keep working) and every other
//!   byte stays as the source sent it. `blob` contents are never touched.
//!   The rewriting is linear in the text, and a large one (over
//!   [`OFF_RUNTIME`] bytes of text) runs on a blocking thread, never on one
//!   of the runtime's workers. A content URI that cannot be mapped fails the
//!   read. A read is never a tool call: it needs only the endpoint's read
//!   scope.
//!
//! **A source that asks for input** to answer a read (MCP 2026-07-28, multi
//! round-trip requests) gets its requests passed to the agent, labelled as
//! its own, and its `requestState` wrapped in one sealed for the agent's
//! grant lineage and this exact read of this source's resource
//! (the `input` module); the agent's retry is unwrapped and forwarded with its
//! answers. A read is not a ledger request, so the wrapped state names none
//! (the nil request id). An agent token has no grant lineage to seal for:
//! its reads never carry a round.
//!
//! **The revision's shape.** Results built here go through rmcp's typed
//! model as its constructors build them: `resultType: "complete"`, which
//! protocol 2026-07-28 requires of every result (schema, `Result`) and which
//! rmcp removes for a client of an earlier revision, and no caching hints of
//! their own, so rmcp adds the 2026-07-28 defaults (`ttlMs: 0`,
//! `cacheScope: "private"`: the gateway's answers are behind each user's
//! authorization). A source's own `resultType` and hints are not passed on.

use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::granted_apps::AppSelection;
use portcullis_core::ledger::RequestId;
use portcullis_core::ledger::resume::is_source_state;
use rmcp::ErrorData;
use rmcp::model::{
    ClientRequest, InputRequiredResult, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ResourceContents, ResultType, ServerResult,
};
use rmcp::service::ServiceError;
use serde_json::json;

use portcullis_axum::{HostStore, Portcullis};

use crate::bounds;
use crate::input::{self, Round};
use crate::{Gateway, Source, Unavailable};

/// How much longer than the call timeout a read is waited for (rmcp's own
/// timeout, which cancels the request at the source, comes first).
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Text contents larger than this (bytes, all contents of one read) are
/// rewritten on a blocking thread.
const OFF_RUNTIME: usize = 64 * 1024;

fn unavailable(e: &Unavailable) -> ErrorData {
    ErrorData::internal_error(
        e.message(),
        Some(json!({"code": ErrorCode::SourceUnavailable.as_str(), "source": e.0.as_str()})),
    )
}

impl Gateway {
    /// `resources/list` through the gateway, of the sources `granted` reaches
    /// ([`Gateway::reach`]), from the cache: the sources connected now, in
    /// source order, URIs mapped, one page.
    #[must_use]
    pub fn resources(&self, granted: &AppSelection) -> ListResourcesResult {
        let mut items = Vec::new();
        for source in self
            .sources
            .iter()
            .filter(|s| s.is_up() && granted.allows_source(&s.spec.id))
        {
            items.extend(source.listed().resources.iter().cloned());
        }
        ListResourcesResult::with_all_items(items)
    }

    /// `resources/templates/list` through the gateway, of the sources
    /// `granted` reaches ([`Gateway::reach`]), from the cache as
    /// [`Gateway::resources`].
    #[must_use]
    pub fn templates(&self, granted: &AppSelection) -> ListResourceTemplatesResult {
        let mut items = Vec::new();
        for source in self
            .sources
            .iter()
            .filter(|s| s.is_up() && granted.allows_source(&s.spec.id))
        {
            items.extend(source.listed().templates.iter().cloned());
        }
        ListResourceTemplatesResult::with_all_items(items)
    }

    /// `resources/read` of a gateway URI (`request.uri`) by `principal` (`None`
    /// for an agent token), with what the agent can take of the source's
    /// input round (`round`); a retry's wrapped state and answers are in
    /// `request`. The source's contents with their URIs mapped (see the
    /// module docs), or its request for input passed on.
    pub async fn read<S: HostStore>(
        &self,
        portcullis: &Portcullis<S>,
        principal: Option<&Principal>,
        request: &ReadResourceRequestParams,
        mut round: Round,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let gateway: &Gateway = self;
        let uri = request.uri.as_str();
        let (id, downstream) = gateway.map.decode(uri).map_err(|e| {
            ErrorData::resource_not_found(
                format!("not a resource of this gateway: {e}"),
                Some(json!({"uri": uri})),
            )
        })?;
        // A source the caller's grant does not reach answers as one that does
        // not exist.
        let granted = self.reach(portcullis, principal).await?;
        let source: &Source = gateway
            .sources
            .iter()
            .find(|s| s.spec.id == id && granted.allows_source(&s.spec.id))
            .ok_or_else(|| {
                ErrorData::resource_not_found(
                    format!("no source named {id}"),
                    Some(json!({"uri": uri})),
                )
            })?;
        let digest = input::digest(&id, "resources/read", &downstream, b"");
        if principal.is_none() {
            round.elicitation = None;
        }
        if let Some(text) = request.request_state.as_deref() {
            let opened = principal
                .filter(|_| is_source_state(text))
                .ok_or(input::Unwrap::State(
                    portcullis_core::ledger::resume::StateError::Malformed,
                ))
                .and_then(|p| input::unwrap(portcullis, &self.stash, p, &digest, text));
            let (_, state) = opened.map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
            round.state = state;
            round.responses.clone_from(&request.input_responses);
        }
        let _slot = source
            .slot(&gateway.bounds)
            .await
            .map_err(|e| unavailable(&e))?;
        let peer = source.peer().map_err(|e| unavailable(&e))?;
        let mut params = ReadResourceRequestParams::new(downstream.clone());
        params.request_state.clone_from(&round.state);
        params.input_responses.clone_from(&round.responses);
        let options = input::options(&peer, &round, gateway.bounds.call);
        let sent = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(params));
        let read = bounds::within(gateway.bounds.call.saturating_add(GRACE), async {
            peer.send_request_with_option(sent, options)
                .await?
                .await_response()
                .await
        })
        .await;
        let result = match read {
            Ok(Ok(ServerResult::ReadResourceResult(r))) => r,
            Ok(Ok(ServerResult::InputRequiredResult(asked))) => {
                return self
                    .asked_for_input(portcullis, principal, &id, &digest, asked, &round)
                    .map(Into::into);
            }
            Ok(Ok(_)) => {
                return Err(ErrorData::internal_error(
                    format!("source {id} answered the read with something other than its contents"),
                    None,
                ));
            }
            Ok(Err(ServiceError::McpError(e))) => return Err(e),
            Ok(Err(e)) => {
                tracing::warn!(source = %id, error = %e, "gateway: read failed");
                source.failed();
                return Err(unavailable(&Unavailable(id)));
            }
            Err(bounds::Exceeded::Timeout) => {
                source.failed();
                return Err(unavailable(&Unavailable(id)));
            }
        };
        let text: usize = result
            .contents
            .iter()
            .map(|c| match c {
                ResourceContents::TextResourceContents { text, .. } => text.len(),
                _ => 0,
            })
            .sum();
        let (map, listed) = (gateway.map.clone(), source.listed());
        let mapped = move || mapped(&map, &id, &listed.uris, result);
        let result = if text > OFF_RUNTIME {
            tokio::task::spawn_blocking(mapped)
                .await
                .map_err(|_| ErrorData::internal_error("mapping the answer failed", None))?
        } else {
            mapped()
        };
        result.map(Into::into)
    }

    /// A source's request for input on a read, as the agent gets it (see the
    /// module docs), or why it cannot.
    fn asked_for_input<S: HostStore>(
        &self,
        portcullis: &Portcullis<S>,
        principal: Option<&Principal>,
        source: &portcullis_core::gateway::SourceId,
        digest: &portcullis_core::ledger::resume::CallDigest,
        asked: InputRequiredResult,
        round: &Round,
    ) -> Result<InputRequiredResult, ErrorData> {
        let refused = |e: input::Refused| {
            let e = e.to_string();
            tracing::warn!(source = %source, error = %e, "gateway: a source's input request is not passed on");
            ErrorData::internal_error(e, Some(json!({"source": source.as_str()})))
        };
        let principal =
            principal.ok_or_else(|| refused(input::Refused::AgentToken(source.clone())))?;
        let (requests, state) =
            input::for_agent(source, asked, round, &self.host_origin).map_err(refused)?;
        let nil = RequestId::from_bytes([0; 16]);
        let state =
            input::wrap(portcullis, &self.stash, principal, digest, nil, state).map_err(refused)?;
        Ok(InputRequiredResult::new(requests, Some(state)))
    }
}

/// A source's read result as the gateway answers it: mapped (see the
/// module docs) and shaped as this server's own result.
fn mapped(
    map: &portcullis_core::gateway::Gateway,
    id: &portcullis_core::gateway::SourceId,
    known: &[String],
    result: ReadResourceResult,
) -> Result<ReadResourceResult, ErrorData> {
    let v = serde_json::to_value(result)
        .map_err(|e| ErrorData::internal_error(format!("reading the answer: {e}"), None))?;
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let v = map.rewrite_read_result(id, v, &known).map_err(|e| {
        ErrorData::internal_error(
            format!("source {id}'s answer names a resource URI the gateway cannot pass on: {e}"),
            None,
        )
    })?;
    let mut typed: ReadResourceResult = serde_json::from_value(v).map_err(|e| {
        ErrorData::internal_error(format!("a source's answer is not valid MCP: {e}"), None)
    })?;
    typed.result_type = Some(ResultType::COMPLETE);
    typed.ttl_ms = None;
    typed.cache_scope = None;
    Ok(typed)
}

#[cfg(test)]
mod tests {
    use portcullis_core::gateway::{Gateway as UriMap, SourceId};
    use serde_json::json;

    /// What [`super::read`] does to an answer: the HTML's self-references
    /// are mapped, everything else is byte-identical, blobs untouched.
    #[test]
    fn read_results_map_self_references_only() {
        let map = UriMap::default();
        let s = SourceId::new("apps").unwrap();
        let html = "<!doctype html><a href=\"ui://app/widget.html\">me</a> ui://app/widget.html2 \
                    <img src='ui://app/other.png'> x=ui://app/widget.html";
        let answer = json!({"contents": [
            {"uri": "ui://app/widget.html", "mimeType": "text/html;profile=mcp-app", "text": html,
             "_meta": {"ui": {"prefersBorder": true}}},
            {"uri": "ui://app/logo.png", "blob": "dWk6Ly9hcHAvd2lkZ2V0Lmh0bWw="},
        ]});
        let typed: rmcp::model::ReadResourceResult = serde_json::from_value(answer).unwrap();
        let out = map
            .rewrite_read_result(
                &s,
                serde_json::to_value(typed).unwrap(),
                &["ui://app/widget.html"],
            )
            .unwrap();
        let text = out["contents"][0]["text"].as_str().unwrap();
        assert_eq!(
            text,
            html.replace(
                "\"ui://app/widget.html\"",
                "\"ui://portcullis/apps/app/widget.html\""
            )
            .replace(
                "x=ui://app/widget.html",
                "x=ui://portcullis/apps/app/widget.html"
            )
        );
        assert!(
            text.contains(" ui://app/widget.html2 "),
            "not inside a longer URI"
        );
        assert!(
            text.contains("'ui://app/other.png'"),
            "unknown URIs are left alone"
        );
        assert_eq!(
            out["contents"][0]["uri"],
            "ui://portcullis/apps/app/widget.html"
        );
        assert_eq!(out["contents"][0]["mimeType"], "text/html;profile=mcp-app");
        assert_eq!(out["contents"][0]["_meta"]["ui"]["prefersBorder"], true);
        assert_eq!(out["contents"][1]["blob"], "dWk6Ly9hcHAvd2lkZ2V0Lmh0bWw=");
        let _: rmcp::model::ReadResourceResult = serde_json::from_value(out).unwrap();
    }
}
