// Approvals the protocol's own way (issue 34), with the official TypeScript
// clients as they are, against examples/notes-app (a write the server
// performs) and `portcullis serve` (`execute`, run by a scripted connected
// tab):
//
// * `@modelcontextprotocol/client` 2.x at MCP 2026-07-28 (multi round-trip
//   requests): its elicitation handler is shown the approval page's URL
//   once (a URL-mode elicitation in an `InputRequiredResult`); the person
//   approves on that page over HTTP; the SDK's own retry (with the sealed
//   `requestState`) waits for the decision and returns the real result; the
//   effect happened once. A denial ends in a tool error and no effect.
// * `@modelcontextprotocol/sdk` 1.x at 2025-11-25 with URL elicitation: the
//   call fails with -32042 (`URLElicitationRequiredError`) carrying the URL
//   and the `requestId`; the person approves; the same call again with the
//   id in `_meta["portcullis/requestId"]` returns the result; once.
// * A figure: the time from the person's approving POST to the 2.x SDK's
//   result, and the prompts shown per approval, over `MRTR_APPROVALS`
//   approvals (default 20) on each server (both on redb). Printed as
//   `FIGURE …` lines (docs/figures.md, "Approvals as multi round-trip
//   requests").
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import {
  Client as Client2,
  StreamableHTTPClientTransport as Transport2,
  auth as auth2,
} from "@modelcontextprotocol/client";
import { Client as Client1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as Transport1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth as auth1 } from "@modelcontextprotocol/sdk/client/auth.js";
import { ErrorCode, UrlElicitationRequiredError } from "@modelcontextprotocol/sdk/types.js";
import { startServer, startNotesApp, notesSignIn, Provider, ScriptedTab, sleep } from "./helpers.mjs";

const META = "portcullis/requestId";
/** How long the person takes to decide after the URL is shown: the SDK's
 * retry is then already waiting at the server for the decision. Spread
 * over 250 ms, so that a server that looks for the decision periodically
 * is measured at every phase of its period, not one. */
const think = () => 300 + Math.random() * 250;
const APPROVALS = Number(process.env.MRTR_APPROVALS ?? 20);

const body = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

/** `t`'s clean-ups, run last first (clients, then the tab, then servers). */
function cleanups(t) {
  const stack = [];
  t.after(async () => {
    while (stack.length) await stack.pop()();
  });
  return (f) => stack.push(f);
}

/** Signs `provider` in with the scopes the resource metadata lists. */
async function signIn(auth, mcpUrl, provider) {
  const serverUrl = new URL(mcpUrl);
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code, iss: provider.iss }), "AUTHORIZED");
  return serverUrl;
}

/** A 2.x client at 2026-07-28 declaring URL elicitation, whose handler
 * shows each URL to `person` (which decides later, like a person) and
 * accepts at once. */
async function connect2(serverUrl, provider, shown, person) {
  const client = new Client2(
    { name: "node-mrtr", version: "1.0.0" },
    { capabilities: { elicitation: { url: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } },
  );
  client.setRequestHandler("elicitation/create", async (request) => {
    assert.equal(request.params.mode, "url", JSON.stringify(request.params));
    shown.push(request.params);
    person.prompt(request.params.url);
    return { action: "accept" };
  });
  await client.connect(new Transport2(serverUrl, { authProvider: provider }));
  assert.equal(client.getNegotiatedProtocolVersion?.() ?? client._negotiatedProtocolVersion, "2026-07-28");
  return client;
}

/** A 1.x client (its default 2025-11-25) declaring URL elicitation. The
 * SDK's `UrlElicitationRequiredError` keeps only `data.elicitations`, so
 * the client also keeps each JSON-RPC error as it came (`client.wire`). */
async function connect1(serverUrl, provider) {
  const client = new Client1({ name: "node-url-elicitation", version: "1.0.0" }, { capabilities: { elicitation: { url: {} } } });
  client.wire = [];
  const transport = new Transport1(serverUrl, {
    authProvider: provider,
    fetch: async (url, init) => {
      const r = await fetch(url, init);
      if ((r.headers.get("content-type") ?? "").startsWith("application/json")) {
        const message = await r.clone().json().catch(() => null);
        if (message?.error) client.wire.push(message.error);
      }
      return r;
    },
  });
  await client.connect(transport);
  assert.equal(transport.protocolVersion, "2025-11-25");
  return client;
}

/** Calls `call` with the 1.x client and expects -32042 (one URL
 * elicitation); returns the error's data as the server sent it. */
async function urlElicitationRequired(client, call) {
  let answer;
  try {
    answer = await client.callTool(call);
  } catch (e) {
    assert.ok(e instanceof UrlElicitationRequiredError, String(e));
    assert.equal(e.code, ErrorCode.UrlElicitationRequired);
    assert.equal(e.code, -32042);
    assert.equal(e.elicitations.length, 1, JSON.stringify(e.data));
    const [elicitation] = e.elicitations;
    assert.equal(elicitation.mode, "url");
    const sent = client.wire.at(-1);
    assert.equal(sent.code, -32042);
    assert.deepEqual(sent.data.elicitations, e.elicitations);
    assert.match(sent.data.requestId, /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
    assert.equal(elicitation.elicitationId, sent.data.requestId);
    return sent.data;
  }
  assert.fail(`the call did not answer -32042: ${JSON.stringify(answer)}`);
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const ms = (x) => `${Math.round(x)} ms`;

/**
 * The person at notes-app, signed in with the app's own session: opens an
 * approval URL (the card of that request must be on the page, with the
 * tool, the arguments and the client's name), then decides it with the
 * page's JSON (`/agent-approvals/pending` for the csrf, then
 * `/agent-approvals/decide`). `decided` keeps, per request id, when the
 * approving POST started.
 */
class NotesPerson {
  constructor(base, cookie) {
    Object.assign(this, { base, cookie, decision: "once", decided: new Map(), errors: [] });
  }

  get(path) {
    return fetch(new URL(path, this.base), { headers: { cookie: this.cookie } });
  }

  async notes() {
    return (await this.get("/notes")).json();
  }

  /** Shown `url`: decides it a moment later (errors kept for the test). */
  prompt(url) {
    const decision = this.decision;
    setTimeout(() => this.decide(url, decision).catch((e) => this.errors.push(e)), think());
  }

  async decide(url, decision) {
    const at = new URL(url);
    assert.equal(at.origin, this.base);
    assert.equal(at.pathname, "/agent-approvals");
    const id = at.hash.replace(/^#r-/, "");
    const page = await (await this.get(at.pathname)).text();
    const card = page.match(new RegExp(`<div class="approval" id="r-${id}">(.*?)</div>`, "s"));
    assert.ok(card, `no card for ${id} on the page`);
    assert.match(card[1], /add_note/);
    assert.match(card[1], /Node MRTR Agent|Node URL Agent/);
    const pending = await (await this.get("/agent-approvals/pending")).json();
    const a = pending.approvals.find((x) => x.requestId === id);
    assert.ok(a, `request ${id} is not pending`);
    const started = performance.now();
    const r = await fetch(new URL("/agent-approvals/decide", this.base), {
      method: "POST",
      headers: { cookie: this.cookie, "content-type": "application/json" },
      body: JSON.stringify({
        grant: a.grant, requestId: a.requestId, seq: a.seq, fingerprint: a.fingerprint, decision, csrf: pending.csrf,
      }),
    });
    assert.equal(r.status, 200, await r.text());
    this.decided.set(id, { started, approval: a });
    return a;
  }
}

/**
 * The person at the demo server: their Agents page is the connected tab
 * (one poll loop, as /agents/app.js has). A URL shown to them names the
 * request (`/agents#approval-<id>`); a moment after it is shown and once
 * the tab lists that approval, they decide it there. The tab performs the
 * jobs of approved runs with the app's own API.
 */
class TabPerson {
  constructor(tab) {
    Object.assign(this, { tab, decision: "once", prompts: new Map(), pending: new Map(), decided: new Map(), errors: [] });
  }

  prompt(url) {
    const at = new URL(url);
    assert.equal(at.origin, this.tab.base);
    assert.equal(at.pathname, "/agents");
    const id = at.hash.replace(/^#approval-/, "");
    const decision = this.decision;
    setTimeout(() => { this.prompts.set(id, decision); this.maybeDecide(id); }, think());
  }

  /** Decides `id` once it was shown (and the person thought) and the tab lists it. */
  maybeDecide(id) {
    const a = this.pending.get(id);
    if (!a || !this.prompts.has(id) || this.decided.has(id)) return;
    const started = performance.now();
    this.decided.set(id, { started, approval: a });
    this.tab.decide(a, this.prompts.get(id)).then(
      (r) => { if (r.status !== 200) this.errors.push(new Error(`decide: ${r.status}`)); },
      (e) => this.errors.push(e),
    );
  }

  start() {
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        const w = await this.tab.poll();
        this.pending = new Map(w.approvals.map((a) => [a.requestId, a]));
        for (const id of this.pending.keys()) this.maybeDecide(id);
        for (const job of w.jobs) await this.tab.perform(job);
      }
    })().catch((e) => this.errors.push(e));
  }

  async stop() {
    this.running = false;
    await this.tab.stop();
  }
}

test("the TypeScript client 2.x at 2026-07-28: notes-app's approval as a multi round-trip request", async (t) => {
  const later = cleanups(t);
  const app = await startNotesApp();
  later(() => app.stop());
  const provider = new Provider("bob", { name: "Node MRTR Agent", authorize: notesSignIn });
  const serverUrl = await signIn(auth2, app.mcpUrl, provider);
  const person = new NotesPerson(app.base, provider.cookie);
  const shown = [];
  const client = await connect2(serverUrl, provider, shown, person);
  later(() => client.close());
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name).sort(), ["add_note", "list_notes"]);

  // Approved: the handler is shown the page's URL once, the SDK's own retry
  // returns the note, which exists once.
  const done = await client.callTool({ name: "add_note", arguments: { text: "via TS MRTR" } });
  assert.equal(done.isError, false, JSON.stringify(done));
  assert.equal(body(done).status, "done", JSON.stringify(done));
  assert.equal(body(done).result.text, "via TS MRTR");
  assert.deepEqual(person.errors, []);
  assert.equal(shown.length, 1, JSON.stringify(shown));
  const url = new URL(shown[0].url);
  assert.equal(url.pathname, "/agent-approvals");
  assert.equal(url.hash, `#r-${body(done).requestId}`);
  assert.ok(!url.search && !url.username && !/token|code=/i.test(shown[0].url), "no credential in the URL");
  assert.match(shown[0].message, /add_note/);
  const approved = person.decided.get(body(done).requestId).approval;
  assert.deepEqual(JSON.parse(approved.arguments), { text: "via TS MRTR" });
  assert.equal(approved.client.name, "Node MRTR Agent");
  assert.deepEqual((await person.notes()).map((n) => n.text), ["via TS MRTR"]);

  // Denied: a tool error, no note.
  person.decision = "deny";
  const denied = await client.callTool({ name: "add_note", arguments: { text: "denied" } });
  assert.equal(denied.isError, true, JSON.stringify(denied));
  assert.equal(body(denied).error.code, "PERMISSION_DENIED", JSON.stringify(denied));
  assert.equal(shown.length, 2);
  assert.deepEqual(person.errors, []);
  assert.equal((await person.notes()).length, 1, "the denied write had no effect");

  const logs = app.logs();
  for (const secret of [provider.current.access_token, provider.current.refresh_token, provider.cookie.split("=")[1]]) {
    assert.ok(!logs.includes(secret), "no secret in the logs");
  }
});

test("the TypeScript client 2.x at 2026-07-28: execute's approval as a multi round-trip request, run by the tab", async (t) => {
  const later = cleanups(t);
  const server = await startServer();
  later(() => server.stop());
  const provider = new Provider("dora", { name: "Node MRTR Agent" });
  const serverUrl = await signIn(auth2, server.mcpUrl, provider);
  const tab = await new ScriptedTab(server.base, provider.cookie).open();
  assert.equal((await tab.connect()).json.grants[0].state, "connected");
  const person = new TabPerson(tab);
  person.start();
  later(() => person.stop());
  const shown = [];
  const client = await connect2(serverUrl, provider, shown, person);
  later(() => client.close());

  const requestId = randomUUID();
  const code = JSON.stringify([{ skill: "create_note", args: { title: "TS MRTR", body: "via the 2.x client" } }]);
  const done = await client.callTool({ name: "execute", arguments: { requestId, code } });
  assert.equal(body(done).status, "done", JSON.stringify(done));
  assert.equal(body(done).requestId, requestId);
  assert.equal(body(done).result[0].result.title, "TS MRTR");
  assert.deepEqual(person.errors, []);
  assert.deepEqual(shown.map((s) => s.url), [`${server.base}/agents#approval-${requestId}`]);
  const approved = person.decided.get(requestId).approval;
  assert.equal(approved.args.title, "TS MRTR");
  assert.equal(approved.client.name, "Node MRTR Agent");
  assert.equal(tab.jobs, 1);

  // The same requestId again: the stored result, no prompt, no second run.
  const again = await client.callTool({ name: "execute", arguments: { requestId, code } });
  assert.deepEqual(body(again), body(done));
  assert.equal(shown.length, 1);

  // Denied: a tool error, nothing sent to the tab.
  person.decision = "deny";
  const refused = JSON.stringify([{ skill: "create_note", args: { title: "never", body: "denied" } }]);
  const denied = await client.callTool({ name: "execute", arguments: { requestId: randomUUID(), code: refused } });
  assert.equal(denied.isError, true, JSON.stringify(denied));
  assert.equal(body(denied).error.code, "PERMISSION_DENIED", JSON.stringify(denied));
  assert.equal(shown.length, 2);
  assert.deepEqual(person.errors, []);
  assert.equal(tab.jobs, 1);
  assert.deepEqual((await tab.notes()).map((n) => n.title), ["TS MRTR"]);
});

test("the TypeScript SDK 1.x at 2025-11-25: notes-app's approval through -32042, then the call again with the requestId", async (t) => {
  const later = cleanups(t);
  const app = await startNotesApp();
  later(() => app.stop());
  const provider = new Provider("erin", { name: "Node URL Agent", authorize: notesSignIn });
  const client = await connect1(await signIn(auth1, app.mcpUrl, provider), provider);
  later(() => client.close());
  const person = new NotesPerson(app.base, provider.cookie);

  const call = { name: "add_note", arguments: { text: "via -32042" } };
  const data = await urlElicitationRequired(client, call);
  const rid = data.requestId;
  assert.equal(data.elicitations[0].url, `${app.base}/agent-approvals#r-${rid}`);
  assert.match(data.elicitations[0].message, /add_note/);
  assert.deepEqual(await person.notes(), [], "nothing ran before the approval");
  const approved = await person.decide(data.elicitations[0].url, "once");
  assert.deepEqual(JSON.parse(approved.arguments), call.arguments);
  assert.equal(approved.client.name, "Node URL Agent");
  const resumed = { ...call, _meta: { [META]: rid } };
  const done = await client.callTool(resumed);
  assert.equal(body(done).status, "done", JSON.stringify(done));
  assert.equal(body(done).requestId, rid);
  assert.equal(body(done).result.text, "via -32042");
  assert.deepEqual(body(await client.callTool(resumed)), body(done), "a repeat answers the stored result");
  assert.deepEqual((await person.notes()).map((n) => n.text), ["via -32042"]);

  // Denied: the call again is a tool error; no note.
  const deny = { name: "add_note", arguments: { text: "denied" } };
  const refused = await urlElicitationRequired(client, deny);
  await person.decide(refused.elicitations[0].url, "deny");
  const denied = await client.callTool({ ...deny, _meta: { [META]: refused.requestId } });
  assert.equal(denied.isError, true, JSON.stringify(denied));
  assert.equal(body(denied).error.code, "PERMISSION_DENIED");
  assert.equal((await person.notes()).length, 1);
});

test("the TypeScript SDK 1.x at 2025-11-25: execute through -32042, approved and run in the connected tab", async (t) => {
  const later = cleanups(t);
  const server = await startServer();
  later(() => server.stop());
  const p2 = new Provider("erin", { name: "Node URL Agent" });
  const c2 = await connect1(await signIn(auth1, server.mcpUrl, p2), p2);
  later(() => c2.close());
  const tab = await new ScriptedTab(server.base, p2.cookie).open();
  await tab.connect();
  const requestId = randomUUID();
  const code = JSON.stringify([{ skill: "create_note", args: { title: "URL elicitation", body: "1.x" } }]);
  const exec = { name: "execute", arguments: { requestId, code } };
  const pending = await urlElicitationRequired(c2, exec);
  assert.equal(pending.elicitations[0].url, `${server.base}/agents#approval-${requestId}`);
  assert.equal(pending.requestId, requestId, "data.requestId is the ledger's request id");
  const approval = await tab.approval();
  assert.equal(approval.requestId, requestId);
  assert.equal((await tab.decide(approval, "once")).status, 200);
  tab.work();
  later(() => tab.stop());
  let result = body(await c2.callTool({ ...exec, _meta: { [META]: pending.requestId } }));
  for (let i = 0; result.status === "execution_pending" && i < 20; i++) {
    await sleep(200);
    result = body(await c2.callTool({ ...exec, _meta: { [META]: pending.requestId } }));
  }
  assert.equal(result.status, "done", JSON.stringify(result));
  assert.equal(result.result[0].result.title, "URL elicitation");
  assert.equal(tab.jobs, 1);
  assert.equal((await tab.notes()).length, 1);
});

/** `n` approved writes through `call(i)` with a 2.x client whose person
 * decides each; the time from each approving POST to the SDK's result. */
async function measure(n, person, shown, call) {
  const latencies = [];
  for (let i = 0; i < n; i++) {
    const before = shown.length;
    const r = await call(i);
    const ended = performance.now();
    const id = body(r).requestId;
    assert.equal(body(r).status, "done", JSON.stringify(r));
    assert.equal(shown.length, before + 1, "one prompt per approval");
    latencies.push(ended - person.decided.get(id).started);
  }
  assert.deepEqual(person.errors, []);
  return latencies;
}

function report(where, n, shown, latencies) {
  const line = `FIGURE mrtr ${where}: ${n} approvals, prompts per approval ${shown.length / n}, `
    + `approve → result p50 ${ms(median(latencies))}, max ${ms(Math.max(...latencies))}`;
  console.log(line);
  assert.equal(shown.length, n);
  assert.ok(median(latencies) < 1000, line);
}

test(`figure: approving POST to the 2.x SDK's result over ${APPROVALS} approvals on redb`, async (t) => {
  const later = cleanups(t);
  // notes-app: the server performs the write.
  const app = await startNotesApp();
  later(() => app.stop());
  const provider = new Provider("fay", { name: "Node MRTR Agent", authorize: notesSignIn });
  const serverUrl = await signIn(auth2, app.mcpUrl, provider);
  const person = new NotesPerson(app.base, provider.cookie);
  const shown = [];
  const client = await connect2(serverUrl, provider, shown, person);
  later(() => client.close());
  const notes = await measure(APPROVALS, person, shown, (i) =>
    client.callTool({ name: "add_note", arguments: { text: `note ${i}` } }));
  assert.equal((await person.notes()).length, APPROVALS);
  report("notes-app (add_note, run by the server)", APPROVALS, shown, notes);

  // The demo server: execute, approved and run in the connected tab.
  const server = await startServer();
  later(() => server.stop());
  const p2 = new Provider("fay", { name: "Node MRTR Agent" });
  const url2 = await signIn(auth2, server.mcpUrl, p2);
  const tab = await new ScriptedTab(server.base, p2.cookie).open();
  await tab.connect();
  const tabPerson = new TabPerson(tab);
  tabPerson.start();
  later(() => tabPerson.stop());
  const shown2 = [];
  const c2 = await connect2(url2, p2, shown2, tabPerson);
  later(() => c2.close());
  const exec = await measure(APPROVALS, tabPerson, shown2, (i) => c2.callTool({
    name: "execute",
    arguments: { requestId: randomUUID(), code: JSON.stringify([{ skill: "create_note", args: { title: `n${i}`, body: "figure" } }]) },
  }));
  assert.equal(tab.jobs, APPROVALS);
  assert.equal((await tab.notes()).length, APPROVALS);
  report("portcullis serve (execute, run by the connected tab)", APPROVALS, shown2, exec);
});
