// The viewer's fixed values: what is drawn, when a graph is too large to draw whole, and
// the colour of each outcome.
export const TOKEN_KEY = "jetdbt.token";
export const SHOWN = new Set(["model", "seed", "snapshot"]);
export const TESTS = new Set(["test", "unit_test"]);
// Past this many nodes a run page asks for a focus (a node and its +n neighbours).
export const FOCUS_ABOVE = 1500;
// dagre orders each rank to cut crossings, which costs seconds past a few hundred nodes.
// The whole of a larger graph is drawn in columns, one per topological generation (the
// API places each node), this far apart in cytoscape's units (a node is 150 by 30); a
// part of one (a focus) gets cytoscape's breadth-first layering, turned left to right.
export const DAGRE_UP_TO = 200;
export const COLUMN_GAP = 400;
export const ROW_GAP = 40;
// While a run goes, a graph larger than that is redrawn at most this often.
export const LARGE_REDRAW_MS = 250;
export const DARK_TEXT = new Set(["pending", "not_selected", "warned", "cancelled"]);
// A label is drawn only where it is at least MIN_READABLE_PX high on screen.
export const FONT_PX = 11;
export const MIN_READABLE_PX = 7;
export const COLOURS = {
  pending: "#e8edf3", running: "#2f6fde", passed: "#2e9d4f", warned: "#e0a800",
  failed: "#d93636", skipped: "#9a9a9a", no_op: "#b5c4b1", unknown: "#b0b0b0",
  not_selected: "#ffffff", cancelled: "#d9d2c5",
};
// Roles in order: each may do what the ones before it may (the API's rule).
export const ROLES = ["viewer", "runner", "deployer", "admin"];
// A node's history: its outcome and duration in this many of its project's latest runs.
export const HISTORY_RUNS = 20;
// A node's own page: its history over this many runs (the API's most).
export const HISTORY_PAGE_RUNS = 100;
