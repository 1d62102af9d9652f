// A project: its deployed version and its lineage, what each environment runs and its
// published state, its runs.
import { api, seg } from "./api.js";
import { h, link, pill, runLink, seconds, show, table, totals, when } from "./dom.js";
import { lineageSection } from "./lineage.js";

export async function projectPage(project, params) {
  const offset = Number(params.get("offset") || 0);
  const [runs, deploys, envs, versions] = await Promise.all([
    api(`/v1/projects/${seg(project)}/runs?limit=25&offset=${offset}`),
    api(`/v1/projects/${seg(project)}/deploys?limit=1`),
    api(`/v1/projects/${seg(project)}/environments`),
    api(`/v1/projects/${seg(project)}/versions`),
  ]);
  const short = (v) => h("code", {}, (v || "").slice(0, 19) || "-");
  const latest = deploys.deploys[0];
  const pager = h("p", {},
    offset ? link(`#/projects/${project}?offset=${Math.max(0, offset - 25)}`, "← newer") : "",
    " ", runs.next ? link(`#/projects/${project}?offset=${runs.next.offset}`, "older →") : "");
  const lineage = lineageSection(project, params);
  show(project, [link("#/", "projects"), h("span", {}, project)],
    h("h1", {}, project),
    h("p", {}, latest
      ? ["deployed version ", h("code", {}, (latest.version || "").slice(0, 19)), " ",
         pill(latest.status), ` ${when(latest.at)} by ${latest.requested_by || "?"}`]
      : "not deployed"),
    ...lineage.elements,
    h("h2", {}, "Environments"),
    versions.versions.length ? table(["environment", "runs version", "before", "promoted by", "at"],
      versions.versions.map((v) => [v.slot, short(v.version), short(v.previous),
        v.promoted_by || "?", when(v.promoted_at)])) : h("p", { class: "muted" }, "nothing promoted yet"),
    envs.environments.length ? table(["warehouse", "target", "schema", "published by", "at"],
      envs.environments.map((e) => [e.warehouse, e.target, e.schema, runLink(e.run_id),
        when(e.published_at)])) : h("p", { class: "muted" }, "no published state"),
    h("h2", {}, "Runs"),
    table(["run", "status", "outcomes", "duration", "requested by", "requested"],
      runs.runs.map((r) => [runLink(r.run_id), pill(r.status), totals(r.totals),
        seconds(r.started_at, r.finished_at), r.requested_by || "", when(r.requested_at)])),
    pager);
  window.viewer = await lineage.draw();
  document.body.dataset.ready = "1";
}
