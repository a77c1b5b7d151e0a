// The router (hash routes, so the broker serves one page at `/`), live refresh, and the
// token prompt when the broker has auth on.

const REFRESH_KEY = "queen.dashboard.refreshMs";
const DEFAULT_REFRESH_MS = 5000;

const Router = {
  generation: 0,
  inFlight: 0,  // loads started and not yet ended, of any route (a left one's too)
  ctx: null,

  current() {
    const [path, query] = location.hash.replace(/^#\/?/, "").split("?");
    const parts = path ? path.split("/").map((p) => decodeURIComponent(p)) : [];
    const params = Object.fromEntries(new URLSearchParams(query || ""));
    return { parts, params };
  },

  // A new route: build the view's controls, then load its data.
  async show() {
    const { parts, params } = Router.current();
    const name = Views[parts[0]] ? parts[0] : "overview";
    const spec = Views[name];
    for (const a of document.querySelectorAll("#nav a")) {
      a.classList.toggle("active", a.dataset.nav === (spec.nav || name));
    }
    const main = document.getElementById("view");
    const ctx = { name, parts, params, title: h("h1", {}, spec.title),
      controls: h("div", { class: "controls" }), body: h("div", { class: "body" }) };
    Router.ctx = ctx;
    Router.generation += 1;
    main.dataset.view = name;
    main.dataset.loads = "0";
    main.replaceChildren(ctx.title, ctx.controls, ctx.body);
    document.title = `${spec.title} · queen-broker`;
    if (Access.auth === "on" && !Api.token()) {
      showTokenPrompt();
      return;
    }
    if (spec.frame) spec.frame(ctx);
    await Router.reload();
  },

  // (Re)load the current view's data; a reload for a route the user has left is dropped.
  async reload() {
    const ctx = Router.ctx;
    if (!ctx || (Access.auth === "on" && !Api.token())) return;
    const generation = Router.generation;
    Router.inFlight += 1;
    Router.markLoading();
    try {
      const content = await Views[ctx.name].load(ctx);
      if (generation !== Router.generation) return;
      ctx.body.replaceChildren(...[content].flat().filter(Boolean));
      document.getElementById("updated").textContent =
        `updated ${new Date().toLocaleTimeString("en-GB")}`;
    } catch (error) {
      if (generation !== Router.generation) return;
      if (error instanceof ApiError && error.status === 401) {
        Access.auth = "on";
        showTokenPrompt(error.text);
        return;
      }
      ctx.body.replaceChildren(h("div", { class: "error", "data-error": "load" },
        error instanceof ApiError ? error.message : `Could not load: ${error}`));
    } finally {
      Router.inFlight -= 1;
      Router.markLoading();
      if (generation === Router.generation) {  // a left route's load counts for nothing here
        const main = document.getElementById("view");
        main.dataset.loads = String(Number(main.dataset.loads || 0) + 1);
      }
    }
  },

  // `data-loading` on the view while any load is in flight, so a watcher (a test, the live
  // refresh) can tell a load in progress from an idle view.
  markLoading() {
    const main = document.getElementById("view");
    if (Router.inFlight > 0) main.dataset.loading = "1";
    else delete main.dataset.loading;
  },
};

function refreshMs() {
  const stored = Number.parseInt(sessionStorage.getItem(REFRESH_KEY) || "", 10);
  return Number.isFinite(stored) && stored >= 500 ? stored : DEFAULT_REFRESH_MS;
}

function tick() {
  const dialog = document.getElementById("confirm");
  if (!document.getElementById("live").checked || document.hidden || dialog.open || Router.inFlight > 0) return;
  Router.reload();
}

function showWho() {
  const who = document.getElementById("who");
  who.replaceChildren(Access.label());
  if (Access.auth === "on" && Api.token()) {
    who.append(" ", h("button", { type: "button", class: "link", "data-action": "forget-token",
      onclick: () => {
        Api.setToken(""); Api.setTenant(""); Access.decide(); showWho(); Router.show();
      } }, "forget token"));
  }
}

function showTokenPrompt(problem) {
  const ctx = Router.ctx;
  const input = h("input", { type: "password", id: "token-input", autocomplete: "off",
    placeholder: "eyJhbGciOi…", size: 60 });
  const form = h("form", { class: "token", id: "token-form" },
    h("p", {}, "This broker has authentication on. Paste a bearer token (JWT); it is kept in this " +
      "browser tab only (sessionStorage) and sent with every API request."),
    problem ? h("p", { class: "error", "data-error": "token" }, `The broker refused the token: ${problem}`) : null,
    h("label", {}, "Token ", input), " ", h("button", { type: "submit" }, "Use token"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    try {
      await Api.call("GET", "/api/v1/status", { token });
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        showTokenPrompt(error.text);
        return;
      }
      // 403: a valid token whose role may not read; views will say so as they load.
    }
    Api.setToken(token);
    Access.decide();
    showWho();
    await showTenants();
    Router.show();
  });
  Api.setToken("");
  Access.decide();
  showWho();
  ctx.controls.replaceChildren();
  ctx.body.replaceChildren(form);
  input.focus();
}

async function probeAuth() {
  try {
    await Api.call("GET", "/api/v1/status", { token: "" });
    Access.auth = "off";
  } catch (error) {
    Access.auth = error instanceof ApiError && error.status === 401 ? "on" : "unknown";
  }
  Access.decide();
  showWho();
}

// The tenant picker: shown to an operator, whom the broker lets list the tenants (a token
// bound to one tenant sees its own tenant only, and gets 403 here).
async function showTenants() {
  const select = document.getElementById("tenant");
  let answer;
  try {
    answer = await Api.get("/api/v1/tenants");
  } catch (_) {
    select.hidden = true;
    return;
  }
  const names = answer.tenants.map((t) => t.tenant);
  if (Api.tenant() && !names.includes(Api.tenant())) names.push(Api.tenant());
  select.replaceChildren(...names.map((name) => h("option", { value: name },
    name ? `tenant ${name}` : "default tenant")));
  select.value = Api.tenant();
  select.hidden = names.length < 2 && !Api.tenant();
  select.onchange = () => { Api.setTenant(select.value); Router.show(); };
}

async function start() {
  await probeAuth();
  await showTenants();
  window.addEventListener("hashchange", () => Router.show());
  setInterval(tick, refreshMs());
  await Router.show();
}

start();
