// A few helpers in place of a framework: elements, escaping, formatting.

type Child = Node | string | number | null | undefined | false;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, unknown> = {},
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v as EventListener);
    } else if (k === "class") {
      el.className = String(v);
    } else if (v === true) {
      el.setAttribute(k, "");
    } else {
      el.setAttribute(k, String(v));
    }
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

export function esc(s: unknown): string {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);
}

export function bytes(n: number | undefined): string {
  if (n === undefined || n === null || isNaN(n)) return "—";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + u[i];
}

export function ago(iso: string | undefined, now = Date.now()): string {
  if (!iso) return "—";
  const t = Date.parse(iso);
  if (isNaN(t) || t <= 0) return "—";
  return dur((now - t) / 1000);
}

export function dur(s: number): string {
  if (s < 0) s = 0;
  if (s < 1) return Math.round(s * 1000) + "ms";
  if (s < 60) return Math.round(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + String(Math.round(s % 60)).padStart(2, "0") + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}

// sparkline draws values as a small SVG line.
export function sparkline(values: number[], label: string): SVGSVGElement {
  const w = 160, hgt = 36;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${hgt}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const max = Math.max(1e-9, ...values);
  const pts = values.map((v, i) => `${values.length < 2 ? 0 : (i / (values.length - 1)) * w},${hgt - 2 - (v / max) * (hgt - 4)}`).join(" ");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", pts);
  svg.append(line);
  return svg;
}

// bar is a horizontal bar of parts (label, value, class) out of their sum.
export function bar(parts: [string, number, string][]): HTMLElement {
  const total = parts.reduce((a, p) => a + p[1], 0) || 1;
  return h(
    "div",
    { class: "bar", role: "img", "aria-label": parts.map((p) => `${p[0]} ${p[1]}`).join(", ") },
    parts.filter((p) => p[1] > 0).map((p) => h("span", { class: p[2], style: `width:${(p[1] / total) * 100}%`, title: `${p[0]}: ${p[1]}` })),
  );
}
