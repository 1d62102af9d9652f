// The projects a token may see: deployed version, last deploy (a failed one with its
// reason, so a project whose deploys all failed never reads as an empty row), last run.
import { api } from "./api.js";
import { h, link, pill, runLink, show, table, when } from "./dom.js";

const lastDeploy = (p) => p.last_deploy_status
  ? [pill(p.last_deploy_status), " ", when(p.last_deploy_at),
     p.last_deploy_status === "failed"
       ? h("pre", { class: "deploy-reason" }, p.last_deploy_reason || "no reason recorded")
       : ""]
  : "";

export async function projectsPage(signal) {
  const { projects } = await api("/v1/projects?limit=500");
  show(signal, "projects", [h("span", {}, "projects")], h("h1", {}, "Projects"),
    projects.length ? table(
      ["project", "deployed version", "deployed", "last deploy", "last run", "outcome", "finished"],
      projects.map((p) => [
        link(`#/projects/${p.project}`, p.project),
        p.version ? h("code", {}, p.version.slice(0, 19)) : h("span", { class: "muted" }, "none"),
        when(p.deployed_at), lastDeploy(p), p.last_run_id ? runLink(p.last_run_id) : "",
        p.last_run_status ? pill(p.last_run_status) : "", when(p.last_run_finished_at),
      ]), { id: "projects" }) : h("p", { class: "muted" }, "no project has been deployed or run yet"));
}
