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
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
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

// ask shows an in-page modal dialog (not the browser's prompt or confirm) holding
// fields, and resolves with the form's values, or null when it is cancelled (Cancel,
// Escape). check may refuse the values with a message shown on the form.
function ask(title: string, fields: HTMLElement[], submit: string, opts: { danger?: boolean; check?: (f: FormData) => string } = {}): Promise<FormData | null> {
  return new Promise((resolve) => {
    const err = h("p", { class: "error", "aria-live": "polite" });
    const form = h(
      "form",
      { method: "dialog", novalidate: true },
      h("h2", { id: "dialog-title" }, title),
      ...fields,
      err,
      h(
        "div",
        { class: "dialog-actions" },
        h("button", { type: "button", onclick: () => dlg.close("cancel") }, "Cancel"),
        h("button", { type: "submit", class: opts.danger ? "danger" : "" }, submit),
      ),
    );
    const dlg = h("dialog", { "aria-labelledby": "dialog-title" }, form) as HTMLDialogElement;
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const data = new FormData(form);
      const why = opts.check?.(data) ?? "";
      if (why) {
        err.textContent = why;
        return;
      }
      resolve(data);
      dlg.close("ok");
    });
    dlg.addEventListener("close", () => {
      dlg.remove();
      resolve(null); // a no-op after the submit's resolve
    });
    document.body.append(dlg);
    dlg.showModal();
  });
}

// field is a labelled form control for a dialog.
function field(id: string, label: string, control: HTMLElement, help?: string): HTMLElement {
  control.id = id;
  if (help) control.setAttribute("aria-describedby", id + "-help");
  return h("div", { class: "field" }, h("label", { for: id }, label), control, help ? h("p", { id: id + "-help", class: "help" }, help) : null);
}

// usage is a session's usage as every page shows it: live figures (memory, processes)
// only from a sample of its running sandbox, CPU time and disk as last seen, "—" where
// there is none.
function usage(s: api.Session): { live: boolean; cpu: string; mem: string; peak: string; disk: string; procs: string; egress: string; conns: string } {
  const u = s.usage;
  const live = s.state === "ready" && !!u?.sampledAt;
  return {
    live,
    cpu: u && (u.sampledAt || u.cpuSeconds > 0) ? u.cpuSeconds.toFixed(1) + "s" : "—",
    mem: live ? bytes(u!.memoryBytes) : "—",
    peak: u && u.memoryPeakBytes > 0 ? bytes(u.memoryPeakBytes) : "—",
    disk: u?.diskSampledAt ? bytes(u.diskBytes) : "—",
    procs: live ? String(u!.processes) : "—",
    egress: bytes((u?.egressBytesIn ?? 0) + (u?.egressBytesOut ?? 0)),
    conns: String(u?.egressConnections ?? 0),
  };
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
        const u = usage(s);
        // The admin view lists every tenant's sessions but opens none of them: a view, not a key.
        const name = adm ? esc(s.id) : `<a href="#/sessions/${encodeURIComponent(s.id)}">${esc(s.id)}</a>`;
        return `<tr><th scope="row">${name}${s.labels ? Object.entries(s.labels).map(([k, v]) => ` <span class="label">${esc(k)}=${esc(v)}</span>`).join("") : ""}</th>${adm ? `<td>${esc(s.tenant)}</td>` : ""}<td><span class="dot st-${esc(s.state)}"></span>${esc(s.state)}</td><td class="num">${ago(s.createdAt, now)}</td><td class="num">${ago(s.lastUsed, now)}</td><td>${esc(s.image)}</td><td class="num">${u.cpu}</td><td class="num">${u.mem}</td><td class="num">${u.disk}</td><td class="num">${u.egress}</td></tr>`;
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

// Ranges of ports, inclusive.
type Ports = [number, number][];

// portsOf reads a previewPorts list ([3000, "8000-8099"]); undefined for no list.
function portsOf(list: unknown): Ports | undefined {
  if (!Array.isArray(list)) return undefined;
  const out: Ports = [];
  for (const e of list) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(String(e).trim());
    if (m) out.push([+m[1], +(m[2] ?? m[1])]);
  }
  return out.sort((a, b) => a[0] - b[0]);
}

// previewPorts is what a session may expose: the tenant's previewPorts, narrowed by
// the workspace's when it has a list.
function previewPorts(p: { tenant: any; workspace?: any }): Ports {
  const t = portsOf(p.tenant?.previewPorts) ?? [];
  const w = typeof p.workspace === "object" ? portsOf(p.workspace?.previewPorts) : undefined;
  if (!w) return t;
  const out: Ports = [];
  for (const a of t) for (const b of w) if (Math.max(a[0], b[0]) <= Math.min(a[1], b[1])) out.push([Math.max(a[0], b[0]), Math.min(a[1], b[1])]);
  return out.sort((a, b) => a[0] - b[0]);
}

const portsText = (ps: Ports) => ps.map(([a, b]) => (a === b ? String(a) : `${a}–${b}`)).join(", ");

async function sessionPage(id: string, tab: string): Promise<void> {
  const base = `/v1/sessions/${encodeURIComponent(id)}`;
  // The page's one copy of the session: the header, the actions and the Details tab all
  // show it, and each refresh redraws them together.
  let sess: api.Session;
  try {
    sess = await api.get<api.Session>(base);
  } catch (e) {
    frame("Session " + id, e instanceof api.ApiError && e.status === 404 ? h("p", { class: "error", role: "alert" }, "Session not found: it does not exist, or it is not yours.") : errorBox(e));
    return;
  }
  const watchers: ((s: api.Session) => void)[] = [];
  const watch = (f: (s: api.Session) => void) => {
    watchers.push(f);
    f(sess);
  };
  const refresh = async () => {
    sess = await api.get<api.Session>(base);
    for (const f of watchers) f(sess);
  };
  const tabs: [string, string][] = [["details", "Details"], ["files", "Files"], ["processes", "Processes"], ...(api.mayExec() ? [["terminal", "Terminal"] as [string, string]] : []), ["audit", "Audit"], ["diff", "Diff"]];
  if (!tabs.some(([k]) => k === tab)) tab = "details";
  const head = h("div", { class: "session-head" });
  const msg = h("div", { "aria-live": "polite" });
  const act = (label: string, fn: () => Promise<unknown>, danger = false) => {
    const b = h("button", {
      type: "button",
      class: danger ? "danger" : "",
      onclick: async () => {
        b.disabled = true;
        try {
          const r = await fn();
          if (r !== false) msg.replaceChildren(h("p", { class: "ok" }, label + ": done"));
          await refresh();
        } catch (e) {
          msg.replaceChildren(errorBox(e));
        } finally {
          b.disabled = false;
          for (const f of watchers) f(sess);
        }
      },
    }, label);
    return b;
  };
  const suspend = act("Suspend", () => api.post(base + "/suspend"));
  const resume = act("Resume", () => api.post(base + "/resume"));
  const actions = h(
    "div",
    { class: "actions", role: "toolbar", "aria-label": "session actions" },
    act("Renew", () => api.post(base + "/renew")),
    suspend,
    resume,
    act("Snapshot", async () => {
      const f = await ask("Take a snapshot", [field("snap-name", "Name", h("input", { name: "name", value: "from-console", maxlength: 200, required: true }))], "Take snapshot");
      if (!f) return false;
      const s = await api.post<{ id: string }>(base + "/snapshots", { name: String(f.get("name")) });
      msg.replaceChildren(h("p", { class: "ok" }, `snapshot ${s.id} taken`));
      return false;
    }),
    act("Fork", async () => {
      const f = await ask("Fork the session", [field("fork-count", "How many forks", h("input", { name: "count", type: "number", min: 1, max: 16, value: 1, required: true }), "From 1 to 16; each is a new session with this one's files.")], "Fork", {
        check: (f) => (/^([1-9]|1[0-6])$/.test(String(f.get("count"))) ? "" : "Give a number from 1 to 16."),
      });
      if (!f) return false;
      const r = await api.post<{ sessions: api.Session[] }>(base + "/fork", { count: parseInt(String(f.get("count")), 10) });
      msg.replaceChildren(h("p", { class: "ok" }, "forked: ", ...(r.sessions ?? []).map((s) => h("a", { href: `#/sessions/${s.id}` }, s.id + " "))));
      return false;
    }),
    act("Preview link", async () => {
      const ports = previewPorts(await api.get<{ tenant: unknown; workspace?: unknown }>(base + "/policy"));
      if (!ports.length) {
        msg.replaceChildren(h("p", { class: "error", role: "alert" }, "The policy allows no preview port (previewPorts is empty)."));
        return false;
      }
      const choices = ports.flatMap(([a, b]) => Array.from({ length: Math.min(b - a + 1, 20) }, (_, i) => a + i)).slice(0, 50);
      const f = await ask("Make a preview link", [
        field("link-port", "Port", h("input", { name: "port", type: "number", min: ports[0][0], max: ports[ports.length - 1][1], value: ports[0][0], list: "link-ports", required: true }), `The policy's previewPorts: ${portsText(ports)}.`),
        h("datalist", { id: "link-ports" }, choices.map((p) => h("option", { value: p }))),
      ], "Make link", {
        check: (f) => {
          const p = Number(f.get("port"));
          return Number.isInteger(p) && ports.some(([a, b]) => p >= a && p <= b) ? "" : `Choose a port the policy allows: ${portsText(ports)}.`;
        },
      });
      if (!f) return false;
      const l = await api.post<{ url: string; expiresAt: string }>(`${base}/ports/${encodeURIComponent(String(f.get("port")))}/link`, { ttl: "1h" });
      const copy = h("button", {
        type: "button",
        onclick: async () => {
          try {
            await navigator.clipboard.writeText(l.url);
            announce("link copied");
            copy.textContent = "Copied";
          } catch {
            getSelection()?.selectAllChildren(link);
          }
        },
      }, "Copy");
      const link = h("a", { class: "url", href: l.url, target: "_blank", rel: "noopener" }, l.url);
      msg.replaceChildren(h("div", { class: "ok link-box" }, h("p", {}, "Preview link (1 h): ", link), copy));
      return false;
    }),
    act("Delete", async () => {
      const f = await ask("Delete the session?", [h("p", {}, `Delete ${id}, its sandbox and its files? This can't be undone.`)], "Delete", { danger: true });
      if (!f) return false;
      await api.del(base);
      location.hash = "#/sessions";
      return false;
    }, true),
  );
  watch((s) => {
    const u = usage(s);
    head.replaceChildren(
      h("span", { class: "state" }, h("span", { class: "dot st-" + s.state }), s.state),
      h("span", {}, s.image),
      h("span", {}, "age " + ago(s.createdAt)),
      h("span", {}, "idle " + ago(s.lastUsed)),
      h("span", { class: "usage" }, u.live
        ? `CPU ${u.cpu} · mem ${u.mem} (peak ${u.peak}) · disk ${u.disk} · ${u.procs} procs · egress ${u.egress} in ${u.conns} conns`
        : s.state === "ready"
          ? `CPU ${u.cpu} · disk ${u.disk} · waiting for the first usage sample`
          : `CPU ${u.cpu} · disk ${u.disk} · nothing runs while ${s.state}`),
    );
    // A button is enabled only where its action applies (and not while one runs).
    suspend.disabled = s.state !== "ready";
    resume.disabled = s.state !== "suspended" && s.state !== "archived";
  });
  const nav = h("nav", { class: "tabs", "aria-label": "session" }, tabs.map(([k, l]) => h("a", { href: `#/sessions/${encodeURIComponent(id)}/${k}`, "aria-current": k === tab ? "page" : undefined }, l)));
  const body = h("section", { class: "tab" });
  frame(id, head, actions, msg, nav, body);
  every(5000, refresh);
  switch (tab) {
    case "details": return detailsTab(body, base, watch, refresh);
    case "files": return filesTab(body, id);
    case "processes": return processesTab(body, id, watch);
    case "terminal": return terminalTab(body, id);
    case "audit": return auditTab(body, base);
    case "diff": return diffTab(body, base);
  }
}

async function detailsTab(body: HTMLElement, base: string, watch: (f: (s: api.Session) => void) => void, refresh: () => Promise<void>): Promise<void> {
  const dl = h("dl", { class: "details" });
  let first: api.Session | undefined;
  watch((s) => {
    first ??= s;
    const rows: HTMLElement[] = [];
    const add = (k: string, v: unknown) => rows.push(h("dt", {}, k), h("dd", {}, v === undefined || v === "" ? "—" : String(v)));
    add("id", s.id);
    add("subject", s.sub);
    add("state", s.state);
    add("image", s.image);
    add("created", s.createdAt);
    add("last used", s.lastUsed);
    add("idle until", s.idleUntil);
    add("expires", s.expiresAt);
    add("suspended", s.state === "ready" ? "" : s.suspendedAt);
    add("MCP URL", s.mcpUrl);
    add("labels", s.labels ? Object.entries(s.labels).map(([k, v]) => `${k}=${v}`).join(", ") : "");
    // Names only: a session's view never holds a secret's value.
    add("secrets", s.secrets ? Object.entries(s.secrets).map(([env, name]) => `${env} ← ${name}`).join(", ") : "");
    dl.replaceChildren(...rows);
  });
  const s = first!;
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
    if (s.state !== "ready") await refresh(); // it woke
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
  let current = ""; // the open file, marked in the list (aria-current)
  const mark = () => {
    for (const b of list.querySelectorAll<HTMLElement>("button[data-path]")) {
      if (b.dataset.path === current) b.setAttribute("aria-current", "true");
      else b.removeAttribute("aria-current");
    }
  };
  const open = async (dir: string) => {
    list.replaceChildren(h("p", { class: "help" }, "Loading " + (dir || "/") + "…"));
    try {
      const r = await api.tool<{ entries: { name: string; path?: string; type: string; size?: number }[] }>(id, "listFiles", { path: dir || "." });
      const items: HTMLElement[] = [];
      if (dir) {
        const up = dir.includes("/") ? dir.slice(0, dir.lastIndexOf("/")) : "";
        items.push(h("li", {}, h("button", { type: "button", class: "link", "aria-label": "Parent folder: /" + up, onclick: () => open(up) }, "../")));
      }
      for (const e of r.entries ?? []) {
        const path = dir ? dir + "/" + e.name : e.name;
        items.push(
          h("li", {}, e.type === "directory" || e.type === "dir"
            ? h("button", { type: "button", class: "link", onclick: () => open(path) }, e.name + "/")
            : h("button", { type: "button", class: "link", "data-path": path, onclick: () => read(path) }, e.name)),
        );
      }
      list.replaceChildren(h("p", { class: "path" }, "/" + dir), h("ul", {}, items));
      mark();
    } catch (e) {
      list.replaceChildren(errorBox(e));
    }
  };
  const read = async (path: string) => {
    current = path;
    mark();
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

async function processesTab(body: HTMLElement, id: string, watch: (f: (s: api.Session) => void) => void): Promise<void> {
  // The tools wake a sleeping session: the list is polled only while it is ready.
  let ready = true;
  watch((s) => (ready = s.state === "ready"));
  const table = h("tbody", {});
  const out = h("pre", { class: "output", "aria-live": "polite", tabindex: 0 });
  let chosen = "";
  body.replaceChildren(
    h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "id"), h("th", {}, "command"), h("th", {}, "state"), h("th", {}, "started"))), table)),
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
  every(1000, async () => {
    if (!ready) return;
    await load();
    await poll();
  });
}

// terminalTab is a real terminal (xterm.js) on a PTY in the workspace: a program that
// runs under the session's policy, attached over a WebSocket. It follows the window's
// size, and reconnects after a drop (the scrollback is replayed); the terminal outlives
// the page, which attaches to it again while it runs.
function terminalTab(body: HTMLElement, id: string): void {
  const status = h("p", { class: "help", role: "status" }, "Opening a terminal…");
  const box = h("div", { class: "xterm-box" });
  const again = h("button", { type: "button", hidden: true }, "Open a new terminal");
  body.replaceChildren(status, box, again);
  const term = new Terminal({ cursorBlink: true, scrollback: 5000, fontSize: 13, fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace" });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(box);
  term.textarea?.setAttribute("aria-label", "Terminal input");
  const key = "cws.terminal." + id;
  let tid = sessionStorage.getItem(key) ?? "";
  let ws: WebSocket | null = null;
  let stopped = false;
  let tries = 0;
  const enc = new TextEncoder();
  const send = (d: string | Uint8Array) => {
    if (ws?.readyState === WebSocket.OPEN) ws.send(d);
  };
  const resize = () => {
    try {
      fit.fit();
    } catch {
      /* not laid out yet */
    }
  };
  term.onData((d) => send(enc.encode(d)));
  term.onBinary((d) => send(Uint8Array.from(d, (c) => c.charCodeAt(0))));
  term.onResize(({ cols, rows }) => send(JSON.stringify({ type: "resize", cols, rows })));
  const ro = new ResizeObserver(resize);
  ro.observe(box);
  const retry = () => {
    if (!stopped) window.setTimeout(connect, Math.min(5000, 250 * 2 ** tries++));
  };
  const connect = async (): Promise<void> => {
    if (stopped) return;
    resize();
    if (!tid) {
      try {
        const t = await api.call<{ id: string }>("POST", `/v1/sessions/${id}/terminals`, { cols: term.cols, rows: term.rows });
        tid = t.id;
        sessionStorage.setItem(key, tid);
      } catch (e) {
        status.textContent = "The terminal could not be opened: " + (e instanceof Error ? e.message : String(e));
        if (e instanceof api.ApiError && e.status < 500 && e.status !== 429) return;
        return retry();
      }
    }
    const url = new URL(`/v1/sessions/${id}/terminals/${tid}/attach`, location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const sock = new WebSocket(url, ["cws.terminal.v1", "bearer." + (api.token() ?? "")]);
    sock.binaryType = "arraybuffer";
    ws = sock;
    let attached = false;
    let ended = false;
    sock.onmessage = (ev) => {
      if (typeof ev.data !== "string") {
        term.write(new Uint8Array(ev.data as ArrayBuffer));
        return;
      }
      const m = JSON.parse(ev.data);
      switch (m.type) {
        case "attached":
          attached = true;
          tries = 0;
          term.reset(); // the scrollback follows
          status.textContent = "Attached: the program runs in the workspace under its policy.";
          send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
          break;
        case "skipped":
          term.write(`\r\n\x1b[2m[cws: ${m.bytes} bytes of output skipped: this view fell behind]\x1b[0m\r\n`);
          break;
        case "error":
          status.textContent = m.error?.message ?? "error";
          break;
        case "exit":
          ended = true;
          status.textContent = `The program ended (${m.endReason ?? "exited"}, exit code ${m.code ?? "?"}).`;
          sessionStorage.removeItem(key);
          tid = "";
          again.hidden = false;
          break;
      }
    };
    sock.onclose = () => {
      if (stopped || ended || ws !== sock) return;
      if (!attached) {
        // Never attached: the terminal is gone (ended, or the session slept); open anew.
        sessionStorage.removeItem(key);
        tid = "";
      }
      status.textContent = "Disconnected: reconnecting…";
      retry();
    };
  };
  again.onclick = () => {
    again.hidden = true;
    term.reset();
    void connect();
  };
  void connect();
  term.focus();
  stopPage.push(() => {
    stopped = true;
    ws?.close();
    ro.disconnect();
    term.dispose();
  });
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
