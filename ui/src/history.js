// A node's history: its outcome and duration in its project's latest runs, oldest left,
// each bar as high as the node took and coloured by its outcome, linking to its run.
import { COLOURS } from "./constants.js";
import { h } from "./dom.js";
import { s } from "./svg.js";

const BAR_PX = 14;
const HEIGHT_PX = 60;

export function historyChart(rows, current) {
  if (!rows.length) return h("p", { class: "muted" }, "no earlier run of this node");
  const runs = [...rows].reverse();
  const longest = Math.max(...runs.map((r) => r.execution_time || 0), 0.001);
  const bars = runs.map((r, i) => {
    const tall = Math.max(2, ((r.execution_time || 0) / longest) * (HEIGHT_PX - 4));
    const o = r.outcome || r.status;
    const took = r.execution_time != null ? `${r.execution_time.toFixed(2)} s` : "no time";
    return s("a", { href: `#/runs/${encodeURIComponent(r.run_id)}` },
      s("rect", { x: i * BAR_PX, y: HEIGHT_PX - tall, width: BAR_PX - 2, height: tall,
        fill: COLOURS[o] || COLOURS.unknown, stroke: r.run_id === current ? "#1d232a" : "none",
        "stroke-width": 2, class: "history-bar" },
      s("title", {}, `run ${r.run_id}: ${o}, ${took}`)));
  });
  return h("div", { id: "history" },
    s("svg", { width: runs.length * BAR_PX, height: HEIGHT_PX }, bars),
    h("p", { class: "muted" }, `${runs.length} runs, oldest left; longest ${longest.toFixed(2)} s`));
}
