// The Rust agent (`portcullis agent run`, on the core's client loop) against
// `portcullis serve`, with Debian's Chromium (playwright-core) as its user:
// the agent prints a consent URL, Chromium signs in and allows it (the
// redirect lands on the agent's loopback listener), then opens the approval
// page the agent printed (the Agents view, the connected tab, which runs the
// write) and approves there. The agent speaks MCP 2026-07-28 (its default):
// the approval reaches it as a multi round-trip request, whose page it
// prints once before retrying with the server's state. Runs:
//   1. one `execute`, one effect, the result printed;
//   2. a grant revoked on the Agents page: the next run is refused, fails
//      to refresh, asks for consent again and finishes;
//   3. a server whose rate limit (one `execute` per 3 s) makes the agent
//      wait `retryAfterMs` while it resumes the same request;
//   4. a write whose approved run waits on the tab (a scripted tab, slow to
//      start): the call answers a task, which the agent follows with
//      `tasks/get` to its result.
// Each time: the token file is 0600, no token, code or refresh token
// appears in the agent's output or logs, and the log has one line per call.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { BIN, ScriptedTab, startServer } from "./helpers.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

/** Spawns `portcullis agent … run <code>`; collects its stdout and stderr. */
function startAgent(mcpUrl, tokenFile, code, extra = []) {
  const child = spawn(
    BIN,
    ["agent", "--url", mcpUrl, "--token-file", tokenFile, "--consent-timeout-secs", "60", ...extra,
      "run", code, "--max-wait-secs", "90"],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "info" } },
  );
  const agent = { out: "", err: "" };
  child.stdout.on("data", (d) => { agent.out += d; });
  child.stderr.on("data", (d) => { agent.err += d; });
  agent.exited = new Promise((ok) => child.on("exit", (status) => ok(status)));
  agent.kill = () => child.kill("SIGTERM");
  /** Resolves with the first match of `re` in stdout. */
  agent.waitFor = async (re, ms = 30000) => {
    const end = Date.now() + ms;
    for (;;) {
      const m = agent.out.match(re);
      if (m) return m;
      if (Date.now() > end) throw new Error(`agent never printed ${re}:\n${agent.out}\n${agent.err}`);
      await new Promise((ok) => setTimeout(ok, 50));
    }
  };
  return agent;
}

const CONSENT = /open this URL in your browser and sign in:\n\s+(\S+)/;

/** Follows the agent's consent URL in `page`: sign-in when asked, allow. */
async function consent(page, agent, { signIn }) {
  const url = (await agent.waitFor(CONSENT))[1];
  const u = new URL(url);
  assert.equal(u.searchParams.get("code_challenge_method"), "S256");
  assert.match(u.searchParams.get("redirect_uri"), /^http:\/\/127\.0\.0\.1:\d+\/callback$/);
  assert.match(u.searchParams.get("scope"), /skills:write/);
  await page.goto(url);
  if (signIn) {
    await page.fill("input[name=username]", "alice");
    await page.click("button[type=submit]");
  }
  await page.waitForSelector("text=Connect an agent");
  assert.match(await page.textContent("body"), /Portcullis agent/);
  await page.click("button[value=allow]");
  await page.waitForURL((x) => x.href.startsWith(u.searchParams.get("redirect_uri")));
  assert.match(await page.textContent("body"), /signed in/);
  const back = new URL(page.url());
  assert.equal(back.searchParams.get("state"), u.searchParams.get("state"));
  await agent.waitFor(/Signed in\./);
  return back.searchParams.get("code");
}

const APPROVAL = /open this page to approve or deny it:\n\s+(\S+)/;

/** The approval page the agent printed: the Agents view, naming the request. */
async function approvalPage(agent, base) {
  const url = (await agent.waitFor(APPROVAL))[1];
  const u = new URL(url);
  assert.equal(u.origin, base);
  assert.equal(u.pathname, "/agents");
  assert.match(u.hash, /^#approval-[0-9a-f-]{36}$/);
  assert.ok(!u.search && !u.username, "no credential in the URL");
  return url;
}

/** The person has the app open (`page` is the connected tab, where the
 * write waits); they open the page the agent printed, the same view
 * naming the request, and approve the write once there. */
async function approve(page, agent, base, title) {
  await page.goto(`${base}/agents`);
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  const url = await approvalPage(agent, base);
  await page.goto(url);
  await page.waitForSelector("#tab-status:has-text('Connected to')");
  const dialog = page.locator(".approval");
  await dialog.waitFor({ timeout: 30000 });
  const shown = await dialog.textContent();
  assert.match(shown, /Portcullis agent/);
  assert.ok(shown.includes(title), "the approval shows the note");
  await dialog.locator("button[data-decision=once]").click();
  await dialog.waitFor({ state: "detached" });
}

/** The agent finished with the note in its printed result, having shown
 * the approval page once and resumed the request with the server's state. */
async function finished(agent, title) {
  const status = await agent.exited;
  assert.equal(status, 0, `agent failed:\n${agent.out}\n${agent.err}`);
  assert.match(agent.out, /Waiting for approval/);
  assert.match(agent.out, /Resumed request [0-9a-f-]{36} with the server's state\./);
  assert.equal(agent.out.match(new RegExp(APPROVAL, "g")).length, 1, `the page once:\n${agent.out}`);
  const result = JSON.parse(agent.out.match(/^Result: (.*)$/m)[1]);
  assert.equal(result[0].skill, "create_note");
  assert.equal(result[0].result.title, title);
}

/** No secret in the agent's output; one log line per call, no content. */
function checkSecrets(agent, tokenFile, code) {
  assert.equal(statSync(tokenFile).mode & 0o777, 0o600, "token file is 0600");
  const stored = JSON.parse(readFileSync(tokenFile, "utf8"));
  const tokens = stored.credentials.token_response;
  const all = agent.out + agent.err;
  for (const secret of [tokens.access_token, tokens.refresh_token, code]) {
    assert.ok(secret && secret.length > 10);
    assert.ok(!all.includes(secret), "no token or code in the agent's output");
  }
  const calls = agent.err.split("\n").filter((l) => l.includes("mcp call"));
  assert.ok(calls.length >= 4, agent.err);
  for (const l of calls) {
    assert.match(l, /request_id=\S+ protocol_version=\S+ capability=\S+ outcome=\S+ duration_ms=\d+/);
  }
  assert.ok(calls.some((l) => /protocol_version="2026-07-28" capability="server\/discover" outcome=ok/.test(l)), agent.err);
  assert.ok(calls.some((l) => /capability="execute:create_note" outcome=input_required/.test(l)), agent.err);
  assert.ok(calls.some((l) => /capability="(execute:create_note|tasks\/get)" outcome=(done|task:completed)/.test(l)), agent.err);
  assert.ok(!agent.err.includes("2 litres"), "no tool argument in the log");
  return stored;
}

const note = (title) => JSON.stringify([{ skill: "create_note", args: { title, body: "2 litres" } }]);

test("the Rust agent runs a write through consent and approval, then re-authenticates after a revocation", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const dir = mkdtempSync(join(tmpdir(), "portcullis-agent-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "agent.json");
  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const page = await context.newPage();

  // 1. Discovery, registration, consent, approval: one effect, the result.
  const first = startAgent(server.mcpUrl, tokenFile, note("Buy milk"));
  t.after(() => first.kill());
  const code1 = await consent(page, first, { signIn: true });
  await approve(page, first, server.base, "Buy milk");
  await finished(first, "Buy milk");
  await page.waitForSelector("#notes li:has-text('Buy milk')");
  assert.equal(await page.locator("#notes li").count(), 1, "one effect");
  const stored1 = checkSecrets(first, tokenFile, code1);

  // 2. The user disconnects the agent on the Agents page; the next run is
  // refused, cannot refresh, and asks for consent again (same client).
  await page.locator("button[value=revoke]").click();
  await page.waitForSelector("text=revoked");
  const second = startAgent(server.mcpUrl, tokenFile, note("Buy eggs"));
  t.after(() => second.kill());
  const code2 = await consent(page, second, { signIn: false });
  assert.match(second.out, /refused the session; signing in again/);
  await approve(page, second, server.base, "Buy eggs");
  await finished(second, "Buy eggs");
  await page.waitForSelector("#notes li:has-text('Buy eggs')");
  assert.equal(await page.locator("#notes li").count(), 2, "one more effect");
  const stored2 = checkSecrets(second, tokenFile, code2);
  assert.equal(stored2.client_id, stored1.client_id, "the registration is kept");
  assert.notEqual(stored2.credentials.token_response.refresh_token, stored1.credentials.token_response.refresh_token);
  for (const secret of [stored1.credentials.token_response.access_token, code1]) {
    assert.ok(!server.logs().includes(secret), "no secret in the server's logs");
  }
});

test("the Rust agent honours retryAfterMs while resuming the same request", async (t) => {
  const server = await startServer(["--execute-rate-interval-ms", "3000", "--execute-rate-burst", "1"]);
  t.after(() => server.stop());
  const dir = mkdtempSync(join(tmpdir(), "portcullis-agent-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "agent.json");
  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const page = await context.newPage();

  const agent = startAgent(server.mcpUrl, tokenFile, note("Rate limited"));
  t.after(() => agent.kill());
  const code = await consent(page, agent, { signIn: true });
  await approve(page, agent, server.base, "Rate limited");
  await finished(agent, "Rate limited");
  assert.match(agent.out, /Rate limited: waiting \d+ ms as the server asks/);
  assert.ok(/outcome=RATE_LIMITED/.test(agent.err), "the refusal is logged");
  const ids = new Set([...agent.out.matchAll(/request ([0-9a-f-]{36})/g)].map((m) => m[1]));
  assert.equal(ids.size, 1, "one request id throughout");
  await page.waitForSelector("#notes li:has-text('Rate limited')");
  assert.equal(await page.locator("#notes li").count(), 1, "one effect");
  checkSecrets(agent, tokenFile, code);
});

test("the Rust agent follows an approved write whose run waits on the tab as a task, to its result", async (t) => {
  const server = await startServer();
  t.after(() => server.stop());
  const dir = mkdtempSync(join(tmpdir(), "portcullis-agent-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tokenFile = join(dir, "agent.json");
  const profile = mkdtempSync(join(tmpdir(), "portcullis-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  t.after(async () => { await context.close(); rmSync(profile, { recursive: true, force: true }); });
  const page = await context.newPage();

  const agent = startAgent(server.mcpUrl, tokenFile, note("As a task"));
  t.after(() => agent.kill());
  const code = await consent(page, agent, { signIn: true });

  // The person's connected tab is scripted (their browser's session): it
  // shows the approval, which they approve, but starts the run late.
  const session = (await context.cookies()).find((c) => c.name === "portcullis_session");
  const tab = await new ScriptedTab(server.base, `${session.name}=${session.value}`).open();
  assert.equal((await tab.connect()).status, 200);
  const url = await approvalPage(agent, server.base);
  const a = await tab.approval();
  assert.equal(url, `${server.base}/agents#approval-${a.requestId}`);
  assert.equal(a.args.title, "As a task");
  assert.equal((await tab.decide(a, "once")).status, 200);

  // The approved run waits on the tab: the call answers a task, which the
  // agent polls at the server's interval; the tab then runs the job.
  await agent.waitFor(/as a task \(tasks\/get\)/);
  tab.since = 0;
  tab.work();
  try {
    await finished(agent, "As a task");
  } finally {
    // Before the server stops (the clean-ups run after the test).
    await tab.stop();
  }
  assert.match(agent.out, /The run goes on as a task: polling it every \d+ ms\./);
  const polls = agent.err.split("\n").filter((l) => l.includes("mcp call") && l.includes('capability="tasks/get"'));
  assert.ok(polls.some((l) => /outcome=task:working/.test(l)), agent.err);
  assert.match(polls.at(-1), /outcome=task:completed/, agent.err);
  assert.equal(tab.jobs, 1, "the run ran once");
  assert.deepEqual((await tab.notes()).map((n) => n.title), ["As a task"]);
  checkSecrets(agent, tokenFile, code);
});
