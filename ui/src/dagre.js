// dagre lays out graphs of up to DAGRE_UP_TO nodes (app.js): a module of its own, loaded
// only for them, since evaluating it costs a larger graph's page as much as cytoscape.
export { default } from "cytoscape-dagre";
