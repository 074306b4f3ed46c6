// The official MCP TypeScript SDK against `portcullis serve`: discovery,
// dynamic registration, PKCE and code exchange through the SDK's OAuth
// client provider; Streamable HTTP; `execute` through approval in a
// scripted connected tab; and a refresh once the 2 s access token expires.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, Provider, ScriptedTab, sleep } from "./helpers.mjs";

const text = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

test("the MCP SDK connects with OAuth, executes through approval and refreshes", async (t) => {
  const server = await startServer(["--access-token-ttl-secs", "2", "--jwt-leeway-secs", "0"]);
  t.after(() => server.stop());
  const provider = new Provider("alice");
  const serverUrl = new URL(server.mcpUrl);

  // Authorize up front with the scopes the resource metadata lists (the
  // 401 challenge names only `skills:read`, which listing tools needs).
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(provider.lastUrl.searchParams.get("code_challenge_method"), "S256");
  assert.equal(provider.lastUrl.searchParams.get("resource"), server.mcpUrl);
  assert.match(provider.lastUrl.searchParams.get("scope"), /skills:write/);
  assert.ok(provider.client.client_id, "registered dynamically");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
  assert.equal(provider.saved.length, 1);

  const client = new Client({ name: "portcullis-e2e", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name), ["search_skills", "describe_skill", "execute"]);
  const found = text(await client.callTool({ name: "search_skills", arguments: { query: "note" } }));
  assert.equal(found.skills.length, 3);

  const tab = await new ScriptedTab(server.base, provider.cookie).open();
  const connected = await tab.connect();
  assert.equal(connected.json.grants[0].state, "connected");

  const requestId = randomUUID();
  const code = JSON.stringify([{ skill: "create_note", args: { title: "From Node", body: "via the SDK" } }]);
  const call = { name: "execute", arguments: { requestId, code } };
  const first = text(await client.callTool(call));
  assert.equal(first.status, "approval_pending", JSON.stringify(first));
  assert.equal(first.approval.client.name, "Node SDK Agent");

  const approval = await tab.approval();
  assert.equal(approval.args.title, "From Node");
  assert.equal((await tab.decide(approval, "once")).status, 200);

  tab.work();
  const done = text(await client.callTool(call));
  assert.equal(done.status, "done", JSON.stringify(done));
  assert.equal(done.result[0].result.title, "From Node");
  assert.equal((await tab.notes()).length, 1);

  // Past the access token's expiry the SDK refreshes (the refresh token
  // rotates) and the same requestId returns the stored result.
  await sleep(3100);
  const again = text(await client.callTool(call));
  assert.deepEqual(again, done);
  assert.equal(provider.saved.length, 2, "one refresh");
  assert.notEqual(provider.saved[1].refresh_token, provider.saved[0].refresh_token);
  assert.equal((await tab.notes()).length, 1, "the write ran exactly once");
  assert.equal(tab.jobs, 1);
  await tab.stop();
  await client.close();

  const logs = server.logs();
  for (const secret of [provider.saved[0].access_token, provider.saved[1].refresh_token,
    provider.code, provider.verifier, provider.cookie.split("=")[1], "From Node"]) {
    assert.ok(!logs.includes(secret), "no secret or user data in the logs");
  }
});
