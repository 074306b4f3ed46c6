//! Resources through the gateway: `resources/list`,
//! `resources/templates/list` and `resources/read` of every source,
//! forwarded under the core's mapping (MCP 2025-06-18 "Resources"; the MCP
//! Apps extension's `ui://` resources among them).
//!
//! * A listing asks every connected source at once (each within the call
//!   timeout) and merges their entries in source order, every `uri` and
//!   `uriTemplate` mapped to its gateway URI. A source that is down or does
//!   not answer in time is left out of that listing; the others are not
//!   held up. Pages are followed to the end on each source, and the merged
//!   listing is one page.
//! * A read decodes the gateway URI to exactly one `(source, uri)`, reads it
//!   there, and maps the contents' URIs; in text contents every whole
//!   occurrence of one of the source's own resource URIs becomes its gateway
//!   URI (so an HTML app's self-references keep working) and every other
//!   byte stays as the source sent it. `blob` contents are never touched.
//!   A read is never a tool call: it needs only the endpoint's read scope.

use std::sync::Arc;

use portcullis_core::error::ErrorCode;
use rmcp::ErrorData;
use rmcp::RoleClient;
use rmcp::model::{
    ListResourceTemplatesResult, ListResourcesResult, ReadResourceRequestParams, ReadResourceResult,
};
use rmcp::service::{Peer, ServiceError};
use serde_json::{Value, json};

use super::{Gateway, Source, Unavailable, bounds};

/// Every resource URI a source lists (its pages followed).
pub(crate) async fn all_uris(peer: &Peer<RoleClient>) -> Result<Vec<String>, ServiceError> {
    Ok(peer
        .list_all_resources()
        .await?
        .into_iter()
        .map(|r| r.uri.clone())
        .collect())
}

fn unavailable(e: &Unavailable) -> ErrorData {
    ErrorData::internal_error(
        e.message(),
        Some(json!({"code": ErrorCode::SourceUnavailable.as_str(), "source": e.0.as_str()})),
    )
}

/// Which listing.
#[derive(Clone, Copy)]
enum Listing {
    Resources,
    Templates,
}

impl Listing {
    const fn key(self) -> &'static str {
        match self {
            Self::Resources => "resources",
            Self::Templates => "resourceTemplates",
        }
    }
}

/// One source's listing as JSON (`{"resources": […]}` or
/// `{"resourceTemplates": […]}`), mapped; `None` if it is down or failed.
async fn list_one(gateway: Arc<Gateway>, index: usize, which: Listing) -> Option<Vec<Value>> {
    let source = &gateway.sources[index];
    let peer = source.peer().ok()?;
    let listed = match which {
        Listing::Resources => bounds::within(gateway.bounds.call, peer.list_all_resources())
            .await
            .ok()?
            .map(|r| {
                source.learn(r.iter().map(|x| x.uri.clone()));
                serde_json::to_value(r)
            }),
        Listing::Templates => {
            bounds::within(gateway.bounds.call, peer.list_all_resource_templates())
                .await
                .ok()?
                .map(serde_json::to_value)
        }
    };
    let items = match listed {
        Ok(Ok(items)) => items,
        Ok(Err(_)) => return None,
        Err(e) => {
            tracing::warn!(source = %source.spec.id, error = %e, "gateway: listing failed");
            return None;
        }
    };
    let mapped = gateway
        .map
        .rewrite_resources_list(&source.spec.id, json!({ which.key(): items }));
    match mapped {
        Value::Object(mut m) => match m.remove(which.key()) {
            Some(Value::Array(a)) => Some(a),
            _ => None,
        },
        _ => None,
    }
}

/// Every source's listing, merged in source order.
async fn list_all(gateway: &Arc<Gateway>, which: Listing) -> Value {
    let mut set = tokio::task::JoinSet::new();
    for index in 0..gateway.sources.len() {
        let g = Arc::clone(gateway);
        set.spawn(async move { (index, list_one(g, index, which).await) });
    }
    let mut parts: Vec<(usize, Vec<Value>)> = Vec::new();
    while let Some(done) = set.join_next().await {
        if let Ok((index, Some(items))) = done {
            parts.push((index, items));
        }
    }
    parts.sort_by_key(|(i, _)| *i);
    let items: Vec<Value> = parts.into_iter().flat_map(|(_, v)| v).collect();
    json!({ which.key(): items })
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| {
        ErrorData::internal_error(format!("a source's answer is not valid MCP: {e}"), None)
    })
}

/// `resources/list` through the gateway.
pub(crate) async fn list(gateway: &Arc<Gateway>) -> Result<ListResourcesResult, ErrorData> {
    typed(list_all(gateway, Listing::Resources).await)
}

/// `resources/templates/list` through the gateway.
pub(crate) async fn templates(
    gateway: &Arc<Gateway>,
) -> Result<ListResourceTemplatesResult, ErrorData> {
    typed(list_all(gateway, Listing::Templates).await)
}

/// `resources/read` of a gateway URI.
pub(crate) async fn read(gateway: &Gateway, uri: &str) -> Result<ReadResourceResult, ErrorData> {
    let (id, downstream) = gateway.map.decode(uri).map_err(|e| {
        ErrorData::resource_not_found(format!("not a resource of this gateway: {e}"), None)
    })?;
    let source: &Source = gateway
        .sources
        .iter()
        .find(|s| s.spec.id == id)
        .ok_or_else(|| ErrorData::resource_not_found(format!("no source named {id}"), None))?;
    let _slot = source
        .slot(&gateway.bounds)
        .await
        .map_err(|e| unavailable(&e))?;
    let peer = source.peer().map_err(|e| unavailable(&e))?;
    let read = bounds::within(
        gateway.bounds.call,
        peer.read_resource(ReadResourceRequestParams::new(downstream)),
    )
    .await;
    let result = match read {
        Ok(Ok(r)) => r,
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
    let v = serde_json::to_value(result)
        .map_err(|e| ErrorData::internal_error(format!("reading the answer: {e}"), None))?;
    let known = source.uris();
    let known: Vec<&str> = known.iter().map(String::as_str).collect();
    let mapped = gateway
        .map
        .rewrite_read_result(&source.spec.id, v, &known)
        .map_err(|e| {
            ErrorData::internal_error(
                format!(
                    "source {id}'s answer names a resource URI the gateway cannot pass on: {e}"
                ),
                None,
            )
        })?;
    typed(mapped)
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
