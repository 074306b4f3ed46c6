// The MCP Apps host end to end, in a real browser (Debian's Chromium driven
// by playwright-core): `portcullis serve --source counter=URL` in front of
// a downstream SDK server with a counter App (./counter.mjs), its sandbox
// on its own origin (`--sandbox-addr`, `--sandbox-public-url`). A scripted
// agent (JSON-RPC over Streamable HTTP with its OAuth token) calls
// `show_counter`; the Agents page shows the App beside the result, in the
// sandbox proxy's frame (the sandbox's origin, no host cookie) and an
// opaque inner frame. Before "Activate interactions" the App can call
// nothing; after it, its button calls `increment`, whose approval appears
// in the page's approvals list OUTSIDE the frame with the source, the tool
// and the exact arguments; once approved the counter changes exactly once
// (read over the downstream's own channel). A link to the host's origin
// is refused, another is a proposal shown outside the frame; a message is
// a proposal sent once. A revoked grant ends the View's authority: the
// next App call is refused. Screenshots go to target/e2e-screenshots/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer as createHttpServer } from "node:http";
import { chromium } from "playwright-core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { startServer, sleep, Provider, csrfOf, startCounter, freePort } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const SHOTS = process.env.SCREENSHOT_DIR ?? resolve(here, "../../../target/e2e-screenshots");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const b64url = (buf) => buf.toString("base64url");

/** A scripted MCP agent's tool call: plain JSON-RPC over Streamable HTTP. */
async function callTool(mcpUrl, token, name, args) {
  const r = await fetch(mcpUrl, {
    method: "POST",
    headers: {
      authorization: `Bearer ${token}`,
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
    },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
  });
  assert.equal(r.status, 200);
  return (await r.json()).result;
}

test("an MCP App from a gateway tool, in the sandbox, under activation, approval and the grant", async (t) => {
  const started = Date.now();
  mkdirSync(SHOTS, { recursive: true });
  const counter = await startCounter();
  t.after(() => counter.stop().catch(() => {}));
  const sandboxPort = await freePort();
  const SANDBOX = `http://localhost:${sandboxPort}`;
  const server = await startServer([
    "--source", `counter=${counter.url}`,
    "--source", `board=cmd:${process.execPath} ${join(here, "downstream.mjs")} stdio`,
    "--sandbox-addr", `127.0.0.1:${sandboxPort}`,
    "--sandbox-public-url", SANDBOX,
  ]);
  t.after(() => server.stop());
  const HOST = server.base;

  // The sandbox serves its proxy with strict headers and no cookie; the
  // View's document gets a CSP of exact declared origins only.
  const proxy = await fetch(`${SANDBOX}/sandbox.html`, { headers: { cookie: "portcullis_session=x" } });
  assert.equal(proxy.status, 200);
  assert.equal(proxy.headers.get("set-cookie"), null);
  assert.equal(proxy.headers.get("referrer-policy"), "no-referrer");
  assert.match(proxy.headers.get("content-security-policy"), new RegExp(`frame-ancestors ${HOST}(;|$)`));
  const viewDoc = await fetch(`${SANDBOX}/view?connect=https://api.example.com&connect=https://*.example.net&resource=javascript:x`);
  const viewCsp = viewDoc.headers.get("content-security-policy");
  assert.match(viewCsp, /connect-src https:\/\/api\.example\.com;/);
  assert.doesNotMatch(viewCsp, /example\.net|javascript|'self'/);
  assert.equal((await fetch(`${SANDBOX}/agents`)).status, 404, "the sandbox serves nothing of the host");

  // The agent registers; the user signs in and allows it in Chromium.
  const callback = createHttpServer((_, res) => res.end("You can close this tab."));
  await new Promise((ok) => callback.listen(0, "127.0.0.1", ok));
  t.after(() => callback.close());
  const REDIRECT = `http://127.0.0.1:${callback.address().port}/callback`;
  const reg = await fetch(`${HOST}/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "Apps Agent",
      redirect_uris: ["http://127.0.0.1/callback"],
      token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"],
    }),
  });
  assert.equal(reg.status, 201);
  const clientId = (await reg.json()).client_id;
  const verifier = b64url(randomBytes(32));
  const authUrl = new URL(`${HOST}/authorize`);
  for (const [k, v] of Object.entries({
    response_type: "code", client_id: clientId, redirect_uri: REDIRECT, state: "s1",
    code_challenge: b64url(createHash("sha256").update(verifier).digest()),
    code_challenge_method: "S256", resource: server.mcpUrl, scope: "skills:read skills:write",
  })) authUrl.searchParams.set(k, v);

  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1000, height: 1100 },
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const page = await context.newPage();
  const popups = [];
  context.on("page", (p) => popups.push(p));
  await page.goto(authUrl.href);
  await page.fill("input[name=username]", "alice");
  await page.click("button[type=submit]");
  await page.waitForSelector("text=Connect an agent");
  await page.click("button[value=allow]");
  await page.waitForURL((u) => u.href.startsWith(REDIRECT));
  const tok = await fetch(`${HOST}/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code", code: new URL(page.url()).searchParams.get("code"),
      redirect_uri: REDIRECT, client_id: clientId, code_verifier: verifier,
    }),
  });
  assert.equal(tok.status, 200);
  const tokens = await tok.json();

  // A cookie of the host's origin that scripts could read: the sandbox, on
  // another host name, never sees it.
  await context.addCookies([{ name: "host_visible", value: "secret", url: HOST }]);
  await page.goto(`${HOST}/agents`);
  await page.waitForSelector("#tab-status:has-text('Connected to')");

  // The agent calls the App's tool (a read: no approval).
  const shown = await callTool(server.mcpUrl, tokens.access_token, "show_counter", {});
  assert.deepEqual(shown.structuredContent, { count: 0 }, JSON.stringify(shown));

  // The View appears beside the result, in the sandbox proxy; the App
  // runs in an opaque inner frame and gets the tool's result.
  const card = page.locator(".app-view");
  await card.waitFor();
  assert.match(await card.locator("h3").textContent(), /source counter: result of show_counter, called by “Apps Agent”/);
  const appFrame = page.frameLocator(".app-frame").frameLocator("iframe");
  await appFrame.locator("#status:has-text('ready')").waitFor();
  assert.equal(await appFrame.locator("#count").textContent(), "0");
  assert.equal(await appFrame.locator("#origin").textContent(), "origin: null", "an opaque origin");
  assert.equal(await appFrame.locator("#cookie").textContent(), "cookie: blocked");
  const proxyFrame = page.frames().find((f) => f.url().startsWith(`${SANDBOX}/sandbox.html`));
  assert.ok(proxyFrame, `the proxy frame: ${page.frames().map((f) => f.url())}`);
  assert.equal(new URL(proxyFrame.url()).origin, SANDBOX);
  assert.equal(await proxyFrame.evaluate(() => self.origin), SANDBOX);
  assert.doesNotMatch(await proxyFrame.evaluate(() => document.cookie), /host_visible/);
  assert.equal(await page.evaluate(() => document.cookie), "host_visible=secret", "the host's own page sees it");
  const inner = proxyFrame.childFrames()[0];
  const innerUrl = new URL(inner.url());
  assert.equal(innerUrl.origin, SANDBOX);
  assert.deepEqual(innerUrl.searchParams.getAll("connect"), ["https://api.example.com"]);
  assert.deepEqual(innerUrl.searchParams.getAll("resource"), ["https://fonts.example.org"]);
  await page.screenshot({ path: join(SHOTS, "app-view.png"), fullPage: true });

  // Before "Activate interactions" the App can call nothing.
  await appFrame.locator("#inc").click();
  await appFrame.locator("#status:has-text('increment refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /not activated|activate/i);
  assert.deepEqual(await counter.state(), { count: 0, increments: 0 });

  // Activated: the App's write waits for an approval shown outside the
  // frame, with the source, the tool and the exact arguments.
  await card.locator("button.app-activate").click();
  await card.locator(".app-state:has-text('Interactions are active')").waitFor();
  await appFrame.locator("#inc").click();
  const approval = page.locator("#approvals .approval");
  await approval.waitFor();
  const asked = await approval.textContent();
  assert.match(asked, /The App of source counter \(shown for “Apps Agent”\) wants to run increment from source counter/);
  // The App asked, not the agent: the card says so.
  assert.match(asked, /Requested by the App of source counter, in a View shown for “Apps Agent”/);
  assert.doesNotMatch(asked, /Requested by “Apps Agent”/);
  assert.match(asked, /"by": 2/);
  assert.equal(await page.locator(".app-view .approval").count(), 0, "the approval is not inside the App's card");
  assert.deepEqual(await counter.state(), { count: 0, increments: 0 }, "nothing runs before the approval");
  await approval.screenshot({ path: join(SHOTS, "app-approval.png") });
  await page.screenshot({ path: join(SHOTS, "app-approval-page.png"), fullPage: true });
  await approval.locator("button[data-decision=once]").click();
  await appFrame.locator("#status:has-text('increment done')").waitFor();
  assert.equal(await appFrame.locator("#count").textContent(), "2");
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 }, "run exactly once");
  await sleep(300);
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });

  // A link to the host's origin is refused; another is a proposal shown
  // outside the frame with its normalised URL, opened only by a click.
  await appFrame.locator("#url").fill(`${HOST}/agents`);
  await appFrame.locator("#link").click();
  await appFrame.locator("#status:has-text('open-link refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /host/i);
  assert.equal(await page.locator(".app-proposal").count(), 0);
  await appFrame.locator("#url").fill(`${SANDBOX}/sandbox.html`);
  await appFrame.locator("#link").click();
  await appFrame.locator("#status:has-text('open-link refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /sandbox/i);
  await appFrame.locator("#url").fill("HTTPS://Example.COM:443/docs?x=1");
  await appFrame.locator("#link").click();
  const link = page.locator(".app-proposal.link");
  await link.waitFor();
  assert.equal(await link.locator(".app-link-url").textContent(), "https://example.com/docs?x=1");
  assert.equal(await link.locator("a.app-open-link").getAttribute("rel"), "noopener noreferrer");
  assert.equal(popups.length, 0, "nothing opened without the user's click");
  await link.locator("button:has-text('Decline')").click();
  await appFrame.locator("#status:has-text('open-link refused: declined by the user')").waitFor();

  // A message is a proposal the user sends once.
  await appFrame.locator("#say").click();
  const message = page.locator(".app-proposal.message");
  await message.waitFor();
  assert.equal(await message.locator(".app-message-text").textContent(), "Hello from the counter");
  await message.locator("button:has-text('Send once')").click();
  await appFrame.locator("#status:has-text('message done')").waitFor();
  await page.screenshot({ path: join(SHOTS, "app-proposals.png"), fullPage: true });

  // The grant's apps change on the Agents page (no longer the counter):
  // the View's activation ends with the authority it was given, and its
  // next call is refused; given back, it must be activated again.
  const grant = await card.getAttribute("data-grant");
  const setApps = (apps) => page.evaluate(async ([grant, apps]) => {
    const csrf = document.getElementById("tab").dataset.csrf;
    const r = await fetch("/agents/grants/apps", {
      method: "POST",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify({ grant, apps }),
    });
    return r.status;
  }, [grant, apps]);
  // An approval the App is waiting for does not outlive that authority:
  // its card goes at once and the write never runs.
  await appFrame.locator("#inc").click();
  await approval.waitFor();
  assert.equal(await setApps(["_host", "board"]), 200);
  await approval.waitFor({ state: "detached" });
  await appFrame.locator("#status:has-text('increment refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /interactions ended/);
  await card.locator(".app-state:has-text('Interactions ended')").waitFor();
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });
  await appFrame.locator("#inc").click();
  await appFrame.locator("#status:has-text('increment refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /not activated/);
  assert.equal(await setApps("all"), 200);
  await card.locator("button.app-activate").click();
  await card.locator(".app-state:has-text('Interactions are active')").waitFor();
  // A write the user denies never runs; the App is told.
  await appFrame.locator("#inc").click();
  await approval.waitFor();
  await approval.locator("button[data-decision=deny]").click();
  await appFrame.locator("#status:has-text('increment failed')").waitFor();
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });

  // Closing a View ends its pending confirmations: the approval its App
  // asked for leaves the approvals list, and the write never runs.
  const again = await callTool(server.mcpUrl, tokens.access_token, "show_counter", {});
  assert.deepEqual(again.structuredContent, { count: 2 }, JSON.stringify(again));
  const closing = page.locator(".app-view").nth(1);
  await closing.waitFor();
  const closingApp = page.frameLocator(".app-frame").nth(1).frameLocator("iframe");
  await closingApp.locator("#status:has-text('ready')").waitFor();
  await closing.locator("button.app-activate").click();
  await closing.locator(".app-state:has-text('Interactions are active')").waitFor();
  await closingApp.locator("#inc").click();
  await approval.waitFor();
  await closing.locator("button.app-close").click();
  await closing.waitFor({ state: "detached" });
  await approval.waitFor({ state: "detached" });
  await sleep(300);
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 }, "a closed View's write never runs");

  // A second agent of the same user, given only the board source at
  // consent, sees none of the counter's tools or its App, and cannot call
  // or read them (one connector, a granted set).
  const boardOnly = new Provider("alice", {
    name: "Board Agent",
    authorize: async (authorizationUrl, user) => {
      const signIn = await fetch(`${HOST}/sign-in?${new URLSearchParams({ next: "/agents" })}`, {
        method: "POST", redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ intent: "signin", username: user }),
      });
      const cookie = signIn.headers.getSetCookie()[0].split(";")[0];
      const html = await (await fetch(authorizationUrl, { headers: { cookie } })).text();
      const r = await fetch(authorizationUrl, {
        method: "POST", redirect: "manual",
        headers: { "content-type": "application/x-www-form-urlencoded", cookie },
        body: new URLSearchParams([["intent", "allow"], ["csrf", csrfOf(html)], ["apps", "selected"], ["app:board", "on"]]),
      });
      assert.equal(r.status, 302);
      const back = new URL(r.headers.get("location"));
      return { cookie, code: back.searchParams.get("code"), iss: back.searchParams.get("iss") ?? undefined };
    },
  });
  const serverUrl = new URL(server.mcpUrl);
  assert.equal(await auth(boardOnly, { serverUrl }), "REDIRECT");
  assert.equal(await auth(boardOnly, { serverUrl, authorizationCode: boardOnly.code }), "AUTHORIZED");
  const second = new Client({ name: "board-only", version: "1.0.0" });
  await second.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: boardOnly }));
  t.after(() => second.close());
  const seen = (await second.listTools()).tools.map((x) => x.name).sort();
  assert.deepEqual(seen, ["big_text", "board_status", "pin_card"]);
  assert.deepEqual((await second.listResources()).resources.map((r) => r.uri), ["ui://portcullis/board/widget/board.html"]);
  await assert.rejects(second.callTool({ name: "increment", arguments: { by: 1 } }), /no tool named/);
  await assert.rejects(second.readResource({ uri: "ui://portcullis/counter/counter/app.html" }), /no source named counter/);
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });

  // The agent's grant is revoked (by its client, RFC 7009) while the App
  // waits for an approval: the card goes within a poll's round trip (not
  // when the App's wait for a decision ends, 20 s later), the App's call is
  // refused, and the View no longer says its interactions are active.
  await appFrame.locator("#inc").click();
  await approval.waitFor();
  const revokedAt = Date.now();
  const revoked = await fetch(`${HOST}/revoke`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: tokens.refresh_token, client_id: clientId }),
  });
  assert.equal(revoked.status, 200);
  await approval.waitFor({ state: "detached", timeout: 5000 });
  await appFrame.locator("#status:has-text('increment refused')").waitFor({ timeout: 5000 });
  assert.ok(Date.now() - revokedAt < 5000, `the card stayed ${Date.now() - revokedAt} ms`);
  assert.doesNotMatch(await card.locator(".app-state").textContent(), /Interactions are active/);
  await appFrame.locator("#inc").click();
  await appFrame.locator("#status:has-text('increment refused')").waitFor();
  assert.match(await appFrame.locator("#status").textContent(), /no longer live/);
  assert.equal(await page.locator("#approvals .approval").count(), 0);
  assert.deepEqual(await counter.state(), { count: 2, increments: 1 });
  await page.screenshot({ path: join(SHOTS, "app-revoked.png"), fullPage: true });
  assert.ok(Date.now() - started < 60000, `took ${Date.now() - started} ms`);
});

test("an unsafe sandbox configuration refuses the start", async (t) => {
  const counter = await startCounter();
  t.after(() => counter.stop().catch(() => {}));
  const port = await freePort();
  for (const [flags, why] of [
    [["--sandbox-addr", "0.0.0.0:0"], /MCP Apps sandbox.*--sandbox-public-url/],
    [["--public-url", `http://127.0.0.1:${port}`, "--sandbox-public-url", `http://127.0.0.1:${port}/`], /must differ from the host origin/],
    [["--sandbox-public-url", "https://apps.example.net"], /use https for both origins/],
    [["--sandbox-public-url", "http://localhost:9/apps"], /MCP Apps sandbox/],
  ]) {
    await assert.rejects(startServer(["--source", `counter=${counter.url}`, ...flags]), why, flags.join(" "));
  }
});
