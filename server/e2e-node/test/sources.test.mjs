// The gateway against sources as they are (./source.mjs, the TypeScript
// SDK's server over stdio, configured per test): the MCP TypeScript SDK
// client, authorized against Portcullis, and a connected tab (scripted, or
// Chromium running the Agents page).
//
// * approvals and auto-approval are keyed by source and tool, never by a
//   name the app's own skill shares, and the approval card names the source;
// * a tool name belongs to its first owner for the life of the process (a
//   late source's claim is refused and logged; a dropped name is not handed
//   on), and a source that starts slowly gets longer to connect each time;
// * one source cannot cost the others: list_changed debounced, a flood cut
//   off, URIs it cannot have mapped left out of its own listing or failing
//   its own call clearly, an oversized stdio line failing its call at once,
//   and a 2 MB read with 4 096 known URIs leaving the server responsive.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, Provider, ScriptedTab, sleep } from "./helpers.mjs";
import { FIGURE_BIG, figurePage } from "./source.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** `--source NAME=cmd:node source.mjs ARGS…`. */
const source = (name, ...args) => ["--source", `${name}=cmd:${process.execPath} ${join(here, "source.mjs")} ${args.join(" ")}`];

/** An authorized SDK client of `server` as `user`. */
async function connectClient(server, user) {
  const provider = new Provider(user);
  const serverUrl = new URL(server.mcpUrl);
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
  const client = new Client({ name: "sources-e2e", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  return { client, provider };
}

const body = (r) => r.structuredContent ?? JSON.parse(r.content[0].text);
const names = async (client) => (await client.listTools()).tools.map((t) => t.name);
const call = (client, name, args = {}) =>
  client.callTool({ name, arguments: args, _meta: { "portcullis/requestId": randomUUID() } });

/** Polls `check` (every 250 ms, at most `ms`) until it returns a truthy value. */
async function until(check, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(250);
  }
}

test("approvals are per source and tool, and the card names the source", async (t) => {
  const server = await startServer(source("notes", "tools=create_note", "ctl=n_"));
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "hana");
  const stats = async () => body(await call(client, "n_stats")).executions.create_note ?? 0;

  // The Agents page in Chromium is the connected tab (the user's cookie).
  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const [name, value] = provider.cookie.split(/=(.*)/s);
  await context.addCookies([{ name, value, url: server.base }]);
  const page = await context.newPage();
  await page.goto(`${server.base}/agents`);
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  const decide = async (decision) => {
    const card = page.locator(".approval");
    await card.waitFor();
    const shown = { heading: await card.locator("h3").textContent(), auto: await card.locator("button[data-decision=auto]").textContent() };
    await card.locator(`button[data-decision=${decision}]`).click();
    await card.waitFor({ state: "detached" });
    return shown;
  };

  // The app's own create_note, always allowed while this tab is connected.
  const code = (title) => JSON.stringify([{ skill: "create_note", args: { title, body: "from the agent" } }]);
  const execute = (requestId, title = "App note") =>
    client.callTool({ name: "execute", arguments: { requestId, code: code(title) } });
  const appId = randomUUID();
  const appFirst = body(await execute(appId));
  assert.equal(appFirst.status, "approval_pending", JSON.stringify(appFirst));
  const appCard = await decide("auto");
  assert.match(appCard.heading, /wants to run create_note$/);
  assert.doesNotMatch(appCard.heading, /source/);
  assert.equal(body(await execute(appId)).status, "done");
  // (An identical write always asks again: another title.)
  const second = body(await execute(randomUUID(), "App note 2"));
  assert.equal(second.status, "done", `the app's create_note is now auto-approved: ${JSON.stringify(second)}`);

  // The source's create_note shares the name but not the approval: it asks,
  // and the card says whose it is.
  const downstream = { name: "create_note", arguments: { title: "Source note" }, _meta: { "portcullis/requestId": randomUUID() } };
  const pending = body(await client.callTool(downstream));
  assert.equal(pending.status, "approval_pending", JSON.stringify(pending));
  assert.equal(await stats(), 0, "nothing ran before the approval");
  const sourceCard = await decide("auto");
  assert.match(sourceCard.heading, /wants to run create_note from source notes$/);
  assert.match(sourceCard.auto, /auto-approve create_note from source notes while/);
  const done = await client.callTool(downstream);
  assert.ok(!done.isError, JSON.stringify(done));
  assert.match(done.content[0].text, /^ran create_note/);
  assert.equal(await stats(), 1);

  // Its own auto-approval now covers it (and only it).
  const again = await call(client, "create_note", { title: "Another" });
  assert.ok(!again.isError, JSON.stringify(again));
  assert.equal(await stats(), 2);
  await client.close();
});

test("a tool name never moves, a late source's claim is refused, and a slow start gets there", async (t) => {
  const server = await startServer([
    ...source("alpha", "tools=shared,alpha_only", "ctl=a_"),
    // Answers nothing for 5 s: longer than the first two attempts' connect
    // waits (3 s, then 6 s counting the restart: today every attempt gets
    // 3 s, and a stdio source is started anew each time, so it never gets
    // there).
    ...source("beta", "tools=shared,beta_only", "ctl=b_", "delay=5000"),
    "--source-connect-timeout-secs", "3",
  ]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "ines");
  const tab = await new ScriptedTab(server.base, provider.cookie, "own-tab", "own-page").open();
  assert.equal((await tab.connect()).status, 200);

  // alpha connects at once (or on a retry, on a loaded machine), beta later.
  const first = await until(async () => {
    const n = await names(client);
    return n.includes("alpha_only") && n;
  }, 30000, "alpha");
  assert.ok(first.includes("shared"), first.join());
  assert.ok(!first.includes("beta_only"), "beta is late");
  // Each attempt waits longer (3 s, 6 s, 12 s): beta connects in the end.
  const later = await until(async () => {
    const n = await names(client);
    return n.includes("beta_only") && n;
  }, 45000, "the slow source");
  assert.equal(later.filter((n) => n === "shared").length, 1);
  assert.match(server.logs(), /a tool name that another owner has is refused[^\n]*/);
  assert.match(server.logs(), /refused[^\n]*source beta|source beta[^\n]*refused/);
  // A write: approved once in the tab, then it runs, alpha's.
  const shared = { name: "shared", arguments: {}, _meta: { "portcullis/requestId": randomUUID() } };
  assert.equal(body(await client.callTool(shared)).status, "approval_pending");
  const approval = await tab.approval();
  assert.equal(approval.kind, "alpha/shared");
  assert.equal(approval.source, "alpha");
  assert.equal(approval.action, "shared");
  assert.equal((await tab.decide(approval, "once")).status, 200);
  assert.match((await client.callTool(shared)).content[0].text, /^ran shared/);
  assert.equal(body(await call(client, "a_stats")).executions.shared, 1);

  // alpha stops listing it: the name stays alpha's, beta does not get it.
  await call(client, "a_drop", { name: "shared" });
  await until(async () => !(await names(client)).includes("shared"), 10000, "alpha's new list");
  await sleep(2500);
  assert.ok(!(await names(client)).includes("shared"), "nobody else gets the name");
  await assert.rejects(call(client, "shared"), /no tool named/);
  assert.equal(body(await call(client, "b_stats")).executions.shared, undefined, "beta's never ran");
  await client.close();
});

test("list_changed is taken together, and a flood cuts off only its own source", async (t) => {
  const server = await startServer([...source("noisy", "ctl=f_"), ...source("calm", "ctl=c_", "resources=plain")]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "jon");
  const tab = await new ScriptedTab(server.base, provider.cookie, "f-tab", "f-page").open();
  assert.equal((await tab.connect()).status, 200);
  const lists = async () => body(await call(client, "f_stats")).listCalls;

  // 40 notifications over a second: a couple of listings, not 40.
  const before = await lists();
  await call(client, "f_flood", { n: 40, everyMs: 25 });
  await sleep(4000);
  const listed = (await lists()) - before;
  assert.ok(listed >= 1 && listed <= 3, `${listed} listings for 40 notifications`);

  // Thousands at once: the connection is dropped and made again; the
  // other source and the built-in tools never notice.
  await call(client, "f_flood", { n: 5000 });
  await until(() => /the source floods notifications/.test(server.logs()), 10000, "the flood's log line");
  assert.equal(body(await call(client, "c_stats")).listCalls >= 1, true);
  assert.equal(body(await client.callTool({ name: "search_skills", arguments: {} })).ok, true);
  const back = await until(async () => {
    const r = await call(client, "f_stats");
    return !r.isError && r;
  }, 30000, "the noisy source to come back");
  assert.ok(back.structuredContent.listCalls >= 1);
  await client.close();
});

test("URIs the gateway cannot map stay out of their own source's listing, or fail their call clearly", async (t) => {
  const server = await startServer([
    ...source("bad", "ctl=x_", "resources=plain,long,dots"),
    ...source("good", "ctl=g_", "resources=plain"),
  ]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "kai");
  const tab = await new ScriptedTab(server.base, provider.cookie, "u-tab", "u-page").open();
  assert.equal((await tab.connect()).status, 200);

  // One URI over 8 KiB and one with a `..` segment: left out of bad's
  // listing only, with a log line; everything else is listed.
  const { resources } = await client.listResources();
  assert.deepEqual(resources.map((r) => r.uri), ["ui://portcullis/bad/app/plain.html", "ui://portcullis/good/app/plain.html"]);
  assert.match(server.logs(), /entries whose URI cannot be mapped are left out/);
  // A gateway URI with a dot segment is refused, not resolved.
  await assert.rejects(client.readResource({ uri: "ui://portcullis/bad/evil/../good/main.html" }), /dot|\.\./);
  assert.match((await client.readResource({ uri: "ui://portcullis/good/app/plain.html" })).contents[0].text, /plain/);

  // A result that links to a URI the gateway cannot map: a clear error.
  const linked = await call(client, "x_bad_link");
  assert.equal(linked.isError, true, JSON.stringify(linked).slice(0, 300));
  const error = linked.structuredContent.result.error;
  assert.equal(error.code, "UNMAPPABLE_URI");
  assert.match(error.message, /source bad's result names a resource URI the gateway cannot pass on/);
  await client.close();
});

test("an oversized stdio line fails its own call at once", async (t) => {
  const server = await startServer([
    ...source("wide", "ctl=w_"),
    "--source-max-response-bytes", "65536",
    "--source-call-timeout-secs", "20",
  ]);
  t.after(() => server.stop());
  const { client, provider } = await connectClient(server, "lea");
  const tab = await new ScriptedTab(server.base, provider.cookie, "w-tab", "w-page").open();
  assert.equal((await tab.connect()).status, 200);

  const started = Date.now();
  const huge = await call(client, "w_big", { bytes: 200000 });
  const took = Date.now() - started;
  assert.equal(huge.isError, true, JSON.stringify(huge).slice(0, 300));
  const error = huge.structuredContent.result.error;
  assert.equal(error.code, "RESPONSE_TOO_LARGE", JSON.stringify(error));
  assert.match(error.message, /65536 bytes/);
  assert.ok(took < 5000, `answered after ${took} ms, not the 20 s call timeout`);
  // The connection is intact: the next call needs no reconnection.
  assert.equal((await call(client, "w_big", { bytes: 10 })).content[0].text, "x".repeat(10));
  await client.close();
});

test("a 2 MB read with 4 096 known URIs leaves the server responsive", async (t) => {
  const server = await startServer([...source("fig", "ctl=fig_", "resources=figure"), "--source-call-timeout-secs", "60"]);
  t.after(() => server.stop());
  const { client } = await connectClient(server, "mia");
  const metadata = server.mcpUrl.replace("/mcp/", "/.well-known/oauth-protected-resource/mcp/");
  const uri = FIGURE_BIG.replace("ui://", "ui://portcullis/fig/");

  const reads = [client.readResource({ uri }), client.readResource({ uri })];
  let slowest = 0;
  let done = false;
  Promise.allSettled(reads).then(() => { done = true; });
  while (!done) {
    const started = performance.now();
    const r = await fetch(metadata);
    assert.equal(r.status, 200);
    await r.arrayBuffer();
    slowest = Math.max(slowest, performance.now() - started);
    await sleep(20);
  }
  const [first] = await Promise.all(reads);
  const text = first.contents[0].text;
  assert.ok(text.length > 2 * 1024 * 1024, `${text.length} bytes`);
  assert.ok(text.includes(`href="${figurePage(7).replace("ui://", "ui://portcullis/fig/")}"`), "links rewritten");
  assert.ok(!text.includes(`"${figurePage(7)}"`), "no link left unmapped");
  // Generous for a debug build on a loaded machine; docs/figures.md has
  // the release figures (test/figure.mjs).
  assert.ok(slowest < 1000, `an unauthenticated metadata GET took ${slowest.toFixed(0)} ms during two reads`);
  await client.close();
});
