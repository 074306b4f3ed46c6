// A downstream MCP server for the gateway test, on the official TypeScript
// SDK's Streamable HTTP server transport (stateless: a server per request):
// a UI-capable tool whose descriptor and results point at its `ui://` HTML
// resource (both metadata conventions), a read-only tool, and a resource
// template. It counts the executions of its write tool, served at
// GET /count, so the test can prove a repeated requestId ran it once.
//
// Usage: node downstream.mjs PORT [COUNT]   (prints "listening PORT")
//        node downstream.mjs stdio [PREFIX]  (MCP over stdio; tool names prefixed)
import { createServer } from "node:http";
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const stdio = process.argv[2] === "stdio";
const port = stdio ? 0 : Number(process.argv[2] ?? 0);
let executions = stdio ? 0 : Number(process.argv[3] ?? 0);
const prefix = stdio ? (process.argv[3] ?? "") : "";

export const WIDGET = "ui://widget/board.html";
/** The HTML app: it names itself (rewritten by the gateway), a longer URI
 * that merely starts with its own (left alone) and an external link. */
export const HTML =
  `<!doctype html><html><head><meta name="app" content="${WIDGET}"></head>` +
  `<body><a href="${WIDGET}">reload</a> <span>${WIDGET}.map</span> ` +
  `<a href="https://example.com/docs">docs</a>\n<script>const self = '${WIDGET}';</script></body></html>\n`;

const uiMeta = { ui: { resourceUri: WIDGET }, "openai/outputTemplate": WIDGET };

function mcpServer() {
  const server = new Server(
    { name: "downstream-board", version: "1.0.0" },
    { capabilities: { tools: {}, resources: {} } },
  );
  server.setRequestHandler(ListToolsRequestSchema, async () => ({
    tools: [
      {
        name: `${prefix}pin_card`,
        description: "Pins a card on the board and shows the board.",
        inputSchema: { type: "object", properties: { title: { type: "string" } }, required: ["title"] },
        annotations: { readOnlyHint: false, destructiveHint: false },
        _meta: uiMeta,
      },
      {
        name: `${prefix}big_text`,
        description: "Answers `bytes` bytes of text (for the gateway's size cap).",
        inputSchema: { type: "object", properties: { bytes: { type: "integer" }, delayMs: { type: "integer" } } },
        annotations: { readOnlyHint: true },
      },
      {
        name: `${prefix}board_status`,
        description: "How many cards were pinned.",
        inputSchema: { type: "object", properties: {} },
        annotations: { readOnlyHint: true },
      },
    ],
  }));
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    if (req.params.name === `${prefix}pin_card`) {
      executions += 1;
      return {
        content: [
          { type: "text", text: `pinned ${req.params.arguments.title}` },
          { type: "resource_link", uri: WIDGET, name: "board", mimeType: "text/html;profile=mcp-app" },
        ],
        structuredContent: { pinned: req.params.arguments.title, executions },
        _meta: { "ui/resourceUri": WIDGET },
      };
    }
    if (req.params.name === `${prefix}big_text`) {
      const { bytes = 1, delayMs = 0 } = req.params.arguments ?? {};
      await new Promise((ok) => setTimeout(ok, delayMs));
      return { content: [{ type: "text", text: "x".repeat(bytes) }] };
    }
    if (req.params.name === `${prefix}board_status`) {
      return { content: [{ type: "text", text: String(executions) }], structuredContent: { executions } };
    }
    throw new Error(`no tool ${req.params.name}`);
  });
  server.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: [{ uri: WIDGET, name: "board", mimeType: "text/html;profile=mcp-app" }],
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: "ui://widget/{name}.html", name: "widgets" }],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    if (req.params.uri !== WIDGET) throw new Error(`no resource ${req.params.uri}`);
    return {
      contents: [{ uri: WIDGET, mimeType: "text/html;profile=mcp-app", text: HTML, _meta: { ui: { prefersBorder: true } } }],
    };
  });
  return server;
}

const http = createServer(async (req, res) => {
  if (req.method === "GET" && req.url === "/count") {
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ executions }));
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

if (process.argv[1] && process.argv[1].endsWith("downstream.mjs")) {
  if (stdio) {
    await mcpServer().connect(new StdioServerTransport());
  } else {
    http.listen(port, "127.0.0.1", () => console.log(`listening ${http.address().port}`));
  }
}
