// The connected tab of the Portcullis demo (served at /agents/app.js).
//
// This page becomes the executor of every live agent connection of the
// signed-in user: it connects with a tab id kept in sessionStorage (a
// duplicated tab gets a fresh one) and a page-instance id new on every
// load, sends heartbeats with its visibility, long-polls for work, runs the
// notes app's skills with the user's own cookie, reports outcomes, and shows
// approval dialogs naming the requesting client. It also applies the
// `navigate` commands of deep links opened in this browser session (the
// view, filters, a highlighted note, a compose draft — never saved without
// the user) and acknowledges them. Every decision is the server's (the
// Portcullis core's); this script only carries them out.
"use strict";

(() => {
  const root = document.getElementById("tab");
  if (!root) return;
  const csrf = root.dataset.csrf;
  const statusEl = document.getElementById("tab-status");
  const useButton = document.getElementById("use-this-tab");
  const approvalsEl = document.getElementById("approvals");
  const notesEl = document.getElementById("notes");
  const navEl = document.getElementById("navigation");

  const random = () => {
    const b = new Uint8Array(12);
    crypto.getRandomValues(b);
    return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  };
  const pageInstance = random();
  let tabId = sessionStorage.getItem("portcullis.tabId") || random();
  sessionStorage.setItem("portcullis.tabId", tabId);
  let since = 0;
  let highlighted = null;
  // The `f_*` filters of the last deep link: `f_q` matches title or body,
  // `f_<field>` that field; case-insensitive substring matches.
  let filters = {};

  const api = async (method, path, body) => {
    const r = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    let json = null;
    try { json = await r.json(); } catch (_) { json = null; }
    return { status: r.status, json };
  };
  const visible = () => document.visibilityState === "visible";
  const hello = (takeOver) => ({ tabId, pageInstance, visible: visible(), takeOver });

  // A duplicated tab inherits sessionStorage: ask whether a live page
  // already uses this tab id, and take a fresh one if so.
  const probe = () => new Promise((resolve) => {
    if (!("BroadcastChannel" in window)) return resolve();
    const ch = new BroadcastChannel("portcullis-tab");
    ch.onmessage = (e) => {
      const m = e.data || {};
      if (m.type === "probe" && m.tabId === tabId && m.from !== pageInstance) {
        ch.postMessage({ type: "taken", tabId, to: m.from });
      } else if (m.type === "taken" && m.to === pageInstance) {
        tabId = random();
        sessionStorage.setItem("portcullis.tabId", tabId);
      }
    };
    ch.postMessage({ type: "probe", tabId, from: pageInstance });
    setTimeout(resolve, 200);
  });

  const clientName = (c) => (c && c.name ? `“${c.name}”` : "An unnamed client");

  const showGrants = (grants) => {
    if (!grants || grants.length === 0) {
      statusEl.textContent = "No agent is connected to your account yet.";
      useButton.hidden = true;
      return;
    }
    const here = grants.filter((g) => g.here || g.state === "connected");
    const busy = grants.filter((g) => g.state === "busy" || (g.connected && g.here === false));
    if (here.length > 0 && busy.length === 0) {
      statusEl.textContent = `Connected to ${here.map((g) => clientName(g.client)).join(", ")} ` +
        "(names are unverified). Keep this tab open: your agents' calls run here.";
      useButton.hidden = true;
    } else if (busy.length > 0) {
      statusEl.textContent = "Another tab is connected to your agents. " +
        "Choose “Use this tab” to run their calls here instead.";
      useButton.hidden = false;
    } else {
      statusEl.textContent = "Not connected.";
      useButton.hidden = false;
    }
  };

  const connect = async (takeOver) => {
    const r = await api("POST", "/agents/tab/connect", hello(takeOver));
    if (r.json && r.json.grants) showGrants(r.json.grants);
  };

  const heartbeat = async () => {
    const r = await api("POST", "/agents/tab/heartbeat", { tabId, pageInstance, visible: visible() });
    if (r.json && r.json.grants && r.json.grants.some((g) => g.state === "not_connected")) {
      await connect(false);
    }
  };

  const matches = (n) => Object.entries(filters).every(([k, v]) => {
    const field = k.slice(2);
    const hay = field === "q" ? `${n.title} ${n.body}` : n[field];
    return typeof hay === "string" && hay.toLowerCase().includes(v.toLowerCase());
  });

  const refreshNotes = async () => {
    const r = await api("GET", "/app/notes");
    if (!r.json || !r.json.notes) return;
    notesEl.replaceChildren();
    const shown = r.json.notes.filter(matches);
    if (shown.length === 0) {
      const li = document.createElement("li");
      li.textContent = r.json.notes.length === 0 ? "No notes yet." : "No note matches the filters.";
      notesEl.append(li);
    }
    for (const n of shown) {
      const li = document.createElement("li");
      li.dataset.noteId = n.id;
      const strong = document.createElement("strong");
      strong.textContent = n.title;
      li.append(strong, document.createTextNode(` — ${n.body}`));
      if (n.id === highlighted) li.className = "highlight";
      notesEl.append(li);
    }
  };

  // The skills: performed with the user's own session, as the app would.
  const skills = {
    async list_notes() {
      const r = await api("GET", "/app/notes");
      if (r.status !== 200) return { ok: false, code: "LIST_FAILED", summary: "could not list notes" };
      let text = JSON.stringify(r.json.notes);
      if (text.length > 3500) text = JSON.stringify({ truncated: true, count: r.json.notes.length });
      return { ok: true, summary: text };
    },
    async create_note(args) {
      const r = await api("POST", "/app/notes", { title: args.title, body: args.body });
      if (r.status !== 201) return { ok: false, code: "CREATE_FAILED", summary: "could not create the note" };
      await refreshNotes();
      return { ok: true, summary: JSON.stringify(r.json) };
    },
    async highlight_note(args) {
      await refreshNotes();
      const find = () => notesEl.querySelector(`li[data-note-id="${CSS.escape(args.id)}"]`);
      if (!find() && Object.keys(filters).length > 0) {
        clearFilters();
        await refreshNotes();
      }
      const li = find();
      if (!li) return { ok: false, code: "NOT_FOUND", summary: `no note ${args.id}` };
      highlighted = args.id;
      for (const el of notesEl.querySelectorAll(".highlight")) el.className = "";
      li.className = "highlight";
      li.scrollIntoView({ block: "center" });
      return { ok: true, summary: JSON.stringify({ highlighted: args.id }) };
    },
  };

  const para = (text, className) => {
    const p = document.createElement("p");
    p.textContent = text;
    if (className) p.className = className;
    return p;
  };

  const clearFilters = () => {
    filters = {};
    const f = navEl.querySelector(".filters");
    if (f) f.remove();
  };

  // A compose draft from a link: shown prefilled, saved only if the user
  // says so (a link is a pure pointer: anyone can send one).
  const showDraft = (compose) => {
    const draft = compose.draft || {};
    const text = (v) => (typeof v === "string" ? v : "");
    const box = document.createElement("form");
    box.className = "draft";
    box.dataset.key = compose.key;
    const h = document.createElement("h3");
    h.textContent = "Draft from a link (not saved)";
    const title = document.createElement("input");
    title.name = "title";
    title.maxLength = 200;
    title.value = text(draft.title) || text(draft.subject);
    const body = document.createElement("textarea");
    body.name = "body";
    body.rows = 4;
    body.value = text(draft.body);
    const save = document.createElement("button");
    save.type = "submit";
    save.textContent = "Save as a note";
    const discard = document.createElement("button");
    discard.type = "button";
    discard.textContent = "Discard";
    discard.onclick = () => box.remove();
    box.onsubmit = async (e) => {
      e.preventDefault();
      const r = await api("POST", "/app/notes", { title: title.value, body: body.value });
      if (r.status === 201) {
        box.remove();
        await refreshNotes();
      } else {
        box.append(para("The note could not be saved."));
      }
    };
    const label = (text, el) => {
      const l = document.createElement("label");
      l.append(text, el);
      return l;
    };
    box.append(h, label("Title", title), label("Body", body), save, discard);
    navEl.append(box);
  };

  // Applies a deep link's `navigate` command: the view (a banner), the
  // filters, the note to highlight, the compose draft.
  const applyNavigate = async (m) => {
    const nav = m.navigate && typeof m.navigate === "object" ? m.navigate : {};
    const view = typeof nav.view === "string" && nav.view !== "" ? nav.view : null;
    filters = {};
    const rest = [];
    for (const [k, v] of Object.entries(nav)) {
      if (typeof v !== "string" || k === "view") continue;
      if (k.startsWith("f_") && k.length > 2) filters[k] = v;
      else rest.push(`${k} = ${v}`);
    }
    const noteId = [nav.noteId, nav.id, nav.highlight].find((v) => typeof v === "string");
    if (noteId) highlighted = noteId;
    navEl.replaceChildren();
    const banner = para(view ? `Navigated to ${view}` : "Navigated from a link", "navigated");
    banner.setAttribute("role", "status");
    banner.dataset.view = view || "";
    navEl.append(banner);
    if (rest.length > 0) navEl.append(para(`Link parameters: ${rest.join(", ")}`, "params"));
    const shown = Object.entries(filters);
    if (shown.length > 0) {
      const f = para(`Filters: ${shown.map(([k, v]) => `${k.slice(2)} = ${v}`).join(", ")} `, "filters");
      const clear = document.createElement("button");
      clear.type = "button";
      clear.textContent = "Clear filters";
      clear.onclick = async () => { clearFilters(); await refreshNotes(); };
      f.append(clear);
      navEl.append(f);
    }
    if (m.compose && typeof m.compose === "object") showDraft(m.compose);
    await refreshNotes();
    const li = noteId && notesEl.querySelector(`li[data-note-id="${CSS.escape(noteId)}"]`);
    (li || navEl).scrollIntoView({ block: "center" });
  };

  const handleMessage = async (m) => {
    try {
      if (m.kind === "navigate") await applyNavigate(m);
    } catch (_) {
      // Acknowledged even so: a retry would fail the same way.
    }
    await api("POST", "/agents/tab/ack", { id: m.id });
  };

  const runJob = async (job) => {
    const skill = skills[job.skill];
    let out;
    try {
      out = skill ? await skill(job.args || {}) : { ok: false, code: "ACTION_NOT_FOUND", summary: job.skill };
    } catch (e) {
      out = { ok: false, code: "FAILED", summary: "the page failed to run the skill" };
    }
    await api("POST", "/agents/tab/report", { job: job.job, ok: out.ok, code: out.code, summary: out.summary });
  };

  const decide = async (a, decision, box) => {
    for (const b of box.querySelectorAll("button")) b.disabled = true;
    const r = await api("POST", "/agents/tab/decide", {
      grant: a.grant, requestId: a.requestId, seq: a.seq, fingerprint: a.fingerprint, decision,
    });
    if (r.status !== 200) {
      const p = document.createElement("p");
      p.textContent = (r.json && r.json.error && r.json.error.message) || "The decision was not accepted.";
      box.append(p);
    } else {
      box.remove();
    }
  };

  const showApprovals = (approvals) => {
    const keep = new Set(approvals.map((a) => `${a.requestId}/${a.seq}/${a.fingerprint}`));
    for (const el of approvalsEl.querySelectorAll(".approval")) {
      if (!keep.has(el.dataset.key)) el.remove();
    }
    for (const a of approvals) {
      const key = `${a.requestId}/${a.seq}/${a.fingerprint}`;
      if (approvalsEl.querySelector(`[data-key="${CSS.escape(key)}"]`)) continue;
      const box = document.createElement("div");
      box.className = "approval";
      box.dataset.key = key;
      box.setAttribute("role", "dialog");
      box.setAttribute("aria-label", "Approve an agent's action");
      // A downstream tool (through the gateway) is named with its source,
      // so it is never mistaken for the app's own skill of the same name.
      const what = a.source ? `${a.action} from source ${a.source}` : a.kind;
      const h = document.createElement("h3");
      // An MCP App asks through its View (shown for the agent's call).
      h.textContent = a.appView
        ? `The App of source ${a.source} (shown for ${clientName(a.client)}) wants to run ${what}`
        : `${clientName(a.client)} wants to run ${what}`;
      if (a.appView) box.dataset.appView = a.appView;
      const who = document.createElement("p");
      const id = document.createElement("code");
      id.textContent = a.client.id;
      // The App asked (its own call, in its View), not the agent: the
      // agent's client only had the View shown, and its grant is the one
      // the call runs under.
      who.append(
        a.appView
          ? `Requested by the App of source ${a.source}, in a View shown for ${clientName(a.client)} (unverified name: the client chose it) and under that agent's grant, client ID `
          : `Requested by ${clientName(a.client)} (unverified name: the client chose it), client ID `,
        id, `. Effect: ${a.effect}.`,
      );
      const pre = document.createElement("pre");
      box.append(h, who, pre);
      if (a.canApprove) {
        pre.textContent = JSON.stringify(a.args, null, 2);
        const approve = document.createElement("button");
        approve.textContent = "Approve";
        approve.dataset.decision = "once";
        approve.onclick = () => decide(a, "once", box);
        box.append(approve);
      } else {
        // Nobody approves what they were not shown: Deny is the only choice.
        pre.textContent = "(the arguments of this action cannot be shown: it can only be denied)";
      }
      if (a.canApprove && a.offerAutoApprove && a.effect === "write") {
        const auto = document.createElement("button");
        auto.textContent = `Approve, and auto-approve ${what} while this tab is connected`;
        auto.dataset.decision = "auto";
        auto.onclick = () => decide(a, "auto", box);
        box.append(auto);
      }
      const deny = document.createElement("button");
      deny.textContent = "Deny";
      deny.dataset.decision = "deny";
      deny.onclick = () => decide(a, "deny", box);
      box.append(deny);
      approvalsEl.append(box);
    }
  };

  const poll = async () => {
    for (;;) {
      try {
        const q = new URLSearchParams({ tabId, pageInstance, since: String(since) });
        const r = await api("GET", `/agents/tab/work?${q}`);
        if (r.status === 401 || r.status === 403) {
          statusEl.textContent = "Signed out: reload the page.";
          return;
        }
        if (r.status === 409) {
          // A newer poll of this browser took this one's place (too many
          // open pages): back off before polling again.
          await new Promise((res) => setTimeout(res, 5000));
          continue;
        }
        if (!r.json || !r.json.ok) throw new Error("poll failed");
        since = r.json.version;
        showGrants(r.json.grants);
        showApprovals(r.json.approvals);
        // The MCP Apps host (apps.js) takes the App Views from here.
        window.dispatchEvent(new CustomEvent("portcullis:work", { detail: r.json }));
        for (const m of r.json.messages || []) await handleMessage(m);
        for (const job of r.json.jobs) await runJob(job);
        await refreshNotes();
      } catch (_) {
        await new Promise((res) => setTimeout(res, 2000));
      }
    }
  };

  useButton.onclick = () => connect(true);
  document.addEventListener("visibilitychange", () => { heartbeat(); });
  window.addEventListener("pagehide", () => {
    fetch("/agents/tab/disconnect", {
      method: "POST",
      keepalive: true,
      credentials: "same-origin",
      headers: { "content-type": "application/json", "x-csrf-token": csrf },
      body: JSON.stringify({ tabId, pageInstance }),
    });
  });

  (async () => {
    await probe();
    await connect(false);
    await refreshNotes();
    setInterval(heartbeat, 10000);
    poll();
  })();
})();
