// A graph as the API serves it (pages of nodes and edges), folded into what is drawn:
// models, seeds and snapshots, and the sources whose freshness was checked (in a column
// of their own before the first when the API placed the rest), each test folded into the
// node it tests.
import { api, seg } from "./api.js";
import { SHOWN, TESTS } from "./constants.js";
import { sleep } from "./dom.js";

// Every page of the graph at `path` (a run's or a project's graph route).
export async function graphAt(path) {
  const nodes = [], edges = [];
  let after = null;
  let head = null;
  do {
    const q = after ? `${path.includes("?") ? "&" : "?"}after=${seg(after)}` : "";
    const page = await api(path + q);
    head ??= page;
    nodes.push(...page.nodes);
    edges.push(...page.edges);
    after = page.next?.after;
  } while (after);
  return { ...head, nodes, edges };
}

export const graphOf = (runId) => graphAt(`/v1/runs/${seg(runId)}/graph`);

// A run's graph is known once it has started (its version names the graph): a page opened
// before then reads it when the run starts, trying a few times while the projection catches up.
export async function graphWhenKnown(runId, signal) {
  for (let tries = 0; ; tries++) {
    try {
      return await graphOf(runId);
    } catch (err) {
      if (err.status !== 404 || tries >= 60 || signal.aborted) throw err;
      await sleep(250);
    }
  }
}

// A drawn node's name; a source's with its source's (`shop.raw_orders`): a seed may share
// its table's.
export const drawnName = (n) => (n.resource_type === "source"
  ? n.unique_id.split(".").slice(2).join(".") : n.name);

export function fold(graph) {
  const byId = new Map(graph.nodes.map((n) => [n.unique_id, n]));
  const drawn = new Map(), testsOf = new Map(), testedBy = new Map();
  for (const n of graph.nodes) if (SHOWN.has(n.resource_type)) drawn.set(n.unique_id, n);
  const placed = [...drawn.values()].some((n) => n.layer != null);
  let sourceRow = 0;
  for (const n of graph.nodes) {
    if (n.resource_type !== "source" || !n.freshness) continue;
    drawn.set(n.unique_id, placed ? { ...n, layer: -1, row: sourceRow++ } : n);
  }
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

// Each node's parents (`up`) and children (`down`) among `edges`.
export function adjacency(edges) {
  const up = new Map(), down = new Map();
  for (const e of edges) {
    (up.get(e.child) || up.set(e.child, []).get(e.child)).push(e.parent);
    (down.get(e.parent) || down.set(e.parent, []).get(e.parent)).push(e.child);
  }
  return { up, down };
}

// `start` and what `step` reaches from it in up to `depth` steps.
export function walk(start, step, depth) {
  const seen = new Set(start);
  let ring = [...start];
  for (let d = 0; ring.length && d < depth; d++) {
    ring = ring.flatMap((id) => step.get(id) || []).filter((id) => !seen.has(id));
    ring.forEach((id) => seen.add(id));
  }
  return seen;
}

// A node and its ancestors and descendants up to `depth` steps.
export function neighbourhood(folded, focus, depth) {
  const { up, down } = adjacency(folded.edges);
  return new Set([...walk([focus], up, depth), ...walk([focus], down, depth)]);
}
