// cytoscape, a module of its own: index.html preloads it beside the page's script, so a
// run page reads its run while cytoscape loads, and other pages never run it.
export { default } from "cytoscape";
