//! The MCP endpoint at `/mcp/{key}`: rmcp's Streamable HTTP server
//! transport behind the crate's bearer check, as any host serves it.
//!
//! * The route's service is [`endpoint`] behind
//!   [`Portcullis::protect`](portcullis_axum::Portcullis::protect), which
//!   runs **first**: `portcullis-axum`'s bearer check (the `Origin`, the
//!   path key against the site's current public key (re-read on every
//!   other instance's or the CLI's site change), no token in the query, an
//!   access token of a live grant with `skills:read` or a minted agent
//!   token); refusals are the core's challenges (`400`/`401`/`403` with
//!   `WWW-Authenticate`) or `503` with `Retry-After`. The verified [`Agent`]
//!   goes into the request extensions, where the tools read it.
//! * Then the strict JSON check ([`portcullis_axum::strict_json`]), then rmcp's
//!   [`service`]: MCP is served **statelessly** with JSON responses (no
//!   `Mcp-Session-Id`: every POST carries its own bearer, so no session
//!   outlives a token), and rmcp keeps its DNS-rebinding guard (the `Host`
//!   must be the public URL's authority or the bound address).
//! * [`Tools`] implements `search_skills`, `describe_skill` and `execute`
//!   (see [`super::run`] and [`super::skills`]). Tool answers are structured
//!   JSON; a protocol failure (`"ok": false`) is an `isError` result. A
//!   missing scope found mid-run turns the HTTP response into the core's
//!   `403 insufficient_scope` challenge, as the MCP authorization spec asks.
//! * With `--source`, the downstream tools and resources of the gateway
//!   ([`portcullis_gateway`]) come through two narrow hooks: extra tools on the
//!   list (their calls go to the gateway) and the `resources/*` methods.

use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use portcullis_axum::Agent;
use portcullis_axum::TabWaits;
use portcullis_axum::rmcp::{Call, REQUEST_ID_META};
use portcullis_core::bearer::Challenge;
use portcullis_core::engine::Principal;
use portcullis_core::engine::RequestStatus;
use portcullis_core::error::ErrorCode;
use portcullis_core::ledger::resume::is_source_state;
use portcullis_core::ledger::{BeginError, RequestId};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, GetTaskParams,
    GetTaskResult, Implementation, JsonObject, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::Shared;
use super::run::{self, Answer};
use super::skills::{self, Skill};
use portcullis_axum::strict_json::MAX_MCP_BODY;
use portcullis_gateway::{Reply, Round, ToolCall};

/// rmcp's Streamable HTTP service for [`Tools`]: stateless, JSON answers,
/// the DNS-rebinding guard on `allowed_hosts`, the MCP body limit.
fn service(
    app: &Shared,
    allowed_hosts: Vec<String>,
) -> StreamableHttpService<Tools, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_allowed_hosts(allowed_hosts)
        .with_max_request_body_bytes(MAX_MCP_BODY)
        .with_sse_keep_alive(None);
    let app = Arc::clone(app);
    StreamableHttpService::new(
        move || Ok(Tools::new(&app)),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

/// The MCP route's service, which the bearer check
/// ([`Portcullis::protect`](portcullis_axum::Portcullis::protect)) wraps:
/// the strict JSON check ([`portcullis_axum::strict_json`]), then rmcp's [`service`].
/// `protect` clones it per request, as tower services are: a clone is one
/// `Arc`, and rmcp's `handle` runs on the shared service (its own
/// `Service::call` would clone the service, configuration and all, per
/// request).
pub(crate) fn endpoint(
    app: &Shared,
    allowed_hosts: Vec<String>,
) -> impl tower::Service<
    Request,
    Response = Response,
    Error = Infallible,
    Future = impl Future<Output = Result<Response, Infallible>> + Send + 'static,
> + Clone
+ Send
+ 'static {
    let rmcp = Arc::new(service(app, allowed_hosts));
    tower::service_fn(move |request: Request| {
        let rmcp = Arc::clone(&rmcp);
        async move {
            Ok(match portcullis_axum::strict_json::strict(request).await {
                Ok(request) => rmcp.handle(request).await.map(Body::new),
                Err(refused) => refused,
            })
        }
    })
}

/// The MCP tools: a cheap handle on the app, cloned per request.
#[derive(Clone)]
pub(crate) struct Tools {
    app: Shared,
}

impl Tools {
    /// The caller of a task call and the request its task id names: the
    /// id must be one sealed for the caller's grant lineage (an agent token
    /// has none).
    async fn task_of(
        &self,
        context: &mut RequestContext<RoleServer>,
        task_id: &str,
    ) -> Result<(Principal, RequestId), ErrorData> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Agent>())
            .and_then(|agent| agent.principal().cloned())
            .ok_or_else(|| ErrorData::invalid_params("unknown task", None))?;
        let id = self
            .app
            .engine()
            .open_task_id(&principal, task_id, crate::clock::now())
            .map_err(|_| ErrorData::invalid_params("unknown task", None))?;
        // Tasks are `execute`'s, a built-in tool: a grant that no longer
        // reaches the built-ins (the reserved app `_host`) no longer reads
        // them either ([`super::granted`]).
        if !self.app.reach(Some(&principal)).await?.allows_host() {
            return Err(ErrorData::invalid_params("unknown task", None));
        }
        Ok((principal, id))
    }

    /// The tools of `app`.
    pub(crate) fn new(app: &Shared) -> Self {
        Self {
            app: Arc::clone(app),
        }
    }
}

fn schema(v: &Value) -> Arc<JsonObject> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

/// The tool list, built once: `tools/list` answers a copy (names and
/// descriptions are `'static`, schemas shared `Arc`s), not a rebuilt one.
static TOOLS: LazyLock<Vec<Tool>> = LazyLock::new(tools);

/// The built-in tools' names (no gateway source may take one).
pub(crate) fn builtin_names() -> Vec<String> {
    TOOLS.iter().map(|t| t.name.to_string()).collect()
}

/// What `initialize` answers, built once: rmcp asks for it on every
/// request it serves (each sets up its own peer from it).
static INFO: LazyLock<ServerConfig> = LazyLock::new(|| {
    info(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .build(),
    )
});

/// [`INFO`] with the gateway's resources.
static GATEWAY_INFO: LazyLock<ServerConfig> = LazyLock::new(|| {
    info(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_tasks()
            .enable_resources()
            .build(),
    )
});

fn info(capabilities: ServerCapabilities) -> ServerConfig {
    ServerConfig::new(capabilities)
        .with_server_info(Implementation::new(
            "portcullis-demo",
            env!("CARGO_PKG_VERSION"),
        ))
        .with_instructions(
            "Skills of a notes app, run in the user's connected browser tab. \
             Find them with search_skills, read one with describe_skill, run them with execute.",
        )
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "search_skills",
            "Search the skills of the user's open app (empty query: all). \
             Each has a name, a description and an effect (read or write).",
            schema(&json!({
                "type": "object",
                "properties": {"query": {"type": "string", "maxLength": 200}},
                "additionalProperties": false,
            })),
        ),
        Tool::new(
            "describe_skill",
            "The input schema and effect of one skill. Writes need the user's approval.",
            schema(&json!({
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 128}},
                "required": ["name"],
                "additionalProperties": false,
            })),
        ),
        Tool::new(
            "execute",
            "Run skills in the user's connected browser tab. `code` is a JSON array of steps \
             [{\"skill\": name, \"args\": {...}}], run in order. `requestId` is a fresh UUID per \
             logical request: calling again with the same requestId and code never runs it twice \
             and returns its state (approval_pending, execution_pending) or its result. \
             On approval_pending or execution_pending, call again with the same requestId. \
             ok:false is a protocol failure (see error.code); result.error a business failure.",
            schema(&json!({
                "type": "object",
                "properties": {
                    "requestId": {"type": "string", "format": "uuid"},
                    "code": {"type": "string", "maxLength": portcullis_core::ledger::MAX_CODE_LEN},
                    "outcomeCursor": {"type": "string"},
                },
                "required": ["requestId", "code"],
                "additionalProperties": false,
            })),
        ),
    ]
}

fn structured(answer: &Answer) -> CallToolResult {
    if answer.is_error() {
        CallToolResult::structured_error(answer.body.clone())
    } else {
        CallToolResult::structured(answer.body.clone())
    }
}

fn ok(body: Value) -> CallToolResult {
    CallToolResult::structured(body)
}

/// How long `execute` waits for its run before a client that declared the
/// tasks extension gets a task: a quick run answers its result at once.
const TASK_WAIT: Duration = Duration::from_secs(2);

/// How often a client should poll a task (`pollIntervalMs`).
const TASK_POLL: Duration = Duration::from_secs(1);

/// An RFC 3339 timestamp of `t` (whole seconds, UTC), as task records carry.
fn rfc3339(t: portcullis_core::Timestamp) -> String {
    t.utc().to_string()
}

/// The task record of request `id` at `status` (the MCP tasks extension:
/// a server-generated, unguessable id — here sealed to the grant lineage
/// and the request — a time to live, and a polling interval).
fn task_record(
    app: &super::App,
    principal: &Principal,
    id: RequestId,
    status: &str,
) -> Result<Value, ErrorData> {
    let now = crate::clock::now();
    let task_id = app
        .engine()
        .seal_task_id(principal, id, now)
        .ok_or_else(|| ErrorData::internal_error("no active signing key", None))?;
    let ttl = app.engine().policy().result_retention;
    Ok(json!({
        "taskId": task_id,
        "status": status,
        "createdAt": rfc3339(now),
        "lastUpdatedAt": rfc3339(now),
        "ttlMs": u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        "pollIntervalMs": u64::try_from(TASK_POLL.as_millis()).unwrap_or(1000),
    }))
}

/// The task that answers a call whose run is still in progress. The ledger
/// entry it names is durable already (the run was admitted in a committed
/// transaction before this answer).
fn task_created(
    app: &super::App,
    principal: &Principal,
    id: RequestId,
) -> Result<rmcp::model::CreateTaskResult, ErrorData> {
    let mut record = task_record(app, principal, id, "working")?;
    record["resultType"] = json!("task");
    serde_json::from_value(record).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

/// The call of `tool` as the ledger answers it in the client's revision
/// (`portcullis-axum`'s [`Call`]: a multi round-trip request's sealed
/// state, URL elicitation, -32042, or the ledger's JSON).
fn waiting_call(
    agent: &Agent,
    context: &RequestContext<RoleServer>,
    tool: &str,
    args: &Value,
    request: &CallToolRequestParams,
) -> Result<Call, ErrorData> {
    let empty = JsonObject::new();
    Call::new(
        agent,
        context,
        tool,
        args.as_object().unwrap_or(&empty),
        request.request_state.as_deref(),
        request.input_responses.as_ref(),
    )
}

/// Whether a ledger answer waits (for a person, or a run in progress).
fn is_waiting(body: &Value) -> bool {
    matches!(
        body["status"].as_str(),
        Some("approval_pending" | "execution_pending")
    )
}

/// The grant a request's verified caller holds (`None` for a minted agent
/// token).
fn principal_of(context: &RequestContext<RoleServer>) -> Option<Principal> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Agent>())
        .and_then(|agent| agent.principal().cloned())
}

/// Hands a tool's challenge to the guard, which turns the response into
/// `403 insufficient_scope`.
fn raise(challenge: Option<&Challenge>, agent: &Agent) {
    if let Some(c) = challenge {
        agent.raise(c.clone());
    }
}

impl Tools {
    /// `execute`: the program's run through the ledger and the tab, its
    /// answer in the client's revision (a task for a client that declared
    /// the tasks extension and whose run is still in progress).
    async fn call_execute(
        &self,
        agent: &Agent,
        context: &mut RequestContext<RoleServer>,
        args: &Value,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(p) = agent.principal().cloned() else {
            let answer = Answer::begin_error(&BeginError::AgentToken, None);
            return Ok(structured(&answer).into());
        };
        let id = args
            .get("requestId")
            .and_then(Value::as_str)
            .and_then(|s| RequestId::parse(s).ok());
        // The run's request id is its argument's: the call names it
        // (in -32042's `data`, in a sealed state), not one drawn.
        if let Some(id) = id {
            context
                .meta
                .insert(REQUEST_ID_META.into(), json!(id.to_string()));
        }
        let call = waiting_call(agent, context, "execute", args, request)?;
        let tasks = context
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks());
        // A retry of a multi round-trip request waits for the person's
        // decision (one prompt per approval); any other call answers
        // `approval_pending` at once.
        let waits = TabWaits {
            approval: call.wait(Duration::ZERO),
            running: if tasks { TASK_WAIT } else { run::WAIT },
        };
        let answer = Box::pin(run::execute(&self.app, agent, args, waits)).await;
        if let (true, Some(id), Some("execution_pending")) =
            (tasks, id, answer.body["status"].as_str())
        {
            return task_created(&self.app, &p, id).map(CallToolResponse::Task);
        }
        let url = id.map(|id| self.app.approval_url(id));
        call.answer(agent, answer.body, url.as_deref())
    }

    /// A downstream tool of the gateway, through the ledger. A retry that
    /// carries a wrapped source state (the source asked for input,
    /// [`portcullis_gateway::Round`]) is unwrapped first: its request id is the one the
    /// call runs under, and the source gets its own state back with the
    /// agent's answers; any other state is one of the approval's.
    async fn call_gateway(
        &self,
        agent: &Agent,
        context: &mut RequestContext<RoleServer>,
        name: &str,
        args: Value,
        request: &CallToolRequestParams,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some((source, tool)) = self.app.gateway.find(name) else {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        };
        let Some(p) = agent.principal().cloned() else {
            let reply = Reply::refused_agent_token();
            return Ok(reply.result.into());
        };
        let arguments = match &args {
            Value::Object(m) => m.clone(),
            _ => JsonObject::new(),
        };
        let mut round = Round::of(context);
        let (approval_state, approval_answers) = match request.request_state.as_deref() {
            Some(text) if is_source_state(text) => {
                let digest = portcullis_gateway::digest(source.id(), name, &arguments);
                let (id, state) = self
                    .app
                    .gateway
                    .unwrap_state(&self.app.portcullis, &p, &digest, text)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
                context
                    .meta
                    .insert(REQUEST_ID_META.into(), json!(id.to_string()));
                round.state = state;
                round.responses.clone_from(&request.input_responses);
                (None, None)
            }
            state => (state, request.input_responses.as_ref()),
        };
        let call = Call::new(
            agent,
            context,
            name,
            &arguments,
            approval_state,
            approval_answers,
        )?
        .with_output_schema(tool.output_schema.is_some());
        let id = call.request_id();
        // The call's request id (from its `_meta`, its sealed state,
        // or drawn for it) is the one the gateway runs under.
        // A tool that names an MCP App leaves a View once its call
        // completes ([`super::apps`]).
        let view = super::apps::Candidate::of(&p, source.id(), &tool, &arguments);
        let reply = Box::pin(self.app.call_gateway(ToolCall {
            principal: p,
            tool: (source, tool),
            request_id: id,
            arguments,
            round,
            wait: call.wait(Duration::ZERO),
        }))
        .await;
        raise(reply.challenge.as_ref(), agent);
        if let Some(asked) = reply.input {
            return Ok(CallToolResponse::InputRequired(asked));
        }
        let url = self.app.approval_url(id);
        match reply.result.structured_content {
            Some(body) if is_waiting(&body) => call.answer(agent, body, Some(&url)),
            _ => {
                if let Some(view) = view {
                    self.app.record_view(view, &reply.result, id);
                }
                Ok(reply.result.into())
            }
        }
    }
}

/// The handlers whose work waits (a run in the tab, a downstream server)
/// await it boxed: rmcp's dispatch future (`Service::handle_request`) is as
/// large as the largest handler future, and every request, a `ping`
/// included, builds one and moves it into the task rmcp spawns for it.
/// Boxed, their state stays out of it; the calls that wait pay one
/// allocation.
impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        if self.app.gateway.is_active() {
            GATEWAY_INFO.clone()
        } else {
            INFO.clone()
        }
    }

    /// The tools the caller's grant reaches ([`super::granted`]): the
    /// built-in ones (the reserved app `_host`) and its sources'.
    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let granted = self.app.reach(principal_of(&context).as_ref()).await?;
        let mut tools = if granted.allows_host() {
            TOOLS.clone()
        } else {
            Vec::new()
        };
        if self.app.gateway.is_active() {
            tools.extend(self.app.gateway.granted_tools(&granted));
        }
        Ok(ListToolsResult {
            tools,
            ..ListToolsResult::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // Taken, not cloned: the context is this call's own.
        let parts = context
            .extensions
            .get_mut::<axum::http::request::Parts>()
            .ok_or_else(|| ErrorData::internal_error("no request", None))?;
        let agent = parts
            .extensions
            .remove::<Agent>()
            .ok_or_else(|| ErrorData::internal_error("no verified caller", None))?;
        // A tool of an app the grant does not reach answers as a tool that
        // does not exist ([`super::granted`]).
        let granted = self.app.reach(agent.principal()).await?;
        let reaches = match request.name.as_ref() {
            "search_skills" | "describe_skill" | "execute" => granted.allows_host(),
            name => self
                .app
                .gateway
                .source_of(name)
                .is_none_or(|s| granted.allows_source(&s)),
        };
        if !reaches {
            return Err(ErrorData::invalid_params(
                format!("no tool named {:?}", request.name),
                None,
            ));
        }
        let args = Value::Object(request.arguments.clone().unwrap_or_default());
        let result = match request.name.as_ref() {
            "search_skills" => {
                let query = args
                    .get("query")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let found: Vec<Value> = skills::search(query).iter().map(|s| s.summary()).collect();
                ok(json!({"ok": true, "skills": found}))
            }
            "describe_skill" => {
                let name = args.get("name").and_then(Value::as_str).unwrap_or_default();
                match Skill::named(name) {
                    Some(s) => ok(json!({"ok": true, "skill": s.describe()})),
                    None => structured(&run::failure(
                        ErrorCode::ActionNotFound,
                        "no such skill: call search_skills",
                        None,
                    )),
                }
            }
            "execute" => {
                let answer = self
                    .call_execute(&agent, &mut context, &args, &request)
                    .await;
                return super::apps::deliver(&self.app, agent.principal(), answer).await;
            }
            name => {
                let answer = self
                    .call_gateway(&agent, &mut context, name, args, &request)
                    .await;
                return super::apps::deliver(&self.app, agent.principal(), answer).await;
            }
        };
        // What the user sent from an MCP App to this agent rides on its
        // next complete tool result ([`super::apps::deliver`]).
        super::apps::deliver(&self.app, agent.principal(), Ok(result.into())).await
    }

    /// `tasks/get` (the MCP tasks extension): the task of an `execute`
    /// whose run was still in progress, read from the ledger (never run by
    /// the read): `working` while it runs or waits to resume,
    /// `input_required` while it waits for the person (with the approval
    /// page as a URL elicitation), `completed` with the call's result once
    /// it ended. A task id of another user or client, or forged, is refused
    /// as unknown.
    async fn get_task(
        &self,
        request: GetTaskParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let (principal, id) = self.task_of(&mut context, &request.task_id).await?;
        let p = principal.clone();
        let status = self
            .app
            .blocking(move |app| app.engine().request_status(&p, &id, crate::clock::now()))
            .await
            .map_err(|_| ErrorData::internal_error("a blocking task failed", None))?;
        let mut record = task_record(&self.app, &principal, id, "working")?;
        record["taskId"] = json!(request.task_id);
        match status {
            Ok(RequestStatus::AwaitingApproval(prompt)) => {
                record["status"] = json!("input_required");
                record["inputRequests"] = json!({
                    portcullis_axum::rmcp::APPROVAL_INPUT: {
                        "method": "elicitation/create",
                        "params": {
                            "mode": "url",
                            "message": format!("Approve {} for {}", prompt.kind,
                                prompt.client_name.as_deref().unwrap_or("an agent")),
                            "url": self.app.approval_url(id),
                            // Never empty (rmcp writes one): the request's
                            // id, as the call's own prompt names it.
                            "elicitationId": id.to_string(),
                        },
                    },
                });
            }
            Ok(RequestStatus::Done(stored)) => {
                let body = stored.to_json();
                let result = if body["ok"] == Value::Bool(false) {
                    CallToolResult::structured_error(body)
                } else {
                    CallToolResult::structured(body)
                };
                record["status"] = json!("completed");
                record["result"] = serde_json::to_value(result)
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
            }
            Err(e) => {
                return Err(ErrorData::invalid_params(
                    format!("unknown task: {e}"),
                    None,
                ));
            }
            // In progress (running, or waiting to resume): `working`.
            Ok(_) => {}
        }
        record["resultType"] = json!("complete");
        serde_json::from_value(record).map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    /// `tasks/cancel`: acknowledged, and nothing stops: a run dispatched to
    /// the tab may already have had its effect (the ledger never undoes or
    /// abandons one: it ends with `unknownTail` only when its tab goes), and
    /// an approval is the person's to deny. The task's status stays what
    /// the ledger says.
    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.task_of(&mut context, &request.task_id).await?;
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let granted = self.app.reach(principal_of(&context).as_ref()).await?;
        Ok(self.app.gateway.resources(&granted))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let granted = self.app.reach(principal_of(&context).as_ref()).await?;
        Ok(self.app.gateway.templates(&granted))
    }

    /// A gateway resource's read; a source that asks for input passes its
    /// request on to an agent at 2026-07-28 ([`portcullis_gateway::Gateway::read`]).
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let principal = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Agent>())
            .and_then(|agent| agent.principal().cloned());
        let round = Round::of(&context);
        Box::pin(
            self.app
                .gateway
                .read(&self.app.portcullis, principal.as_ref(), &request, round),
        )
        .await
    }
}
