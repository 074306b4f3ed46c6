// A loopback proxy that adds `Authorization: Bearer TOKEN` to every request
// it forwards to TARGET (the MCP URL): the conformance suite has no way to
// authenticate, and the endpoint answers nobody without a token.
//
// Usage: node bearer-proxy.mjs TARGET TOKEN   (prints "listening PORT")
import { createServer, request } from "node:http";

const [target, token] = process.argv.slice(2);
const to = new URL(target);
const server = createServer((req, res) => {
  // The server checks `Host` against its own authority; `Origin`, if any,
  // goes on unchanged.
  const headers = { ...req.headers, host: to.host, authorization: `Bearer ${token}` };
  const up = request({ host: to.hostname, port: to.port, path: to.pathname, method: req.method, headers }, (r) => {
    res.writeHead(r.statusCode, r.headers);
    r.pipe(res);
  });
  up.on("error", (e) => {
    res.writeHead(502, { "content-type": "text/plain" });
    res.end(String(e));
  });
  req.pipe(up);
});
server.listen(0, "127.0.0.1", () => console.log(`listening ${server.address().port}`));
