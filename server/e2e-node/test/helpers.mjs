// Shared helpers of the Node end-to-end tests: spawn `portcullis serve` (or
// examples/notes-app) on a fresh database, drive the sign-in (the server's
// development sign-in, or the app's own) and consent with plain HTTP, and
// speak the tab channel as a scripted connected tab.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { createServer } from "node:net";

const here = dirname(fileURLToPath(import.meta.url));

/** The server binary: `$PORTCULLIS_BIN`, else the workspace's debug build. */
export const BIN = process.env.PORTCULLIS_BIN ?? resolve(here, "../../../target/debug/portcullis");

/** Starts the server on a free loopback port; resolves once it listens.
 * `db` (a redb file or a PostgreSQL URL) and `addr` keep a database and an
 * address across a restart; a `db` given is not deleted by `stop`. */
export async function startServer(extra = [], { db, addr = "127.0.0.1:0" } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "portcullis-e2e-"));
  const child = spawn(BIN, ["serve", "--db", db ?? join(dir, "p.redb"), "--addr", addr, ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: "debug" },
  });
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  const base = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`server did not start: ${err}`)), 20000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/Agents page: (http:\/\/[^\s]+)\/agents/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    child.on("exit", (code) => {
      // A refused start: no timer or temporary directory left behind.
      clearTimeout(timer);
      rmSync(dir, { recursive: true, force: true });
      fail(new Error(`server exited ${code}: ${err}`));
    });
  });
  const mcpUrl = out.match(/MCP URL:\s+(\S+)/)[1];
  return {
    base,
    mcpUrl,
    logs: () => out + err,
    async stop() {
      const exited = new Promise((ok) => child.on("exit", ok));
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

/** The `name=value` of a response's session cookie. */
function cookieOf(r) {
  const set = r.headers.getSetCookie().find((c) => c.startsWith("portcullis_session="));
  if (!set) throw new Error(`no session cookie (status ${r.status})`);
  return set.split(";")[0];
}

/** The CSRF token of a page's forms. */
export function csrfOf(html) {
  const m = html.match(/name="csrf" value="([^"]+)"/);
  if (!m) throw new Error("no csrf field");
  return m[1];
}

const form = (pairs) => new URLSearchParams(pairs).toString();

/**
 * Follows an authorization URL as the user's browser would, with plain HTTP:
 * the sign-in form (any user name), then the consent form with its CSRF
 * token. Returns the session cookie and the authorization code from the
 * redirect to the client.
 */
export async function authorizeAsUser(authorizationUrl, user, cookie) {
  const url = new URL(authorizationUrl);
  const path = url.pathname + url.search;
  if (!cookie) {
    const page = await fetch(url, { redirect: "manual" });
    if (!(await page.text()).includes("Development sign-in")) throw new Error("no sign-in page");
    const signIn = new URL(`/sign-in?${new URLSearchParams({ next: path })}`, url);
    const r = await fetch(signIn, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: form({ intent: "signin", username: user }),
    });
    if (r.status !== 303 || r.headers.get("location") !== path) throw new Error(`sign-in: ${r.status}`);
    cookie = cookieOf(r);
  }
  const consent = await fetch(url, { headers: { cookie } });
  const html = await consent.text();
  if (!html.includes("unverified")) throw new Error(`no consent screen: ${html}`);
  const r = await fetch(url, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie },
    body: form({ intent: "allow", csrf: csrfOf(html) }),
  });
  if (r.status !== 302) throw new Error(`consent: ${r.status}`);
  const back = new URL(r.headers.get("location"));
  return {
    cookie,
    code: back.searchParams.get("code"),
    state: back.searchParams.get("state"),
    iss: back.searchParams.get("iss") ?? undefined,
  };
}

/** A scripted connected tab speaking the tab channel (as /agents/app.js does). */
export class ScriptedTab {
  constructor(base, cookie, id = "node-tab", page = "node-page") {
    Object.assign(this, { base, cookie, id, page, since: 0, jobs: 0, running: false });
  }

  async open() {
    const html = await (await fetch(`${this.base}/agents`, { headers: { cookie: this.cookie } })).text();
    this.csrf = csrfOf(html);
    return this;
  }

  async call(method, path, body) {
    const r = await fetch(`${this.base}${path}`, {
      method,
      headers: { cookie: this.cookie, "x-csrf-token": this.csrf, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, json: await r.json().catch(() => null) };
  }

  connect(visible = true) {
    return this.call("POST", "/agents/tab/connect", { tabId: this.id, pageInstance: this.page, visible });
  }

  async poll() {
    const q = new URLSearchParams({ tabId: this.id, pageInstance: this.page, since: String(this.since) });
    const r = await this.call("GET", `/agents/tab/work?${q}`);
    this.since = r.json.version;
    return r.json;
  }

  /** Polls until an approval is pending. */
  async approval() {
    for (let i = 0; i < 20; i++) {
      const w = await this.poll();
      if (w.approvals.length > 0) return w.approvals[0];
    }
    throw new Error("no approval arrived");
  }

  decide(a, decision) {
    const { grant, requestId, seq, fingerprint } = a;
    return this.call("POST", "/agents/tab/decide", { grant, requestId, seq, fingerprint, decision });
  }

  async notes() {
    return (await this.call("GET", "/app/notes")).json.notes;
  }

  /** Performs one job with the notes app's own API, then reports it. */
  async perform(job) {
    let ok = true;
    let summary;
    if (job.skill === "create_note") {
      const r = await this.call("POST", "/app/notes", job.args);
      ok = r.status === 201;
      summary = JSON.stringify(r.json);
    } else if (job.skill === "list_notes") {
      summary = JSON.stringify(await this.notes());
    } else {
      summary = JSON.stringify({ highlighted: job.args.id });
    }
    await this.call("POST", "/agents/tab/report", { job: job.job, ok, summary });
    this.jobs += 1;
  }

  /** Runs jobs in the background until stop(). */
  work() {
    this.running = true;
    this.loop = (async () => {
      while (this.running) {
        const w = await this.poll();
        for (const job of w.jobs) await this.perform(job);
      }
    })();
  }

  async stop() {
    this.running = false;
    await this.call("POST", "/agents/tab/connect", { tabId: this.id, pageInstance: this.page, visible: true });
    await this.loop;
  }
}

/** An in-memory OAuth client provider that "opens the browser" by
 * following the authorization URL itself (sign-in and consent over HTTP):
 * the demo server's development sign-in, or `authorize` (for example
 * `notesSignIn`). `name` is the client's registered name. */
export class Provider {
  constructor(user, { name = "Node SDK Agent", authorize = authorizeAsUser } = {}) {
    Object.assign(this, { user, name, authorize });
    this.saved = [];
    this.authorizations = 0;
  }
  get redirectUrl() { return "http://127.0.0.1:7777/callback"; }
  get clientMetadata() {
    return {
      client_name: this.name,
      redirect_uris: [this.redirectUrl],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "none",
    };
  }
  state() { return randomBytes(12).toString("hex"); }
  clientInformation() { return this.client; }
  saveClientInformation(c) { this.client = c; }
  tokens() { return this.current; }
  saveTokens(t) { this.current = t; this.saved.push(t); }
  saveCodeVerifier(v) { this.verifier = v; }
  codeVerifier() { return this.verifier; }
  // The TypeScript client 2.x binds the callback leg to the authorization
  // server it discovered (it warns when the provider cannot keep it).
  saveDiscoveryState(s) { this.discovery = s; }
  discoveryState() { return this.discovery; }
  async redirectToAuthorization(url) {
    this.authorizations += 1;
    this.lastUrl = url;
    const r = await this.authorize(url, this.user, this.cookie);
    this.cookie = r.cookie;
    this.code = r.code;
    this.iss = r.iss;
  }
}

/** The notes-app binary: `$NOTES_APP_BIN`, else the workspace's debug build. */
export const NOTES_BIN = process.env.NOTES_APP_BIN ?? resolve(here, "../../../target/debug/notes-app");

/** Starts examples/notes-app on a free loopback port and a fresh database;
 * resolves once it listens. */
export async function startNotesApp(env = {}) {
  const dir = mkdtempSync(join(tmpdir(), "notes-app-e2e-"));
  const child = spawn(NOTES_BIN, [], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, NOTES_ADDR: "127.0.0.1:0", NOTES_DB: join(dir, "notes.redb"), NOTES_KEYS: join(dir, "notes.keys"), RUST_LOG: "debug", ...env },
  });
  let out = "";
  let err = "";
  child.stderr.on("data", (d) => { err += d; });
  const mcpUrl = await new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`notes-app did not start: ${err}`)), 20000);
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/MCP URL:\s+(\S+)/);
      if (m) { clearTimeout(timer); ok(m[1]); }
    });
    child.on("exit", (code) => fail(new Error(`notes-app exited ${code}: ${err}`)));
  });
  return {
    base: new URL(mcpUrl).origin,
    mcpUrl,
    logs: () => out + err,
    async stop() {
      const exited = new Promise((ok) => child.on("exit", ok));
      child.kill("SIGTERM");
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Follows an authorization URL of notes-app as the user's browser would:
 * the app's OWN sign-in (`/login`, the first time), then the consent form
 * with its CSRF token. Same answer as `authorizeAsUser`.
 */
export async function notesSignIn(authorizationUrl, user, cookie) {
  const url = new URL(authorizationUrl);
  const path = url.pathname + url.search;
  if (!cookie) {
    const page = await fetch(url, { redirect: "manual" });
    await page.arrayBuffer();
    const login = page.headers.get("location") ?? "";
    if (page.status !== 303 || !login.startsWith("/login?next=")) throw new Error(`no sign-in: ${page.status} ${login}`);
    const r = await fetch(new URL("/login", url), {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: form({ username: user, next: path }),
    });
    if (r.status !== 303 || r.headers.get("location") !== path) throw new Error(`sign-in: ${r.status}`);
    cookie = r.headers.getSetCookie()[0].split(";")[0];
  }
  const html = await (await fetch(url, { headers: { cookie } })).text();
  if (!html.includes("unverified")) throw new Error(`no consent screen: ${html}`);
  const r = await fetch(url, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie },
    body: form({ intent: "allow", csrf: csrfOf(html) }),
  });
  if (r.status !== 302) throw new Error(`consent: ${r.status}`);
  const back = new URL(r.headers.get("location"));
  return {
    cookie,
    code: back.searchParams.get("code"),
    state: back.searchParams.get("state"),
    iss: back.searchParams.get("iss") ?? undefined,
  };
}

export { readFileSync };

/** Starts ./counter.mjs on a free port; resolves once it listens. */
export async function startCounter() {
  const child = spawn(process.execPath, [join(here, "counter.mjs"), "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const port = await new Promise((ok, fail) => {
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
      const m = out.match(/listening (\d+)/);
      if (m) ok(Number(m[1]));
    });
    child.on("exit", (code) => fail(new Error(`counter exited ${code}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  return {
    url: `${base}/mcp`,
    async state() { return (await fetch(`${base}/count`)).json(); },
    async stop() {
      const exited = new Promise((ok) => child.on("exit", ok));
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** A free loopback port (for the sandbox's fixed public URL). */
export async function freePort() {
  const s = createServer();
  await new Promise((ok) => s.listen(0, "127.0.0.1", ok));
  const { port } = s.address();
  await new Promise((ok) => s.close(ok));
  return port;
}
