//! Glue for rmcp servers (feature `rmcp`): a tool takes the verified
//! [`Agent`] and its [`Call`] as arguments, runs its action through
//! [`Call::run`] and returns the answer in the revision the client
//! negotiated.
//!
//! ```ignore
//! #[tool(description = "Add a note (asks you first)")]
//! async fn add_note(&self, agent: Agent, call: Call, Parameters(note): Parameters<NewNote>)
//!     -> Result<CallToolResponse, ErrorData> {
//!     let action = portcullis_axum::rmcp::action(Effect::Write, "add_note", "notes:write", &note)?;
//!     let notes = self.notes.clone();
//!     call.run(&self.portcullis, &agent, action, move || async move { Ok(notes.add(note)) }).await
//! }
//! ```

use std::future::Future;
use std::time::Duration;

use portcullis_core::ledger::resume::{CallDigest, ResumeState};
use portcullis_core::ledger::{Action, BusinessError, Effect, RequestId};
use rmcp::ErrorData;
use rmcp::RoleServer;
use rmcp::handler::server::common::{AsRequestContext, FromContextPart};
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, ErrorCode, InputRequiredResult, InputResponses,
    JsonObject, ProtocolVersion,
};
use rmcp::service::RequestContext;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::json;

use crate::guard::{Agent, ScopeRequired};
use crate::run::{Outcome, Ran};
use crate::{HostStore, Portcullis};

/// The `_meta` key of a call's request id (a UUID): the same id on a
/// retry never runs the action twice.
pub const REQUEST_ID_META: &str = "portcullis/requestId";

impl<C: AsRequestContext> FromContextPart<C> for Agent {
    fn from_context_part(context: &mut C) -> Result<Self, ErrorData> {
        context
            .as_request_context()
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Agent>())
            .cloned()
            .ok_or_else(|| {
                ErrorData::internal_error(
                    "no verified agent: serve this tool behind Portcullis::protect",
                    None,
                )
            })
    }
}

/// How long a client's retry of a multi round-trip request waits for the
/// person's decision (or a run in progress) before it is answered again:
/// the person sees one prompt per approval, not one per retry.
pub const RETRY_WAIT: Duration = Duration::from_secs(25);

/// The key of the approval in an `InputRequiredResult`'s `inputRequests`.
pub const APPROVAL_INPUT: &str = "portcullis_approval";

/// One tool call as the ledger sees it: its request id, and how a call
/// that must wait for a person is answered in the protocol revision the
/// client negotiated. A tool takes it as an argument, before or after its
/// `Parameters`: a retry's sealed state is bound to the call's exact
/// arguments either way (the raw arguments when `Call` comes first; when
/// `Parameters` took them first, the arguments of the action [`Call::run`]
/// runs, which are what the person approves):
///
/// * **2026-07-28** (multi round-trip requests): an `InputRequiredResult`
///   whose one URL-mode `elicitation/create` (when the client declared URL
///   elicitation) points at the approval page, and a sealed `requestState`
///   ([`portcullis_core::ledger::resume`]) naming the ledger request. The
///   client's own retry lands on the same request: it waits up to
///   [`RETRY_WAIT`] for the decision, then answers the result, the
///   refusal, or (still undecided) another state without a second prompt.
///   A tampered, foreign or stale state is refused as invalid params.
/// * **2025-11-25** with URL elicitation (declared in the client's
///   `initialize`, which the guard notes for a stateless endpoint, see
///   [`Agent::declared_url_elicitation`]): the error
///   `URLElicitationRequiredError` (-32042) with the same URL in
///   `data.elicitations` and the `requestId` to call again with (in
///   `_meta["portcullis/requestId"]`).
/// * **Any other client**: the ledger's JSON answer (`approval_pending`,
///   with the `requestId` and the approval URL), after waiting up to the
///   builder's approval wait.
///
/// The request id is the sealed state's, else `_meta["portcullis/requestId"]`
/// (a UUID), else a fresh one (every answer names it).
///
/// **A call without a request id joins an unfinished identical one.** Most
/// clients (every one that gets the JSON form, and any whose model cannot
/// set `_meta`) cannot send an id back, so their model simply calls the
/// tool again. Such a call — no sealed state, no `_meta` id — made while an
/// identical call (the same grant lineage, tool action and exact
/// arguments) is unfinished is answered as that request: the same approval
/// card, not another; the result once it is approved; the action run once
/// ([`Portcullis::run_joining`]). Once that request has ended (done,
/// failed, denied, cancelled, expired), an identical call is a new write
/// and asks again. A call that names its request id never joins anything.
#[derive(Debug)]
pub struct Call {
    request_id: RequestId,
    /// The client named no request id (no sealed state, no `_meta` id):
    /// the call joins an unfinished identical one.
    joins: bool,
    digest: CallDigest,
    form: PendingForm,
    /// The client's retry carried our state.
    resumed: Option<ResumeState>,
    /// The client answered our approval elicitation with decline or cancel.
    declined: bool,
    tool: String,
    /// The tool declares an `outputSchema`.
    typed: bool,
    /// What the call's digest and state are bound to.
    binding: Binding,
}

/// What a [`Call`]'s digest (and the retry's `requestState`) is bound to.
#[derive(Debug)]
enum Binding {
    /// The call's raw arguments, at construction.
    Arguments,
    /// The tool's `Parameters` took the arguments before the call was made:
    /// [`Call::run`] binds it to its action's arguments and opens the
    /// client's `requestState` (kept here) against them.
    Action(Option<String>),
}

/// How a pending answer reaches the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PendingForm {
    /// 2026-07-28: an `InputRequiredResult` (with the URL elicitation when
    /// the client can show one).
    InputRequired { url: bool },
    /// 2025-11-25 with URL elicitation: -32042.
    UrlElicitationError,
    /// The ledger's JSON.
    Json,
}

impl PendingForm {
    /// The form for `agent`'s request. A request of the 2026-07-28
    /// lifecycle carries the client's capabilities in its `_meta`; one of an
    /// earlier revision has them only in the client's `initialize`, which a
    /// stateless endpoint sees as a request of its own: the guard noted
    /// them ([`Agent::declared_url_elicitation`]).
    fn of(context: &RequestContext<RoleServer>, agent: &Agent) -> Self {
        let declared = context
            .client_capabilities()
            .and_then(|c| c.elicitation)
            .is_some_and(|e| e.url.is_some());
        let url = declared
            || (context.meta.client_capabilities().is_none() && agent.declared_url_elicitation());
        let version = context.protocol_version();
        let at_least = |v: &ProtocolVersion| version.as_ref().is_some_and(|have| have >= v);
        if at_least(&ProtocolVersion::V_2026_07_28) {
            Self::InputRequired { url }
        } else if url && at_least(&ProtocolVersion::V_2025_11_25) {
            Self::UrlElicitationError
        } else {
            Self::Json
        }
    }
}

impl<S> FromContextPart<ToolCallContext<'_, S>> for Call {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        let agent = Agent::from_context_part(context)?;
        if let Some(arguments) = &context.arguments {
            return Self::new(
                &agent,
                &context.request_context,
                &context.name,
                arguments,
                context.request_state.take().as_deref(),
                context.input_responses.as_ref(),
            );
        }
        // No arguments left: none were sent, or `Parameters` (an earlier
        // argument of the tool) took them. `run` binds the call to its
        // action's arguments instead, and opens the state then.
        let state = context.request_state.take();
        let mut call = Self::new(
            &agent,
            &context.request_context,
            &context.name,
            &JsonObject::new(),
            None,
            context.input_responses.as_ref(),
        )?;
        if state.is_some() {
            call.joins = false;
        }
        call.binding = Binding::Action(state);
        Ok(call)
    }
}

impl Call {
    /// The call of tool `tool` with `arguments` (and, on a retry, the
    /// `requestState` and `inputResponses` the client sent), for a server
    /// that handles `tools/call` itself rather than through rmcp's tool
    /// macros. A `requestState` this site did not seal for `agent`'s grant
    /// lineage and this exact call, or that expired, is refused
    /// (`invalid_params`) and changes nothing.
    pub fn new(
        agent: &Agent,
        context: &RequestContext<RoleServer>,
        tool: &str,
        arguments: &JsonObject,
        request_state: Option<&str>,
        input_responses: Option<&InputResponses>,
    ) -> Result<Self, ErrorData> {
        let bytes = serde_json::to_vec(arguments)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let digest = CallDigest::of("tools/call", tool, &bytes);
        let declined = input_responses.is_some_and(|responses| {
            responses
                .get(APPROVAL_INPUT)
                .and_then(|r| r.get("action"))
                .and_then(Value::as_str)
                .is_some_and(|a| a != "accept")
        });
        let resumed = match request_state {
            None => None,
            Some(state) => Some(
                agent
                    .open_request_state(&digest, state)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?,
            ),
        };
        let joins = resumed.is_none() && context.meta.get(REQUEST_ID_META).is_none();
        let request_id = match (&resumed, context.meta.get(REQUEST_ID_META)) {
            (Some(state), _) => state.request_id,
            (None, None) => RequestId::random(&mut rand::rng()),
            (None, Some(value)) => value
                .as_str()
                .and_then(|s| RequestId::parse(s).ok())
                .ok_or_else(|| {
                    ErrorData::invalid_params(
                        format!("_meta[\"{REQUEST_ID_META}\"] must be a UUID in canonical form"),
                        None,
                    )
                })?,
        };
        Ok(Self {
            request_id,
            joins,
            digest,
            form: PendingForm::of(context, agent),
            resumed,
            declined,
            tool: tool.to_owned(),
            typed: false,
            binding: Binding::Arguments,
        })
    }

    /// This call bound to `action`'s arguments, for a call whose arguments
    /// `Parameters` took first (see [`Call`]); `None` for any other.
    fn bound_to(&self, agent: &Agent, action: &Action) -> Result<Option<Self>, ErrorData> {
        let Binding::Action(state) = &self.binding else {
            return Ok(None);
        };
        let digest = CallDigest::of(
            "tools/call",
            &self.tool,
            action.arguments().unwrap_or_default(),
        );
        let resumed = match state {
            None => None,
            Some(state) => Some(
                agent
                    .open_request_state(&digest, state)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?,
            ),
        };
        Ok(Some(Self {
            request_id: resumed.map_or(self.request_id, |r| r.request_id),
            joins: self.joins,
            digest,
            form: self.form,
            resumed,
            declined: self.declined,
            tool: self.tool.clone(),
            typed: self.typed,
            binding: Binding::Arguments,
        }))
    }

    /// Marks the tool as one with an `outputSchema`: a client at an older
    /// revision validates a structured result against it, so a pending
    /// answer (which is not the tool's output) reaches such a client as an
    /// error result with its JSON as text, which no client validates.
    #[must_use]
    pub fn with_output_schema(mut self, typed: bool) -> Self {
        self.typed = typed;
        self
    }

    /// The request id this call names (its sealed state's or `_meta`'s), or
    /// the fresh one drawn for a call that names none. Such a call runs
    /// under it only if it joins no unfinished identical request
    /// ([`Call::joins`]): [`Call::run`]'s answer names the request it ran
    /// under.
    #[must_use]
    pub fn request_id(&self) -> RequestId {
        self.request_id
    }

    /// Whether the client named no request id (no sealed state, no
    /// `_meta["portcullis/requestId"]`): [`Call::run`] then joins an
    /// unfinished identical request instead of opening another (see
    /// [`Call`]).
    #[must_use]
    pub fn joins(&self) -> bool {
        self.joins
    }

    /// Whether the client sent back a state of ours: this call is a retry
    /// of a multi round-trip request.
    #[must_use]
    pub fn is_retry(&self) -> bool {
        self.resumed.is_some()
    }

    /// How long to wait for a person's decision before answering pending:
    /// not at all on a first multi round-trip request (the client shows
    /// the URL first), [`RETRY_WAIT`] on its retries, `default` for every
    /// other client.
    #[must_use]
    pub fn wait(&self, default: Duration) -> Duration {
        match (self.form, &self.resumed) {
            _ if self.declined => Duration::ZERO,
            (PendingForm::InputRequired { .. } | PendingForm::UrlElicitationError, None) => {
                Duration::ZERO
            }
            (PendingForm::InputRequired { .. }, Some(_)) => RETRY_WAIT,
            _ => default,
        }
    }

    /// Runs `action` for `agent` at most once under this call's request
    /// id ([`Portcullis::run_once`]) — or, for a call that names none, under
    /// the unfinished identical request it joins or a new one
    /// ([`Portcullis::run_joining`]) — and answers in the client's revision
    /// (see [`Call`]), naming the request it ran under.
    pub async fn run<S, T, F, Fut>(
        &self,
        portcullis: &Portcullis<S>,
        agent: &Agent,
        action: Action,
        run: F,
    ) -> Result<CallToolResponse, ErrorData>
    where
        S: HostStore,
        T: Serialize + DeserializeOwned + Send + 'static,
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, BusinessError>> + Send + 'static,
    {
        let bound = self.bound_to(agent, &action)?;
        let call = bound.as_ref().unwrap_or(self);
        let wait = call.wait(portcullis.inner.approval_wait);
        let ran = portcullis
            .run_once_waiting(
                agent,
                call.request_id,
                call.joins,
                action,
                wait,
                crate::run::acting(run),
            )
            .await;
        let approval_url = match ran.outcome() {
            Outcome::Pending(p) => p.approval_url.clone(),
            _ => None,
        };
        call.answer_as(
            agent,
            ran.answer().clone(),
            approval_url.as_deref(),
            ran.request_id(),
        )
    }

    /// A ledger JSON answer (`{"ok", "status", "requestId", …}`, as every
    /// Portcullis tool answers) as this client expects it: a waiting one
    /// (`approval_pending`, `execution_pending`) in the client's revision
    /// (see [`Call`]), with `approval_url` as the page the person approves
    /// on; any other as a structured result (an error result for `"ok":
    /// false`).
    pub fn answer(
        &self,
        agent: &Agent,
        answer: Value,
        approval_url: Option<&str>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.answer_as(agent, answer, approval_url, self.request_id)
    }

    /// [`Call::answer`] for the ledger request `request_id`: this call's
    /// own, or the one a call that names no request id joined. The sealed
    /// state and -32042's `requestId` name it, so the client's retry lands
    /// on it.
    fn answer_as(
        &self,
        agent: &Agent,
        answer: Value,
        approval_url: Option<&str>,
        request_id: RequestId,
    ) -> Result<CallToolResponse, ErrorData> {
        let status = answer["status"].as_str().unwrap_or_default();
        let approval = status == "approval_pending";
        if !approval && status != "execution_pending" {
            return Ok(if answer["ok"] == Value::Bool(false) {
                CallToolResult::structured_error(answer)
            } else {
                CallToolResult::structured(answer)
            }
            .into());
        }
        if self.declined {
            let mut answer = answer;
            answer["message"] = json!(
                "The approval was declined where it was shown; the request stays pending. \
                 Call again with the same requestId once it is approved."
            );
            return Ok(self.pending_json(answer));
        }
        let message = format!(
            "Approve {} for {}",
            self.tool,
            agent
                .principal()
                .and_then(|p| p.client_name.as_deref())
                .unwrap_or("an agent")
        );
        match (self.form, agent.principal()) {
            (PendingForm::InputRequired { url }, Some(_)) => {
                let prompt_now = url && approval && !self.resumed.is_some_and(|r| r.prompted);
                let prompted = prompt_now || self.resumed.is_some_and(|r| r.prompted);
                let state = agent
                    .seal_request_state(&self.digest, request_id, prompted)
                    .ok_or_else(|| ErrorData::internal_error("no active signing key", None))?;
                let mut result = json!({ "resultType": "input_required", "requestState": state });
                if prompt_now && let Some(approval_url) = approval_url {
                    // 2026-07-28 has no `elicitationId` (its changelog,
                    // item 11, leaves correlation to `requestState`), but
                    // rmcp's type always writes one, empty when absent: it
                    // names the ledger request, unique to this call, as
                    // -32042's does at 2025-11-25.
                    result["inputRequests"] = json!({
                        APPROVAL_INPUT: {
                            "method": "elicitation/create",
                            "params": {
                                "mode": "url",
                                "message": message,
                                "url": approval_url,
                                "elicitationId": request_id.to_string(),
                            },
                        }
                    });
                }
                let result: InputRequiredResult = serde_json::from_value(result)
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                Ok(CallToolResponse::InputRequired(result))
            }
            (PendingForm::UrlElicitationError, Some(_)) if approval => Err(ErrorData::new(
                ErrorCode(URL_ELICITATION_REQUIRED),
                message.clone(),
                Some(json!({
                    "elicitations": [{
                        "mode": "url",
                        "message": message,
                        "url": approval_url.unwrap_or_default(),
                        "elicitationId": request_id.to_string(),
                    }],
                    "requestId": request_id.to_string(),
                })),
            )),
            _ => {
                let mut answer = answer;
                if let Some(url) = approval_url.filter(|_| approval) {
                    answer["approvalUrl"] = json!(url);
                }
                Ok(self.pending_json(answer))
            }
        }
    }

    /// A pending answer as the ledger's JSON: structured, or for a typed
    /// tool an error result carrying it as text (see
    /// [`Call::with_output_schema`]).
    fn pending_json(&self, answer: Value) -> CallToolResponse {
        if self.typed {
            let mut result = CallToolResult::error(vec![ContentBlock::text(answer.to_string())]);
            result.meta = None;
            result.into()
        } else {
            CallToolResult::structured(answer).into()
        }
    }
}

/// The JSON-RPC error code of `URLElicitationRequiredError` (MCP
/// 2025-11-25, "Elicitation", URL mode).
pub const URL_ELICITATION_REQUIRED: i32 = -32042;

/// An action of `kind` with `effect` that needs `scope`, whose arguments
/// (what the person approves) are `arguments` as JSON: the tool's own
/// parameters, usually. A kind, scope or argument size the ledger refuses
/// is an `invalid_params` error.
pub fn action(
    effect: Effect,
    kind: &str,
    scope: &str,
    arguments: &impl Serialize,
) -> Result<Action, ErrorData> {
    let arguments = serde_json::to_vec(arguments)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
    Action::new(kind, effect, scope, &arguments)
        .map_err(|e| ErrorData::invalid_params(e.to_string(), None))
}

/// The ledger's answer as the tool's result: structured content, an error
/// result (`isError`) for a protocol failure.
impl<T> From<Ran<T>> for CallToolResult {
    fn from(ran: Ran<T>) -> Self {
        if ran.is_error() {
            Self::structured_error(ran.answer().clone())
        } else {
            Self::structured(ran.answer().clone())
        }
    }
}

/// A missing scope as the tool's error; the guard has already turned the
/// HTTP response into `403 insufficient_scope`.
impl From<ScopeRequired> for ErrorData {
    fn from(e: ScopeRequired) -> Self {
        Self::invalid_request(e.to_string(), None)
    }
}
