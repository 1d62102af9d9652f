// dbt's node selection, the part a focus needs, over a folded graph's drawn nodes: a
// name, a unique id or package.name (`*` matches any run of characters), the methods
// tag:, resource_type:, package: and config.materialized:, the graph operators `+`,
// `n+` and `@`; words separated by spaces are a union, by commas an intersection.
import { adjacency, walk } from "./dag.js";

const glob = (value) => new RegExp(
  `^${value.split("*").map((p) => p.replace(/[.?^${}()|[\]\\/+]/g, "\\$&")).join(".*")}$`);

function matches(node, method, value) {
  const like = glob(value);
  switch (method) {
    case "tag": return (node.tags || []).some((t) => like.test(t));
    case "resource_type": return like.test(node.resource_type);
    case "package": return like.test(node.package);
    case "config.materialized": return like.test(node.materialized || "");
    default: return like.test(node.name) || like.test(node.unique_id)
      || like.test(`${node.package}.${node.name}`);
  }
}

const METHODS = new Set(["tag", "resource_type", "package", "config.materialized"]);
const ATOM = /^(@)?(?:(\d*)\+)?(.*?)(?:\+(\d*))?$/;

function atom(folded, links, text) {
  const [, at, upDepth, body, downDepth] = ATOM.exec(text);
  const colon = body.indexOf(":");
  const method = colon > 0 && METHODS.has(body.slice(0, colon)) ? body.slice(0, colon) : null;
  const value = method ? body.slice(colon + 1) : body;
  if (!value) return new Set();
  const base = [...folded.drawn.values()].filter((n) => matches(n, method, value))
    .map((n) => n.unique_id);
  const depth = (d) => (d === "" ? Infinity : Number(d));
  let out = new Set(base);
  if (upDepth !== undefined) out = new Set([...out, ...walk(base, links.up, depth(upDepth))]);
  if (downDepth !== undefined || at) {
    const below = walk(base, links.down, at ? Infinity : depth(downDepth));
    out = new Set([...out, ...below]);
    if (at) out = new Set([...out, ...walk([...below], links.up, Infinity)]);
  }
  return out;
}

export function selectNodes(folded, text) {
  const links = adjacency(folded.edges);
  const union = new Set();
  for (const word of text.trim().split(/\s+/).filter(Boolean)) {
    const parts = word.split(",").filter(Boolean).map((p) => atom(folded, links, p));
    if (!parts.length) continue;
    for (const id of parts[0]) if (parts.every((p) => p.has(id))) union.add(id);
  }
  return union;
}

// A focus on one node by its name or id (no operator, method, glob or list): the page
// draws it with its neighbours `depth` steps away, not only itself.
export const namesOneNode = (text) => /^[\w.-]+$/.test(text.trim());
