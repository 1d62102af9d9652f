// What failed and why, without a click: each failed or errored node with dbt's message,
// then the warnings; a run refused or ended by an error says so first.
import { h, pill } from "./dom.js";

const byTime = (a, b) => String(a.finished_at || "").localeCompare(String(b.finished_at || ""));

// `nodes` are the run's node records; `outcomeOf(id)` is what each is drawn as;
// `onPick(id)` opens a node's panel.
export function failurePanel(run, nodes, outcomeOf, onPick) {
  const failed = nodes.filter((n) => outcomeOf(n.unique_id) === "failed").sort(byTime);
  const warned = nodes.filter((n) => outcomeOf(n.unique_id) === "warned").sort(byTime);
  const problem = run.refused_reason ? `refused: ${run.refused_reason}`
    : run.result?.error ? run.result.error : null;
  if (!problem && !failed.length && !warned.length) return h("section", { id: "failures" });
  const item = (n) => h("li", { "data-node": n.unique_id },
    pill(outcomeOf(n.unique_id)), " ",
    h("a", { href: "#", onclick: (e) => { e.preventDefault(); onPick(n.unique_id); } },
      n.name || n.unique_id), " ", h("span", { class: "muted" }, n.resource_type || ""),
    n.message ? h("pre", { class: "message" }, n.message) : "");
  return h("section", { id: "failures" },
    problem ? h("p", { class: "problem", id: "run-problem" }, problem) : "",
    failed.length ? [h("h2", {}, `Failed (${failed.length})`),
      h("ul", { id: "failed-nodes" }, failed.map(item))] : "",
    warned.length ? [h("h2", {}, `Warnings (${warned.length})`),
      h("ul", { id: "warned-nodes" }, warned.map(item))] : "");
}
