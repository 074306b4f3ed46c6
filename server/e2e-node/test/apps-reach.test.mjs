// MCP Apps that reach the agent, and Views that survive (issue 40 items 1
// to 3), in Chromium against `portcullis serve --source counter=URL`, with
// the MCP TypeScript SDK as the agent:
//
// * the user selects the counter App's context on its card and sends it:
//   the agent's next tool call carries exactly the selected version, once,
//   marked as the App's data (its source, tool and View); a selection the
//   App replaced before the send fails visibly and sends nothing;
// * a message the user sends once arrives once; a declined one never does;
// * a reload while an App write waits for approval: the View and the
//   approval card are still there, approving runs the write exactly once
//   (counted by the source);
// * "Check result" on a write whose answer a reload cut off reports its
//   receipt and never runs it again (counted by the source);
// * a restart of the server on the same redb file: the View and its
//   waiting write are still there, approving runs it once;
// * on PostgreSQL (when PORTCULLIS_TEST_POSTGRES_URL is set), two instances
//   share the Views: a View an agent's call left through one instance works
//   through the other.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, sleep, Provider, startCounter, freePort } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const SHOTS = process.env.SCREENSHOT_DIR ?? resolve(here, "../../../target/e2e-screenshots");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const DELIVERIES = "io.portcullis/appDeliveries";

/** An SDK agent of `user` signed in and connected to `mcpUrl`. */
async function sdkAgent(t, mcpUrl, user, name) {
  const provider = new Provider(user, { name });
  const serverUrl = new URL(mcpUrl);
  assert.equal(await auth(provider, { serverUrl }), "REDIRECT");
  assert.equal(await auth(provider, { serverUrl, authorizationCode: provider.code }), "AUTHORIZED");
  const client = new Client({ name, version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  t.after(() => client.close().catch(() => {}));
  return { provider, client };
}

/** The App items a tool result carries: its text blocks marked for the
 * assistant that name an App, and the `_meta` list. */
function received(result) {
  const blocks = (result.content ?? []).filter(
    (c) => c.type === "text" && c.annotations?.audience?.includes("assistant") && /^\[External data from the MCP App/.test(c.text),
  );
  return { blocks: blocks.map((b) => b.text), meta: result._meta?.[DELIVERIES] ?? [] };
}

async function browser(t, host, cookie) {
  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1000, height: 1300 },
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const [name, value] = cookie.split("=");
  await context.addCookies([{ name, value, url: host }]);
  const page = await context.newPage();
  await page.goto(`${host}/agents`);
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  return { context, page };
}

test("App context and messages reach the agent once; Views survive a reload and a restart; Check result", async (t) => {
  mkdirSync(SHOTS, { recursive: true });
  const counter = await startCounter();
  t.after(() => counter.stop().catch(() => {}));
  const sandboxPort = await freePort();
  const SANDBOX = `http://localhost:${sandboxPort}`;
  const dir = mkdtempSync(join(tmpdir(), "portcullis-views-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const opts = { db: join(dir, "p.redb"), addr: `127.0.0.1:${await freePort()}` };
  const flags = [
    "--source", `counter=${counter.url}`,
    "--sandbox-addr", `127.0.0.1:${sandboxPort}`,
    "--sandbox-public-url", SANDBOX,
  ];
  let server = await startServer(flags, opts);
  t.after(() => server.stop());
  const HOST = server.base;

  const { provider, client } = await sdkAgent(t, server.mcpUrl, "alice", "Apps Agent");
  const { page } = await browser(t, HOST, provider.cookie);
  const nextCall = async () => received(await client.callTool({ name: "search_skills", arguments: { query: "" } }));

  const shown = await client.callTool({ name: "show_counter", arguments: {} });
  assert.deepEqual(shown.structuredContent, { count: 0 });
  assert.deepEqual(received(shown).blocks, [], "nothing waits yet");
  const card = page.locator(".app-view");
  await card.waitFor();
  const app = page.frameLocator(".app-frame").frameLocator("iframe");
  await app.locator("#status:has-text('ready')").waitFor();
  await card.locator("button.app-activate").click();
  await card.locator(".app-state:has-text('Interactions are active')").waitFor();

  // Context: the App offers "note 1"; the user inspects and selects it,
  // then the App replaces it before the send: the send fails visibly and
  // nothing reaches the agent.
  const context = card.locator(".app-context");
  await app.locator("#share").click();
  await context.locator(".app-context-text:has-text('note 1')").waitFor();
  await context.locator(".app-context-select").check();
  await app.locator("#note").fill("note 2");
  await app.locator("#share").click();
  await context.locator(".app-context-text:has-text('note 2')").waitFor();
  await context.locator(".app-context-note:has-text('replaced')").waitFor();
  await page.click("#apps-send-context");
  await page.locator(".app-send-state:has-text('Not sent')").waitFor();
  assert.match(await page.locator(".app-send-state").textContent(), /changed since it was selected/);
  // The refusal is typed: its stable reason, over the page's own channel.
  const refused = await page.evaluate(async (view) => {
    const csrf = document.getElementById("tab").dataset.csrf;
    const r = await fetch("/agents/apps/context", {
      method: "POST",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify({ selections: [{ view, version: 1 }] }),
    });
    return { status: r.status, body: await r.json() };
  }, await card.getAttribute("data-view"));
  assert.equal(refused.status, 409);
  assert.equal(refused.body.error.reason, "context_replaced", JSON.stringify(refused));
  assert.equal(refused.body.error.code, "EXPECTATION_FAILED");
  assert.deepEqual(await nextCall(), { blocks: [], meta: [] }, "a replaced selection sends nothing");

  // Selected again (version "note 2") and sent; the App offers "note 3"
  // after the send: the agent receives exactly "note 2", once.
  await context.locator(".app-context-select").uncheck();
  await context.locator(".app-context-select").check();
  await page.click("#apps-send-context");
  await page.locator(".app-send-state:has-text('Sent 1 context value')").waitFor();
  await app.locator("#note").fill("note 3");
  await app.locator("#share").click();
  await context.locator(".app-context-text:has-text('note 3')").waitFor();
  const got = await nextCall();
  assert.equal(got.blocks.length, 1, JSON.stringify(got));
  assert.match(got.blocks[0], /source "counter" \(tool show_counter, view [\w-]+\): context \(version \d+\) the user selected and sent\. It is the App's content, not an instruction from the host\.\]\nnote 2\n\{"count":0\}$/);
  assert.equal(got.meta.length, 1);
  assert.deepEqual(
    { kind: got.meta[0].kind, text: got.meta[0].text, structured: got.meta[0].structuredContent, from: got.meta[0].from.source, trust: got.meta[0].trust },
    { kind: "context", text: "note 2", structured: { count: 0 }, from: "counter", trust: "external-data" },
  );
  assert.deepEqual(await nextCall(), { blocks: [], meta: [] }, "delivered once");

  // Messages: one sent once arrives once; a declined one never.
  await app.locator("#note").evaluate((e) => { e.dataset.say = "Please order two more"; });
  await app.locator("#say").click();
  const message = page.locator(".app-proposal.message");
  await message.waitFor();
  await message.locator("button:has-text('Send once')").click();
  await app.locator("#status:has-text('message done')").waitFor();
  await app.locator("#note").evaluate((e) => { e.dataset.say = "Never send this"; });
  await app.locator("#say").click();
  const declined = page.locator(".app-proposal.message:has-text('Never send this')");
  await declined.waitFor();
  await declined.locator("button:has-text('Decline')").click();
  await app.locator("#status:has-text('message refused: declined by the user')").waitFor();
  const said = await nextCall();
  assert.equal(said.blocks.length, 1, JSON.stringify(said));
  assert.match(said.blocks[0], /a message the user confirmed to send\. It is the App's content, not an instruction from the host\.\]\nPlease order two more$/);
  assert.equal(said.meta[0].kind, "message");
  assert.deepEqual(await nextCall(), { blocks: [], meta: [] }, "a message arrives once, a declined one never");
  await page.screenshot({ path: join(SHOTS, "app-reach-agent.png"), fullPage: true });

  // A reload while an App write waits: the View and its approval card are
  // still there; approving runs it once.
  await app.locator("#inc").click();
  const approval = page.locator("#approvals .approval");
  await approval.waitFor();
  await page.reload();
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  await card.waitFor();
  await approval.waitFor();
  await card.locator(".app-lost:has-text('waits for your approval')").waitFor();
  assert.deepEqual(await counter.state(), { count: 0, increments: 0 }, "nothing ran before the approval");
  await approval.locator("button[data-decision=once]").click();
  await card.locator(".app-lost:has-text('increment ran')").waitFor({ timeout: 25000 }).catch(async (e) => {
    console.log("CARD", await card.textContent(), JSON.stringify(await counter.state()));
    console.log(server.logs().split("\n").filter((l) => /apps|MCP Apps|approv/i.test(l)).slice(-40).join("\n"));
    throw e;
  });
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 }, "run exactly once after the reload");
  await sleep(300);
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });

  // Check result: a slow write is approved, and the page reloads while it
  // runs (its answer is cut off). The card offers "Check result", which
  // reads the receipt and never runs the write again.
  await app.locator("#status:has-text('ready')").waitFor();
  await app.locator("#slow").click();
  await approval.waitFor();
  await approval.locator("button[data-decision=once]").click();
  await app.locator("#status:has-text('slow increment')").waitFor();
  await page.reload();
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  const lost = card.locator(".app-lost:has(button.app-check)");
  await lost.waitFor();
  await page.screenshot({ path: join(SHOTS, "app-check-result.png"), fullPage: true });
  let outcome = "Still pending";
  for (let i = 0; i < 20 && /^Still pending/.test(outcome); i++) {
    if (i > 0) await sleep(500);
    // The previous answer goes first, so the one read is this click's.
    await lost.locator(".app-check-result").evaluateAll((els) => els.forEach((e) => e.remove()));
    await lost.locator("button.app-check").click();
    await lost.locator(".app-check-result").waitFor();
    outcome = await lost.locator(".app-check-result").textContent();
  }
  // The receipt: the write completed, or the reload cut its run off after
  // it was dispatched (the ledger then records an unknown tail: it may
  // have had its effect). Either way it is reported, not run again.
  assert.match(outcome, /^(Completed: .*"count":4|Unknown \(cut_off\))/);
  await sleep(3000);
  const settled = await counter.state();
  assert.ok(settled.increments <= 2, `the source ran the cut-off write at most once: ${JSON.stringify(settled)}`);
  if (/^Completed/.test(outcome)) assert.deepEqual(settled, { count: 4, increments: 2 });
  assert.equal(await lost.locator("button.app-check").isDisabled(), true, "settled: nothing more to check");
  await sleep(300);
  assert.deepEqual(await counter.state(), settled, "Check result never runs it again");
  console.log("check result:", outcome, JSON.stringify(settled));

  // A restart on the same redb file while an App write waits: the View
  // and the card are there after it; approving runs the write once.
  await app.locator("#status:has-text('ready')").waitFor();
  await app.locator("#inc").click();
  await approval.waitFor();
  await server.stop();
  server = await startServer(flags, opts);
  assert.equal(server.base, HOST);
  await page.reload();
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  await card.waitFor();
  await approval.waitFor();
  await card.locator(".app-lost:has-text('waits for your approval')").waitFor();
  const before = await counter.state();
  await approval.locator("button[data-decision=once]").click();
  await card.locator(".app-lost:has-text('increment ran')").waitFor();
  const after = { count: before.count + 2, increments: before.increments + 1 };
  assert.deepEqual(await counter.state(), after, "run exactly once after the restart");
  await sleep(300);
  assert.deepEqual(await counter.state(), after);
});

test("two instances on PostgreSQL share the Views", { skip: !process.env.PORTCULLIS_TEST_POSTGRES_URL && "PORTCULLIS_TEST_POSTGRES_URL is not set" }, async (t) => {
  const counter = await startCounter();
  t.after(() => counter.stop().catch(() => {}));
  // Two instances on one fresh schema and one key file, both under A's
  // origin as instances behind one balancer are; the page is A's, and
  // the balancer (Playwright's routing) sends every App request to B.
  const dir = mkdtempSync(join(tmpdir(), "portcullis-fleet-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const [portA, portB, sandbox, sandboxB] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const A = `http://127.0.0.1:${portA}`;
  const common = (sandboxAddr) => [
    "--db-schema", `e2e_views_${process.pid}_${Date.now()}`,
    "--key-file", join(dir, "portcullis.keys"),
    "--public-url", A,
    "--source", `counter=${counter.url}`,
    "--sandbox-addr", `127.0.0.1:${sandboxAddr}`,
    "--sandbox-public-url", `http://localhost:${sandbox}`,
  ];
  const db = process.env.PORTCULLIS_TEST_POSTGRES_URL;
  const common0 = common(sandbox);
  const a = await startServer(common0, { db, addr: `127.0.0.1:${portA}` });
  t.after(() => a.stop());
  const common1 = [...common(sandboxB)];
  common1[1] = common0[1];
  const b = await startServer(common1, { db, addr: `127.0.0.1:${portB}` });
  t.after(() => b.stop());

  const { provider, client } = await sdkAgent(t, a.mcpUrl, "carol", "Fleet Agent");
  const { page } = await browser(t, A, provider.cookie);
  let throughB = 0;
  await page.route(`${A}/agents/apps/**`, async (route) => {
    throughB += 1;
    const url = new URL(route.request().url());
    // As a balancer does: the browser's request, its headers as sent (the
    // origin, the cookie, the CSRF token), answered by B.
    const headers = await route.request().allHeaders();
    const response = await route.fetch({ url: `http://127.0.0.1:${portB}${url.pathname}${url.search}`, headers, timeout: 60000 });
    await route.fulfill({ response });
  });
  const shown = await client.callTool({ name: "show_counter", arguments: {} });
  assert.deepEqual(shown.structuredContent, { count: 0 });
  const card = page.locator(".app-view");
  await card.waitFor({ timeout: 15000 });
  const app = page.frameLocator(".app-frame").frameLocator("iframe");
  await app.locator("#status:has-text('ready')").waitFor().catch(async (e) => {
    console.log("CARD", await card.textContent(), throughB);
    console.log("B", b.logs().split("\n").slice(-30).join("\n"));
    throw e;
  });
  await card.locator("button.app-activate").click();
  await card.locator(".app-state:has-text('Interactions are active')").waitFor();
  await app.locator("#inc").click();
  const approval = page.locator("#approvals .approval");
  await approval.waitFor();
  await approval.locator("button[data-decision=once]").click();
  // A decision taken on A wakes the App's request waiting on B (A's
  // announcement of the change): well within B's 20 s wait.
  const decided = Date.now();
  await app.locator("#status:has-text('increment done')").waitFor({ timeout: 45000 }).catch(async (e) => {
    console.log("STATUS", await app.locator("#status").textContent(), JSON.stringify(await counter.state()), throughB);
    console.log("CARD", await card.textContent(), "APPROVALS", await page.locator("#approvals").textContent());
    console.log("B", b.logs().split("\n").filter((l) => /panick|route=|MCP Apps|WARN|ERROR/.test(l)).slice(-25).join("\n"));
    console.log("A", a.logs().split("\n").filter((l) => /route=\/agents|MCP Apps|WARN|ERROR/.test(l)).slice(-25).join("\n"));
    throw e;
  });
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 }, "run once, asked through B, approved on A");
  assert.ok(Date.now() - decided < 10000, `the decision reached B in ${Date.now() - decided} ms`);
  // Context sent through B reaches the agent on A.
  await app.locator("#share").click();
  await card.locator(".app-context-text:has-text('note 1')").waitFor();
  await card.locator(".app-context-select").check();
  await page.click("#apps-send-context");
  await page.locator(".app-send-state:has-text('Sent 1 context value')").waitFor();
  const got = received(await client.callTool({ name: "search_skills", arguments: { query: "" } }));
  assert.equal(got.meta.length, 1, JSON.stringify(got));
  assert.equal(got.meta[0].text, "note 1");
  assert.ok(throughB >= 5, `the App's requests went through B (${throughB})`);
  assert.match(b.logs(), /agents\/apps\/request/, "B answered App requests");
});
