// The viewer's fixed values: what is drawn, when a graph is too large to draw whole, and
// the colour of each outcome.
export const TOKEN_KEY = "jetdbt.token";
export const SHOWN = new Set(["model", "seed", "snapshot"]);
export const TESTS = new Set(["test", "unit_test"]);
// Past this many drawn nodes a run page asks for a focus (a node and its +n neighbours):
// a graph page's most (the API's NODES_PER_PAGE); a 5,000-model run is drawn whole.
export const FOCUS_ABOVE = 10000;
// dagre orders each rank to cut crossings, which costs seconds past a few hundred nodes.
// The whole of a larger graph is drawn in columns, one per topological generation (the
// API places each node), this far apart in cytoscape's units (a node is 150 by 30); a
// part of one (a focus) gets cytoscape's breadth-first layering, turned left to right.
export const DAGRE_UP_TO = 200;
// Past this many drawn nodes the whole graph is drawn without its edges until a zoom makes
// its labels readable (then they are added): at 5,000 models its 10,000 edges cost the
// browser 0.7 s to make and over 100 ms a frame, a blur of lines at that scale. Such a
// graph is restyled at most every HUGE_REDRAW_MS while a run goes.
export const EDGES_ON_ZOOM_ABOVE = 2000;
export const HUGE_REDRAW_MS = 1000;
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
