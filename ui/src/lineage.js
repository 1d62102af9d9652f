// A project's lineage: the deployed version's graph, drawn like a run's without outcomes,
// with where it came from, a node's panel (what the graph says of it, its relation's page,
// building it and its children) and a focus by name or dbt selector.
import { me, nodeActions } from "./actions.js";
import { seg } from "./api.js";
import { COLOURS } from "./constants.js";
import { drawnName, fold, graphAt } from "./dag.js";
import { h, historyLink, link, relationLink, table } from "./dom.js";
import { drawGraph, pagePosition } from "./draw_graph.js";
import { focusForm, focusedIds, noSuchNode } from "./focus.js";
import { chipData } from "./freshness.js";
import { graphSections } from "./node_panel.js";
import { provenance } from "./provenance.js";

// The section's elements, drawn into once they are on the page (`draw()`).
export function lineageSection(project, params) {
  const focus = params.get("focus");
  const depth = Number(params.get("depth") || 2);
  const graphBox = h("div", { id: "graph" });
  const panel = h("aside", { id: "panel" }, h("p", { class: "muted" }, "click a node"));
  const source = h("p", { class: "muted", id: "provenance" });
  const relations = h("div", { id: "relations" });
  let names = () => [];
  const elements = [h("h2", {}, "Lineage"),
    focusForm(`#/projects/${project}`, focus, depth, () => names()), source,
    h("div", { class: "run-layout" }, graphBox, panel), h("h2", {}, "Relations"), relations];

  async function draw() {
    let graph;
    try {
      graph = await graphAt(`/v1/projects/${seg(project)}/graph`);
    } catch (err) {
      if (err.status !== 404) throw err;
      graphBox.replaceChildren(h("p", { class: "muted" }, err.message));
      return null;
    }
    const who = await me();
    const folded = fold(graph);
    source.replaceChildren(provenance(graph));
    const nodes = [...folded.drawn.values()];
    relations.replaceChildren(table(["node", "type", "relation"], nodes.filter((n) => n.relation)
      .map((n) => [n.name, `${n.resource_type} ${n.materialized || ""}`, relationLink(n.relation)])));
    names = () => nodes.map((n) => n.name);
    let ids = nodes.map((n) => n.unique_id);
    if (focus) {
      ids = focusedIds(folded, focus, depth);
      if (!ids) {
        graphBox.replaceChildren(noSuchNode(focus, "the deployed graph"));
        return { cy: null };
      }
    }
    const select = (id) => {
      const g = folded.byId.get(id) || {};
      panel.replaceChildren(h("h3", {}, g.name || id), h("p", {}, h("code", {}, id)),
        h("p", { class: "toolbar" }, nodeActions(project, g, who?.role)),
        table(["", ""], [
          ["type", `${g.resource_type || ""} ${g.materialized || ""}`],
          ["relation", g.relation ? relationLink(g.relation) : ""],
          ["tests", (folded.testsOf.get(id) || []).length],
          ["history", historyLink(project, id)],
          ["focus", link(`#/projects/${project}?focus=${encodeURIComponent(g.name || id)}`
            + "&depth=2", "+2 around it")],
        ]), ...graphSections(g));
    };
    const looks = (id) => {
      const n = folded.drawn.get(id);
      return { label: drawnName(n), status: "pending", fill: COLOURS.pending,
        ...chipData(n.freshness) };
    };
    const cy = await drawGraph(graphBox, folded, ids, looks, select);
    return { cy, select, position: (id) => pagePosition(cy, graphBox, id) };
  }
  return { elements, draw };
}

