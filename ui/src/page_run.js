// A run's page: its header (what was asked, where it stands), what failed and why, its
// live DAG (each node coloured by its outcome from the event stream), a node's panel, the
// timeline of its nodes, its log and its invocation.
import { Unauthorized, api, follow, seg } from "./api.js";
import { me, nodeActions, runActions } from "./actions.js";
import {
  COLOURS, DAGRE_UP_TO, EDGES_ON_ZOOM_ABOVE, FOCUS_ABOVE, HUGE_REDRAW_MS, LARGE_REDRAW_MS,
} from "./constants.js";
import { drawnName, fold, graphOf, graphWhenKnown } from "./dag.js";
import { h, link, pill, show, sleep, stillOn, view } from "./dom.js";
import { drawGraph as drawDag, library, pagePosition } from "./draw_graph.js";
import { failurePanel } from "./failures.js";
import { focusForm, focusedIds, noSuchNode } from "./focus.js";
import { chipData } from "./freshness.js";
import { nodeDetail, nodePanel } from "./node_panel.js";
import { badge, drawnOutcome } from "./outcomes.js";
import { provenance } from "./provenance.js";
import { applyNodeEvent, applyRunEvent } from "./run_events.js";
import { runHeader } from "./run_header.js";
import { drawTimeline } from "./timeline.js";
import { askToken } from "./token.js";

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

export async function runPage(runId, params, signal) {
  const noGraph = (err) => { if (err.status === 404) return null; throw err; };
  library();  // cytoscape, loaded while the run is read
  const [run, graph, who] = await Promise.all([
    runOnceKnown(runId, signal), graphOf(runId).catch(noGraph), me(),
  ]);
  performance.mark("jetdbt:run-data-loaded");
  const state = new Map(run.nodes.map((n) => [n.unique_id, n]));
  const focus = params.get("focus");
  const depth = Number(params.get("depth") || 2);
  let folded = fold({ nodes: [], edges: [] });
  const outcome = (id) => drawnOutcome(state.get(id), run);

  const header = h("div", { id: "run-header" });
  let failures = h("section", { id: "failures" });
  const panel = h("aside", { id: "panel" }, h("p", { class: "muted" }, "click a node"));
  const logBox = h("pre", { id: "log" }, "");
  const graphBox = h("div", { id: "graph" }, graph || run.finished_at ? ""
    : h("p", { class: "muted" }, "the run has not started: its graph is drawn when it does"));
  const source = h("p", { class: "muted", id: "provenance" });
  const timeline = h("div", { id: "timeline" });
  const focusing = focusForm(`#/runs/${runId}`, focus, depth,
    () => [...folded.drawn.values()].map((n) => n.name));
  const legend = h("p", { class: "legend" }, Object.entries(COLOURS).map(([k, c]) =>
    h("span", {}, h("i", { style: `background:${c}` }), " ", k.replace("_", " "))),
    h("span", { class: "muted" }, "tests: ✓ passed ⚠ warned ✗ failed ⊘ skipped"));
  show(signal, runId, [link("#/", "projects"), link(`#/projects/${run.project}`, run.project),
    h("span", {}, runId)], header, failures, h("div", { class: "graph-bar" }, focusing, legend),
    source,
    h("div", { class: "run-layout" }, graphBox, panel),
    h("h2", {}, "Timeline"), timeline,
    h("h2", {}, "Log"), logBox,
    h("h2", {}, "Invocation, as submitted"), h("pre", { id: "invocation" },
      JSON.stringify({ command: run.command, invocation_args: run.result?.invocation_args }, null, 2)));

  const testOutcomes = (id) => (folded.testsOf.get(id) || []).map(outcome);
  const label = (id) => {
    const marks = badge(testOutcomes(id));
    return `${drawnName(folded.drawn.get(id))}${marks ? ` ${marks}` : ""}`;
  };
  const looks = (id) => {
    const status = outcome(id);
    return { status, fill: COLOURS[status] || COLOURS.unknown,
      ...chipData(folded.drawn.get(id)?.freshness) };
  };

  let cy = null;
  async function drawGraph(g) {
    folded = fold(g);
    source.replaceChildren(provenance(g));
    let ids = [...folded.drawn.keys()];
    if (focus) {
      ids = focusedIds(folded, focus, depth);
      if (!ids) {
        graphBox.replaceChildren(noSuchNode(focus, "this run's graph"));
        return;
      }
    }
    if (!focus && ids.length > FOCUS_ABOVE) {
      graphBox.replaceChildren(h("p", {}, `${ids.length} nodes: pick a node to focus on;`
        + " what failed or runs:"), h("ul", {}, [...state.values()]
        .filter((n) => folded.drawn.has(n.unique_id) && ["failed", "running"].includes(outcome(n.unique_id)))
        .slice(0, 200).map((n) => h("li", {}, pill(outcome(n.unique_id)), " ",
          link(`#/runs/${runId}?focus=${encodeURIComponent(n.unique_id)}&depth=2`, n.unique_id)))));
      return;
    }
    graphBox.replaceChildren();  // the note of a run not started yet
    cy = await drawDag(graphBox, folded, ids, (id) => ({ label: label(id), ...looks(id) }), select);
  }

  // A node's compiled SQL and history, read once per node (again once the run has ended:
  // the compiled SQL comes with its result).
  const details = new Map();
  function detailOf(id) {
    const key = `${id} ${Boolean(run.finished_at)}`;
    if (!details.has(key)) {
      details.set(key, null);
      nodeDetail(runId, id).catch((err) => ({ error: err.message, history: [] })).then((d) => {
        details.set(key, d);
        if (selected === id) select(id);
      });
    }
    return details.get(key);
  }

  let selected = null;
  function select(id) {
    selected = id;
    const g = folded.byId.get(id) || {};
    const tests = (folded.testsOf.get(id) || []).map((t) => [folded.byId.get(t).name,
      outcome(t), state.get(t)?.message || ""]);
    panel.replaceChildren(...nodePanel({ runId, id, n: state.get(id) || {}, g,
      outcome: outcome(id), tests, detail: detailOf(id),
      actions: nodeActions(run.project, g, who?.role) }));
  }

  function drawHeader() {
    header.replaceChildren(...runHeader(run, runActions(run, who?.role)));
  }

  function drawFailures() {
    failures.replaceWith(failures = failurePanel(run, [...state.values()], outcome, (id) => {
      select(id);
      panel.scrollIntoView({ block: "nearest" });
    }));
  }

  function drawTimes() {
    const start = performance.now();
    const drawn = drawTimeline(timeline, [...state.values()], outcome, select);
    performance.measure("jetdbt:timeline-drawn", { start, end: performance.now(),
      detail: { nodes: drawn } });
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
  // LARGE_REDRAW_MS (HUGE_REDRAW_MS past EDGES_ON_ZOOM_ABOVE nodes): each of its frames
  // costs the browser tens of milliseconds of the machine dbt builds on. (Restyling in an
  // animation frame instead lands after cytoscape's own frame callback: the change is
  // drawn a frame later.)
  const stale = new Set();
  let queued = false;
  let restyled = -Infinity;
  let failuresStale = false;
  function repaint(id) {
    stale.add(folded.testedBy.get(id) || id);
    if (["failed", "warned"].includes(outcome(id))) failuresStale = true;
    if (queued) return;
    queued = true;
    const drawn = cy ? cy.nodes().length : 0;
    const pace = drawn > EDGES_ON_ZOOM_ABOVE ? HUGE_REDRAW_MS
      : drawn > DAGRE_UP_TO ? LARGE_REDRAW_MS : 0;
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
    if (failuresStale) {
      failuresStale = false;
      drawFailures();
    }
  }

  let lateGraph = null;
  function drawLateGraph() {
    lateGraph = graphWhenKnown(runId, signal).then(drawGraph).catch((err) => {
      if (err instanceof Unauthorized) askToken(err.message);
      else if (!signal.aborted) graphBox.replaceChildren(h("p", { class: "problem" }, err.message));
    });
  }

  function ended() {
    if (signal.aborted) return;
    cy?.nodes().forEach((n) => stale.add(n.id()));
    failuresStale = true;
    restyle();  // the final state is drawn before the page says the run ended
    drawHeader();
    drawTimes();
    drawLog();
    document.body.dataset.runEnded = "1";
  }

  function onEvent({ data }) {
    const touched = applyNodeEvent(state, data);
    if (touched) {
      repaint(touched);
      return;
    }
    const change = applyRunEvent(run, state, data);
    if (change === "started" && !graph && !lateGraph) drawLateGraph();
    if (change === "refused") ended();
    // A large run keeps its nodes in a blob the event names: its record has them all.
    if (change === "finished") (data.nodes_blob ? recordedNodes() : Promise.resolve()).then(ended);
    if (change) drawHeader();
  }

  // The run's record once the projection has folded its end, every node in it.
  async function recordedNodes() {
    for (let tries = 0; tries < 120 && !signal.aborted; tries++) {
      const known = await api(`/v1/runs/${seg(runId)}`).catch(() => null);
      if (known?.finished_at) {
        for (const n of known.nodes) state.set(n.unique_id, n);
        return;
      }
      await sleep(500);
    }
  }

  drawFailures();
  if (graph) await drawGraph(graph);
  else if (run.finished_at) graphBox.replaceChildren(h("p", { class: "muted" }, "no graph is recorded for this run"));
  stillOn(signal);
  drawHeader();
  window.viewer = {
    get cy() { return cy; },
    select,
    status: (id) => outcome(id),
    label: (id) => cy?.getElementById(id).data("label"),
    testsOf: (id) => folded.testsOf.get(id) || [],
    colour: (id) => cy?.getElementById(id).style("background-color"),
    position: (id) => pagePosition(cy, graphBox, id),
  };
  // Drawn once the browser has painted the laid-out graph (what a person waits for).
  requestAnimationFrame(() => setTimeout(() => {
    if (signal.aborted) return;
    performance.mark("jetdbt:run-page-drawn");
    document.body.dataset.ready = "1";
    drawTimes();  // below the graph: drawn once the graph is on screen
    drawLog();
  }));
  // A finished run's record holds its every node: there is nothing left to follow.
  if (run.finished_at) {
    document.body.dataset.runEnded = "1";
    return;
  }
  follow(runId, onEvent, signal).catch((err) => {
    if (err instanceof Unauthorized) askToken(err.message);
  });
}
