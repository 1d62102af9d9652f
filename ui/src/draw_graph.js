// Drawing a folded graph with cytoscape: dagre for a small one, the API's columns for the
// whole of a large one, breadth-first layering for a part of one.
import {
  COLUMN_GAP, DAGRE_UP_TO, DARK_TEXT, EDGES_ON_ZOOM_ABOVE, FONT_PX, MIN_READABLE_PX, ROW_GAP,
} from "./constants.js";

// A node's fill says its outcome (its data's `fill`, one rule for every outcome: each rule
// is matched against every node). Past DAGRE_UP_TO nodes the edges are straight lines
// without arrows (haystack: far cheaper to lay out and draw); left to right says which
// way they go.
function graphStyle(small) {
  return [
    { selector: "node", style: {
      shape: "round-rectangle", width: 150, height: 30, "border-width": 1,
      "border-color": "#7a8591", "background-color": "data(fill)",
    } },
    { selector: "node[status = 'not_selected']", style: { "border-style": "dashed" } },
    // A source's freshness chip (freshness.js), over the node's top right corner.
    { selector: "node[chip]", style: {
      "background-image": "data(chip)", "background-width": "data(chipWidth)",
      "background-height": 14, "background-fit": "none", "background-clip": "none",
      "background-image-containment": "over", "background-position-x": "100%",
      "background-position-y": -9, "bounds-expansion": 12,
    } },
    { selector: "node:selected", style: { "border-width": 3, "border-color": "#1d232a" } },
    { selector: "edge", style: small
      ? { width: 1, "curve-style": "bezier", "target-arrow-shape": "triangle",
          "line-color": "#aab2bb", "target-arrow-color": "#aab2bb" }
      : { width: 1, "curve-style": "haystack", "haystack-radius": 0, "line-color": "#aab2bb" } },
  ];
}
// Each node's name and test badge, after graphStyle's rules.
const LABEL_STYLE = [
  { selector: "node", style: {
    label: "data(label)", "text-valign": "center", "font-size": FONT_PX,
    "min-zoomed-font-size": MIN_READABLE_PX, color: "#fff",
  } },
  ...[...DARK_TEXT].map((status) => ({
    selector: `node[status = '${status}']`, style: { color: "#1d232a" },
  })),
];

export const library = () => import("./graph.js");
const FIT_PADDING = 30;  // cytoscape's fit leaves this much around a graph
// cytoscape-dagre, registered with cytoscape the first time a graph small enough is drawn.
let dagreUsed = null;
function useDagre(cytoscape) {
  dagreUsed ??= import("./dagre.js").then((m) => cytoscape.use(m.default));
  return dagreUsed;
}

// A cytoscape graph of `ids` (drawn node ids of `folded`) in `container`; each node's
// data is `data(id)` (its label, status and fill); `onTap(id)` when a node is clicked.
export async function drawGraph(container, folded, ids, data, onTap) {
  const small = ids.length <= DAGRE_UP_TO;
  // The whole of a large graph goes in the columns the API placed its nodes in; a part
  // of one (a focus) is laid out here.
  const placed = ids.length === folded.drawn.size
    && ids.every((id) => folded.drawn.get(id).layer != null);
  const cytoscape = (await library()).default;
  if (small) await useDagre(cytoscape);
  const kept = new Set(ids);
  const edges = folded.edges.filter((e) => kept.has(e.parent) && kept.has(e.child))
    .map((e) => ({ data: { id: `${e.parent}>${e.child}`, source: e.parent, target: e.child } }));
  // Only where the API placed the nodes: a layout here needs the edges.
  const edgesLater = placed && ids.length > EDGES_ON_ZOOM_ABOVE;
  const cy = cytoscape({
    container,
    elements: [...ids.map((id) => ({ data: { id, ...data(id) } })), ...(edgesLater ? [] : edges)],
    style: [...graphStyle(small), ...(small ? LABEL_STYLE : [])],
    layout: small
      ? { name: "dagre", rankDir: "LR", nodeSep: 8, rankSep: 60, animate: false }
      : placed ? { name: "preset", positions: (node) => {
        const n = folded.drawn.get(node.id());
        return { x: n.layer * COLUMN_GAP, y: n.row * ROW_GAP };
      } }
      : { name: "breadthfirst", directed: true, animate: false, spacingFactor: 0.5,
          transform: (node, p) => ({ x: p.y * 4, y: p.x / 4 }) },
    hideEdgesOnViewport: !small,
    textureOnViewport: !small,
    pixelRatio: small ? "auto" : 1,
    wheelSensitivity: 0.3,
  });
  cy.on("tap", "node", (e) => onTap(e.target.id()));
  cy.ready(() => toTop(cy));
  if (!small) {
    // Laid out whole, a large graph is too small to read: its labels would cost a fifth
    // of the first paint and show nothing, so they are styled once a zoom shows them (and
    // a very large graph's edges added then).
    const labelWhenReadable = () => {
      if (cy.zoom() * FONT_PX < MIN_READABLE_PX) return;
      cy.off("zoom", labelWhenReadable);
      if (edgesLater) cy.add(edges);
      LABEL_STYLE.reduce((sheet, rule) => sheet.selector(rule.selector).style(rule.style),
        cy.style()).update();
    };
    cy.on("zoom", labelWhenReadable);
    labelWhenReadable();
  }
  return cy;
}

// A graph wider than its box is fit to the box's width and centred in its height: drawn
// at the top instead, a small graph starts above the fold of a laptop's screen.
function toTop(cy) {
  const top = cy.elements().renderedBoundingBox().y1;
  if (top > FIT_PADDING) cy.panBy({ x: 0, y: FIT_PADDING - top });
}

// Where a node of `cy` is on the page (for a test's click).
export function pagePosition(cy, container, id) {
  const box = container.getBoundingClientRect();
  const p = cy.getElementById(id).renderedPosition();
  return { x: box.left + p.x, y: box.top + p.y };
}
