// The resource gateway end to end: `portcullis serve --source board=URL` in
// front of a downstream MCP server (the official TypeScript SDK's server,
// ./downstream.mjs, on loopback). The MCP TypeScript SDK client, authorized
// against Portcullis, lists the downstream tool with its UI metadata mapped,
// lists and reads its `ui://` HTML through the gateway (self-references
// mapped, every other byte identical), calls the tool once through approval
// with a requestId and repeats it without a second downstream execution;
// the downstream is then stopped (its tools fail with source_unavailable,
// the built-in tools keep working) and restarted (its tools come back).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, Provider, ScriptedTab, sleep } from "./helpers.mjs";
import { WIDGET, HTML } from "./downstream.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const GW = "ui://portcullis/board/widget/board.html";

/** Starts ./downstream.mjs on `port` (0: any); resolves once it listens. */
async function startDownstream(port = 0, executions = 0) {
  const child = spawn(process.execPath, [join(here, "downstream.mjs"), String(port), String(executions)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const bound = await new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening (\d+)/);
      if (m) ok(Number(m[1]));
    });
    child.on("exit", (code) => fail(new Error(`downstream exited ${code}`)));
  });
  const base = `http://127.0.0.1:${bound}`;
  return {
    port: bound,
    url: `${base}/mcp`,
    async executions() { return (await (await fetch(`${base}/count`)).json()).executions; },
    async stop() {
      const exited = new Promise((ok) => child.on("exit", ok));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** An authorized SDK client of `server` as `user`. */
async function connectClient(server, user) {
  const provider = new Provider(user);
  const serverUrl = new URL(server.mcpUrl);
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
  const client = new Client({ name: "gateway-e2e", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  return { client, provider };
}

const body = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);

test("downstream tools and UI resources through the gateway, under approval and the ledger", async (t) => {
  let down = await startDownstream();
  t.after(() => down.stop().catch(() => {}));
  const server = await startServer(["--source", `board=${down.url}`, "--source-call-timeout-secs", "5"]);
  t.after(() => server.stop());

  const { client, provider } = await connectClient(server, "carol");

  // The tools: the built-ins, then the source's under their own names, UI
  // metadata mapped in both conventions, schema and annotations unchanged.
  const { tools } = await client.listTools();
  assert.deepEqual(tools.map((x) => x.name), ["search_skills", "describe_skill", "execute", "pin_card", "big_text", "board_status"]);
  const pin = tools.find((x) => x.name === "pin_card");
  assert.equal(pin._meta.ui.resourceUri, GW);
  assert.equal(pin._meta["openai/outputTemplate"], GW);
  assert.deepEqual(pin.inputSchema.required, ["title"]);
  assert.equal(pin.annotations.readOnlyHint, false);

  // The resources: listed and templated under gateway URIs; the read maps
  // the HTML's self-references and leaves every other byte alone.
  const { resources } = await client.listResources();
  assert.deepEqual(resources.map((r) => r.uri), [GW]);
  assert.equal(resources[0].mimeType, "text/html;profile=mcp-app");
  const { resourceTemplates } = await client.listResourceTemplates();
  assert.deepEqual(resourceTemplates.map((r) => r.uriTemplate), ["ui://portcullis/board/widget/{name}.html"]);
  const read = await client.readResource({ uri: GW });
  const [page] = read.contents;
  assert.equal(page.uri, GW);
  assert.equal(page.mimeType, "text/html;profile=mcp-app");
  assert.equal(page._meta.ui.prefersBorder, true);
  const expected = HTML.split(`"${WIDGET}"`).join(`"${GW}"`).split(`'${WIDGET}'`).join(`'${GW}'`);
  assert.equal(page.text, expected);
  assert.ok(page.text.includes(`${WIDGET}.map`), "a longer URI is not rewritten");
  assert.ok(page.text.includes("https://example.com/docs"));

  // A write tool asks for approval in the connected tab, runs once, and a
  // repeat of the same requestId answers the stored result.
  const tab = await new ScriptedTab(server.base, provider.cookie, "gw-tab", "gw-page").open();
  assert.equal((await tab.connect()).status, 200);
  const requestId = randomUUID();
  const call = { name: "pin_card", arguments: { title: "Gateway card" }, _meta: { "portcullis/requestId": requestId } };
  const first = body(await client.callTool(call));
  assert.equal(first.status, "approval_pending", JSON.stringify(first));
  assert.equal(first.requestId, requestId);
  assert.equal(await down.executions(), 0, "nothing runs before the approval");
  const approval = await tab.approval();
  assert.equal(approval.args.title, "Gateway card");
  assert.equal((await tab.decide(approval, "once")).status, 200);

  const done = await client.callTool(call);
  assert.ok(!done.isError, JSON.stringify(done));
  assert.deepEqual(done.structuredContent, { pinned: "Gateway card", executions: 1 });
  assert.equal(done._meta["ui/resourceUri"], GW);
  assert.equal(done._meta["portcullis/requestId"], requestId);
  assert.equal(done.content[1].uri, GW);
  assert.equal(await down.executions(), 1);
  const again = await client.callTool(call);
  assert.deepEqual(again, done);
  assert.equal(await down.executions(), 1, "a repeated requestId never runs the call twice");

  // A read-only tool needs no approval (and no requestId: one is made).
  const status = await client.callTool({ name: "board_status", arguments: {} });
  assert.deepEqual(status.structuredContent, { executions: 1 });

  // The downstream stops: its tools and resources fail clearly; the
  // built-in tools are unaffected.
  const port = down.port;
  await down.stop();
  let failed;
  for (let i = 0; i < 40; i++) {
    failed = await client.callTool({ name: "board_status", arguments: {}, _meta: { "portcullis/requestId": randomUUID() } });
    if (failed.isError) break;
    await sleep(250);
  }
  assert.equal(failed.isError, true, JSON.stringify(failed));
  assert.match(JSON.stringify(failed.structuredContent), /source_unavailable|SOURCE_UNAVAILABLE/);
  assert.match(JSON.stringify(failed.structuredContent), /source board/);
  const skills = body(await client.callTool({ name: "search_skills", arguments: { query: "" } }));
  assert.equal(skills.ok, true);
  await sleep(6000); // the gateway's health check notices the closed source
  const refused = body(await client.callTool({ name: "board_status", arguments: {}, _meta: { "portcullis/requestId": randomUUID() } }));
  assert.equal(refused.error.code, "source_unavailable", JSON.stringify(refused));
  await assert.rejects(client.readResource({ uri: GW }), /source board is unavailable/);
  assert.deepEqual((await client.listResources()).resources, [], "a down source's resources are left out");

  // It comes back on the same port: the gateway reconnects.
  down = await startDownstream(port, 1);
  let back;
  for (let i = 0; i < 80; i++) {
    back = await client.callTool({ name: "board_status", arguments: {}, _meta: { "portcullis/requestId": randomUUID() } });
    if (!back.isError) break;
    await sleep(250);
  }
  assert.deepEqual(back.structuredContent, { executions: 1 }, JSON.stringify(back));
  assert.equal((await client.readResource({ uri: GW })).contents[0].text, expected);
  await client.close();
});

test("a stdio source (a local command) works through the gateway", async (t) => {
  const cmd = `cmd:${process.execPath} ${join(here, "downstream.mjs")} stdio local_`;
  const server = await startServer(["--source", `local=${cmd}`]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "dave");
  const tab = await new ScriptedTab(server.base, provider.cookie, "stdio-tab", "stdio-page").open();
  assert.equal((await tab.connect()).status, 200);
  const names = (await client.listTools()).tools.map((x) => x.name);
  assert.deepEqual(names.slice(3), ["local_pin_card", "local_big_text", "local_board_status"]);
  const status = await client.callTool({ name: "local_board_status", arguments: {} });
  assert.deepEqual(status.structuredContent, { executions: 0 });
  const uri = "ui://portcullis/local/widget/board.html";
  const read = await client.readResource({ uri });
  assert.equal(read.contents[0].text, HTML.split(`"${WIDGET}"`).join(`"${uri}"`).split(`'${WIDGET}'`).join(`'${uri}'`));
  await client.close();
});

test("a source's tools run on this server (portcullis-axum's server executor): no tab needed, a write still asks", async (t) => {
  const cmd = `cmd:${process.execPath} ${join(here, "downstream.mjs")} stdio`;
  const server = await startServer(["--source", `local=${cmd}`]);
  t.after(() => server.stop());
  const { client } = await connectClient(server, "frank");
  // No tab is connected: execute, which the tab performs, cannot run...
  const code = JSON.stringify([{ skill: "list_notes", args: {} }]);
  const exec = body(await client.callTool({ name: "execute", arguments: { requestId: randomUUID(), code } }));
  assert.equal(exec.error.code, "no_live_tab", JSON.stringify(exec));
  // ...while a source's read runs here, under the ledger.
  const id = randomUUID();
  const read = { name: "board_status", arguments: {}, _meta: { "portcullis/requestId": id } };
  const status = await client.callTool(read);
  assert.ok(!status.isError, JSON.stringify(status));
  assert.deepEqual(status.structuredContent, { executions: 0 });
  assert.equal(status._meta["portcullis/requestId"], id);
  // A write waits for the person's approval all the same, and nothing ran.
  const write = { name: "pin_card", arguments: { title: "Tabless" }, _meta: { "portcullis/requestId": randomUUID() } };
  const pending = body(await client.callTool(write));
  assert.equal(pending.status, "approval_pending", JSON.stringify(pending));
  const again = { ...read, _meta: { "portcullis/requestId": randomUUID() } };
  assert.deepEqual((await client.callTool(again)).structuredContent, { executions: 0 });
  await client.close();
});

test("a tool name two sources share is refused at start", async () => {
  const cmd = `cmd:${process.execPath} ${join(here, "downstream.mjs")} stdio`;
  await assert.rejects(
    startServer(["--source", `one=${cmd}`, "--source", `two=${cmd}`]),
    /tool "pin_card" is offered by both source one and source two/,
  );
});

test("an oversized or slow answer fails only its own call", async (t) => {
  const down = await startDownstream();
  t.after(() => down.stop());
  const server = await startServer([
    "--source", `board=${down.url}`,
    "--source-max-response-bytes", "65536",
    "--source-call-timeout-secs", "2",
  ]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "erin");
  const tab = await new ScriptedTab(server.base, provider.cookie, "b-tab", "b-page").open();
  assert.equal((await tab.connect()).status, 200);
  const big = (args) => client.callTool({ name: "big_text", arguments: args, _meta: { "portcullis/requestId": randomUUID() } });

  const small = await big({ bytes: 1000 });
  assert.equal(small.content[0].text.length, 1000);
  const huge = await big({ bytes: 200000 });
  assert.equal(huge.isError, true, JSON.stringify(huge).slice(0, 500));
  const hugeError = huge.structuredContent.result.error;
  assert.match(hugeError.code, /^(RESPONSE_TOO_LARGE|SOURCE_UNAVAILABLE)$/);
  assert.match(hugeError.message, /65536 bytes/);
  const works = async () => {
    let next;
    for (let i = 0; i < 40; i++) {
      next = await big({ bytes: 10 });
      if (!next.isError) return next;
      await sleep(250);
    }
    return next;
  };
  assert.equal((await works()).content[0].text, "x".repeat(10));
  const slow = await big({ bytes: 10, delayMs: 4000 });
  assert.equal(slow.isError, true);
  assert.equal(slow.structuredContent.result.error.code, "SOURCE_TIMEOUT", JSON.stringify(slow));
  // The source itself is fine: the next call works (after a reconnection).
  const next = await works();
  assert.equal(next.content[0].text, "x".repeat(10), JSON.stringify(next));
  await client.close();
});
