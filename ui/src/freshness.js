// A source's last freshness check (the graph API's `freshness`): its chip on the graph, a
// small badge coloured by dbt's status with the data's age, and its rows in the node panel.
import { COLOURS } from "./constants.js";
import { runLink, when } from "./dom.js";

const STATUS_COLOUR = { pass: COLOURS.passed, warn: COLOURS.warned };
const colour = (status) => STATUS_COLOUR[status] || COLOURS.failed; // error, runtime error

// An age in seconds, in its largest whole unit: 45s, 12m, 5h, 3d, 7y.
export function age(seconds) {
  if (seconds == null) return "";
  const units = [["y", 31536000], ["d", 86400], ["h", 3600], ["m", 60]];
  const [unit, size] = units.find(([, s]) => seconds >= s) || ["s", 1];
  return `${Math.floor(seconds / size)}${unit}`;
}

export const chipText = (f) => [f.status, age(f.age_seconds)].filter(Boolean).join(" ");

// The chip as an SVG image cytoscape draws over a node's corner, in the node's data that
// draw_graph.js styles (none: no check yet).
export function chipData(f) {
  if (!f) return {};
  const text = chipText(f);
  const width = 8 + 6.5 * text.length;
  const dark = f.status === "warn" ? "#1d232a" : "#fff";
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="14">`
    + `<rect width="${width}" height="14" rx="7" fill="${colour(f.status)}"/>`
    + `<text x="${width / 2}" y="10.5" font-size="10" font-family="sans-serif" fill="${dark}"`
    + ` text-anchor="middle">${text}</text></svg>`;
  return { chip: `data:image/svg+xml;utf8,${encodeURIComponent(svg)}`, chipWidth: width };
}

const threshold = (t) => (t ? `${t.count} ${t.period}` : "not set");

// The panel's rows of a source's last check.
export function freshnessRows(f) {
  return [
    ["status", `${f.status} (${f.outcome})`],
    ["newest loaded_at", when(f.max_loaded_at)],
    ["age when checked", age(f.age_seconds)],
    ["warn after", threshold(f.warn_after)], ["error after", threshold(f.error_after)],
    ["checked", when(f.snapshotted_at)], ["by run", runLink(f.run_id)],
  ];
}
