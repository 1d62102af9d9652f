// A node's history: its outcome and duration in its project's latest runs, drawn small in
// a node's panel and at length on its own page.
import { COLOURS } from "./constants.js";
import { h } from "./dom.js";
import { s } from "./svg.js";
import { niceStep } from "./timeline.js";

const BAR_PX = 14;
const HEIGHT_PX = 60;

// The panel's: oldest left, each bar as high as the node took, coloured by its outcome.
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

const CHART = { width: 760, height: 200, left: 52, right: 12, top: 12, bottom: 34 };

// A node's history on a time axis (dbt Cloud's model timing, Dagster's asset history): each
// run a point as high as the node took, coloured by its outcome and linking to its run, a
// line through them; a run that timed nothing (skipped, cancelled) sits on the axis.
export function durationChart(rows) {
  const { width, height, left, right, top, bottom } = CHART;
  const runs = rows.map((r) => ({ ...r, t: Date.parse(r.started_at || r.requested_at) }))
    .filter((r) => !Number.isNaN(r.t)).sort((a, b) => a.t - b.t);
  if (!runs.length) return h("p", { class: "muted" }, "no run of this node is recorded");
  const t0 = runs[0].t, t1 = runs[runs.length - 1].t;
  const longest = Math.max(...runs.map((r) => r.execution_time || 0), 0.1);
  const step = niceStep(longest / 4);
  const ceiling = step * Math.ceil(longest / step);
  const x = (t) => (t1 > t0 ? left + ((t - t0) / (t1 - t0)) * (width - left - right)
    : left + (width - left - right) / 2);
  const y = (sec) => height - bottom - ((sec || 0) / ceiling) * (height - top - bottom);
  const grid = [];
  for (let sec = 0; sec <= ceiling + 1e-9; sec += step) {
    grid.push(s("line", { x1: left, x2: width - right, y1: y(sec), y2: y(sec),
      stroke: "#e1e4e8" }),
      s("text", { x: left - 6, y: y(sec) + 4, "font-size": 10, "text-anchor": "end" },
        `${Number(sec.toFixed(2))} s`));
  }
  const day = (t) => new Date(t).toLocaleString();
  const axis = [[t0, "start"], ...(t1 > t0 ? [[t1, "end"]] : [])].map(([t, anchor]) =>
    s("text", { x: x(t), y: height - bottom + 16, "font-size": 10, "text-anchor": anchor },
      day(t)));
  const timed = runs.filter((r) => r.execution_time != null);
  const line = s("polyline", { points: timed.map((r) => `${x(r.t)},${y(r.execution_time)}`)
    .join(" "), fill: "none", stroke: "#aab2bb", "stroke-width": 1.5 });
  const points = runs.map((r) => {
    const o = r.outcome || r.status;
    const took = r.execution_time != null ? `${r.execution_time.toFixed(2)} s` : "no time";
    return s("a", { href: `#/runs/${encodeURIComponent(r.run_id)}` },
      s("circle", { cx: x(r.t), cy: y(r.execution_time), r: 5, class: "history-point",
        fill: COLOURS[o] || COLOURS.unknown, stroke: "#1d232a", "stroke-width": 0.5,
        "data-run": r.run_id, "data-outcome": o },
      s("title", {}, `run ${r.run_id} ${day(r.t)}: ${o}, ${took}`)));
  });
  return s("svg", { id: "duration-chart", width, height, viewBox: `0 0 ${width} ${height}` },
    grid, axis, line, points);
}
