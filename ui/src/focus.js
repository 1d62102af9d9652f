// A focus on part of a graph, the same on a run's page and a project's: one node by name
// or id with its neighbours `depth` steps away, or what a dbt selector string selects.
import { neighbourhood } from "./dag.js";
import { h, link } from "./dom.js";
import { namesOneNode, selectNodes } from "./selector.js";

// The drawn node ids `focus` asks for; null when nothing matches.
export function focusedIds(folded, focus, depth) {
  const chosen = selectNodes(folded, focus);
  if (!chosen.size) return null;
  if (chosen.size === 1 && namesOneNode(focus)) {
    return [...neighbourhood(folded, [...chosen][0], depth)];
  }
  return [...chosen];
}

export const noSuchNode = (focus, where) => h("p", { class: "problem", id: "no-such-node" },
  `no such node: nothing in ${where} matches ${JSON.stringify(focus)}`);

// The focus form of the page at `base` (`#/runs/RUN`, `#/projects/P`); `names()` lists the
// nodes to suggest, read when the input is first used (500 options cost a load a few ms).
export function focusForm(base, focus, depth, names) {
  const suggestions = h("datalist", { id: "node-ids" });
  const form = h("form", { class: "toolbar", id: "focus-form" },
    "focus on ", h("input", { name: "focus", list: "node-ids", size: 40, value: focus || "",
      placeholder: "a name, or a selector: orders+, tag:daily, 1+stg_orders" }),
    " +", h("input", { name: "depth", type: "number", min: 0, max: 50, value: depth }),
    h("button", { type: "submit" }, "focus"),
    focus ? link(base, "whole graph") : "", suggestions);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(form);
    location.hash = `${base}?focus=${encodeURIComponent(f.get("focus"))}&depth=${f.get("depth")}`;
  });
  form.elements.focus.addEventListener("focus", () => {
    if (!suggestions.childElementCount) {
      suggestions.replaceChildren(...names().map((name) => h("option", { value: name })));
    }
  });
  return form;
}
