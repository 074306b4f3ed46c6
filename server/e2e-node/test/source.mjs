// A configurable downstream MCP server over stdio (the official TypeScript
// SDK's low-level server), for the gateway's tests of sources as they are:
// slow to start, changing their lists, flooding, oversized, listing URIs the
// gateway cannot map, or naming a tool like the app's own skill.
//
// Usage: node source.mjs [key=value …] (no spaces: `--source NAME=cmd:…`
// splits on them)
//   tools=a,b     write tools (readOnlyHint: false) that answer "ran NAME"
//   ctl=PREFIX    prefix of the read-only control tools (default "ctl_"):
//                 stats, drop {name}, flood {n, everyMs}, big {bytes},
//                 bad_link, figure
//   delay=MS      wait this long before answering anything (a slow start)
//   resources=…   which resources to list: plain, long (a URI over 8 KiB),
//                 dots (a `..` segment), figure (4 095 pages and a 2 MB one)
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import {
  CallToolRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  ReadResourceRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";

const opts = Object.fromEntries(process.argv.slice(2).map((a) => a.split(/=(.*)/s).slice(0, 2)));
const ctl = opts.ctl ?? "ctl_";
let tools = (opts.tools ?? "").split(",").filter(Boolean);
const listed = new Set((opts.resources ?? "").split(",").filter(Boolean));
const stats = { listCalls: 0, executions: {} };

/** The figure's resources: 4 096 known URIs (4 095 pages and one 2 MB page
 * that links to them all, over and over: what an MCP Apps bundle with many
 * self-references looks like to the gateway's text rewriting). */
export const FIGURE_PAGES = 4095;
export const figurePage = (i) => `ui://fig/page-${i}.html`;
export const FIGURE_BIG = "ui://fig/big.html";
function figureText() {
  const parts = [];
  let size = 0;
  for (let i = 0; size < 2 * 1024 * 1024; i = (i + 1) % FIGURE_PAGES) {
    const part = `<li><a href="${figurePage(i)}" title='page ${i}'>(${i})</a> = [${figurePage(i)}]</li>\n`;
    parts.push(part);
    size += part.length;
  }
  return parts.join("");
}

const resources = () => {
  const out = [];
  if (listed.has("plain")) out.push({ uri: "ui://app/plain.html", name: "plain" });
  if (listed.has("long")) out.push({ uri: `ui://app/${"l".repeat(9000)}.html`, name: "long" });
  if (listed.has("dots")) out.push({ uri: "ui://evil/../good/main.html", name: "dots" });
  if (listed.has("figure")) {
    out.push({ uri: FIGURE_BIG, name: "big", mimeType: "text/html;profile=mcp-app" });
    for (let i = 0; i < FIGURE_PAGES; i++) out.push({ uri: figurePage(i), name: `page ${i}` });
  }
  return out;
};

const readOnly = { readOnlyHint: true };
const control = () => [
  { name: `${ctl}stats`, description: "Counters.", inputSchema: { type: "object" }, annotations: readOnly },
  {
    name: `${ctl}drop`,
    description: "Stops listing a tool and says so.",
    inputSchema: { type: "object", properties: { name: { type: "string" } } },
    annotations: readOnly,
  },
  {
    name: `${ctl}flood`,
    description: "Sends tools/list_changed n times, everyMs apart.",
    inputSchema: { type: "object", properties: { n: { type: "integer" }, everyMs: { type: "integer" } } },
    annotations: readOnly,
  },
  {
    name: `${ctl}big`,
    description: "Answers `bytes` bytes of text.",
    inputSchema: { type: "object", properties: { bytes: { type: "integer" } } },
    annotations: readOnly,
  },
  { name: `${ctl}bad_link`, description: "Links to a URI over 8 KiB.", inputSchema: { type: "object" }, annotations: readOnly },
];

const server = new Server(
  { name: "test-source", version: "1.0.0" },
  { capabilities: { tools: { listChanged: true }, resources: { listChanged: true } } },
);
server.setRequestHandler(ListToolsRequestSchema, async () => {
  stats.listCalls += 1;
  return {
    tools: [
      ...tools.map((name) => ({
        name,
        description: `The source's own ${name}.`,
        inputSchema: { type: "object", properties: { title: { type: "string" } } },
        annotations: { readOnlyHint: false, destructiveHint: false },
      })),
      ...control(),
    ],
  };
});
server.setRequestHandler(CallToolRequestSchema, async (req) => {
  const { name, arguments: args = {} } = req.params;
  if (tools.includes(name)) {
    stats.executions[name] = (stats.executions[name] ?? 0) + 1;
    return { content: [{ type: "text", text: `ran ${name} ${JSON.stringify(args)}` }] };
  }
  switch (name) {
    case `${ctl}stats`:
      return { content: [{ type: "text", text: JSON.stringify(stats) }], structuredContent: stats };
    case `${ctl}drop`:
      tools = tools.filter((t) => t !== args.name);
      await server.sendToolListChanged();
      return { content: [{ type: "text", text: `dropped ${args.name}` }] };
    case `${ctl}flood`: {
      const { n = 1, everyMs = 0 } = args;
      (async () => {
        for (let i = 0; i < n; i++) {
          await server.sendToolListChanged();
          if (everyMs) await new Promise((ok) => setTimeout(ok, everyMs));
        }
      })();
      return { content: [{ type: "text", text: "flooding" }] };
    }
    case `${ctl}big`:
      return { content: [{ type: "text", text: "x".repeat(args.bytes ?? 1) }] };
    case `${ctl}bad_link`:
      return {
        content: [
          { type: "text", text: "a link the gateway cannot map" },
          { type: "resource_link", uri: `ui://app/${"l".repeat(9000)}.html`, name: "too long" },
        ],
      };
    default:
      throw new Error(`no tool ${name}`);
  }
});
server.setRequestHandler(ListResourcesRequestSchema, async () => ({ resources: resources() }));
server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [] }));
let bigText;
server.setRequestHandler(ReadResourceRequestSchema, async (req) => {
  const { uri } = req.params;
  if (uri === FIGURE_BIG && listed.has("figure")) {
    bigText ??= figureText();
    return { contents: [{ uri, mimeType: "text/html;profile=mcp-app", text: bigText }] };
  }
  if (resources().some((r) => r.uri === uri)) return { contents: [{ uri, mimeType: "text/html", text: `<p>${uri}</p>` }] };
  throw new Error(`no resource ${uri}`);
});

if (process.argv[1] && process.argv[1].endsWith("source.mjs")) {
  if (opts.delay) await new Promise((ok) => setTimeout(ok, Number(opts.delay)));
  await server.connect(new StdioServerTransport());
}
