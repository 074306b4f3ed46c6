// One connector, a granted set (issue 32, item 3): `portcullis serve` with
// two sources (./source.mjs over stdio, `a` and `b`) and the built-in tools
// as one more app (`_host`). One user connects two agents: the first with
// the consent's default (every app), the second choosing only source b on
// the consent screen. Each lists, reads and calls only its own set; a tool
// or resource outside it answers exactly as one that does not exist; and a
// change made from the Agents page (its JSON route, then its form) takes
// effect on the agent's next request.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, Provider, ScriptedTab, csrfOf } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const source = (name, ...args) => ["--source", `${name}=cmd:${process.execPath} ${join(here, "source.mjs")} ${args.join(" ")}`];
const BUILTINS = ["search_skills", "describe_skill", "execute"];
const A_URI = "ui://portcullis/a/app/plain.html";
const B_URI = "ui://portcullis/b/app/plain.html";

const form = (pairs) => new URLSearchParams(pairs).toString();

/** Consent as `authorizeAsUser` does, posting `fields` (the choice of
 * apps) with the decision; checks the screen offers every app, "every app"
 * checked. */
function consentChoosing(fields) {
  return async (authorizationUrl, user, cookie) => {
    const url = new URL(authorizationUrl);
    const html = await (await fetch(url, { headers: { cookie } })).text();
    assert.match(html, /name="apps" value="all" checked/);
    for (const app of ["_host", "a", "b"]) assert.match(html, new RegExp(`name="app:${app}"`));
    const r = await fetch(url, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie },
      body: form([["intent", "allow"], ["csrf", csrfOf(html)], ...fields]),
    });
    assert.equal(r.status, 302, `consent: ${r.status}`);
    const back = new URL(r.headers.get("location"));
    return { cookie, code: back.searchParams.get("code"), iss: back.searchParams.get("iss") ?? undefined };
  };
}

async function connect(server, provider) {
  const serverUrl = new URL(server.mcpUrl);
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
  const client = new Client({ name: provider.name, version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  return client;
}

const names = async (client) => (await client.listTools()).tools.map((t) => t.name).sort();
const uris = async (client) => (await client.listResources()).resources.map((r) => r.uri).sort();
const call = (client, name, args = {}) =>
  client.callTool({ name, arguments: args, _meta: { "portcullis/requestId": randomUUID() } });
/** The error a call or read rejects with: its JSON-RPC code and message. */
const refusal = async (promise) => {
  try {
    await promise;
  } catch (e) {
    return { code: e.code, message: e.message };
  }
  assert.fail("expected a refusal");
};

test("two agents of one user reach different apps; a change on the Agents page applies at once", async (t) => {
  const server = await startServer([
    ...source("a", "tools=a_w", "ctl=a_", "resources=plain"),
    ...source("b", "tools=b_w", "ctl=b_", "resources=plain"),
  ]);
  t.after(() => server.stop());

  // Agent 1: the consent's default (no choice posted), every app.
  const every = new Provider("dana", { name: "Every App Agent" });
  const all = await connect(server, every);
  // Agent 2, same user and session: only source b, chosen on the screen.
  const limitedProvider = new Provider("dana", {
    name: "Only B Agent",
    authorize: consentChoosing([["apps", "selected"], ["app:b", "on"]]),
  });
  limitedProvider.cookie = every.cookie;
  const limited = await connect(server, limitedProvider);

  const tab = await new ScriptedTab(server.base, every.cookie, "g-tab", "g-page").open();
  assert.equal((await tab.connect()).status, 200);

  // tools/list and resources/list: every app, or only b's.
  const aTools = ["a_bad_link", "a_big", "a_drop", "a_flood", "a_stats", "a_w"];
  const bTools = aTools.map((n) => n.replace(/^a_/, "b_"));
  assert.deepEqual(await names(all), [...aTools, ...bTools, ...BUILTINS].sort());
  assert.deepEqual(await names(limited), bTools.sort());
  assert.deepEqual(await uris(all), [A_URI, B_URI]);
  assert.deepEqual(await uris(limited), [B_URI]);

  // b's tools and resources work for the limited agent.
  assert.equal((await call(limited, "b_stats")).isError ?? false, false);
  assert.equal((await limited.readResource({ uri: B_URI })).contents.length, 1);

  // a's tools, and the built-ins, answer as a tool that does not exist
  // (the same error, nothing about a), and a's resource as a source that
  // does not exist; a's write never ran, nor asked for an approval.
  const missing = await refusal(call(limited, "zz_no_such_tool"));
  assert.equal(missing.code, -32602);
  for (const name of ["a_w", "a_stats", "execute", "search_skills"]) {
    const r = await refusal(call(limited, name));
    assert.equal(r.code, missing.code, name);
    assert.equal(r.message, missing.message.replace("zz_no_such_tool", name), name);
  }
  const noSource = await refusal(limited.readResource({ uri: "ui://portcullis/zz/app/plain.html" }));
  const aRead = await refusal(limited.readResource({ uri: A_URI }));
  assert.equal(aRead.code, noSource.code);
  assert.equal(aRead.message, noSource.message.replace("zz", "a"));
  assert.deepEqual((await call(all, "a_stats")).structuredContent.executions, {});
  assert.equal((await tab.poll()).approvals.length, 0);

  // The Agents page links the choice; its page shows each grant's.
  const agents = await (await fetch(`${server.base}/agents`, { headers: { cookie: every.cookie } })).text();
  assert.match(agents, /href="\/agents\/granted"/);
  const page = async () => (await fetch(`${server.base}/agents/granted`, { headers: { cookie: every.cookie } })).text();
  const grantOf = (html, name) => html.match(new RegExp(`data-grant="([^"]+)"><h2>${name}`))[1];
  let html = await page();
  const limitedGrant = grantOf(html, "Only B Agent");
  const everyGrant = grantOf(html, "Every App Agent");
  assert.match(html, new RegExp(`data-grant="${limitedGrant}">.*?name="apps" value="selected" checked.*?name="app:b" checked`));
  assert.match(html, new RegExp(`data-grant="${everyGrant}">.*?name="apps" value="all" checked`));

  // The JSON route: the limited agent now reaches a and the built-ins,
  // from its very next request.
  const json = (body, headers = {}) =>
    fetch(`${server.base}/agents/grants/apps`, {
      method: "POST",
      headers: { cookie: every.cookie, "x-csrf-token": tab.csrf, "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  let r = await json({ grant: limitedGrant, apps: ["a", "_host"] });
  assert.equal(r.status, 200);
  assert.deepEqual(await r.json(), { ok: true, grant: limitedGrant, apps: ["_host", "a"] });
  assert.deepEqual(await names(limited), [...aTools, ...BUILTINS].sort());
  assert.deepEqual(await uris(limited), [A_URI]);
  assert.equal((await refusal(call(limited, "b_stats"))).code, -32602);
  assert.equal((await call(limited, "a_stats")).isError ?? false, false);
  assert.equal(body(await call(limited, "search_skills", { query: "note" })).ok, true);
  // The other agent is unchanged.
  assert.deepEqual(await names(all), [...aTools, ...bTools, ...BUILTINS].sort());

  // Refusals change nothing: an unknown app, a malformed body, no CSRF
  // token, and another user's grant (unknown to this one).
  r = await json({ grant: limitedGrant, apps: ["zz"] });
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, "INVALID_PARAMS");
  assert.equal((await json({ grant: limitedGrant, apps: "some" })).status, 400);
  assert.equal((await json({ grant: limitedGrant, apps: "all" }, { "x-csrf-token": "forged" })).status, 403);
  const eve = new Provider("eve", { name: "Eve Agent" });
  await connect(server, eve);
  const eveTab = await new ScriptedTab(server.base, eve.cookie, "e-tab", "e-page").open();
  r = await fetch(`${server.base}/agents/grants/apps`, {
    method: "POST",
    headers: { cookie: eve.cookie, "x-csrf-token": eveTab.csrf, "content-type": "application/json" },
    body: JSON.stringify({ grant: limitedGrant, apps: "all" }),
  });
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.code, "invalid_grant");
  assert.deepEqual(await names(limited), [...aTools, ...BUILTINS].sort());

  // The page's form: every app again.
  html = await page();
  r = await fetch(`${server.base}/agents/granted`, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie: every.cookie },
    body: form({ csrf: csrfOf(html), grant: limitedGrant, apps: "all" }),
  });
  assert.equal(r.status, 303);
  assert.deepEqual(await names(limited), [...aTools, ...bTools, ...BUILTINS].sort());
  assert.deepEqual(await uris(limited), [A_URI, B_URI]);
  assert.match(await page(), new RegExp(`data-grant="${limitedGrant}">.*?name="apps" value="all" checked`));
});

const body = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);
