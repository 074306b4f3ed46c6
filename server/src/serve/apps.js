// The MCP Apps host of the Agents page (served at /agents/apps.js).
//
// An agent's gateway tool call whose tool names a `ui://` App leaves a View
// on the server, listed in the tab's long-poll (agents.js hands each answer
// over as a `portcullis:work` event). Each View is shown here beside its
// tool result, in a frame of the sandbox proxy on the sandbox's own origin
// (see the server's apps::sandbox): the proxy runs the App in an inner,
// opaque-origin frame and relays its JSON-RPC messages (MCP Apps,
// SEP-1865, "Sandbox proxy").
//
// This page is the trusted side: it accepts a message only from a proxy
// frame it made (`event.source`) on the sandbox origin (`event.origin`),
// sends every App message to the server (`POST /agents/apps/request`),
// which parses it and enforces the rules, and posts the server's answer
// back. Nothing the App sends reaches the server before the user chose
// "Activate interactions" for that View (the server refuses it otherwise).
// A link or a message the App proposes is shown here, outside the frame,
// and acted on only after the user's own click; approvals of the App's
// writes are the Agents page's ordinary approval cards.
//
// Context the App offers (ui/update-model-context) is shown on its card;
// the user ticks what they inspected and sends it ("Send selected context
// to the agent"): the server captures exactly the ticked versions, and the
// agent that opened the View receives them with its next call. A message
// the user sends once goes the same way.
//
// Views live on the server (its store): after a reload the page lists
// them again. An App operation that was waiting for an approval is
// resumed with its own message (it runs once, under its ledger request);
// one that was already dispatched shows "Check result", which reads its
// receipt and never runs it again.
"use strict";

(() => {
  const root = document.getElementById("tab");
  const section = document.getElementById("apps");
  if (!root || !section) return;
  const csrf = root.dataset.csrf;
  const SANDBOX = section.dataset.sandbox;
  if (!SANDBOX) return; // the server shows no Apps (no sandbox)
  const views = new Map();

  const api = async (path, body) => {
    const r = await fetch(path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify(body),
    });
    let json = null;
    try { json = await r.json(); } catch (_) { json = null; }
    return { status: r.status, json };
  };
  const el = (tag, props, ...children) => {
    const e = document.createElement(tag);
    Object.assign(e, props || {});
    e.append(...children);
    return e;
  };
  const errorText = (r) => (r.json && r.json.error && r.json.error.message) || `HTTP ${r.status}`;

  // Posts a message to the View's proxy (which relays it to the App).
  const toApp = (v, m) => {
    if (v.frame.contentWindow) v.frame.contentWindow.postMessage(m, SANDBOX);
  };
  const rpcError = (id, message) => ({ jsonrpc: "2.0", id, error: { code: -32000, message } });

  const setState = (v, text) => { v.stateEl.textContent = text; };

  // A proposal (a link to open, a message to send): shown outside the
  // frame; the App's request is answered once the user chose.
  const showProposal = (v, p) => {
    const box = el("div", { className: `app-proposal ${p.kind}` });
    box.dataset.proposal = p.id;
    box.setAttribute("role", "dialog");
    const decide = async (decision) => {
      for (const b of box.querySelectorAll("button, a")) { b.disabled = true; b.style.pointerEvents = "none"; }
      const r = await api("/agents/apps/proposal", { view: v.id, proposal: p.id, decision });
      if (r.json && r.json.response) toApp(v, r.json.response);
      box.replaceChildren(el("p", {
        className: "app-proposal-done",
        textContent: r.status === 200 ? (r.json.shown || "Done.") : errorText(r),
      }));
      setTimeout(() => box.remove(), 4000);
    };
    if (p.kind === "link") {
      box.append(
        el("p", { textContent: `The App of source ${v.source} proposes to open this link:` }),
        el("p", {}, el("code", { className: "app-link-url", textContent: p.url })),
        // The user's own click opens it, in a new tab without an opener.
        el("a", {
          className: "app-open-link", href: p.url, target: "_blank", rel: "noopener noreferrer",
          referrerPolicy: "no-referrer", textContent: "Open link", onclick: () => { decide("accept"); },
        }),
        " ",
        el("button", { textContent: "Decline", onclick: () => decide("decline") }),
      );
    } else {
      box.append(
        el("p", { textContent: `The App of source ${v.source} proposes a message as you:` }),
        el("pre", { className: "app-message-text", textContent: p.text }),
        el("p", { textContent: "Sending passes it, marked as coming from this App, to the agent that opened it, with the agent's next call." }),
        el("button", { textContent: "Send once", onclick: () => decide("accept") }),
        el("button", { textContent: "Decline", onclick: () => decide("decline") }),
      );
    }
    v.proposalsEl.append(box);
  };

  // One App message to the server, and its answer back to the App. A
  // tool call waiting for an approval is asked again with the same
  // message: the server runs it once under the same ledger request.
  const forward = async (v, m) => {
    for (let round = 0; round < 120; round++) {
      const r = await api("/agents/apps/request", { view: v.id, message: JSON.stringify(m) });
      if (r.status !== 200 || !r.json) {
        if (m.id !== undefined) toApp(v, rpcError(m.id, errorText(r)));
        return;
      }
      const a = r.json;
      if (a.pending) {
        setState(v, "Waiting for your approval (above, outside the App).");
        continue;
      }
      if (a.proposal) { showProposal(v, a.proposal); return; }
      if (a.size && a.size.height) v.frame.style.height = `${Math.min(a.size.height, 800)}px`;
      if (a.response) toApp(v, a.response);
      if (a.afterInitialized) v.afterInitialized = a.afterInitialized;
      if (a.initialized && v.afterInitialized) {
        for (const n of v.afterInitialized) toApp(v, n);
        v.afterInitialized = null;
      }
      if (v.active && v.live !== false) setState(v, "Interactions are active.");
      return;
    }
  };

  const onMessage = async (e) => {
    if (e.origin !== SANDBOX) return;
    let v = null;
    for (const x of views.values()) if (x.frame.contentWindow === e.source) v = x;
    if (!v) return;
    const m = e.data;
    if (!m || typeof m !== "object" || m.jsonrpc !== "2.0") return;
    if (m.method === "ui/notifications/sandbox-proxy-ready") {
      if (v.loaded) return;
      v.loaded = true;
      const r = await api("/agents/apps/resource", { view: v.id });
      if (r.status !== 200 || !r.json || typeof r.json.html !== "string") {
        setState(v, `The App could not be loaded: ${errorText(r)}`);
        return;
      }
      toApp(v, {
        jsonrpc: "2.0",
        method: "ui/notifications/sandbox-resource-ready",
        params: { html: r.json.html, csp: r.json.csp },
      });
      return;
    }
    if (typeof m.method === "string" && m.method.startsWith("ui/notifications/sandbox-")) return;
    if (m.method === undefined) {
      // The one request the host sends: the App's answer to the teardown.
      if (m.id === "teardown" && v.tornDown) v.tornDown();
      return;
    }
    v.queue = v.queue.then(() => forward(v, m)).catch(() => {});
  };

  const activate = async (v) => {
    v.activateEl.disabled = true;
    const r = await api("/agents/apps/activate", { view: v.id });
    if (r.status === 200) {
      v.active = true;
      v.activateEl.hidden = true;
      setState(v, "Interactions are active.");
    } else {
      v.activateEl.disabled = false;
      setState(v, `Not activated: ${errorText(r)}`);
    }
  };

  const close = async (v) => {
    // The App is told first and given a moment to answer (SEP-1865,
    // "Cleanup"); its controls end on the server at once.
    const answered = new Promise((ok) => { v.tornDown = ok; setTimeout(ok, 1000); });
    toApp(v, { jsonrpc: "2.0", id: "teardown", method: "ui/resource-teardown", params: { reason: "closed by the user" } });
    await api("/agents/apps/close", { view: v.id });
    await answered;
    v.box.remove();
    views.delete(v.id);
  };

  // The App's current context offer, on its card, with the box the user
  // ticks to select the version they see.
  const showContext = (v, c) => {
    if (!c) {
      v.contextEl.hidden = true;
      v.contextBox.checked = false;
      return;
    }
    v.contextEl.hidden = false;
    const shown = c.text != null ? c.text : JSON.stringify(c.structured);
    v.contextText.textContent = shown;
    v.contextEl.dataset.version = c.version;
    if (v.contextBox.checked && Number(v.contextBox.dataset.version) !== c.version) {
      v.contextNote.textContent = "The App replaced this context since you selected it: select it again to send this version.";
    } else {
      v.contextNote.textContent = "";
    }
  };

  // An operation the page lost the answer to (a reload): one waiting for
  // an approval is resumed with its own message; one already dispatched
  // gets "Check result".
  const showLost = (v, calls) => {
    for (const c of calls || []) {
      const key = JSON.stringify(c.id);
      if (v.lost.has(key)) continue;
      v.lost.add(key);
      const box = el("div", { className: "app-lost" });
      box.dataset.call = key;
      const say = (t) => { box.querySelector(".app-lost-state").textContent = t; };
      box.append(el("p", { className: "app-lost-state" }));
      v.lostEl.append(box);
      if (c.awaiting && c.message) {
        say(`The App's ${c.what} waits for your approval (above); it runs once when you approve.`);
        (async () => {
          for (let round = 0; round < 120; round++) {
            const r = await api("/agents/apps/request", { view: v.id, message: c.message });
            if (r.status !== 200 || !r.json) { say(`The App's ${c.what} ended: ${errorText(r)}`); return; }
            if (r.json.pending) continue;
            const a = r.json.response || {};
            if (a.error) say(`The App's ${c.what} was refused: ${a.error.message}`);
            else {
              const res = a.result || {};
              say(`The App's ${c.what} ${res.isError ? "failed" : "ran"}: ${JSON.stringify(res.structuredContent || res.content || {})}`);
            }
            return;
          }
        })();
      } else {
        say(`The answer to the App's ${c.what} was lost (the page reloaded). Its outcome is recorded: check it (it is never run again).`);
        const btn = el("button", { className: "app-check", textContent: "Check result" });
        btn.onclick = async () => {
          btn.disabled = true;
          const r = await api("/agents/apps/check", { view: v.id, id: c.id, request: c.request ?? undefined });
          const out = el("p", { className: "app-check-result" });
          if (r.status !== 200 || !r.json) out.textContent = `Not checked: ${errorText(r)}`;
          else if (r.json.outcome === "completed") out.textContent = `Completed: ${JSON.stringify(r.json.detail)}`;
          else if (r.json.outcome === "failed") out.textContent = `Failed: ${JSON.stringify(r.json.detail)}`;
          else if (r.json.outcome === "pending") { out.textContent = "Still pending: check again later."; btn.disabled = false; }
          else out.textContent = `Unknown (${r.json.detail}): it may or may not have had its effect; it is not run again.`;
          box.querySelector(".app-check-result")?.remove();
          box.append(out);
        };
        box.append(btn);
      }
    }
  };

  const add = (d) => {
    const v = { id: d.id, source: d.source, queue: Promise.resolve(), active: d.active === true };
    v.stateEl = el("p", { className: "app-state" });
    v.activateEl = el("button", { className: "app-activate", textContent: "Activate interactions" });
    v.activateEl.onclick = () => activate(v);
    v.activateEl.hidden = v.active;
    const closeEl = el("button", { className: "app-close", textContent: "Close" });
    closeEl.onclick = () => close(v);
    v.proposalsEl = el("div", { className: "app-proposals" });
    v.lost = new Set();
    v.lostEl = el("div", { className: "app-lost-calls" });
    v.contextBox = el("input", { type: "checkbox", className: "app-context-select" });
    v.contextBox.onchange = () => {
      v.contextBox.dataset.version = v.contextEl.dataset.version;
      v.contextNote.textContent = "";
    };
    v.contextText = el("pre", { className: "app-context-text" });
    v.contextNote = el("p", { className: "app-context-note" });
    v.contextEl = el("div", { className: "app-context", hidden: true },
      el("label", {}, v.contextBox, " Select this context (offered by the App) to send to the agent"),
      v.contextText, v.contextNote);
    v.frame = el("iframe", { className: "app-frame", title: `App of ${d.source}` });
    v.frame.setAttribute("sandbox", "allow-scripts allow-same-origin");
    v.frame.setAttribute("referrerpolicy", "no-referrer");
    v.frame.style.cssText = "width:100%;height:220px;border:1px solid #999";
    const who = d.client && d.client.name ? `“${d.client.name}”` : "an unnamed client";
    v.box = el("article", { className: "app-view" },
      el("h3", { textContent: `App from source ${d.source}: result of ${d.tool}, called by ${who}` }),
      v.stateEl, el("p", {}, v.activateEl, " ", closeEl), v.lostEl, v.contextEl, v.proposalsEl, v.frame);
    v.box.dataset.view = d.id;
    v.box.dataset.grant = d.grant;
    setState(v, v.active ? "Interactions are active." :
      "Shown only: the App can call nothing until you choose “Activate interactions”.");
    views.set(d.id, v);
    section.append(v.box);
    v.frame.src = `${SANDBOX}/sandbox.html`;
    // The operations listed when the View first appears here are those a
    // reload (or a restart) left without their answer.
    showLost(v, d.calls);
  };

  // "Send selected context to the agent": exactly the ticked versions.
  const sendBar = el("p", { className: "app-send-context" });
  const sendButton = el("button", { id: "apps-send-context", textContent: "Send selected context to the agent" });
  const sendState = el("span", { className: "app-send-state" });
  sendButton.onclick = async () => {
    const selections = [];
    for (const v of views.values()) {
      if (v.contextBox.checked) selections.push({ view: v.id, version: Number(v.contextBox.dataset.version) });
    }
    if (!selections.length) { sendState.textContent = "Select an App's context first."; return; }
    sendButton.disabled = true;
    const r = await api("/agents/apps/context", { selections });
    sendButton.disabled = false;
    if (r.status === 200) {
      sendState.textContent = `Sent ${r.json.sent} context value(s): the agent receives them with its next call.`;
      for (const v of views.values()) v.contextBox.checked = false;
    } else {
      sendState.textContent = `Not sent: ${errorText(r)}`;
    }
  };
  sendBar.append(sendButton, " ", sendState);
  section.append(sendBar);

  window.addEventListener("message", (e) => { onMessage(e); });
  window.addEventListener("portcullis:work", (e) => {
    const list = (e.detail && e.detail.views) || [];
    for (const d of list) if (!views.has(d.id)) add(d);
    for (const d of list) {
      const v = views.get(d.id);
      if (!v) continue;
      showContext(v, d.context);
      v.live = d.live !== false;
      if (d.live === false) {
        setState(v, "Its connection was revoked: the App can no longer call anything.");
      } else if (v.active && d.active === false) {
        // The server ended the activation (the grant's authority changed).
        v.active = false;
        v.activateEl.hidden = false;
        v.activateEl.disabled = false;
        setState(v, "Interactions ended (the connection's permissions changed): activate again to continue.");
      }
    }
  });
})();
