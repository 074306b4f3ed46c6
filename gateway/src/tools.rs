//! Downstream tools on the authorized MCP endpoint, and their calls through
//! the execution ledger.
//!
//! **Listing.** Each source's tools, as it last listed them, with their
//! names, descriptions and input schemas unchanged and their UI metadata
//! (`_meta.ui.resourceUri`, `_meta["ui/resourceUri"]`,
//! `_meta["openai/outputTemplate"]`) mapped to gateway URIs. A source
//! offers only the names it owns: a name that a built-in tool or another
//! source already has is refused (see the parent module), so the owner of
//! a name never changes.
//!
//! **Effect.** From the tool's annotations (MCP 2025-06-18, "Tool
//! annotations": hints a client should not trust from an unknown server; here
//! the operator chose the source): `readOnlyHint: true` is a read (needs
//! `skills:read`, never asks); any other declared hint (`readOnlyHint:
//! false`, `destructiveHint`) is a write (needs `skills:write` and an
//! approval); no annotations is an unknown effect, which asks and can never
//! be auto-approved.
//!
//! **A call is a ledger request of one action.** The request's "code" (what
//! its `requestId` is bound to) is the canonical JSON
//! `{"source", "tool", "arguments"}`; its one action has the kind
//! `<source>/<tool>` ([`crate::source_of_kind`] reads it back), the effect above, and the arguments
//! (what the approval shows). The kind is what approvals and auto-approval
//! are keyed by, so they are per source and tool: the app's own skills have
//! no `/` in their names, so "always allow `create_note`" for the app never
//! covers a source's `create_note`, nor one source's tool another's; and
//! the approval card names the source. The
//! call is run by `portcullis-axum` on the host's server
//! ([`portcullis_axum::Portcullis::run_for`], the ledger's server
//! executor): where a tab program's step goes to the tab, a gateway run
//! calls the source once, the crate records the outcome and completes the request
//! with the (rewritten) downstream result. The ledger then answers every
//! later call with the same `requestId` from its stored result, so the
//! downstream call never runs twice: not on a repeat, not after an
//! approval, not after a timeout (a call whose answer did not arrive is
//! recorded as failed, `SOURCE_UNAVAILABLE`, because it may have run), not
//! on another instance of a fleet (the run is dispatched to this
//! instance's executor lease; a run whose instance died ends with
//! `unknownTail`). No tab is needed to run it; its approval is shown in
//! the user's Agents page and at the approval URL.
//!
//! The `requestId` travels in the call's `_meta["portcullis/requestId"]`
//! (a UUID), so the tool's arguments stay the downstream's own. A call
//! without one gets a fresh id, returned in the answer
//! (`requestId` of a pending answer, `_meta["portcullis/requestId"]` of a
//! result): call again with it after an approval.
//!
//! A source that is down answers `source_unavailable` before the ledger is
//! asked, so nothing is stored and the same `requestId` works once the
//! source is back (a `requestId` with a stored result included: the safe
//! side, it never runs again, at the cost of waiting for the source).
//!
//! **A source that asks for input first** (MCP 2026-07-28, multi
//! round-trip requests; the passing on is the `input` module's). By the
//! protocol, a source that answers a call with an `InputRequiredResult` has
//! not completed it: it needs something before it can, and the client's
//! retry is a new request. So the source's answer is **not an outcome**:
//! the gateway withdraws the action it was authorized to run
//! ([`portcullis_core::Engine::withdraw_action`]), which stores nothing and
//! leaves the ledger request undecided (parked to resume), and the agent
//! gets the source's requests with a `requestState` that wraps the source's
//! and names the request. The agent's retry (same request, the source's
//! state unwrapped, the agent's answers) is judged afresh by the ledger
//! under that `requestId`: a result already stored (the retry sent twice)
//! is answered from the store and never runs again; otherwise a new run
//! calls the source with its state and the answers. The approval the person
//! gave comes back with the withdrawn action, for that exact call, so one
//! call is approved once however many rounds its source takes; if it no
//! longer holds (the grant or the site's policy changed meanwhile), the
//! person is asked again, and the source's round starts over without its
//! state. Only the source's completed answer (or a failure that may have
//! run: a timeout, a broken connection) is recorded, so the downstream
//! call's effect still happens at most once, provided the source keeps the
//! protocol's promise that an `InputRequiredResult` comes before any effect.

use std::sync::Arc;
use std::time::Duration;

use portcullis_axum::{Act, Outcome};
use portcullis_core::bearer::Challenge;
use portcullis_core::engine::Principal;
use portcullis_core::error::ErrorCode;
use portcullis_core::gateway::{Gateway as UriMap, SourceId};
use portcullis_core::granted_apps::AppSelection;
use portcullis_core::ledger::resume::CallDigest;
use portcullis_core::ledger::{Action, BeginError, BusinessError, Completion, Effect, RequestId};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, ClientRequest, InputRequiredResult,
    JsonObject, ResultType, ServerResult, Tool,
};
use serde_json::Value;

use portcullis_axum::rmcp::REQUEST_ID_META;
use portcullis_axum::{HostStore, Portcullis};

use crate::bounds::{self, Bounds};
use crate::input::{self, Round};
use crate::kind::action_kind;
use crate::{Gateway, Source, Unavailable};

/// How much longer than the call timeout a forwarded call is waited for:
/// rmcp's own timeout (which also cancels the request at the source) comes
/// first.
const GRACE: Duration = Duration::from_secs(2);

/// A downstream descriptor with its UI metadata mapped; `None` if it does
/// not survive the round trip through JSON (then it is not offered).
pub(crate) fn rewrite_descriptor(map: &UriMap, source: &SourceId, tool: &Tool) -> Option<Tool> {
    let v = serde_json::to_value(tool).ok()?;
    serde_json::from_value(map.rewrite_tool(source, v)).ok()
}

/// Why a listed tool is not offered (logged).
#[derive(Debug)]
pub(crate) enum Unofferable {
    /// Its name makes no ledger action kind (the name given).
    Name(String),
    /// Its descriptor does not survive the mapping (the name given).
    Descriptor(String),
}

impl std::fmt::Display for Unofferable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(name) => {
                write!(
                    f,
                    "tool name {name:?} is not printable ASCII or is too long"
                )
            }
            Self::Descriptor(name) => write!(f, "tool {name:?}: its descriptor cannot be mapped"),
        }
    }
}

/// A listed tool as the gateway offers it (its descriptor mapped), or why
/// it cannot be: its descriptor does not survive the mapping, or its name
/// makes no ledger action kind (printable ASCII, at most
/// `MAX_KIND_LEN` bytes with the source's name).
pub(crate) fn offerable(map: &UriMap, source: &SourceId, tool: &Tool) -> Result<Tool, Unofferable> {
    let kind = action_kind(source.as_str(), &tool.name);
    if kind.len() > portcullis_core::ledger::MAX_KIND_LEN
        || !kind.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Unofferable::Name(tool.name.to_string()));
    }
    rewrite_descriptor(map, source, tool)
        .ok_or_else(|| Unofferable::Descriptor(tool.name.to_string()))
}

/// The scope a downstream tool's call needs: the demo's `skills:read` for
/// a read-only tool, `skills:write` for anything else.
fn scope_of(effect: Effect) -> &'static str {
    match effect {
        Effect::Read => portcullis_core::scope::SKILLS_READ,
        Effect::Write | Effect::Unknown => portcullis_core::scope::SKILLS_WRITE,
    }
}

/// The ledger effect of a downstream tool, from its annotations: a
/// read-only hint is a read; any other declared hint a write; none an
/// unknown effect (asks, never auto-approved).
#[must_use]
pub fn effect(tool: &Tool) -> Effect {
    match &tool.annotations {
        Some(a) if a.read_only_hint == Some(true) => Effect::Read,
        Some(a) if a.read_only_hint.is_some() || a.destructive_hint.is_some() => Effect::Write,
        _ => Effect::Unknown,
    }
}

impl Gateway {
    /// `tools/list`'s downstream part: the tools of every source `granted`
    /// reaches ([`Gateway::reach`]), in source order, each source's those
    /// it lists whose names it owns (a name is its first owner's for the
    /// life of the process), descriptors mapped.
    #[must_use]
    pub fn granted_tools(&self, granted: &AppSelection) -> Vec<Tool> {
        let mut out = Vec::new();
        for source in self
            .sources
            .iter()
            .filter(|s| granted.allows_source(&s.spec.id))
        {
            let listed = source.listed();
            out.extend(
                listed
                    .tools
                    .iter()
                    .filter(|t| self.names.owns(source.index, &t.name))
                    .cloned(),
            );
        }
        out
    }

    /// The source that owns the tool name `name`, if one does (listed now
    /// or not).
    #[must_use]
    pub fn source_of(&self, name: &str) -> Option<SourceId> {
        self.sources
            .get(self.names.owner(name)?)
            .map(|s| s.spec.id.clone())
    }

    /// The source and descriptor of the offered tool `name`, if a source
    /// owns that name and lists it now.
    #[must_use]
    pub fn find(&self, name: &str) -> Option<(Arc<Source>, Tool)> {
        let source = self.sources.get(self.names.owner(name)?)?;
        let tool = source
            .listed()
            .tools
            .iter()
            .find(|t| t.name == name)
            .cloned()?;
        Some((Arc::clone(source), tool))
    }
}

/// A tool answer in the core's JSON (the ledger's answer, or a refusal
/// before it), and the challenge when the HTTP response must be
/// `403 insufficient_scope`.
struct Answer {
    body: Value,
    challenge: Option<Challenge>,
}

impl Answer {
    fn ok(body: Value) -> Self {
        Self {
            body,
            challenge: None,
        }
    }

    /// Whether this is a protocol failure (`"ok": false`).
    fn is_error(&self) -> bool {
        self.body["ok"] == Value::Bool(false)
    }
}

/// A protocol failure with `code`, in the core's shape
/// ([`portcullis_core::ledger::failure_json`]).
fn failure(code: ErrorCode, message: &str, id: Option<RequestId>) -> Answer {
    Answer::ok(portcullis_core::ledger::failure_json(code, message, id))
}

/// What a gateway tool call answers: the MCP result, and the challenge when
/// the HTTP response must be `403 insufficient_scope`.
#[derive(Debug)]
#[non_exhaustive]
pub struct Reply {
    /// The tool result: the downstream's own (mapped, with the request id
    /// in its `_meta`, [`REQUEST_ID_META`]) when the call completed, the
    /// ledger's JSON otherwise (pending, refused, a failure recorded).
    pub result: CallToolResult,
    /// Set for a missing scope.
    pub challenge: Option<Challenge>,
    /// The source asked for input: what the agent gets instead of
    /// `result` (its requests labelled, its state wrapped in ours).
    pub input: Option<InputRequiredResult>,
    /// The call waits on a person's approval, asked now: the host tells
    /// the person's pages (the reference server wakes their Agents page).
    pub approval_asked: bool,
}

impl Reply {
    /// A minted agent token has no grant, so it cannot run a call.
    #[must_use]
    pub fn refused_agent_token() -> Self {
        let e = BeginError::AgentToken;
        Self::ledger(Answer::ok(e.to_json(None)))
    }

    fn ledger(answer: Answer) -> Self {
        let failed = answer.is_error() || answer.body.pointer("/result/error").is_some();
        let result = if failed {
            CallToolResult::structured_error(answer.body)
        } else {
            CallToolResult::structured(answer.body)
        };
        Self {
            result,
            challenge: answer.challenge,
            input: None,
            approval_asked: false,
        }
    }

    /// The ledger's answer on request `id`: the downstream's own result
    /// when the call completed, the ledger's JSON otherwise (a refusal, a
    /// failure recorded for the call), with the scope challenge of a
    /// refusal for a missing scope.
    fn answered(answer: &Value, id: RequestId, challenge: Option<Challenge>) -> Self {
        let mut json = answer.clone();
        let downstream = json
            .get_mut("result")
            .filter(|r| r.get("content").is_some())
            .map(Value::take)
            .and_then(|r| serde_json::from_value::<CallToolResult>(r).ok());
        match downstream {
            Some(mut result) => {
                let meta = result.meta.get_or_insert_with(Default::default);
                meta.0
                    .insert(REQUEST_ID_META.into(), Value::String(id.to_string()));
                Self {
                    result,
                    challenge: None,
                    input: None,
                    approval_asked: false,
                }
            }
            None => Self::ledger(Answer {
                body: answer.clone(),
                challenge,
            }),
        }
    }
}

/// The digest of a call of `tool` of `source` with `arguments`: what a
/// wrapped source state is bound to ([`Gateway::unwrap_state`]).
#[must_use]
pub fn digest(source: &SourceId, tool: &str, arguments: &JsonObject) -> CallDigest {
    let bytes = serde_json::to_vec(arguments).unwrap_or_default();
    input::digest(source, "tools/call", tool, &bytes)
}

/// One call of a downstream tool, as the host hands it to
/// [`Gateway::call`].
#[derive(Debug)]
pub struct ToolCall {
    /// Who calls: the agent's grant (a minted agent token has none and
    /// cannot call, [`Reply::refused_agent_token`]).
    pub principal: Principal,
    /// The tool's source and descriptor ([`Gateway::find`]).
    pub tool: (Arc<Source>, Tool),
    /// The ledger request it runs under: the call's
    /// `_meta["portcullis/requestId"]`, its sealed state's, or a fresh one.
    pub request_id: RequestId,
    /// The tool's arguments, the downstream's own.
    pub arguments: JsonObject,
    /// What the agent can take of a source's input round, and on a retry
    /// the source's state and the agent's answers.
    pub round: Round,
    /// How long to wait for a person's decision before answering pending.
    pub wait: Duration,
}

impl Gateway {
    /// `tools/call` of a downstream tool: run by `portcullis-axum` on the
    /// host's server ([`portcullis_axum::Portcullis::run_for`]) under the
    /// call's ledger request, approvals and `requestId` idempotency
    /// included (see the crate docs). A source the caller's grant does not
    /// reach answers as a tool that does not exist.
    pub async fn call<S: HostStore>(&self, portcullis: &Portcullis<S>, call: ToolCall) -> Reply {
        let ToolCall {
            principal,
            tool: (source, tool),
            request_id: rid,
            arguments,
            round,
            wait,
        } = call;
        // Only a source the grant reaches, on every path here (an agent's
        // call, checked before with the same answer as an unknown tool, or
        // an App View's): refused before the ledger, as a tool that does
        // not exist.
        match self.reach(portcullis, Some(&principal)).await {
            Ok(granted) if granted.allows_source(&source.spec.id) => {}
            Ok(_) => {
                return Reply::ledger(failure(
                    ErrorCode::ActionNotFound,
                    &format!("no tool named {:?}", tool.name),
                    None,
                ));
            }
            Err(_) => {
                return Reply::ledger(failure(
                    ErrorCode::ServerError,
                    "temporary server error",
                    None,
                ));
            }
        }
        let effect = effect(&tool);
        let action = match serde_json::to_vec(&arguments)
            .map_err(|e| e.to_string())
            .and_then(|a| {
                let kind = action_kind(source.spec.id.as_str(), &tool.name);
                Action::new(&kind, effect, scope_of(effect), &a).map_err(|e| e.to_string())
            }) {
            Ok(a) => a,
            Err(e) => return Reply::ledger(failure(ErrorCode::InvalidParams, &e, Some(rid))),
        };
        // A source that is down is refused before the ledger stores anything.
        if let Err(e) = source.peer() {
            return Reply::ledger(failure(
                ErrorCode::SourceUnavailable,
                &e.message(),
                Some(rid),
            ));
        }
        let run = Run {
            map: self.map.clone(),
            bounds: self.bounds,
            digest: digest(&source.spec.id, &tool.name, &arguments),
            source,
            request: CallToolRequestParams::new(tool.name).with_arguments(arguments),
            round,
            asked: std::sync::Mutex::default(),
        };
        let run = Arc::new(run);
        let performer = Arc::clone(&run);
        let ran = portcullis
            .run_for(&principal, rid, action, wait, move || async move {
                performer.perform().await
            })
            .await;
        match ran.outcome() {
            Outcome::Withdrawn(_) => {
                let asked = run
                    .asked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                match asked {
                    Some(asked) => self.asked(portcullis, &run, &principal, rid, asked),
                    None => Reply::ledger(failure(
                        ErrorCode::ServerError,
                        "temporary server error",
                        Some(rid),
                    )),
                }
            }
            Outcome::Pending(p) => {
                let mut reply = Reply::ledger(Answer::ok(ran.answer().clone()));
                reply.approval_asked = p.approval.is_some();
                reply
            }
            _ => Reply::answered(ran.answer(), rid, ran.challenge().cloned()),
        }
    }

    /// The source asked for input before running the call: the action was
    /// withdrawn (no outcome; the request parked, the approval kept) and
    /// the agent gets the source's requests with its state wrapped in
    /// ours, or, when it cannot take them, a failure that stores nothing.
    fn asked<S: HostStore>(
        &self,
        portcullis: &Portcullis<S>,
        run: &Run,
        principal: &Principal,
        id: RequestId,
        asked: InputRequiredResult,
    ) -> Reply {
        let source = &run.source.spec.id;
        let refused = |e: input::Refused| {
            let e = e.to_string();
            tracing::warn!(source = %source, error = e, "gateway: a source's input request is not passed on");
            Reply::ledger(failure(ErrorCode::ActionUnavailable, &e, Some(id)))
        };
        let (requests, state) = match input::for_agent(source, asked, &run.round, &self.host_origin)
        {
            Ok(r) => r,
            Err(e) => return refused(e),
        };
        let state = match input::wrap(portcullis, &self.stash, principal, &run.digest, id, state) {
            Ok(s) => s,
            Err(e) => return refused(e),
        };
        Reply {
            result: CallToolResult::success(Vec::new()),
            challenge: None,
            input: Some(InputRequiredResult::new(requests, Some(state))),
            approval_asked: false,
        }
    }
}

/// One call of a source's tool, performed by the host's server when the
/// ledger lets it run.
struct Run {
    /// The gateway's URI mapping.
    map: UriMap,
    /// The gateway's bounds.
    bounds: Bounds,
    /// The call's digest (a wrapped state's binding).
    digest: CallDigest,
    source: Arc<Source>,
    request: CallToolRequestParams,
    round: Round,
    /// The source asked for input instead of running the call.
    asked: std::sync::Mutex<Option<InputRequiredResult>>,
}

/// What a call to the source came to.
enum Performed {
    /// It ran (or may have): its outcome.
    Done(Completion),
    /// The source needs input first: nothing ran.
    Asked(InputRequiredResult),
}

impl Run {
    /// Calls the source: its (rewritten) result or a failure that may have
    /// run, recorded by the ledger; or, when the source asks for input
    /// first, nothing ran and the action is withdrawn.
    async fn perform(&self) -> Act<Value> {
        match self.call().await {
            Performed::Done(Completion::Value(v)) => Act::Did(Ok(v)),
            Performed::Done(Completion::Error(e)) => Act::Did(Err(e)),
            Performed::Asked(asked) => {
                *self
                    .asked
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(asked);
                Act::Withdrew
            }
        }
    }

    /// Calls the source once, within the bounds (with the source's state
    /// and the agent's answers on a retry); the result rewritten.
    async fn call(&self) -> Performed {
        let bounds = self.bounds;
        let unavailable = |e: Unavailable| {
            Performed::Done(Completion::Error(BusinessError::new(
                "SOURCE_UNAVAILABLE",
                e.message(),
            )))
        };
        let _slot = match self.source.slot(&bounds).await {
            Ok(s) => s,
            Err(e) => return unavailable(e),
        };
        let peer = match self.source.peer() {
            Ok(p) => p,
            Err(e) => return unavailable(e),
        };
        let mut request = self.request.clone();
        request.request_state.clone_from(&self.round.state);
        request.input_responses.clone_from(&self.round.responses);
        let options = input::options(&peer, &self.round, bounds.call);
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(request));
        let called = bounds::within(bounds.call.saturating_add(GRACE), async {
            peer.send_request_with_option(request, options)
                .await?
                .await_response()
                .await
        })
        .await;
        let completion = match called {
            Ok(Ok(ServerResult::CallToolResult(result))) => self.mapped(result),
            Ok(Ok(ServerResult::InputRequiredResult(asked))) => return Performed::Asked(asked),
            Ok(Ok(_)) => Completion::Error(BusinessError::new(
                "SOURCE_ERROR",
                format!(
                    "source {} answered the call with something other than a tool result; \
                     it may have run and is not repeated",
                    self.source.spec.id
                ),
            )),
            Ok(Err(rmcp::ServiceError::Timeout { .. })) | Err(bounds::Exceeded::Timeout) => {
                self.source.failed();
                Completion::Error(BusinessError::new(
                    "SOURCE_TIMEOUT",
                    format!(
                        "source {} did not answer within {} s; the call may have run and is not repeated",
                        self.source.spec.id,
                        bounds.call.as_secs()
                    ),
                ))
            }
            Ok(Err(e)) => {
                tracing::warn!(source = %self.source.spec.id, error = %e, "gateway: tool call failed");
                if bounds::too_large(&e) {
                    Completion::Error(BusinessError::new(
                        "RESPONSE_TOO_LARGE",
                        format!(
                            "source {} answered more than {} bytes",
                            self.source.spec.id, bounds.max_response
                        ),
                    ))
                } else if matches!(e, rmcp::ServiceError::McpError(_)) {
                    Completion::Error(BusinessError::new(
                        "SOURCE_ERROR",
                        format!("the source refused the call: {e}"),
                    ))
                } else {
                    // rmcp ends the whole transport on some failures (an SSE
                    // event over the size cap among them): reconnect.
                    self.source.failed();
                    Completion::Error(BusinessError::new(
                        "SOURCE_UNAVAILABLE",
                        format!(
                            "the connection to source {} failed during the call ({e}; an answer \
                             over {} bytes also ends it); the call may have run and is not \
                             repeated; the gateway is reconnecting",
                            self.source.spec.id, bounds.max_response
                        ),
                    ))
                }
            }
        };
        Performed::Done(completion)
    }

    /// The source's result as the host's server answers it: a result of the
    /// client's revision (`resultType` set, which rmcp leaves out for a
    /// client before 2026-07-28), its URIs mapped. One that names a URI the
    /// gateway cannot map is refused: `UNMAPPABLE_URI`.
    fn mapped(&self, mut result: CallToolResult) -> Completion {
        result.result_type = Some(ResultType::COMPLETE);
        let source = &self.source.spec.id;
        let mapped = serde_json::to_value(&result)
            .map_err(|_| {
                BusinessError::new("BAD_RESULT", "the source's result could not be read")
            })
            .and_then(|v| {
                self.map
                    .rewrite_tool_result(source, v)
                    .map_err(|e| {
                        tracing::warn!(source = %source, error = %e, "gateway: a result names an unmappable URI");
                        BusinessError::new(
                            "UNMAPPABLE_URI",
                            format!(
                                "source {source}'s result names a resource URI the gateway cannot \
                                 pass on ({e}); the call ran, and is not repeated"
                            ),
                        )
                    })
            });
        match mapped {
            Ok(v) => Completion::Value(v),
            Err(e) => Completion::Error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;
    use serde_json::json;

    fn tool(meta: Value, annotations: Option<ToolAnnotations>) -> Tool {
        let mut t = Tool::new("show_issue", "Shows an issue", Arc::new(JsonObject::new()));
        t.meta = serde_json::from_value(meta).unwrap();
        t.annotations = annotations;
        t
    }

    #[test]
    fn descriptors_keep_names_and_map_both_conventions() {
        let map = UriMap::default();
        let gh = SourceId::new("github").unwrap();
        let t = tool(
            json!({
                "ui": {"resourceUri": "ui://app/issue.html", "visibility": ["model"]},
                "ui/resourceUri": "ui://app/issue.html",
                "openai/outputTemplate": "ui://app/issue.html",
                "other": "ui://app/issue.html",
            }),
            None,
        );
        let out = rewrite_descriptor(&map, &gh, &t).unwrap();
        assert_eq!(out.name, "show_issue");
        assert_eq!(out.description.as_deref(), Some("Shows an issue"));
        let meta = serde_json::to_value(out.meta.unwrap()).unwrap();
        let gw = "ui://portcullis/github/app/issue.html";
        assert_eq!(meta["ui"]["resourceUri"], gw);
        assert_eq!(meta["ui"]["visibility"], json!(["model"]));
        assert_eq!(meta["ui/resourceUri"], gw);
        assert_eq!(meta["openai/outputTemplate"], gw);
        assert_eq!(
            meta["other"], "ui://app/issue.html",
            "only the UI keys are mapped"
        );
    }

    #[test]
    fn effects_follow_annotations() {
        let hints = |ro: Option<bool>, de: Option<bool>| {
            let mut a = ToolAnnotations::default();
            a.read_only_hint = ro;
            a.destructive_hint = de;
            Some(a)
        };
        assert_eq!(
            effect(&tool(json!(null), hints(Some(true), None))),
            Effect::Read
        );
        assert_eq!(
            effect(&tool(json!(null), hints(Some(false), None))),
            Effect::Write
        );
        assert_eq!(
            effect(&tool(json!(null), hints(None, Some(false)))),
            Effect::Write
        );
        assert_eq!(
            effect(&tool(json!(null), hints(None, Some(true)))),
            Effect::Write
        );
        assert_eq!(
            effect(&tool(json!(null), hints(None, None))),
            Effect::Unknown
        );
        assert_eq!(effect(&tool(json!(null), None)), Effect::Unknown);
    }

    #[test]
    fn results_are_mapped_and_round_trip() {
        let map = UriMap::default();
        let gh = SourceId::new("github").unwrap();
        let result = json!({
            "content": [
                {"type": "text", "text": "see ui://app/issue.html"},
                {"type": "resource_link", "uri": "ui://app/issue.html", "name": "issue"},
                {"type": "resource", "resource": {"uri": "file:///a.md", "text": "a"}},
            ],
            "structuredContent": {"n": 1},
            "_meta": {"ui/resourceUri": "ui://app/issue.html", "openai/outputTemplate": "ui://app/issue.html"},
        });
        let typed: CallToolResult = serde_json::from_value(result).unwrap();
        let out = map
            .rewrite_tool_result(&gh, serde_json::to_value(&typed).unwrap())
            .unwrap();
        let back: CallToolResult = serde_json::from_value(out.clone()).unwrap();
        let back = serde_json::to_value(back).unwrap();
        assert_eq!(
            back, out,
            "the rewritten result is still a valid tool result"
        );
        let gw = "ui://portcullis/github/app/issue.html";
        let mapped = [&out["content"][1]["uri"], &out["_meta"]["ui/resourceUri"]];
        assert_eq!(mapped, [gw, gw]);
        assert_eq!(out["structuredContent"], json!({"n": 1}));
    }
}
