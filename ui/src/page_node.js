// A model (any node) across its project's runs: how long it took and how it ended, drawn
// over time, with each run listed; reached from a node's panel and a relation's page.
import { api, seg } from "./api.js";
import { HISTORY_PAGE_RUNS } from "./constants.js";
import { h, link, pill, runLink, ready, show, table, totals, when } from "./dom.js";
import { durationChart } from "./history.js";

const median = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
};

function summary(history) {
  const outcomes = {};
  for (const r of history) {
    const o = r.outcome || r.status;
    outcomes[o] = (outcomes[o] || 0) + 1;
  }
  const times = history.map((r) => r.execution_time).filter((t) => t != null);
  const fixed = (t) => `${t.toFixed(2)} s`;
  return [`${history.length} runs: ${totals(outcomes)}`,
    times.length ? `; median ${fixed(median(times))}, longest ${fixed(Math.max(...times))}`
      + `, latest ${fixed(times[0])}` : ""].join("");
}

// A show or compile run reads a model without building it: listed, never drawn or counted.
const READS_ONLY = new Set(["show", "compile"]);

export async function nodePage(project, uniqueId, signal) {
  const { history } = await api(`/v1/projects/${seg(project)}/nodes/${seg(uniqueId)}/history`
    + `?limit=${HISTORY_PAGE_RUNS}`);
  const built = history.filter((r) => !READS_ONLY.has(r.command));
  const name = uniqueId.split(".").slice(2).join(".") || uniqueId;
  show(signal, `${name} history`, [link("#/", "projects"), link(`#/projects/${seg(project)}`, project),
    h("span", {}, name)],
    h("h1", {}, name),
    h("p", {}, h("code", {}, uniqueId), " · ",
      link(`#/projects/${seg(project)}?focus=${seg(uniqueId)}&depth=2`, "in the lineage")),
    h("h2", {}, "Duration and outcome over time"),
    h("p", { id: "node-summary" }, built.length ? summary(built) : ""),
    durationChart(built),
    h("h2", {}, "Runs"),
    table(["run", "command", "outcome", "took", "started", "run ended"], history.map((r) => [
      runLink(r.run_id), r.command || "", pill(r.outcome || r.status),
      r.execution_time != null ? `${r.execution_time.toFixed(2)} s` : "",
      when(r.started_at || r.requested_at), pill(r.run_status)]), { id: "node-runs" }));
  ready(signal);
}
