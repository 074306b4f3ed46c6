// The MCP Apps sandbox proxy (served on the sandbox origin at /sandbox.js).
//
// The Agents page frames /sandbox.html on this separate origin, one per
// App View. This script tells the page it is ready, takes the App's HTML
// and declared CSP origins from the page (and only from the page: the
// parent window, on the host's origin), and loads them in an inner frame
// sandboxed with `allow-scripts` only (an opaque origin) at /view, whose
// CSP the server builds from those origins. It then relays every message
// between the page and the App, except its own `ui/notifications/sandbox-*`
// ones (MCP Apps, "Sandbox proxy"). It never makes a request of its own.
"use strict";

(() => {
  const HOST = document.documentElement.dataset.host;
  let inner = null;
  let html = null;
  const own = (m) => m && typeof m === "object" && typeof m.method === "string" &&
    m.method.startsWith("ui/notifications/sandbox-");
  const load = (p) => {
    if (!p || typeof p.html !== "string") return;
    const q = new URLSearchParams();
    const csp = p.csp && typeof p.csp === "object" ? p.csp : {};
    for (const o of Array.isArray(csp.connectDomains) ? csp.connectDomains : []) q.append("connect", String(o));
    for (const o of Array.isArray(csp.resourceDomains) ? csp.resourceDomains : []) q.append("resource", String(o));
    html = p.html;
    inner = document.createElement("iframe");
    inner.setAttribute("sandbox", "allow-scripts");
    inner.setAttribute("referrerpolicy", "no-referrer");
    inner.setAttribute("title", "MCP App");
    // Styled from here: the page's CSP allows no inline style.
    for (const e of [document.documentElement, document.body]) e.style.cssText = "margin:0;padding:0;height:100%;overflow:hidden";
    inner.style.cssText = "border:0;width:100%;height:100%;display:block";
    inner.src = `/view?${q}`;
    document.body.append(inner);
  };
  window.addEventListener("message", (e) => {
    const m = e.data;
    if (e.source === window.parent && e.origin === HOST) {
      if (own(m)) {
        if (m.method === "ui/notifications/sandbox-resource-ready" && !inner) load(m.params);
        return;
      }
      if (inner) inner.contentWindow.postMessage(m, "*");
      return;
    }
    if (inner && e.source === inner.contentWindow) {
      if (own(m)) {
        if (m.method === "ui/notifications/sandbox-view-ready" && html !== null) {
          const params = { html };
          html = null;
          inner.contentWindow.postMessage({ jsonrpc: "2.0", method: "ui/notifications/sandbox-view-html", params }, "*");
        }
        return;
      }
      window.parent.postMessage(m, HOST);
    }
  });
  window.parent.postMessage({ jsonrpc: "2.0", method: "ui/notifications/sandbox-proxy-ready", params: {} }, HOST);
})();
