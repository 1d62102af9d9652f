// The projects a token may see: deployed version, last run and its outcome.
import { api } from "./api.js";
import { h, link, pill, runLink, show, table, when } from "./dom.js";

export async function projectsPage() {
  const { projects } = await api("/v1/projects?limit=500");
  show("projects", [h("span", {}, "projects")], h("h1", {}, "Projects"),
    projects.length ? table(
      ["project", "deployed version", "deployed", "last run", "outcome", "finished"],
      projects.map((p) => [
        link(`#/projects/${p.project}`, p.project), h("code", {}, (p.version || "").slice(0, 19)),
        when(p.deployed_at), p.last_run_id ? runLink(p.last_run_id) : "",
        p.last_run_status ? pill(p.last_run_status) : "", when(p.last_run_finished_at),
      ])) : h("p", { class: "muted" }, "no project has been deployed or run yet"));
}
