// The JSON API: one request helper, the bearer token (kept in sessionStorage only, so it
// dies with the tab), and what the token's role may do. The role is read from the JWT's
// payload for display only: the broker verifies the token and decides every request.
// An operator (an admin token bound to no tenant, or auth off) may pick a tenant to act for:
// every call then carries the tenant header (docs/security/tenants.md).

const TOKEN_KEY = "queen.dashboard.token";
const TENANT_KEY = "queen.dashboard.tenant";
const TENANT_HEADER = "x-queen-tenant";  // the broker's default QUEEN_TENANT_HEADER

class ApiError extends Error {
  constructor(status, body, method, path) {
    const text = body && typeof body.error === "string" ? body.error : `HTTP ${status}`;
    super(`${method} ${path}: ${text}`);
    this.status = status;
    this.body = body;
    this.text = text;
  }
}

const Api = {
  token() {
    return sessionStorage.getItem(TOKEN_KEY) || "";
  },

  setToken(token) {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  },

  // The tenant an operator acts for ("": the default tenant, no header).
  tenant() {
    return sessionStorage.getItem(TENANT_KEY) || "";
  },

  setTenant(tenant) {
    if (tenant) sessionStorage.setItem(TENANT_KEY, tenant);
    else sessionStorage.removeItem(TENANT_KEY);
  },

  url(path, query) {
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(query || {})) {
      if (value !== undefined && value !== null && value !== "") params.set(key, String(value));
    }
    const text = params.toString();
    return text ? `${path}?${text}` : path;
  },

  async call(method, path, { query, body, token } = {}) {
    const headers = { Accept: "application/json" };
    const bearer = token === undefined ? Api.token() : token;
    if (bearer) headers.Authorization = `Bearer ${bearer}`;
    if (Api.tenant()) headers[TENANT_HEADER] = Api.tenant();
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const answer = await fetch(Api.url(path, query), init);
    const text = await answer.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = { error: text.slice(0, 300) }; }
    }
    if (!answer.ok) throw new ApiError(answer.status, data, method, path);
    return data;
  },

  get(path, query) { return Api.call("GET", path, { query }); },
  post(path, body, query) { return Api.call("POST", path, { body: body || {}, query }); },
  del(path, query) { return Api.call("DELETE", path, { query }); },
};

// Path segments: names are percent-encoded (the broker decodes every segment once).
function seg(name) {
  return encodeURIComponent(name);
}

// What the page offers. `auth` is "off", "on" or "unknown" (before the first probe).
const Access = {
  auth: "unknown",
  claims: null,
  roles: [],
  can: { read: false, write: false, admin: false },

  // Role names are the broker's defaults (JWT_ROLE_*); a token whose roles the page does
  // not recognise is offered every action, and the broker answers 403 where it must.
  decide() {
    if (Access.auth === "off") {
      Access.can = { read: true, write: true, admin: true };
      return;
    }
    Access.claims = jwtClaims(Api.token());
    const claims = Access.claims || {};
    const roles = [];
    if (typeof claims.role === "string") roles.push(claims.role);
    if (Array.isArray(claims.roles)) roles.push(...claims.roles.filter((r) => typeof r === "string"));
    const realm = claims.realm_access && claims.realm_access.roles;
    if (Array.isArray(realm)) roles.push(...realm.filter((r) => typeof r === "string"));
    Access.roles = roles;
    const known = roles.filter((r) => ["admin", "read-write", "read-only", "write-only"].includes(r));
    if (!known.length) {
      Access.can = { read: true, write: true, admin: true, unknown: true };
      return;
    }
    const has = (r) => known.includes(r);
    Access.can = {
      read: has("admin") || has("read-write") || has("read-only"),
      write: has("admin") || has("read-write"),
      admin: has("admin"),
    };
  },

  label() {
    if (Access.auth === "off") return "auth off: every action is open";
    if (Access.auth !== "on") return "";
    const sub = Access.claims && typeof Access.claims.sub === "string" ? Access.claims.sub : "?";
    // The claim name is the broker's default JWT_TENANT_CLAIM.
    const tenant = Access.claims && typeof Access.claims.tenant === "string"
      ? ` · tenant ${Access.claims.tenant || "(default)"}` : "";
    if (Access.can.unknown) return `${sub} · role not recognised (the broker decides)${tenant}`;
    return `${sub} · ${Access.roles.join(", ")}${tenant}`;
  },
};

function jwtClaims(token) {
  const part = (token || "").split(".")[1];
  if (!part) return null;
  try {
    const b64 = part.replace(/-/g, "+").replace(/_/g, "/");
    const bytes = Uint8Array.from(atob(b64 + "===".slice((b64.length + 3) % 4)), (c) => c.charCodeAt(0));
    return JSON.parse(new TextDecoder().decode(bytes));
  } catch (_) {
    return null;
  }
}
