// The run viewer: projects, a project's runs, a run's live DAG, a relation. Plain DOM,
// hash routes, every data call with the bearer token kept in sessionStorage for this tab.
const TOKEN_KEY = "jetdbt.token";
const SHOWN = new Set(["model", "seed", "snapshot"]);
const TESTS = new Set(["test", "unit_test"]);
// Past this many nodes a run page asks for a focus (a node and its +n neighbours).
const FOCUS_ABOVE = 1500;
// dagre orders each rank to cut crossings, which costs seconds past a few hundred nodes.
// The whole of a larger graph is drawn in columns, one per topological generation (the
// API places each node), this far apart in cytoscape's units (a node is 150 by 30); a
// part of one (a focus) gets cytoscape's breadth-first layering, turned left to right.
const DAGRE_UP_TO = 200;
const COLUMN_GAP = 400;
const ROW_GAP = 40;
// While a run goes, a graph larger than that is redrawn at most this often.
const LARGE_REDRAW_MS = 250;
const DARK_TEXT = new Set(["pending", "not_selected", "warned"]);
// A label is drawn only where it is at least MIN_READABLE_PX high on screen.
const FONT_PX = 11;
const MIN_READABLE_PX = 7;
const COLOURS = {
  pending: "#e8edf3", running: "#2f6fde", passed: "#2e9d4f", warned: "#e0a800",
  failed: "#d93636", skipped: "#9a9a9a", no_op: "#b5c4b1", unknown: "#b0b0b0",
  not_selected: "#ffffff",
};
// The run page's graph: a node's fill says its outcome (its data's `fill`, one rule for
// every outcome: each rule is matched against every node). Past DAGRE_UP_TO nodes the
// edges are straight lines without arrows (haystack: far cheaper to lay out and draw);
// left to right says which way they go.
function graphStyle(small) {
  return [
    { selector: "node", style: {
      shape: "round-rectangle", width: 150, height: 30, "border-width": 1,
      "border-color": "#7a8591", "background-color": "data(fill)",
    } },
    { selector: "node[status = 'not_selected']", style: { "border-style": "dashed" } },
    { selector: "node:selected", style: { "border-width": 3, "border-color": "#1d232a" } },
    { selector: "edge", style: small
      ? { width: 1, "curve-style": "bezier", "target-arrow-shape": "triangle",
          "line-color": "#aab2bb", "target-arrow-color": "#aab2bb" }
      : { width: 1, "curve-style": "haystack", "haystack-radius": 0, "line-color": "#aab2bb" } },
  ];
}
// Each node's name and test badge, after graphStyle's rules.
const LABEL_STYLE = [
  { selector: "node", style: {
    label: "data(label)", "text-valign": "center", "font-size": FONT_PX,
    "min-zoomed-font-size": MIN_READABLE_PX, color: "#fff",
  } },
  ...[...DARK_TEXT].map((status) => ({
    selector: `node[status = '${status}']`, style: { color: "#1d232a" },
  })),
];
const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
let leave = () => {};  // stops what the current page runs (its event stream)

// ---- talking to the API ----------------------------------------------------------------

class Unauthorized extends Error {}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

function headers(extra = {}) {
  return { Authorization: `Bearer ${token()}`, ...extra };
}

// A value from the URL or an answer, as one path segment: "../" or "?" in a run id read
// from the location must not reach another route with the viewer's token.
const seg = encodeURIComponent;

async function api(path, options = {}) {
  const resp = await fetch(path, { ...options, headers: headers(options.headers) });
  if (resp.status === 401) throw new Unauthorized((await resp.json()).error);
  const body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  if (!resp.ok) {
    const err = new Error(body?.error || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return body;
}

function askToken(problem = "") {
  const dialog = document.getElementById("token-dialog");
  document.getElementById("token-problem").textContent = problem;
  if (!dialog.open) dialog.showModal();
}

document.getElementById("token-form").addEventListener("submit", () => {
  const input = document.getElementById("token-input");
  sessionStorage.setItem(TOKEN_KEY, input.value.trim());
  input.value = "";
  route();
});
document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  askToken();
});

// The run's events, read by follow.js in a worker of its own and posted here in order.
// Each gets a user-timing mark at the time it reached the browser, its detail saying when
// this page handled it: bench/bench_viewer.py reads both.
function follow(runId, onEvent, signal) {
  const worker = new Worker("follow.js");
  signal.addEventListener("abort", () => worker.terminate());
  const since = (epochMs) => epochMs - performance.timeOrigin;
  return new Promise((ended, refused) => {
    worker.onmessage = ({ data }) => {
      if (data.opened) performance.mark("jetdbt:stream-open", { startTime: since(data.opened) });
      for (const message of data.events || []) {
        const { type, unique_id, node } = message.data;
        performance.mark("jetdbt:event", { startTime: since(message.arrived), detail: {
          type, unique_id: unique_id || node?.unique_id, seq: message.id,
          handled: performance.timeOrigin + performance.now() } });
        onEvent(message);
      }
      if (data.ended || data.refused) worker.terminate();
      if (data.ended) ended();
      if (data.refused) refused(new Unauthorized(data.refused));
    };
    worker.postMessage({ runId, token: token() });
  });
}

// ---- small DOM helpers -----------------------------------------------------------------

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function h(tag, attrs = {}, ...children) {
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

const pill = (status) => h("span", { class: `pill ${status}` }, status ?? "");
const when = (t) => (t ? new Date(t).toLocaleString() : "");
const link = (href, text) => h("a", { href }, text);
const runLink = (id) => link(`#/runs/${encodeURIComponent(id)}`, id);
const relationLink = (key) => link(`#/relations/${encodeURIComponent(key)}`, key);

function seconds(from, to) {
  if (!from) return "";
  const end = to ? new Date(to) : new Date();
  return `${((end - new Date(from)) / 1000).toFixed(1)} s`;
}

function totals(t) {
  return Object.entries(t || {}).filter(([, n]) => n).map(([k, n]) => `${k} ${n}`).join(", ");
}

function table(head, rows) {
  return h("table", {}, h("tr", {}, head.map((c) => h("th", {}, c))),
    rows.map((r) => h("tr", {}, r.map((c) => h("td", {}, c)))));
}

function show(title, path, ...content) {
  document.title = `${title} · jetdbt`;
  crumbs.replaceChildren(...path.flatMap((p, i) => (i ? [" / ", p] : [p])));
  view.replaceChildren(...content);
}

// ---- pages -----------------------------------------------------------------------------

async function projectsPage() {
  const { projects } = await api("/v1/projects?limit=500");
  show("projects", [h("span", {}, "projects")], h("h1", {}, "Projects"),
    projects.length ? table(
      ["project", "deployed version", "deployed", "last run", "outcome", "finished"],
      projects.map((p) => [
        link(`#/projects/${p.project}`, p.project), h("code", {}, (p.version || "").slice(0, 19)),
        when(p.deployed_at), p.last_run_id ? runLink(p.last_run_id) : "",
        p.last_run_status ? pill(p.last_run_status) : "", when(p.last_run_finished_at),
      ])) : h("p", { class: "muted" }, "no project has been deployed or run yet"));
}

async function projectPage(project, params) {
  const offset = Number(params.get("offset") || 0);
  const [runs, deploys, envs] = await Promise.all([
    api(`/v1/projects/${seg(project)}/runs?limit=25&offset=${offset}`),
    api(`/v1/projects/${seg(project)}/deploys?limit=1`),
    api(`/v1/projects/${seg(project)}/environments`),
  ]);
  const latest = deploys.deploys[0];
  const pager = h("p", {},
    offset ? link(`#/projects/${project}?offset=${Math.max(0, offset - 25)}`, "← newer") : "",
    " ", runs.next ? link(`#/projects/${project}?offset=${runs.next.offset}`, "older →") : "");
  show(project, [link("#/", "projects"), h("span", {}, project)],
    h("h1", {}, project),
    h("p", {}, latest
      ? ["deployed version ", h("code", {}, (latest.version || "").slice(0, 19)), " ",
         pill(latest.status), ` ${when(latest.at)} by ${latest.requested_by || "?"}`]
      : "not deployed"),
    h("h2", {}, "Environments"),
    envs.environments.length ? table(["warehouse", "target", "schema", "published by", "at"],
      envs.environments.map((e) => [e.warehouse, e.target, e.schema, runLink(e.run_id),
        when(e.published_at)])) : h("p", { class: "muted" }, "no published state"),
    h("h2", {}, "Runs"),
    table(["run", "status", "outcomes", "duration", "requested by", "requested"],
      runs.runs.map((r) => [runLink(r.run_id), pill(r.status), totals(r.totals),
        seconds(r.started_at, r.finished_at), r.requested_by || "", when(r.requested_at)])),
    pager);
}

async function relationPage(key) {
  const rel = await api(`/v1/relations/${seg(key)}`);
  const owners = rel.producers.map((p) => (p.kind === "dbt"
    ? [link(`#/projects/${p.project}`, p.project), " ", h("code", {}, p.unique_id)]
    : [`declared by ${p.producer}`]));
  const other = (r) => (r.relation ? relationLink(r.relation) : h("code", {}, r.unique_id));
  show(key, [link("#/", "projects"), h("span", {}, key)],
    h("h1", {}, key),
    h("h2", {}, "Owned by"), owners.length ? h("ul", {}, owners.map((o) => h("li", {}, o)))
      : h("p", { class: "muted" }, "no project owns it"),
    h("h2", {}, "Upstream"), table(["project", "node", "relation"],
      rel.upstream.map((u) => [u.project, `${u.resource_type} ${u.name}`, other(u)])),
    h("h2", {}, "Downstream"), table(["project", "node", "relation"],
      rel.readers.map((r) => [r.project, `${r.resource_type} ${r.name}`, other(r)])),
    h("h2", {}, "Runs that built it"), h("table", { id: "relation-runs" },
      h("tr", {}, ["run", "project", "node", "outcome", "finished"].map((c) => h("th", {}, c))),
      rel.runs.map((r) => h("tr", {}, [runLink(r.run_id), r.project, r.unique_id,
        pill(r.outcome || r.status), when(r.finished_at)].map((c) => h("td", {}, c))))),
    h("h2", {}, "Declared writes"), table(["producer", "status", "rows", "written", "refused"],
      rel.writes.map((w) => [w.producer, w.status, w.row_count ?? "", when(w.written_at),
        w.refused_reason || ""])));
}

// ---- the run page ----------------------------------------------------------------------

async function graphOf(runId) {
  const nodes = [], edges = [];
  let after = null;
  do {
    const q = after ? `?after=${seg(after)}` : "";
    const page = await api(`/v1/runs/${seg(runId)}/graph` + q);
    nodes.push(...page.nodes);
    edges.push(...page.edges);
    after = page.next?.after;
  } while (after);
  return { nodes, edges };
}

// The nodes drawn: models, seeds and snapshots; each test folded into the node it tests.
function fold(graph) {
  const byId = new Map(graph.nodes.map((n) => [n.unique_id, n]));
  const drawn = new Map(), testsOf = new Map(), testedBy = new Map();
  for (const n of graph.nodes) if (SHOWN.has(n.resource_type)) drawn.set(n.unique_id, n);
  const parents = new Map();
  for (const e of graph.edges) {
    if (!parents.has(e.child)) parents.set(e.child, []);
    parents.get(e.child).push(e.parent);
  }
  for (const n of graph.nodes) {
    if (!TESTS.has(n.resource_type)) continue;
    const owner = [n.attached_node, ...(parents.get(n.unique_id) || [])].find((p) => drawn.has(p));
    if (!owner) continue;
    if (!testsOf.has(owner)) testsOf.set(owner, []);
    testsOf.get(owner).push(n.unique_id);
    testedBy.set(n.unique_id, owner);
  }
  const edges = graph.edges.filter((e) => drawn.has(e.parent) && drawn.has(e.child));
  return { byId, drawn, edges, testsOf, testedBy };
}

// A node and its ancestors and descendants up to `depth` steps.
function neighbourhood(folded, focus, depth) {
  const up = new Map(), down = new Map();
  for (const e of folded.edges) {
    (up.get(e.child) || up.set(e.child, []).get(e.child)).push(e.parent);
    (down.get(e.parent) || down.set(e.parent, []).get(e.parent)).push(e.child);
  }
  const keep = new Set([focus]);
  for (const step of [up, down]) {
    let ring = [focus];
    for (let d = 0; d < depth && ring.length; d++) {
      ring = ring.flatMap((id) => step.get(id) || []).filter((id) => !keep.has(id));
      ring.forEach((id) => keep.add(id));
    }
  }
  return keep;
}

// cytoscape-dagre, registered with cytoscape the first time a graph small enough is drawn.
let dagreUsed = null;
function useDagre(cytoscape) {
  dagreUsed ??= import("./dagre.js").then((m) => cytoscape.use(m.default));
  return dagreUsed;
}

// A run just submitted is not projected yet: its page waits for it (a minute at most).
async function runOnceKnown(runId, signal) {
  for (let tries = 0; ; tries++) {
    try {
      return await api(`/v1/runs/${seg(runId)}`);
    } catch (err) {
      if (err.status !== 404 || tries >= 120 || signal.aborted) throw err;
      view.replaceChildren(h("p", { class: "muted" }, `waiting for run ${runId} to be recorded…`));
      await sleep(500);
    }
  }
}

// A run's graph is known once it has started (its version names the graph): a page opened
// before then reads it when the run starts, trying a few times while the projection catches up.
async function graphWhenKnown(runId, signal) {
  for (let tries = 0; ; tries++) {
    try {
      return await graphOf(runId);
    } catch (err) {
      if (err.status !== 404 || tries >= 60 || signal.aborted) throw err;
      await sleep(250);
    }
  }
}

async function runPage(runId, params) {
  const stop = new AbortController();
  leave = () => stop.abort();
  const noGraph = (err) => { if (err.status === 404) return null; throw err; };
  const library = import("./graph.js");  // cytoscape, loaded while the run is read
  const [run, graph] = await Promise.all([
    runOnceKnown(runId, stop.signal), graphOf(runId).catch(noGraph),
  ]);
  performance.mark("jetdbt:run-data-loaded");
  const state = new Map(run.nodes.map((n) => [n.unique_id, n]));
  const focus = params.get("focus");
  const depth = Number(params.get("depth") || 2);
  let folded = fold({ nodes: [], edges: [] });

  const outcome = (id) => {
    const n = state.get(id);
    if (!n) return run.finished_at ? "not_selected" : "pending";
    if (n.status === "running") return "running";
    return n.outcome || n.status;
  };

  const header = h("div", { id: "run-header" });
  const panel = h("aside", { id: "panel" }, h("p", { class: "muted" }, "click a node"));
  const logBox = h("pre", { id: "log" }, "");
  const graphBox = h("div", { id: "graph" });
  const nodeIds = h("datalist", { id: "node-ids" });
  const focusForm = h("form", { class: "toolbar", id: "focus-form" },
    "focus on ", h("input", { name: "focus", list: "node-ids", size: 40, value: focus || "" }),
    " +", h("input", { name: "depth", type: "number", min: 0, max: 50, value: depth }),
    h("button", { type: "submit" }, "focus"),
    focus ? link(`#/runs/${runId}`, "whole graph") : "", nodeIds);
  focusForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(focusForm);
    location.hash = `#/runs/${runId}?focus=${encodeURIComponent(f.get("focus"))}&depth=${f.get("depth")}`;
  });
  // Filled when the input is first used: 500 options cost every load of the page a few ms.
  focusForm.elements.focus.addEventListener("focus", () => {
    if (!nodeIds.childElementCount) {
      nodeIds.replaceChildren(...[...folded.drawn.keys()].map((id) => h("option", { value: id })));
    }
  });
  const legend = h("p", { class: "legend" }, Object.entries(COLOURS).map(([k, c]) =>
    h("span", {}, h("i", { style: `background:${c}` }), " ", k.replace("_", " "))));
  show(runId, [link("#/", "projects"), link(`#/projects/${run.project}`, run.project),
    h("span", {}, runId)], header, focusForm, legend,
    h("div", { class: "run-layout" }, graphBox, panel),
    h("h2", {}, "Log"), logBox,
    h("h2", {}, "Invocation, as submitted"), h("pre", { id: "invocation" },
      JSON.stringify({ command: run.command, invocation_args: run.result?.invocation_args }, null, 2)));

  const badge = (id) => {
    const tests = folded.testsOf.get(id) || [];
    const failed = tests.filter((t) => ["failed", "warned"].includes(state.get(t)?.outcome));
    return tests.length ? ` ✓${tests.length - failed.length}${failed.length ? ` ✗${failed.length}` : ""}` : "";
  };
  const label = (id) => `${folded.drawn.get(id).name}${badge(id)}`;
  const looks = (id) => {
    const status = outcome(id);
    return { status, fill: COLOURS[status] || COLOURS.unknown };
  };

  let cy = null;
  async function drawGraph(g) {
    folded = fold(g);
    nodeIds.replaceChildren();
    let ids = [...folded.drawn.keys()];
    if (focus && folded.drawn.has(focus)) ids = [...neighbourhood(folded, focus, depth)];
    if (!focus && ids.length > FOCUS_ABOVE) {
      graphBox.replaceChildren(h("p", {}, `${ids.length} nodes: pick a node to focus on;`
        + " what failed or runs:"), h("ul", {}, [...state.values()]
        .filter((n) => folded.drawn.has(n.unique_id) && ["failed", "running"].includes(outcome(n.unique_id)))
        .slice(0, 200).map((n) => h("li", {}, pill(outcome(n.unique_id)), " ",
          link(`#/runs/${runId}?focus=${encodeURIComponent(n.unique_id)}&depth=2`, n.unique_id)))));
      return;
    }
    const small = ids.length <= DAGRE_UP_TO;
    // The whole of a large graph goes in the columns the API placed its nodes in; a part
    // of one (a focus) is laid out here.
    const placed = ids.length === folded.drawn.size
      && ids.every((id) => folded.drawn.get(id).layer != null);
    const cytoscape = (await library).default;
    if (small) await useDagre(cytoscape);
    const kept = new Set(ids);
    cy = cytoscape({
      container: graphBox,
      elements: [
        ...ids.map((id) => ({ data: { id, label: label(id), ...looks(id) } })),
        ...folded.edges.filter((e) => kept.has(e.parent) && kept.has(e.child))
          .map((e) => ({ data: { id: `${e.parent}>${e.child}`, source: e.parent, target: e.child } })),
      ],
      style: [...graphStyle(small), ...(small ? LABEL_STYLE : [])],
      layout: small
        ? { name: "dagre", rankDir: "LR", nodeSep: 8, rankSep: 60, animate: false }
        : placed ? { name: "preset", positions: (node) => {
          const n = folded.drawn.get(node.id());
          return { x: n.layer * COLUMN_GAP, y: n.row * ROW_GAP };
        } }
        : { name: "breadthfirst", directed: true, animate: false, spacingFactor: 0.5,
            transform: (node, p) => ({ x: p.y * 4, y: p.x / 4 }) },
      hideEdgesOnViewport: !small,
      textureOnViewport: !small,
      pixelRatio: small ? "auto" : 1,
      wheelSensitivity: 0.3,
    });
    cy.on("tap", "node", (e) => select(e.target.id()));
    if (!small) {
      // Laid out whole, a large graph is too small to read: its labels would cost a fifth
      // of the first paint and show nothing, so they are styled once a zoom shows them.
      const labelWhenReadable = () => {
        if (cy.zoom() * FONT_PX < MIN_READABLE_PX) return;
        cy.off("zoom", labelWhenReadable);
        LABEL_STYLE.reduce((sheet, rule) => sheet.selector(rule.selector).style(rule.style),
          cy.style()).update();
      };
      cy.on("zoom", labelWhenReadable);
      labelWhenReadable();
    }
  }

  let selected = null;
  function select(id) {
    selected = id;
    const n = state.get(id) || {};
    const g = folded.byId.get(id) || {};
    const tests = folded.testsOf.get(id) || [];
    panel.replaceChildren(...[
      h("h3", {}, g.name || id), h("p", {}, pill(outcome(id)), " ", h("code", {}, id)),
      table(["", ""], [
        ["type", `${g.resource_type || n.resource_type || ""} ${g.materialized || ""}`],
        ["dbt status", n.status || ""], ["outcome", n.outcome || outcome(id)],
        ["started", when(n.started_at)], ["finished", when(n.finished_at)],
        ["time", n.execution_time != null ? `${n.execution_time.toFixed(2)} s` : ""],
        ["rows affected", n.rows_affected ?? ""],
        ["relation", g.relation ? relationLink(g.relation) : ""],
        ["focus", link(`#/runs/${runId}?focus=${encodeURIComponent(id)}&depth=2`, "+2 around it")],
      ]),
      n.message ? [h("h4", {}, "Message"), h("pre", { class: "message" }, n.message)] : [],
      h("h4", {}, `Tests (${tests.length})`),
      table(["test", "outcome", "message"], tests.map((t) => [folded.byId.get(t).name,
        pill(outcome(t)), state.get(t)?.message || ""])),
      h("h4", {}, "Raw SQL"), h("pre", {}, g.raw_code || "(not in the graph)"),
      h("h4", {}, "Compiled SQL"), h("p", { class: "muted" }, "not recorded by jetdbt"),
    ].flat());
  }

  function drawHeader() {
    const live = ["requested", "queued", "running"].includes(run.status);
    const actions = [];
    if (live) {
      actions.push(h("button", { type: "button", id: "cancel", onclick: async () => {
        await api(`/v1/runs/${seg(runId)}/cancel`, { method: "POST", body: "{}",
          headers: { "Content-Type": "application/json" } });
      } }, "cancel"));
    } else if (["failed", "cancelled", "error"].includes(run.status)) {
      actions.push(h("button", { type: "button", id: "retry", onclick: async () => {
        const body = JSON.stringify({ command: { label: "retry", dbt_retry_job: runId } });
        const { run_id } = await api(`/v1/projects/${seg(run.project)}/runs`, { method: "POST", body,
          headers: { "Content-Type": "application/json" } });
        location.hash = `#/runs/${run_id}`;
      } }, "retry what failed"));
    }
    header.replaceChildren(h("h1", {}, "run ", runId, " ", pill(run.status)),
      h("p", {}, `project ${run.project} · requested by ${run.requested_by || "?"} `,
        `${when(run.requested_at)} · ${seconds(run.started_at, run.finished_at)} · `,
        totals(run.totals || run.result?.totals), " ", actions));
  }

  async function drawLog() {
    try {
      const page = await api(`/v1/runs/${seg(runId)}/logs?limit=5000`);
      logBox.textContent = page.lines.map((l) => l.text).join("\n");
    } catch (err) {
      if (err instanceof Unauthorized) throw err;
      logBox.textContent = `(no log: ${err.message})`;
    }
  }

  // Events only change `state` as they arrive; the nodes they touch are restyled together
  // in one batch, and cytoscape draws the batch in its next frame. A small graph's batch is
  // the events of one read from the stream. A large graph is restyled at most every
  // LARGE_REDRAW_MS: each of its frames costs the browser tens of milliseconds of the
  // machine dbt builds on. (Restyling in an animation frame instead lands after
  // cytoscape's own frame callback: the change is drawn a frame later.)
  const stale = new Set();
  let queued = false;
  let restyled = -Infinity;
  function repaint(id) {
    stale.add(folded.testedBy.get(id) || id);
    if (queued) return;
    queued = true;
    const pace = cy && cy.nodes().length > DAGRE_UP_TO ? LARGE_REDRAW_MS : 0;
    const wait = restyled + pace - performance.now();
    if (wait > 0) setTimeout(restyle, wait);
    else queueMicrotask(restyle);
  }
  function restyle() {
    queued = false;
    restyled = performance.now();
    cy?.batch(() => {
      for (const id of stale) {
        const node = cy.getElementById(id);
        if (node.nonempty()) node.data({ label: label(id), ...looks(id) });
      }
    });
    if (selected && stale.has(selected)) select(selected);
    stale.clear();
  }

  let lateGraph = null;
  function drawLateGraph() {
    lateGraph = graphWhenKnown(runId, stop.signal).then(drawGraph).catch((err) => {
      if (err instanceof Unauthorized) askToken(err.message);
      else if (!stop.signal.aborted) graphBox.replaceChildren(h("p", { class: "problem" }, err.message));
    });
  }

  function onEvent({ data }) {
    const type = data.type;
    if (type === "node.started.v1") {
      state.set(data.unique_id, { ...(state.get(data.unique_id) || {}), unique_id: data.unique_id,
        status: "running", outcome: null, started_at: data.started_at || data.at });
      repaint(data.unique_id);
    } else if (type === "node.finished.v1") {
      state.set(data.node.unique_id, data.node);
      repaint(data.node.unique_id);
    } else if (type.startsWith("run.")) {
      if (type === "run.started.v1") {
        Object.assign(run, { status: "running", started_at: data.at });
        if (!graph && !lateGraph) drawLateGraph();
      }
      if (type === "run.queued.v1") run.status = "queued";
      if (type === "run.refused.v1") Object.assign(run, { status: "refused", finished_at: data.at });
      if (type === "run.finished.v1" || type === "run.finished.v2") {
        Object.assign(run, { status: data.result.status, finished_at: data.at,
          totals: data.result.totals, result: data.result });
        for (const n of data.result.nodes) state.set(n.unique_id, n);
        // A large run keeps its nodes in a blob the event names: its record has them all.
        (data.nodes_blob ? recordedNodes() : Promise.resolve()).then(() => {
          cy?.nodes().forEach((n) => stale.add(n.id()));
          restyle();  // the final state is drawn before the page says the run ended
          drawLog();
          document.body.dataset.runEnded = "1";
        });
      }
      drawHeader();
    }
  }

  // The run's record once the projection has folded its end, every node in it.
  async function recordedNodes() {
    for (let tries = 0; tries < 120 && !stop.signal.aborted; tries++) {
      const known = await api(`/v1/runs/${seg(runId)}`).catch(() => null);
      if (known?.finished_at) {
        for (const n of known.nodes) state.set(n.unique_id, n);
        return;
      }
      await sleep(500);
    }
  }

  if (graph) await drawGraph(graph);
  drawHeader();
  window.viewer = {
    get cy() { return cy; },
    select,
    status: (id) => outcome(id),
    colour: (id) => cy?.getElementById(id).style("background-color"),
    position: (id) => {
      const box = graphBox.getBoundingClientRect();
      const p = cy.getElementById(id).renderedPosition();
      return { x: box.left + p.x, y: box.top + p.y };
    },
  };
  // Drawn once the browser has painted the laid-out graph (what a person waits for).
  requestAnimationFrame(() => setTimeout(() => {
    performance.mark("jetdbt:run-page-drawn");
    document.body.dataset.ready = "1";
    drawLog();  // below the graph: read once the graph is on screen
  }));
  // A finished run's record holds its every node: there is nothing left to follow.
  if (run.finished_at) {
    document.body.dataset.runEnded = "1";
    return;
  }
  follow(runId, onEvent, stop.signal).catch((err) => {
    if (err instanceof Unauthorized) askToken(err.message);
  });
}

// ---- routing ---------------------------------------------------------------------------

async function route() {
  leave();
  leave = () => {};
  delete document.body.dataset.ready;
  delete document.body.dataset.runEnded;
  if (!token()) { askToken(); return; }
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "projects" && parts[1]) await projectPage(parts[1], params);
    else if (parts[0] === "runs" && parts[1]) await runPage(parts[1], params);
    else if (parts[0] === "relations" && parts[1]) await relationPage(parts.slice(1).join("/"));
    else await projectsPage();
  } catch (err) {
    if (err instanceof Unauthorized) { askToken(err.message); return; }
    view.replaceChildren(h("p", { class: "problem", id: "problem" }, err.message));
  }
}

window.addEventListener("hashchange", route);
route();
