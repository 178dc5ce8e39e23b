// The REST API, as a client calls it: the console has no back door.

const TOKEN_KEY = "cws.token";

export class ApiError extends Error {
  constructor(public status: number, public code: string, message: string) {
    super(message);
  }
}

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(t: string | null): void {
  if (t) sessionStorage.setItem(TOKEN_KEY, t);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export interface Claims {
  iss?: string;
  sub?: string;
  exp?: number;
  scope?: string;
  session?: string;
}

// claims reads a JWT's payload (not verified: cws does that on every call).
export function claims(t: string): Claims | null {
  const parts = t.split(".");
  if (parts.length !== 3) return null;
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4)));
  } catch {
    return null;
  }
}

// scopes is the token's scope claim, or null when it has none (its tenant's defaults).
export function scopes(): string[] | null {
  const t = token();
  const c = t ? claims(t) : null;
  if (!c || !c.scope) return null;
  return c.scope.split(/\s+/).filter(Boolean);
}

export function mayExec(): boolean {
  const s = scopes();
  return s === null || s.includes("tools:exec");
}

export async function call<T>(method: string, path: string, body?: unknown, accept = "application/json"): Promise<T> {
  const headers: Record<string, string> = { Accept: accept };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  let payload: BodyInit | undefined;
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const resp = await fetch(path, { method, headers, body: payload });
  if (!resp.ok) {
    let code = "error";
    let message = resp.statusText;
    try {
      const e = await resp.json();
      code = e.error?.code ?? code;
      message = e.error?.message ?? message;
    } catch {
      /* not JSON */
    }
    throw new ApiError(resp.status, code, message);
  }
  if (resp.status === 204) return undefined as T;
  if (accept !== "application/json") return (await resp.text()) as unknown as T;
  return (await resp.json()) as T;
}

export const get = <T>(path: string) => call<T>("GET", path);
export const post = <T>(path: string, body?: unknown) => call<T>("POST", path, body);
export const del = (path: string) => call<void>("DELETE", path);

export interface Usage {
  cpuSeconds: number;
  memoryBytes: number;
  memoryPeakBytes: number;
  diskBytes: number;
  processes: number;
  egressBytesOut: number;
  egressBytesIn: number;
  egressConnections: number;
  egressDenied: number;
  sampledAt?: string; // the running sandbox's last sample; absent: none since it started
  diskSampledAt?: string;
}

export interface Session {
  id: string;
  sub: string;
  tenant?: string;
  image: string;
  state: string;
  labels?: Record<string, string>;
  createdAt: string;
  lastUsed: string;
  idleUntil?: string;
  expiresAt?: string;
  suspendedAt?: string;
  mcpUrl: string;
  usage?: Usage;
  /** The secrets the session uses: variable → secret name (never a value). */
  secrets?: Record<string, string>;
}

export interface AuditRecord {
  time: string;
  tenant: string;
  sub: string;
  session: string;
  tool: string;
  decision: string;
  outcome: string;
  durationSeconds: number;
  rule?: string;
  args?: string;
  target?: string;
  bytesOut?: number;
  bytesIn?: number;
}

export interface TenantSummary {
  id: string;
  sessions: Record<string, number>;
  maxSessions?: number;
  network: string;
  toolsets: string[];
  usage: Usage;
}

// tool calls a tool over REST and returns its result (or throws its error).
export async function tool<T = any>(id: string, name: string, args: unknown): Promise<T> {
  const r = await post<{ result: T; isError?: boolean }>(`/v1/sessions/${encodeURIComponent(id)}/tools/${name}`, args);
  if (r.isError) {
    const v: any = r.result;
    throw new ApiError(200, "tool_error", typeof v === "string" ? v : v?.message ?? JSON.stringify(v));
  }
  return r.result;
}
