// Small DOM helpers: elements built from data (text is always text, never markup).
export const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");

export const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "onclick") el.addEventListener("click", v);
    else if (v !== undefined && v !== null) el.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export const pill = (status) => h("span", { class: `pill ${status}` }, status ?? "");
export const when = (t) => (t ? new Date(t).toLocaleString() : "");
export const link = (href, text) => h("a", { href }, text);
export const runLink = (id) => link(`#/runs/${encodeURIComponent(id)}`, id);
export const relationLink = (key) => link(`#/relations/${encodeURIComponent(key)}`, key);
// A node's page: its duration and outcome across its project's runs.
export const historyLink = (project, id, text = "history across runs") =>
  link(`#/projects/${encodeURIComponent(project)}/nodes/${encodeURIComponent(id)}`, text);

export function seconds(from, to) {
  if (!from) return "";
  const end = to ? new Date(to) : new Date();
  return `${((end - new Date(from)) / 1000).toFixed(1)} s`;
}

export function totals(t) {
  return Object.entries(t || {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(", ");
}

// `rowAttrs(i)`: the attributes of the i-th row (a test or a style finds a row by them).
export function table(head, rows, attrs = {}, rowAttrs = () => ({})) {
  return h("table", attrs, h("tr", {}, head.map((c) => h("th", {}, c))),
    rows.map((r, i) => h("tr", rowAttrs(i), r.map((c) => h("td", {}, c)))));
}

// A page the tab has left: what it would draw now comes too late (the router ignores it).
export class Left extends Error {}

// Each route's page is drawn under the signal the router gives it and aborts on the next
// route: a page the tab has left draws nothing more over the one it is on.
export function stillOn(signal) {
  if (signal.aborted) throw new Left();
}

export function show(signal, title, path, ...content) {
  stillOn(signal);
  document.title = `${title} · jetdbt`;
  crumbs.replaceChildren(...path.flatMap((p, i) => (i ? [" / ", p] : [p])));
  view.replaceChildren(...content);
}

// The page is drawn: what a test (and a person's wait) waits for.
export function ready(signal) {
  stillOn(signal);
  document.body.dataset.ready = "1";
}
