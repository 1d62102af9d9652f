// One relation across projects: who owns it, what it reads, who reads it, what built it.
import { api, seg } from "./api.js";
import { h, historyLink, link, pill, relationLink, runLink, show, table, when } from "./dom.js";

export async function relationPage(key, signal) {
  const rel = await api(`/v1/relations/${seg(key)}`);
  // Where each owning project's runs built it, as far as its latest runs tell.
  const builtIn = (project) => [...new Set(rel.runs.filter((r) => r.project === project)
    .map((r) => r.environment))].join(", ");
  const owners = rel.producers.map((p) => (p.kind === "dbt"
    ? [link(`#/projects/${p.project}`, p.project), " ", h("code", {}, p.unique_id), " ",
       historyLink(p.project, p.unique_id, "its history"),
       builtIn(p.project) ? ` (built in ${builtIn(p.project)})` : ""]
    : [`declared by ${p.producer}`]));
  const writers = new Set(rel.producers.map((p) => p.project || p.producer)).size;
  const shared = writers > 1 ? h("p", { id: "relation-shared", class: "warn" },
    `${writers} writers: each one's build or write replaces the others'`) : "";
  const other = (r) => (r.relation ? relationLink(r.relation) : h("code", {}, r.unique_id));
  show(signal, key, [link("#/", "projects"), h("span", {}, key)],
    h("h1", {}, key),
    h("h2", {}, "Owned by"), owners.length ? h("ul", {}, owners.map((o) => h("li", {}, o)))
      : h("p", { class: "muted" }, "no project owns it"), shared,
    h("h2", {}, "Upstream"), table(["project", "node", "relation"],
      rel.upstream.map((u) => [u.project, `${u.resource_type} ${u.name}`, other(u)])),
    h("h2", {}, "Downstream"), table(["project", "node", "relation"],
      rel.readers.map((r) => [r.project, `${r.resource_type} ${r.name}`, other(r)])),
    h("h2", {}, "Runs that built it"),
    table(["run", "project", "environment", "node", "outcome", "finished"],
      rel.runs.map((r) => [runLink(r.run_id), r.project, r.environment + (r.pr ? ` pr ${r.pr}` : ""),
        r.unique_id, pill(r.outcome || r.status), when(r.finished_at)]), { id: "relation-runs" }),
    h("h2", {}, "Declared writes"), table(["producer", "status", "rows", "written", "refused"],
      rel.writes.map((w) => [w.producer, w.status, w.row_count ?? "", when(w.written_at),
        w.refused_reason || ""])));
}
