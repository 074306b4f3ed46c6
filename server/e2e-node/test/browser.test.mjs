// A real browser (Debian's Chromium, driven by playwright-core): sign in,
// allow the consent screen, then approve in the Agents view — the connected
// tab — a write requested by a scripted agent over MCP; then a deep link
// opened in another tab navigates the connected tab. Screenshots of the
// consent screen, the approval dialog and the navigated page go to
// target/e2e-screenshots/.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createServer } from "node:http";
import { chromium } from "playwright-core";
import { startServer } from "./helpers.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const SHOTS = process.env.SCREENSHOT_DIR ?? resolve(here, "../../../target/e2e-screenshots");
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const b64url = (buf) => buf.toString("base64url");

/** A scripted MCP agent: plain JSON-RPC over Streamable HTTP. */
async function tool(mcpUrl, token, name, args) {
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
  return (await r.json()).result.structuredContent;
}

test("a user allows an agent and approves its write in the connected tab", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  mkdirSync(SHOTS, { recursive: true });
  // The agent's loopback callback (RFC 8252: registered without a port; the
  // port of the listener is ignored when matching).
  const callbackServer = createServer((_, res) => res.end("You can close this tab."));
  await new Promise((ok) => callbackServer.listen(0, "127.0.0.1", ok));
  t.after(() => callbackServer.close());
  const REDIRECT = `http://127.0.0.1:${callbackServer.address().port}/callback`;

  // The agent registers and builds its authorization URL.
  const reg = await fetch(`${server.base}/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "Playwright Agent",
      redirect_uris: ["http://127.0.0.1/callback"],
      token_endpoint_auth_method: "none",
      grant_types: ["authorization_code", "refresh_token"],
    }),
  });
  assert.equal(reg.status, 201);
  const clientId = (await reg.json()).client_id;
  const verifier = b64url(randomBytes(32));
  const state = b64url(randomBytes(12));
  const authUrl = new URL(`${server.base}/authorize`);
  for (const [k, v] of Object.entries({
    response_type: "code", client_id: clientId, redirect_uri: REDIRECT, state,
    code_challenge: b64url(createHash("sha256").update(verifier).digest()),
    code_challenge_method: "S256", resource: server.mcpUrl, scope: "skills:read skills:write",
  })) authUrl.searchParams.set(k, v);

  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  // A fresh user-data dir per run (playwright takes it as the persistent
  // context's directory rather than as --user-data-dir).
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 900, height: 900 },
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const page = await context.newPage();

  // Sign in, then the consent screen names the client (unverified).
  await page.goto(authUrl.href);
  await page.fill("input[name=username]", "alice");
  await page.click("button[type=submit]");
  await page.waitForSelector("text=Connect an agent");
  const consent = await page.textContent("body");
  assert.match(consent, /Playwright Agent/);
  assert.match(consent, /unverified/);
  assert.match(consent, /runs on your computer/);
  await page.screenshot({ path: join(SHOTS, "consent.png"), fullPage: true });
  await page.click("button[value=allow]");
  await page.waitForURL((u) => u.href.startsWith(REDIRECT));
  const back = new URL(page.url());
  assert.equal(back.searchParams.get("state"), state);

  // The agent exchanges the code.
  const tok = await fetch(`${server.base}/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({
      grant_type: "authorization_code", code: back.searchParams.get("code"), redirect_uri: REDIRECT,
      client_id: clientId, code_verifier: verifier,
    }),
  });
  assert.equal(tok.status, 200);
  const token = (await tok.json()).access_token;

  // The Agents view becomes the connected tab.
  await page.goto(`${server.base}/agents`);
  await page.waitForSelector("#tab-status:has-text('Connected to')");

  const requestId = randomUUID();
  const code = JSON.stringify([{ skill: "create_note", args: { title: "Buy milk", body: "2 litres" } }]);
  const first = await tool(server.mcpUrl, token, "execute", { requestId, code });
  assert.equal(first.status, "approval_pending", JSON.stringify(first));

  const dialog = page.locator(".approval");
  await dialog.waitFor();
  const shown = await dialog.textContent();
  assert.match(shown, /Playwright Agent/);
  assert.match(shown, /unverified/);
  assert.ok(shown.includes(clientId.slice(0, 20)), "the client id is shown");
  assert.match(shown, /Buy milk/);
  assert.equal(await dialog.locator("button[data-decision=auto]").count(), 1, "auto-approve offered for a write");
  await dialog.screenshot({ path: join(SHOTS, "approval.png") });
  await page.screenshot({ path: join(SHOTS, "agents.png"), fullPage: true });
  await dialog.locator("button[data-decision=once]").click();
  await dialog.waitFor({ state: "detached" });

  // The agent resumes; the page runs the skill; the note appears once.
  const done = await tool(server.mcpUrl, token, "execute", { requestId, code });
  assert.equal(done.status, "done", JSON.stringify(done));
  assert.equal(done.result[0].result.title, "Buy milk");
  await page.waitForSelector("#notes li:has-text('Buy milk')");
  assert.equal(await page.locator("#notes li").count(), 1);
  const replay = await tool(server.mcpUrl, token, "execute", { requestId, code });
  assert.deepEqual(replay, done);
  assert.equal(await page.locator("#notes li").count(), 1);

  // A deep link opened in another tab of this browser navigates the
  // connected tab: banner, filters, highlighted note, compose draft. The
  // link's tab lands on an Agents page too, which is not the connected tab
  // and so does not take the command.
  const noteId = await page.locator("#notes li").first().getAttribute("data-note-id");
  const draft = Buffer.from(JSON.stringify({ id: "d1", title: "From a link", body: "draft body" }))
    .toString("base64url");
  const linkTab = await context.newPage();
  await linkTab.goto(
    `${server.base}/_agent-native/open?app=notes&view=notes&noteId=${noteId}&f_q=milk&to=%2Fagents&compose=${draft}`,
  );
  assert.equal(new URL(linkTab.url()).pathname, "/agents");
  const banner = page.locator("#navigation .navigated");
  await banner.waitFor();
  assert.equal(await banner.textContent(), "Navigated to notes");
  assert.match(await page.locator("#navigation .filters").textContent(), /q = milk/);
  assert.equal(await page.locator("#notes li.highlight").getAttribute("data-note-id"), noteId);
  const form = page.locator("#navigation form.draft");
  assert.equal(await form.getAttribute("data-key"), "compose-d1");
  assert.equal(await form.locator("input[name=title]").inputValue(), "From a link");
  await page.screenshot({ path: join(SHOTS, "navigate.png"), fullPage: true });
  assert.equal(await linkTab.locator("#navigation .navigated").count(), 0);
  await linkTab.close();
  // Saving the draft is the user's choice; the filter hides the new note
  // until cleared.
  await form.locator("button[type=submit]").click();
  await form.waitFor({ state: "detached" });
  assert.equal(await page.locator("#notes li").count(), 1);
  await page.locator("#navigation .filters button").click();
  await page.waitForSelector("#notes li:has-text('From a link')");
  assert.equal(await page.locator("#notes li").count(), 2);
});
