// A node's panel: where it stands in the run, dbt's message, what the graph says of it
// (description, columns with their types, tags, raw SQL), and what the run recorded of it
// (compiled SQL, masked like every line jetdbt keeps) with its history over its latest runs.
import { api, seg } from "./api.js";
import { HISTORY_RUNS } from "./constants.js";
import { h, historyLink, link, pill, relationLink, table, when } from "./dom.js";
import { freshnessRows } from "./freshness.js";
import { historyChart } from "./history.js";

// A column's type: the warehouse's (the last catalog's), else the engine's (declared, else
// inferred), else the author's data_type; the warehouse's columns first, in its order.
function columnRows(g) {
  const warehouse = new Map((g.catalog?.columns || []).map((c) => [c.name, c]));
  const typed = new Map((g.column_schema || []).map((c) => [c.name, c]));
  const declared = new Map((g.columns || []).map((c) => [c.name, c]));
  const names = [...new Set([...warehouse.keys(), ...declared.keys(), ...typed.keys()])];
  return names.map((name) => {
    const w = warehouse.get(name), t = typed.get(name), d = declared.get(name);
    return [name, w?.data_type || t?.declared_type || t?.inferred_type || d?.data_type || "",
      d?.description || t?.description || ""];
  });
}

export function graphSections(g) {
  const columns = columnRows(g);
  return [
    g.description ? [h("h4", {}, "Description"), h("p", { id: "node-description" }, g.description)]
      : [],
    g.tags?.length ? [h("h4", {}, "Tags"),
      h("p", { id: "node-tags" }, g.tags.map((t) => h("code", { class: "tag" }, t)))] : [],
    g.freshness ? [h("h4", {}, "Freshness"),
      table(["", ""], freshnessRows(g.freshness), { id: "node-freshness" })] : [],
    columns.length ? [h("h4", {}, `Columns (${columns.length})`),
      g.catalog ? h("p", { class: "muted" },
        `types as the warehouse listed them on ${when(g.catalog.generated_at)}`) : [],
      table(["column", "type", "description"], columns, { id: "node-columns" })].flat() : [],
    h("h4", {}, "Raw SQL"), h("pre", {}, g.raw_code || "(not in the graph)"),
  ].flat();
}

// The run's record of a node beyond its row: compiled SQL and history (one request).
export const nodeDetail = (runId, id) =>
  api(`/v1/runs/${seg(runId)}/nodes/${seg(id)}?limit=${HISTORY_RUNS}`);

function recorded(detail, runId) {
  if (!detail) return [h("p", { class: "muted" }, "reading…")];
  if (detail.error) return [h("p", { class: "problem" }, detail.error)];
  return [
    h("h4", {}, "Compiled SQL"),
    detail.compiled_code != null ? h("pre", { id: "compiled-sql" }, detail.compiled_code)
      : h("p", { class: "muted", id: "compiled-sql" },
        "none recorded: dbt compiled nothing for this node in this run, or it has not ended"),
    h("h4", {}, "History"), historyChart(detail.history, runId),
    h("p", { id: "node-history-link" },
      historyLink(detail.project, detail.unique_id, "all its runs →")),
  ];
}

// `n` the run's row of the node, `g` the graph's, `detail` nodeDetail's answer (null while
// it is read), `tests` [name, outcome, message] rows, `actions` its buttons.
export function nodePanel({ runId, id, n, g, outcome, tests, detail, actions }) {
  return [
    h("h3", {}, g.name || id), h("p", {}, pill(outcome), " ", h("code", {}, id)),
    h("p", { class: "toolbar" }, actions),
    table(["", ""], [
      ["type", `${g.resource_type || n.resource_type || ""} ${g.materialized || ""}`],
      ["dbt status", n.status || ""], ["outcome", outcome],
      ["started", when(n.started_at)], ["finished", when(n.finished_at)],
      ["time", n.execution_time != null ? `${n.execution_time.toFixed(2)} s` : ""],
      ["thread", n.thread || ""],
      ["rows affected", n.rows_affected ?? ""],
      ["relation", g.relation ? relationLink(g.relation) : ""],
      ["focus", link(`#/runs/${runId}?focus=${encodeURIComponent(id)}&depth=2`, "+2 around it")],
    ]),
    n.message ? [h("h4", {}, "Message"), h("pre", { class: "message" }, n.message)] : [],
    h("h4", {}, `Tests (${tests.length})`),
    table(["test", "outcome", "message"], tests.map(([name, o, m]) => [name, pill(o), m])),
    graphSections(g),
    recorded(detail, runId),
  ].flat();
}
