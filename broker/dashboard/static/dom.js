// Building the page: elements, formatting, tables, pagers, notices and the confirmation
// dialog. Text always goes in through textContent, never as HTML, so names and payloads
// cannot inject markup.

// Every view registers here: name -> {title, nav?, frame?(ctx), load(ctx) -> content}.
// `frame` builds the controls once per route; `load` fetches and answers the content, and
// runs again on every live refresh.
const Views = {};

function view(name, spec) {
  Views[name] = spec;
}

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function fmtInt(value) {
  return typeof value === "number" ? value.toLocaleString("en-US") : value == null ? "–" : String(value);
}

function fmtTime(iso) {
  if (!iso) return "–";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return date.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function fmtSeconds(seconds) {
  if (seconds == null) return "–";
  const s = Math.round(seconds);
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  if (s < 172800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86400).toFixed(1)} d`;
}

function preview(value, max = 120) {
  const text = typeof value === "string" ? JSON.stringify(value) : JSON.stringify(value);
  if (text === undefined) return "";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

// A link inside the dashboard: route parts (each encoded) and query parameters.
function href(parts, params) {
  const path = parts.map((p) => encodeURIComponent(p)).join("/");
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") query.set(key, String(value));
  }
  const text = query.toString();
  return `#/${path}${text ? `?${text}` : ""}`;
}

function link(text, parts, params) {
  return h("a", { href: href(parts, params) }, text);
}

// Go to the current route with some parameters changed.
function setParams(changes) {
  const { parts, params } = Router.current();
  location.hash = href(parts, { ...params, ...changes }).slice(1);
}

// A table: columns are [heading, cell(row) -> text or Node, field name for tests].
function table(columns, rows, { key, empty = "Nothing here." } = {}) {
  if (!rows.length) return h("p", { class: "empty" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, columns.map(([title]) => h("th", {}, title)))),
    h("tbody", {}, rows.map((row) => h("tr", { dataset: key ? { key: key(row) } : {} },
      columns.map(([, cell, field]) => h("td", { dataset: field ? { field } : {} }, cell(row)))))));
}

// Key figures: [label, value, field].
function figures(items) {
  return h("dl", { class: "figures" }, items.map(([label, value, field]) =>
    h("div", {}, h("dt", {}, label), h("dd", { dataset: { field } }, value))));
}

// Paging by offset: "‹ newer/previous" and "next ›" around "a–b of total".
function pager(total, limit, offset, paramName = "offset") {
  const last = Math.min(offset + limit, total);
  const bar = h("div", { class: "pager" });
  bar.append(h("button", {
    type: "button", disabled: offset <= 0, "data-page": "prev",
    onclick: () => setParams({ [paramName]: Math.max(offset - limit, 0) || "" }),
  }, "‹ previous"));
  bar.append(h("span", { "data-field": "range" },
    total ? `${fmtInt(offset + 1)}–${fmtInt(last)} of ${fmtInt(total)}` : "0 of 0"));
  bar.append(h("button", {
    type: "button", disabled: last >= total, "data-page": "next",
    onclick: () => setParams({ [paramName]: offset + limit }),
  }, "next ›"));
  return bar;
}

// Paging on by the broker's cursor (a key, or an offset where pages differ in size and
// have no total): "‹ first", where this page starts, and "next ›" to `next` (null when
// nothing follows).
function cursorPager(paramName, at, next, range) {
  return h("div", { class: "pager" },
    h("button", { type: "button", disabled: !at, "data-page": "first",
      onclick: () => setParams({ [paramName]: "" }) }, "‹ first"),
    h("span", { "data-field": "range" }, range),
    h("button", { type: "button", disabled: next == null, "data-page": "next",
      onclick: () => setParams({ [paramName]: next }) }, "next ›"));
}

// A keyset page's pager (`after` = the last key of the page before; `nextAfter` when the
// answer is truncated).
function keysetPager(answer, after) {
  return cursorPager("after", after, answer.truncated ? answer.nextAfter : null,
    after ? `after ${after}` : "from the start");
}

function intParam(params, name, fallback, max = 1e15) {
  const value = Number.parseInt(params[name], 10);
  return Number.isFinite(value) && value >= 0 ? Math.min(value, max) : fallback;
}

// A search form whose submit sets route parameters (and clears those named in `clear`).
function searchForm(fields, params, clear = []) {
  const form = h("form", { class: "search" });
  const inputs = {};
  for (const [name, label, extra] of fields) {
    inputs[name] = h("input", { name, value: params[name] || "", placeholder: label, ...(extra || {}) });
    form.append(h("label", {}, `${label} `, inputs[name]));
  }
  form.append(h("button", { type: "submit" }, "Apply"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const changes = { offset: "" };
    for (const name of clear) changes[name] = "";
    for (const name of Object.keys(inputs)) {
      const input = inputs[name];
      changes[name] = input.type === "checkbox" ? (input.checked ? "1" : "") : input.value.trim();
    }
    setParams(changes);
  });
  return form;
}

function section(title, ...children) {
  return h("section", {}, h("h2", {}, title), ...children);
}

let noticeTimer = null;
function notice(text, kind = "ok") {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = kind;
  box.hidden = false;
  clearTimeout(noticeTimer);
  noticeTimer = setTimeout(() => { box.hidden = true; }, kind === "error" ? 15000 : 8000);
}

// Ask before an action. `extra` is an optional element (e.g. a time input) shown in the
// dialog; answers true when confirmed. Live refresh pauses while the dialog is open.
function confirmAction(title, text, { verb = "Confirm", extra = null } = {}) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  const slot = document.getElementById("confirm-extra");
  slot.replaceChildren(...(extra ? [extra] : []));
  const ok = document.getElementById("confirm-ok");
  const cancel = document.getElementById("confirm-cancel");
  ok.textContent = verb;
  return new Promise((resolve) => {
    const finish = (answer) => {
      ok.onclick = cancel.onclick = dialog.oncancel = null;
      if (dialog.open) dialog.close();
      resolve(answer);
    };
    ok.onclick = () => finish(true);
    cancel.onclick = () => finish(false);
    dialog.oncancel = () => finish(false);
    dialog.showModal();
  });
}

// Run an action's request, report the outcome, then reload the view.
async function perform(run, describe) {
  try {
    const answer = await run();
    notice(describe(answer), "ok");
  } catch (error) {
    notice(error instanceof ApiError ? error.message : String(error), "error");
  }
  await Router.reload();
}
