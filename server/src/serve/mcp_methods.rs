//! The MCP methods the server knows by name: the methods of rmcp's
//! `ClientRequest` that name one variant, each with its request type.
//!
//! The table is shared by the strict JSON check ([`super::jsonrpc`]), which
//! records a body's method as it walks it ([`known_method`]), and the
//! direct path of the MCP endpoint ([`super::mcp_direct`]), which then
//! decodes the body as that method's type only ([`decode_known`]). Its own
//! module, so that both depend on it and not on each other; it depends on
//! rmcp's model alone.

use rmcp::model::{
    CallToolRequest, CallToolRequestMethod, ClientRequest, CompleteRequest, CompleteRequestMethod,
    ConstString, GetPromptRequest, GetPromptRequestMethod, InitializeRequest,
    InitializeResultMethod, JsonRpcRequest, ListPromptsRequest, ListPromptsRequestMethod,
    ListResourceTemplatesRequest, ListResourceTemplatesRequestMethod, ListResourcesRequest,
    ListResourcesRequestMethod, ListToolsRequest, ListToolsRequestMethod, PingRequest,
    PingRequestMethod, ReadResourceRequest, ReadResourceRequestMethod,
};

/// `body` as a request of the known method `method`'s type.
fn decode_as<T: serde::de::DeserializeOwned>(
    body: &[u8],
    variant: fn(T) -> ClientRequest,
) -> Option<JsonRpcRequest<ClientRequest>> {
    let JsonRpcRequest {
        jsonrpc,
        id,
        request,
    } = serde_json::from_slice::<JsonRpcRequest<T>>(body).ok()?;
    Some(JsonRpcRequest {
        jsonrpc,
        id,
        request: variant(request),
    })
}

/// The methods of rmcp's `ClientRequest` that name one variant, and their
/// method types. The rest go to rmcp's decoding: `server/discover` (never
/// direct), custom methods, and the methods rmcp deprecates
/// (`logging/setLevel`, `resources/subscribe` and `unsubscribe`).
macro_rules! known_methods {
    ($($variant:ident: $method:ty),* $(,)?) => {
        /// `method` as a `&'static str` if it names one variant of rmcp's
        /// `ClientRequest` (the strict check records it, so the direct path
        /// decodes the body with [`decode_known`]).
        pub(crate) fn known_method(method: &str) -> Option<&'static str> {
            [$(<$method as ConstString>::VALUE),*]
                .into_iter()
                .find(|known| *known == method)
        }

        /// `body` as a request of the known method `method`'s type (the one
        /// member of rmcp's untagged union that can decode it), or `None`
        /// when it does not decode as that type or `method` is not known.
        pub(crate) fn decode_known(
            method: &str,
            body: &[u8],
        ) -> Option<JsonRpcRequest<ClientRequest>> {
            $(if method == <$method as ConstString>::VALUE {
                return decode_as::<$variant>(body, ClientRequest::$variant);
            })*
            None
        }
    };
}

known_methods! {
    PingRequest: PingRequestMethod,
    InitializeRequest: InitializeResultMethod,
    CompleteRequest: CompleteRequestMethod,
    GetPromptRequest: GetPromptRequestMethod,
    ListPromptsRequest: ListPromptsRequestMethod,
    ListResourcesRequest: ListResourcesRequestMethod,
    ListResourceTemplatesRequest: ListResourceTemplatesRequestMethod,
    ReadResourceRequest: ReadResourceRequestMethod,
    CallToolRequest: CallToolRequestMethod,
    ListToolsRequest: ListToolsRequestMethod,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_methods_are_the_single_variant_ones() {
        assert_eq!(known_method("tools/call"), Some("tools/call"));
        assert_eq!(known_method("initialize"), Some("initialize"));
        assert_eq!(known_method("server/discover"), None);
        assert_eq!(known_method("logging/setLevel"), None);
        assert_eq!(known_method("vendor/x"), None);
        let ping = br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
        assert!(matches!(
            decode_known("ping", ping).map(|r| r.request),
            Some(ClientRequest::PingRequest(_))
        ));
        // Another method's type, or a method not in the table: not decoded.
        assert!(decode_known("tools/call", ping).is_none());
        assert!(decode_known("vendor/x", ping).is_none());
    }
}
