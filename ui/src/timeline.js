// A run's nodes on a time axis (dbt Cloud's model timing, Dagster's Gantt): one lane per
// dbt thread, a bar from each node's start to its end coloured by its outcome. Nodes dbt
// named no thread for are packed into the fewest lanes that keep their bars apart, which
// is how its threads ran them. One SVG element per node: 500 nodes draw in milliseconds.
import { COLOURS } from "./constants.js";
import { h } from "./dom.js";
import { s } from "./svg.js";

const LANE_PX = 16;
const AXIS_PX = 18;
const LABEL_PX = 120;

function lanesOf(nodes) {
  const named = new Map();
  const ends = [];  // the packed lanes: when each is free again
  const lane = new Map();
  for (const n of [...nodes].sort((a, b) => a.start - b.start)) {
    if (n.thread) {
      if (!named.has(n.thread)) named.set(n.thread, named.size);
      lane.set(n.unique_id, `t${named.get(n.thread)}`);
      continue;
    }
    let free = ends.findIndex((end) => end <= n.start);
    if (free < 0) free = ends.push(0) - 1;
    ends[free] = n.end;
    lane.set(n.unique_id, `p${free}`);
  }
  const names = [...[...named.keys()].map((t, i) => [`t${i}`, t]),
    ...ends.map((_, i) => [`p${i}`, `lane ${i + 1}`])];
  return { lane, names };
}

// `nodes` the run's node records; `outcomeOf(id)`; `onPick(id)` when a bar is clicked.
export function drawTimeline(container, nodes, outcomeOf, onPick, now = Date.now()) {
  // A node dbt skipped did no work: its "finish" is when the run recorded the skip.
  const endOf = (n, start) => {
    if (outcomeOf(n.unique_id) === "skipped") return start;
    return n.finished_at ? Date.parse(n.finished_at) : now;
  };
  const spans = nodes.filter((n) => n.started_at).map((n) => {
    const start = Date.parse(n.started_at);
    return { unique_id: n.unique_id, name: n.name || n.unique_id, thread: n.thread, start,
      end: endOf(n, start) };
  });
  if (!spans.length) {
    container.replaceChildren(h("p", { class: "muted" }, "no node has started"));
    return 0;
  }
  const t0 = Math.min(...spans.map((n) => n.start));
  const t1 = Math.max(...spans.map((n) => n.end), t0 + 1);
  const { lane, names } = lanesOf(spans);
  const row = new Map(names.map(([key], i) => [key, i]));
  const width = Math.max(400, container.clientWidth || 1000) - LABEL_PX - 10;
  const x = (t) => LABEL_PX + ((t - t0) / (t1 - t0)) * width;
  const height = AXIS_PX + names.length * LANE_PX;
  const ticks = [];
  const step = niceStep((t1 - t0) / 1000 / 8);
  for (let i = 0; i * step <= (t1 - t0) / 1000; i++) {
    const sec = Number((i * step).toFixed(1));
    ticks.push(s("line", { x1: x(t0 + sec * 1000), x2: x(t0 + sec * 1000), y1: AXIS_PX - 4,
      y2: height, stroke: "#e1e4e8" }),
    s("text", { x: x(t0 + sec * 1000) + 2, y: AXIS_PX - 6, "font-size": 10 }, `${sec} s`));
  }
  const bars = spans.map((n) => {
    const o = outcomeOf(n.unique_id);
    const seconds = ((n.end - n.start) / 1000).toFixed(2);
    return s("rect", { x: x(n.start), y: AXIS_PX + row.get(lane.get(n.unique_id)) * LANE_PX + 2,
      width: Math.max(1, x(n.end) - x(n.start)), height: LANE_PX - 4,
      fill: COLOURS[o] || COLOURS.unknown, stroke: "#7a8591", "stroke-width": 0.5,
      "data-node": n.unique_id, class: "bar" },
    s("title", {}, `${n.name}: ${o}, ${seconds} s${n.thread ? ` on ${n.thread}` : ""}`));
  });
  const labels = names.map(([, text], i) => s("text", { x: 2, y: AXIS_PX + i * LANE_PX + 12,
    "font-size": 11 }, text));
  const svg = s("svg", { width: LABEL_PX + width + 10, height, id: "timeline-svg" },
    ticks, labels, bars);
  svg.addEventListener("click", (e) => {
    const id = e.target.getAttribute?.("data-node");
    if (id) onPick(id);
  });
  container.replaceChildren(svg);
  return spans.length;
}

export function niceStep(raw) {
  for (const step of [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600]) {
    if (step >= raw) return step;
  }
  return 7200;
}
