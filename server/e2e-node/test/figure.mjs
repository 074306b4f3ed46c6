// The gateway's cost figure (docs/figures.md, "Gateway: a 2 MB read with
// 4 096 known URIs"): `portcullis serve` with ./source.mjs as a stdio source
// that lists 4 096 `ui://` pages and serves a 2 MB HTML page linking to them
// all, over and over. Measures the server's CPU time (utime + stime from
// /proc) for one `resources/read` of that page through the gateway, and the
// latency of unauthenticated metadata GETs (the protected-resource
// document) while two such reads run at once.
//
// Not part of `npm test` (its suite has a looser check of the same, in
// sources.test.mjs). Run with a release build:
//
//   cargo build --release -p portcullis-server
//   cd server/e2e-node && PORTCULLIS_BIN=$PWD/../../target/release/portcullis node test/figure.mjs
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { auth } from "@modelcontextprotocol/sdk/client/auth.js";
import { BIN, Provider, sleep } from "./helpers.mjs";
import { FIGURE_BIG } from "./source.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const TICK = Number(execFileSync("getconf", ["CLK_TCK"]).toString().trim());

/** CPU seconds (user + system) the process `pid` has used. */
function cpu(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) / TICK;
}

const dir = mkdtempSync(join(tmpdir(), "portcullis-figure-"));
const source = `fig=cmd:${process.execPath} ${join(here, "source.mjs")} ctl=fig_ resources=figure`;
const child = spawn(
  BIN,
  ["serve", "--db", join(dir, "p.redb"), "--addr", "127.0.0.1:0", "--source", source,
    "--source-call-timeout-secs", "300", "--request-timeout-secs", "300"],
  { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, RUST_LOG: "warn" } },
);
let out = "";
await new Promise((ok) => child.stdout.on("data", (d) => { out += d; if (/Agents page/.test(out)) ok(); }));
const mcpUrl = out.match(/MCP URL:\s+(\S+)/)[1];
const metadata = mcpUrl.replace("/mcp/", "/.well-known/oauth-protected-resource/mcp/");

try {
  const provider = new Provider("figure");
  const serverUrl = new URL(mcpUrl);
  await auth(provider, { serverUrl });
  await auth(provider, { serverUrl, authorizationCode: provider.code });
  const client = new Client({ name: "figure", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(serverUrl, { authProvider: provider }));
  const uri = FIGURE_BIG.replace("ui://", "ui://portcullis/fig/");
  const read = () => client.readResource({ uri }, { timeout: 600000 });

  // One read (the source builds its page on the first), then one measured.
  await read();
  const before = cpu(child.pid);
  let started = performance.now();
  const page = await read();
  const oneRead = { cpuSeconds: cpu(child.pid) - before, wallMs: performance.now() - started };

  // Two reads at once, and metadata GETs one after another meanwhile.
  const latencies = [];
  let done = false;
  started = performance.now();
  const cpuTwo = cpu(child.pid);
  const both = Promise.all([read(), read()]).finally(() => { done = true; });
  while (!done) {
    const t = performance.now();
    const r = await fetch(metadata);
    await r.arrayBuffer();
    if (r.status !== 200) throw new Error(`metadata: ${r.status}`);
    latencies.push(performance.now() - t);
    await sleep(10);
  }
  await both;
  const twoReads = { cpuSeconds: cpu(child.pid) - cpuTwo, wallMs: performance.now() - started };
  latencies.sort((a, b) => a - b);
  const at = (q) => latencies[Math.min(latencies.length - 1, Math.floor(q * latencies.length))];
  console.log(JSON.stringify({
    textBytes: page.contents[0].text.length,
    oneRead,
    twoReads,
    metadataGet: { count: latencies.length, medianMs: at(0.5), p99Ms: at(0.99), maxMs: latencies.at(-1) },
  }, null, 2));
  await client.close();
} finally {
  child.kill("SIGTERM");
  await new Promise((ok) => child.on("exit", ok));
  rmSync(dir, { recursive: true, force: true });
}
