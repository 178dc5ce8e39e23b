// The cws console: one page, routed by the URL's hash, that calls the same REST API a
// client calls (api.ts). Pages: sign-in, overview, sessions, a session.
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import c from "highlight.js/lib/languages/c";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import go from "highlight.js/lib/languages/go";
import ini from "highlight.js/lib/languages/ini";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import markdown from "highlight.js/lib/languages/markdown";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import yaml from "highlight.js/lib/languages/yaml";
import * as api from "./api";
import { ago, bar, bytes, dur, esc, h, sparkline } from "./dom";

for (const [name, lang] of Object.entries({ bash, c, css, diff, go, ini, javascript, json, markdown, python, rust, typescript, xml, yaml })) {
  hljs.registerLanguage(name, lang);
}

const app = document.getElementById("app")!;
const live = document.getElementById("live")!; // aria-live: what changed
let stopPage: (() => void)[] = []; // timers of the page on screen
let isAdmin: boolean | null = null;

function every(ms: number, fn: () => Promise<void> | void): void {
  let stopped = false;
  const run = async () => {
    if (stopped) return;
    try {
      await fn();
    } catch (e) {
      if (e instanceof api.ApiError && e.status === 401) return signOut("Your token was refused: " + e.message);
    }
    if (!stopped) t = window.setTimeout(run, ms);
  };
  let t = window.setTimeout(run, ms);
  stopPage.push(() => {
    stopped = true;
    clearTimeout(t);
  });
}

function announce(msg: string): void {
  live.textContent = msg;
}

function errorBox(e: unknown): HTMLElement {
  const msg = e instanceof api.ApiError ? `${e.status} ${e.code}: ${e.message}` : String(e);
  return h("p", { class: "error", role: "alert" }, msg);
}

function signOut(why?: string): void {
  api.setToken(null);
  isAdmin = null;
  location.hash = "#/signin";
  if (why) sessionStorage.setItem("cws.why", why);
}

async function admin(): Promise<boolean> {
  if (isAdmin !== null) return isAdmin;
  try {
    await api.get("/v1/admin/tenants");
    isAdmin = true;
  } catch {
    isAdmin = false;
  }
  return isAdmin;
}

// ---------------------------------------------------------------- frame

function frame(title: string, ...body: HTMLElement[]): void {
  const c = api.token() ? api.claims(api.token()!) : null;
  const nav = h(
    "header",
    { class: "top" },
    h("a", { href: "#/", class: "brand" }, "cws"),
    h("nav", { "aria-label": "main" }, h("a", { href: "#/" }, "Overview"), h("a", { href: "#/sessions" }, "Sessions")),
    h(
      "div",
      { class: "who" },
      c ? h("span", { title: "token issuer and subject" }, `${c.iss ?? "?"} · ${c.sub ?? "?"}`) : null,
      isAdmin ? h("span", { class: "badge" }, "admin") : null,
      h("button", { type: "button", onclick: toggleTheme, "aria-label": "switch between dark and light theme" }, "◐"),
      h("button", { type: "button", onclick: () => signOut() }, "Sign out"),
    ),
  );
  document.title = title + " · cws";
  app.replaceChildren(nav, h("main", { id: "main" }, h("h1", {}, title), ...body));
}

function toggleTheme(): void {
  const root = document.documentElement;
  const next = root.dataset.theme === "dark" ? "light" : "dark";
  root.dataset.theme = next;
  localStorage.setItem("cws.theme", next);
}

// ---------------------------------------------------------------- sign-in

function signInPage(): void {
  const why = sessionStorage.getItem("cws.why");
  sessionStorage.removeItem("cws.why");
  const input = h("textarea", { id: "token", rows: 4, autocomplete: "off", spellcheck: "false", required: true, "aria-describedby": "token-help" });
  const err = h("div", { "aria-live": "polite" }, why ? h("p", { class: "error" }, why) : null);
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const t = (input as HTMLTextAreaElement).value.trim().replace(/^Bearer\s+/i, "");
        api.setToken(t);
        isAdmin = null;
        try {
          await api.get("/v1/sessions");
        } catch (e) {
          if (!(e instanceof api.ApiError) || e.status === 401) {
            api.setToken(null);
            err.replaceChildren(errorBox(e));
            return;
          }
          // 403: a token without the sessions scope may still have the admin view.
        }
        location.hash = "#/sessions";
      },
    },
    h("label", { for: "token" }, "Token"),
    input,
    h("p", { id: "token-help", class: "help" }, "A JWT from your platform, or the dev token `cws serve --dev` prints. It stays in this tab (session storage) and is sent to cws only."),
    h("button", { type: "submit" }, "Sign in"),
    err,
  );
  document.title = "Sign in · cws";
  app.replaceChildren(h("main", { id: "main", class: "center" }, h("h1", {}, "cws console"), form));
  (input as HTMLTextAreaElement).focus();
}

// ---------------------------------------------------------------- overview

interface Sample {
  at: number;
  calls: number;
  errors: number;
  denials: number;
}

function parseMetrics(text: string): Map<string, { labels: Record<string, string>; value: number }[]> {
  const out = new Map<string, { labels: Record<string, string>; value: number }[]>();
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    const list = out.get(m[1]) ?? [];
    list.push({ labels, value: parseFloat(m[4]) });
    out.set(m[1], list);
  }
  return out;
}

const sum = (m: ReturnType<typeof parseMetrics>, name: string, f: (l: Record<string, string>) => boolean = () => true) =>
  (m.get(name) ?? []).filter((s) => f(s.labels)).reduce((a, s) => a + s.value, 0);

async function overviewPage(): Promise<void> {
  const adm = await admin();
  const states = h("section", { class: "wide", "aria-labelledby": "h-states" }, h("h2", { id: "h-states" }, adm ? "Sessions by tenant and state" : "Sessions by state"));
  const rates = h("section", { "aria-labelledby": "h-rates" }, h("h2", { id: "h-rates" }, "Calls"));
  const pool = h("section", { "aria-labelledby": "h-pool" }, h("h2", { id: "h-pool" }, "Warm pool"));
  const slow = h("section", { "aria-labelledby": "h-slow" }, h("h2", { id: "h-slow" }, "Slowest tools (mean)"));
  frame(adm ? "Overview: every tenant" : "Overview", h("div", { class: "grid" }, states, rates, pool, slow));
  const history: Sample[] = [];
  const stateOrder = ["ready", "suspended", "archived", "creating", "lost", "failed"];
  const refresh = async () => {
    if (adm) {
      const { tenants } = await api.get<{ tenants: api.TenantSummary[] }>("/v1/admin/tenants");
      const rows = tenants.map((t) =>
        h(
          "tr",
          {},
          h("th", { scope: "row" }, h("a", { href: `#/sessions?tenant=${encodeURIComponent(t.id)}` }, t.id)),
          ...stateOrder.slice(0, 3).map((s) => h("td", { class: "num" }, t.sessions[s] ?? 0)),
          h("td", {}, bar(stateOrder.map((s) => [s, t.sessions[s] ?? 0, "st-" + s]))),
          h("td", { class: "num" }, t.usage.cpuSeconds.toFixed(1) + "s"),
          h("td", { class: "num" }, bytes(t.usage.memoryBytes)),
          h("td", { class: "num" }, bytes(t.usage.egressBytesIn + t.usage.egressBytesOut)),
        ),
      );
      states.replaceChildren(
        states.firstChild!,
        h(
          "table",
          {},
          h("thead", {}, h("tr", {}, h("th", {}, "tenant"), h("th", {}, "ready"), h("th", {}, "suspended"), h("th", {}, "archived"), h("th", {}, ""), h("th", {}, "CPU"), h("th", {}, "memory"), h("th", {}, "egress"))),
          h("tbody", {}, rows),
        ),
      );
    } else {
      const { sessions } = await api.get<{ sessions: api.Session[] }>("/v1/sessions");
      const by: Record<string, number> = {};
      for (const s of sessions) by[s.state] = (by[s.state] ?? 0) + 1;
      states.replaceChildren(
        states.firstChild!,
        bar(stateOrder.map((s) => [s, by[s] ?? 0, "st-" + s])),
        h("ul", { class: "legend" }, stateOrder.filter((s) => by[s]).map((s) => h("li", {}, h("span", { class: "dot st-" + s }), `${s}: ${by[s]}`))),
      );
    }
    const text = await api.call<string>("GET", "/metrics", undefined, "text/plain");
    const m = parseMetrics(text);
    history.push({
      at: Date.now(),
      calls: sum(m, "cws_tool_calls_total"),
      errors: sum(m, "cws_tool_calls_total", (l) => l.outcome !== "ok"),
      denials: sum(m, "cws_policy_denials_total"),
    });
    if (history.length > 61) history.shift();
    const per = (k: keyof Sample) =>
      history.slice(1).map((s, i) => Math.max(0, (s[k] - history[i][k]) / Math.max(0.001, (s.at - history[i].at) / 1000)));
    const calls = per("calls"), errs = per("errors"), dens = per("denials");
    const last = (a: number[]) => (a.length ? a[a.length - 1] : 0);
    rates.replaceChildren(
      rates.firstChild!,
      h("div", { class: "stat" }, h("span", {}, "calls/s"), h("strong", {}, last(calls).toFixed(1)), sparkline(calls, "calls per second, last 5 minutes")),
      h("div", { class: "stat" }, h("span", {}, "errors/s"), h("strong", {}, last(errs).toFixed(2)), sparkline(errs, "errors per second")),
      h("div", { class: "stat" }, h("span", {}, "denials/s"), h("strong", {}, last(dens).toFixed(2)), sparkline(dens, "policy denials per second")),
      h("p", { class: "help" }, `since start: ${history[history.length - 1].calls} calls, ${history[history.length - 1].errors} not ok, ${history[history.length - 1].denials} denied`),
    );
    const ready = m.get("cws_pool_ready") ?? [];
    pool.replaceChildren(
      pool.firstChild!,
      ready.length
        ? h("ul", {}, ready.map((r) => h("li", {}, `${r.labels.image ?? "?"}: ${r.value} ready`)))
        : h("p", { class: "help" }, "No warm pool (cws serve --pool)."),
      h("p", { class: "help" }, `hits ${sum(m, "cws_pool_hits_total")}, misses ${sum(m, "cws_pool_misses_total")}`),
    );
    const tools = (m.get("cws_tool_call_duration_seconds_sum") ?? [])
      .map((s) => {
        const n = sum(m, "cws_tool_call_duration_seconds_count", (l) => l.tool === s.labels.tool);
        return { tool: s.labels.tool, mean: n ? s.value / n : 0, n };
      })
      .filter((t) => t.n > 0)
      .sort((a, b) => b.mean - a.mean)
      .slice(0, 8);
    slow.replaceChildren(
      slow.firstChild!,
      tools.length
        ? h("table", {}, h("tbody", {}, tools.map((t) => h("tr", {}, h("th", { scope: "row" }, t.tool), h("td", { class: "num" }, dur(t.mean)), h("td", { class: "num" }, `${t.n} calls`)))))
        : h("p", { class: "help" }, "No calls yet."),
    );
  };
  await refresh().catch((e) => states.append(errorBox(e)));
  every(5000, refresh);
}

// ---------------------------------------------------------------- sessions

type SortKey = "id" | "tenant" | "state" | "age" | "idle" | "image" | "cpu" | "mem" | "disk" | "egress";

async function sessionsPage(query: URLSearchParams): Promise<void> {
  const adm = await admin();
  const filters = {
    tenant: query.get("tenant") ?? "",
    state: query.get("state") ?? "",
    image: query.get("image") ?? "",
    label: query.get("label") ?? "",
  };
  let sort: SortKey = "age";
  let desc = false;
  let all: api.Session[] = [];
  const field = (id: string, label: string, el: HTMLElement) => h("div", { class: "field" }, h("label", { for: id }, label), el);
  const stateSel = h("select", { id: "f-state" }, ["", "ready", "suspended", "archived", "creating", "lost"].map((s) => h("option", { value: s, selected: s === filters.state }, s || "any")));
  const image = h("input", { id: "f-image", value: filters.image, placeholder: "cws-workspace:0.1.0" });
  const label = h("input", { id: "f-label", value: filters.label, placeholder: "app=web" });
  const tenant = h("input", { id: "f-tenant", value: filters.tenant, placeholder: "any" });
  const count = h("p", { class: "help", "aria-live": "polite" });
  const tbody = h("tbody", {});
  const heads: [SortKey, string][] = [["id", "session"], ...(adm ? [["tenant", "tenant"] as [SortKey, string]] : []), ["state", "state"], ["age", "age"], ["idle", "idle"], ["image", "image"], ["cpu", "CPU"], ["mem", "memory"], ["disk", "disk"], ["egress", "egress"]];
  const thead = h("thead", {});
  const drawHead = () =>
    thead.replaceChildren(
      h(
        "tr",
        {},
        heads.map(([k, l]) =>
          h(
            "th",
            { scope: "col", "aria-sort": sort === k ? (desc ? "descending" : "ascending") : "none" },
            h("button", { type: "button", class: "sort", onclick: () => { desc = sort === k ? !desc : false; sort = k; drawHead(); draw(); } }, l, sort === k ? (desc ? " ▾" : " ▴") : ""),
          ),
        ),
      ),
    );
  const key = (s: api.Session, now: number): number | string => {
    switch (sort) {
      case "id": return s.id;
      case "tenant": return s.tenant ?? "";
      case "state": return s.state;
      case "age": return now - Date.parse(s.createdAt);
      case "idle": return now - Date.parse(s.lastUsed);
      case "image": return s.image;
      case "cpu": return s.usage?.cpuSeconds ?? -1;
      case "mem": return s.usage?.memoryBytes ?? -1;
      case "disk": return s.usage?.diskBytes ?? -1;
      case "egress": return (s.usage?.egressBytesIn ?? 0) + (s.usage?.egressBytesOut ?? 0);
    }
  };
  const draw = () => {
    const now = Date.now();
    const [lk, lv] = (label as HTMLInputElement).value.split("=");
    const rows = all.filter(
      (s) =>
        (!(stateSel as HTMLSelectElement).value || s.state === (stateSel as HTMLSelectElement).value) &&
        (!(image as HTMLInputElement).value || s.image.includes((image as HTMLInputElement).value)) &&
        (!(tenant as HTMLInputElement).value || (s.tenant ?? "").includes((tenant as HTMLInputElement).value)) &&
        (!lk || (s.labels && (lv === undefined ? lk in s.labels : s.labels[lk] === lv))),
    );
    rows.sort((a, b) => {
      const x = key(a, now), y = key(b, now);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return desc ? -c : c;
    });
    // One string for a thousand rows: far cheaper than a node each.
    tbody.innerHTML = rows
      .map((s) => {
        const u = s.usage;
        // The admin view lists every tenant's sessions but opens none of them: a view, not a key.
        const name = adm ? esc(s.id) : `<a href="#/sessions/${encodeURIComponent(s.id)}">${esc(s.id)}</a>`;
        return `<tr><th scope="row">${name}${s.labels ? Object.entries(s.labels).map(([k, v]) => ` <span class="label">${esc(k)}=${esc(v)}</span>`).join("") : ""}</th>${adm ? `<td>${esc(s.tenant)}</td>` : ""}<td><span class="dot st-${esc(s.state)}"></span>${esc(s.state)}</td><td class="num">${ago(s.createdAt, now)}</td><td class="num">${ago(s.lastUsed, now)}</td><td>${esc(s.image)}</td><td class="num">${u ? u.cpuSeconds.toFixed(1) + "s" : "—"}</td><td class="num">${u ? bytes(u.memoryBytes) : "—"}</td><td class="num">${u ? bytes(u.diskBytes) : "—"}</td><td class="num">${u ? bytes(u.egressBytesIn + u.egressBytesOut) : "—"}</td></tr>`;
      })
      .join("");
    count.textContent = `${rows.length} of ${all.length} sessions`;
  };
  for (const el of [stateSel, image, label, tenant]) el.addEventListener("input", draw);
  const errs = h("div", {});
  frame(
    adm ? "Sessions: every tenant" : "Sessions",
    h("form", { class: "filters", role: "search", onsubmit: (e: Event) => e.preventDefault() }, adm ? field("f-tenant", "Tenant", tenant) : null, field("f-state", "State", stateSel), field("f-image", "Image", image), field("f-label", "Label", label)),
    count,
    errs,
    h("div", { class: "scroll" }, h("table", { class: "sessions" }, thead, tbody)),
  );
  drawHead();
  const load = async () => {
    const r = await api.get<{ sessions: api.Session[] }>(adm ? "/v1/admin/sessions" : "/v1/sessions");
    all = r.sessions;
    errs.replaceChildren();
    draw();
  };
  await load().catch((e) => errs.replaceChildren(errorBox(e)));
  every(3000, () => load().catch((e) => errs.replaceChildren(errorBox(e))));
}

// ---------------------------------------------------------------- a session

async function sessionPage(id: string, tab: string): Promise<void> {
  const base = `/v1/sessions/${encodeURIComponent(id)}`;
  let sess: api.Session;
  try {
    sess = await api.get<api.Session>(base);
  } catch (e) {
    frame("Session " + id, e instanceof api.ApiError && e.status === 404 ? h("p", { class: "error", role: "alert" }, "Session not found: it does not exist, or it is not yours.") : errorBox(e));
    return;
  }
  const tabs: [string, string][] = [["details", "Details"], ["files", "Files"], ["processes", "Processes"], ...(api.mayExec() ? [["terminal", "Terminal"] as [string, string]] : []), ["audit", "Audit"], ["diff", "Diff"]];
  if (!tabs.some(([k]) => k === tab)) tab = "details";
  const head = h("div", { class: "session-head" });
  const msg = h("div", { "aria-live": "polite" });
  const act = (label: string, fn: () => Promise<unknown>, danger = false) =>
    h("button", {
      type: "button",
      class: danger ? "danger" : "",
      onclick: async () => {
        try {
          const r = await fn();
          if (r !== false) {
            msg.replaceChildren(h("p", { class: "ok" }, label + ": done"));
            await refreshHead();
          }
        } catch (e) {
          msg.replaceChildren(errorBox(e));
        }
      },
    }, label);
  const actions = h(
    "div",
    { class: "actions", role: "toolbar", "aria-label": "session actions" },
    act("Renew", () => api.post(base + "/renew")),
    act("Suspend", () => api.post(base + "/suspend")),
    act("Resume", () => api.post(base + "/resume")),
    act("Snapshot", async () => {
      const name = prompt("Snapshot name", "from-console");
      if (name === null) return false;
      const s = await api.post<{ id: string }>(base + "/snapshots", { name });
      msg.replaceChildren(h("p", { class: "ok" }, `snapshot ${s.id} taken`));
      return false;
    }),
    act("Fork", async () => {
      const n = prompt("How many forks (1-16)?", "1");
      if (n === null) return false;
      const r = await api.post<{ sessions: api.Session[] }>(base + "/fork", { count: parseInt(n, 10) });
      msg.replaceChildren(h("p", { class: "ok" }, "forked: ", ...(r.sessions ?? []).map((s) => h("a", { href: `#/sessions/${s.id}` }, s.id + " "))));
      return false;
    }),
    act("Preview link", async () => {
      const p = prompt("Port (the policy's previewPorts)", "3000");
      if (p === null) return false;
      const l = await api.post<{ url: string; expiresAt: string }>(`${base}/ports/${encodeURIComponent(p)}/link`, { ttl: "1h" });
      msg.replaceChildren(h("p", { class: "ok" }, "link (1 h): ", h("a", { href: l.url, target: "_blank", rel: "noopener" }, l.url)));
      return false;
    }),
    act("Delete", async () => {
      if (!confirm(`Delete ${id}, its sandbox and its files?`)) return false;
      await api.del(base);
      location.hash = "#/sessions";
      return false;
    }, true),
  );
  const refreshHead = async () => {
    sess = await api.get<api.Session>(base);
    const u = sess.usage;
    head.replaceChildren(
      h("span", { class: "state" }, h("span", { class: "dot st-" + sess.state }), sess.state),
      h("span", {}, sess.image),
      h("span", {}, "age " + ago(sess.createdAt)),
      h("span", {}, "idle " + ago(sess.lastUsed)),
      ...(u ? [h("span", {}, `CPU ${u.cpuSeconds.toFixed(1)}s · mem ${bytes(u.memoryBytes)} (peak ${bytes(u.memoryPeakBytes)}) · disk ${bytes(u.diskBytes)} · ${u.processes} procs · egress ${bytes(u.egressBytesIn + u.egressBytesOut)} in ${u.egressConnections} conns`)] : []),
    );
  };
  await refreshHead();
  const nav = h("nav", { class: "tabs", "aria-label": "session" }, tabs.map(([k, l]) => h("a", { href: `#/sessions/${encodeURIComponent(id)}/${k}`, "aria-current": k === tab ? "page" : undefined }, l)));
  const body = h("section", { class: "tab" });
  frame(id, head, actions, msg, nav, body);
  every(5000, refreshHead);
  switch (tab) {
    case "details": return detailsTab(body, base);
    case "files": return filesTab(body, id);
    case "processes": return processesTab(body, id);
    case "terminal": return terminalTab(body, id);
    case "audit": return auditTab(body, base);
    case "diff": return diffTab(body, base);
  }
}

async function detailsTab(body: HTMLElement, base: string): Promise<void> {
  const s = await api.get<api.Session>(base);
  const dl = h("dl", { class: "details" });
  const add = (k: string, v: unknown) => dl.append(h("dt", {}, k), h("dd", {}, v === undefined || v === "" ? "—" : String(v)));
  add("id", s.id);
  add("subject", s.sub);
  add("state", s.state);
  add("image", s.image);
  add("created", s.createdAt);
  add("last used", s.lastUsed);
  add("idle until", s.idleUntil);
  add("expires", s.expiresAt);
  add("MCP URL", s.mcpUrl);
  add("labels", s.labels ? Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(", ") : "");
  // Names only: a session's view never holds a secret's value.
  add("secrets", s.secrets ? Object.entries(s.secrets).map(([env, name]) => `${env} ← ${name}`).join(", ") : "");
  const pol = h("div", {}, h("p", { class: "help" }, "Loading the policy…"));
  body.replaceChildren(dl, h("h2", {}, "Policy in force"), pol);
  if (s.state !== "ready") {
    // The workspace's file is read through its agent: reading it would wake the session.
    await new Promise<void>((resolve) =>
      pol.replaceChildren(
        h("p", { class: "help" }, `The session is ${s.state}; its workspace policy is read inside it.`),
        h("button", { type: "button", onclick: () => resolve() }, "Wake it and show the policy"),
      ),
    );
    pol.replaceChildren(h("p", { class: "help" }, "Waking the session…"));
  }
  try {
    const p = await api.get<{ tenant: unknown; workspace?: unknown; workspaceError?: string }>(base + "/policy");
    pol.replaceChildren(
      h("h3", {}, "Tenant (the ceiling)"),
      code(JSON.stringify(p.tenant, null, 2), "json"),
      h("h3", {}, "Workspace .cws-policy.json (may only narrow)"),
      p.workspace === undefined ? h("p", { class: "help" }, "none") : code(JSON.stringify(p.workspace, null, 2), "json"),
      ...(p.workspaceError ? [h("p", { class: "error" }, p.workspaceError)] : []),
    );
  } catch (e) {
    pol.replaceChildren(errorBox(e));
  }
}

function code(text: string, lang?: string): HTMLElement {
  const c = h("code", {});
  if (lang && hljs.getLanguage(lang)) c.innerHTML = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
  else c.textContent = text;
  return h("pre", { class: "code", tabindex: 0 }, c);
}

const langOf = (path: string) =>
  ({ go: "go", ts: "typescript", js: "javascript", py: "python", rs: "rust", json: "json", md: "markdown", sh: "bash", yaml: "yaml", yml: "yaml", html: "xml", css: "css", c: "c", h: "c", toml: "ini", mod: "go", diff: "diff", patch: "diff" })[path.split(".").pop() ?? ""] ?? undefined;

async function filesTab(body: HTMLElement, id: string): Promise<void> {
  const list = h("nav", { class: "files", "aria-label": "files" });
  const view = h("div", { class: "viewer" }, h("p", { class: "help" }, "Choose a file."));
  body.replaceChildren(h("div", { class: "split" }, list, view));
  const open = async (dir: string) => {
    list.replaceChildren(h("p", { class: "help" }, "Loading " + (dir || "/") + "…"));
    try {
      const r = await api.tool<{ entries: { name: string; path?: string; type: string; size?: number }[] }>(id, "listFiles", { path: dir || "." });
      const items: HTMLElement[] = [];
      if (dir) {
        const up = dir.includes("/") ? dir.slice(0, dir.lastIndexOf("/")) : "";
        items.push(h("li", {}, h("button", { type: "button", class: "link", onclick: () => open(up) }, "../")));
      }
      for (const e of r.entries ?? []) {
        const path = dir ? dir + "/" + e.name : e.name;
        items.push(
          h("li", {}, e.type === "directory" || e.type === "dir"
            ? h("button", { type: "button", class: "link", onclick: () => open(path) }, e.name + "/")
            : h("button", { type: "button", class: "link", onclick: () => read(path) }, e.name)),
        );
      }
      list.replaceChildren(h("p", { class: "path" }, "/" + dir), h("ul", {}, items));
    } catch (e) {
      list.replaceChildren(errorBox(e));
    }
  };
  const read = async (path: string) => {
    view.replaceChildren(h("p", { class: "help" }, "Reading " + path + "…"));
    try {
      const r = await api.tool<{ content: string }>(id, "readFile", { path });
      view.replaceChildren(h("h2", { class: "path" }, path), code(r.content ?? "", langOf(path)));
    } catch (e) {
      view.replaceChildren(h("h2", { class: "path" }, path), errorBox(e));
    }
  };
  await open("");
}

async function processesTab(body: HTMLElement, id: string): Promise<void> {
  const table = h("tbody", {});
  const out = h("pre", { class: "output", "aria-live": "polite", tabindex: 0 });
  let chosen = "";
  body.replaceChildren(
    h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "command"), h("th", {}, "state"), h("th", {}, "started"))), table),
    h("h2", {}, "Output"),
    out,
  );
  const load = async () => {
    const r = await api.tool<{ processes: any[] }>(id, "listProcesses", {});
    table.replaceChildren(
      ...(r.processes ?? []).map((p) =>
        h("tr", {},
          h("td", {}, h("button", { type: "button", class: "link", onclick: () => { chosen = p.id; poll(); } }, p.id)),
          h("td", {}, [p.command, ...(p.args ?? [])].join(" ")),
          h("td", {}, p.running ? "running" : `ended${p.exitCode !== undefined ? " (" + p.exitCode + ")" : ""}${p.endReason ? " · " + p.endReason : ""}`),
          h("td", {}, ago(p.startedAt)),
        ),
      ),
    );
    if (!chosen && r.processes?.length) chosen = r.processes[r.processes.length - 1].id;
  };
  const poll = async () => {
    if (!chosen) return;
    const o = await api.tool<{ stdout: string; stderr: string }>(id, "readProcessOutput", { id: chosen });
    const text = (o.stdout ?? "") + (o.stderr ? "\n[stderr]\n" + o.stderr : "");
    if (out.textContent !== text) {
      out.textContent = text;
      out.scrollTop = out.scrollHeight;
    }
  };
  await load().catch((e) => body.prepend(errorBox(e)));
  await poll().catch(() => {});
  every(1000, async () => { await load(); await poll(); });
}

function terminalTab(body: HTMLElement, id: string): void {
  const out = h("pre", { class: "output terminal", "aria-live": "polite", tabindex: 0 });
  const input = h("input", { id: "cmd", autocomplete: "off", spellcheck: "false", placeholder: "git status" }) as HTMLInputElement;
  const history: string[] = [];
  let at = 0;
  const form = h(
    "form",
    {
      class: "prompt",
      onsubmit: async (ev: Event) => {
        ev.preventDefault();
        const line = input.value.trim();
        if (!line) return;
        history.push(line);
        at = history.length;
        input.value = "";
        const argv = line.match(/"[^"]*"|'[^']*'|\S+/g)!.map((a) => a.replace(/^(["'])(.*)\1$/, "$2"));
        out.append(h("span", { class: "cmd" }, "$ " + line + "\n"));
        try {
          const r = await api.tool<{ stdout: string; stderr: string; exitCode: number }>(id, "runCommand", { command: argv[0], args: argv.slice(1) });
          out.append(r.stdout ?? "");
          if (r.stderr) out.append(h("span", { class: "stderr" }, r.stderr));
          if (r.exitCode) out.append(h("span", { class: "stderr" }, `[exit ${r.exitCode}]\n`));
        } catch (e) {
          out.append(h("span", { class: "stderr" }, (e instanceof Error ? e.message : String(e)) + "\n"));
        }
        out.scrollTop = out.scrollHeight;
        announce("command finished: " + line);
      },
    },
    h("label", { for: "cmd" }, "$"),
    input,
    h("button", { type: "submit" }, "Run"),
  );
  input.addEventListener("keydown", (e) => {
    if (e.key === "ArrowUp" && at > 0) input.value = history[--at];
    if (e.key === "ArrowDown" && at < history.length) input.value = history[++at] ?? "";
  });
  body.replaceChildren(h("p", { class: "help" }, "Each line runs as runCommand under the session's policy: no shell, the program and its arguments."), out, form);
  input.focus();
}

async function auditTab(body: HTMLElement, base: string): Promise<void> {
  const tbody = h("tbody", {});
  body.replaceChildren(
    h("div", { class: "scroll" }, h("table", { class: "audit" }, h("thead", {}, h("tr", {}, ["time", "tool", "arguments", "outcome", "duration", "rule / target"].map((c) => h("th", { scope: "col" }, c)))), tbody)),
  );
  const load = async () => {
    const r = await api.get<{ records: api.AuditRecord[] }>(base + "/audit?limit=200");
    tbody.innerHTML = r.records
      .map((a) => `<tr class="${a.decision === "deny" ? "denied" : ""}"><td>${esc(new Date(a.time).toLocaleTimeString())}</td><td>${esc(a.tool)}</td><td><code>${esc(a.args ?? "")}</code></td><td>${esc(a.outcome)}</td><td class="num">${dur(a.durationSeconds)}</td><td>${esc(a.rule ?? "")} ${esc(a.target ?? "")}${a.bytesIn || a.bytesOut ? ` (${bytes(a.bytesOut)} out, ${bytes(a.bytesIn)} in)` : ""}</td></tr>`)
      .join("");
  };
  await load().catch((e) => body.append(errorBox(e)));
  every(5000, load);
}

async function diffTab(body: HTMLElement, base: string): Promise<void> {
  body.replaceChildren(h("p", { class: "help" }, "Computing the diff…"));
  try {
    const d = await api.call<string>("GET", base + "/diff", undefined, "text/x-diff");
    body.replaceChildren(d.trim() ? code(d, "diff") : h("p", { class: "help" }, "No changes since the last commit."));
  } catch (e) {
    body.replaceChildren(errorBox(e));
  }
}

// ---------------------------------------------------------------- router

async function route(): Promise<void> {
  for (const stop of stopPage) stop();
  stopPage = [];
  const [path, q] = location.hash.replace(/^#/, "").split("?");
  const query = new URLSearchParams(q ?? "");
  if (!api.token() && path !== "/signin") {
    location.hash = "#/signin";
    return;
  }
  const parts = (path || "/").split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "signin") return signInPage();
    if (parts[0] === "sessions" && parts[1]) return await sessionPage(parts[1], parts[2] ?? "details");
    if (parts[0] === "sessions") return await sessionsPage(query);
    return await overviewPage();
  } catch (e) {
    if (e instanceof api.ApiError && e.status === 401) return signOut("Your token was refused: " + e.message);
    frame("Error", errorBox(e));
  }
}

const theme = localStorage.getItem("cws.theme");
if (theme) document.documentElement.dataset.theme = theme;
else document.documentElement.dataset.theme = matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
window.addEventListener("hashchange", route);
route();
