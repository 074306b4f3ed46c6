// A downstream MCP server with an MCP App (the MCP Apps extension,
// `text/html;profile=mcp-app`), on the official TypeScript SDK's Streamable
// HTTP server transport (stateless): a read tool `show_counter` whose
// descriptor names the App's `ui://` resource, a write tool `increment {by}`,
// and the App itself, a tiny HTML page that speaks the host protocol with
// raw postMessage JSON-RPC (no bundle). The count is also served at
// GET /count (the test's own channel: it proves a call ran exactly once).
//
// Usage: node counter.mjs PORT   (prints "listening PORT")
import { createServer } from "node:http";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

export const APP = "ui://counter/app.html";
export const MIME = "text/html;profile=mcp-app";

let count = 0;
let increments = 0;

/** The App: shows the count from its tool result, `+2` calls `increment`,
 * and it can propose a link or a message. It reports what it sees of its
 * own origin and of cookies, for the test. */
export const HTML = `<!doctype html>
<html><head><meta charset="utf-8"><title>Counter</title>
<style>body{font:15px sans-serif;margin:8px} #count{font-weight:bold}</style></head>
<body>
<p>Count: <span id="count">?</span></p>
<p><button id="inc">+2</button>
<input id="url" size="30" value="https://example.com/docs?x=1"> <button id="link">Open link</button>
<button id="say">Say hello</button></p>
<p><input id="note" size="20" value="note 1"> <button id="share">Share context</button>
<button id="slow">+2 slowly</button></p>
<p id="status">starting</p>
<p id="origin"></p><p id="cookie"></p>
<script>
(() => {
  const $ = (id) => document.getElementById(id);
  let next = 1;
  const waiting = new Map();
  const post = (m) => window.parent.postMessage(Object.assign({ jsonrpc: "2.0" }, m), "*");
  const request = (method, params) => new Promise((ok, fail) => {
    const id = next++;
    waiting.set(id, { ok, fail });
    post({ id, method, params });
  });
  const show = (r) => {
    const c = r && r.structuredContent && r.structuredContent.count;
    if (typeof c === "number") $("count").textContent = String(c);
  };
  const status = (t) => { $("status").textContent = t; };
  window.addEventListener("message", (e) => {
    if (e.source !== window.parent) return;
    const m = e.data || {};
    if (m.method === undefined && waiting.has(m.id)) {
      const w = waiting.get(m.id);
      waiting.delete(m.id);
      if (m.error) w.fail(m.error); else w.ok(m.result);
      return;
    }
    if (m.method === "ui/notifications/tool-input") $("count").dataset.input = JSON.stringify(m.params);
    if (m.method === "ui/notifications/tool-result") show(m.params);
    if (m.method === "ui/resource-teardown") post({ id: m.id, result: {} });
  });
  $("origin").textContent = "origin: " + self.origin;
  try { $("cookie").textContent = "cookie: [" + document.cookie + "]"; }
  catch (_) { $("cookie").textContent = "cookie: blocked"; }
  const call = async (what, method, params, done) => {
    status(what + "…");
    try {
      const r = await request(method, params);
      if (r && r.isError) status(what + " failed: " + JSON.stringify(r.structuredContent || r.content));
      else { if (done) done(r); status(what + " done"); }
    } catch (err) {
      status(what + " refused: " + (err && err.message ? err.message : JSON.stringify(err)));
    }
  };
  $("inc").onclick = () => call("increment", "tools/call", { name: "increment", arguments: { by: 2 } }, show);
  $("link").onclick = () => call("open-link", "ui/open-link", { url: $("url").value });
  $("say").onclick = () => call("message", "ui/message",
    { role: "user", content: [{ type: "text", text: $("note").dataset.say || "Hello from the counter" }] });
  // Offers the note and the count as context (each offer replaces the last).
  $("share").onclick = () => call("context", "ui/update-model-context", {
    content: [{ type: "text", text: $("note").value }],
    structuredContent: { count: Number($("count").textContent) || 0 },
  });
  // An increment that takes a while at the source (the test cuts the page
  // off meanwhile).
  $("slow").onclick = () => call("slow increment", "tools/call", { name: "increment", arguments: { by: 2, delayMs: 2500 } }, show);
  (async () => {
    const init = await request("ui/initialize", {
      protocolVersion: "2026-01-26",
      appInfo: { name: "counter", version: "1.0.0" },
      appCapabilities: { availableDisplayModes: ["inline"] },
    });
    $("status").dataset.host = init.hostInfo && init.hostInfo.name;
    post({ method: "ui/notifications/initialized", params: {} });
    post({ method: "ui/notifications/size-changed", params: { width: 400, height: document.body.scrollHeight + 16 } });
    status("ready");
  })().catch((err) => status("initialize failed: " + JSON.stringify(err)));
})();
</script>
</body></html>
`;

const uiMeta = { ui: { resourceUri: APP } };

function mcpServer() {
  const server = new Server(
    { name: "counter", version: "1.0.0" },
    { capabilities: { tools: {}, resources: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      {
        name: "show_counter",
        description: "Shows the counter (an interactive App).",
        inputSchema: { type: "object", properties: {} },
        annotations: { readOnlyHint: true },
        _meta: uiMeta,
      },
      {
        name: "increment",
        description: "Adds `by` to the counter.",
        inputSchema: { type: "object", properties: { by: { type: "integer" }, delayMs: { type: "integer" } }, required: ["by"] },
        annotations: { readOnlyHint: false, destructiveHint: false },
        _meta: { ui: { resourceUri: APP, visibility: ["model", "app"] } },
      },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    if (req.params.name === "show_counter") {
      return { content: [{ type: "text", text: `count ${count}` }], structuredContent: { count } };
    }
    if (req.params.name === "increment") {
      const by = Number(req.params.arguments?.by ?? 1);
      const delay = Number(req.params.arguments?.delayMs ?? 0);
      if (delay > 0) await new Promise((ok) => setTimeout(ok, Math.min(delay, 10000)));
      count += by;
      increments += 1;
      return { content: [{ type: "text", text: `count ${count}` }], structuredContent: { count } };
    }
    throw new Error(`no tool ${req.params.name}`);
  });
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [{ uri: APP, name: "counter", mimeType: MIME }],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    if (req.params.uri !== APP) throw new Error(`no resource ${req.params.uri}`);
    return {
      contents: [{
        uri: APP,
        mimeType: MIME,
        text: HTML,
        // Exact origins are kept; a wildcard, a path and another scheme
        // are dropped by the host.
        _meta: {
          ui: {
            prefersBorder: true,
            csp: {
              connectDomains: ["https://api.example.com", "https://*.example.net", "javascript:alert(1)"],
              resourceDomains: ["https://cdn.example.com/lib/", "https://fonts.example.org"],
            },
          },
        },
      }],
    };
  });
  return server;
}

const http = createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/count") {
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ count, increments }));
    return;
  }
  if (req.url !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
  const server = mcpServer();
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => { transport.close(); server.close(); });
  await server.connect(transport);
  await transport.handleRequest(req, res, body);
});

if (process.argv[1] && process.argv[1].endsWith("counter.mjs")) {
  const port = Number(process.argv[2] ?? 0);
  http.listen(port, "127.0.0.1", () => console.log(`listening ${http.address().port}`));
}
