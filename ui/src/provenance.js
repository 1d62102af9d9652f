// Where a drawn graph came from: the deployed version's graph as of its deploy, or the
// graph a run parsed for itself (the reference's provenance label).
import { h, when } from "./dom.js";

export function provenance(g) {
  const version = (g.version || "").slice(0, 19);
  if (g.scope === "version") {
    return h("span", { class: "provenance" }, `graph as of deploy of version ${version}…,`
      + ` stored ${when(g.ingested_at)}${g.fallback ? " (the run parsed no graph of its own)" : ""}`);
  }
  return h("span", { class: "provenance" }, `graph parsed at ${when(g.ingested_at)}`
    + `${g.run_id ? ` by run ${g.run_id}` : ""} (version ${version}…)`);
}
