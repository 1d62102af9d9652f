// A project: its deployed version and its lineage, what each environment runs and its
// published state, its runs.
import { api, seg } from "./api.js";
import { h, link, pill, runLink, seconds, ready, show, stillOn, table, totals, when } from "./dom.js";
import { lineageSection } from "./lineage.js";

// The runs of one environment (`?env=NAME`), or of all; each run's environment links to its.
const runsOf = (project, env, offset = 0) =>
  `#/projects/${project}?${new URLSearchParams({ ...(env ? { env } : {}), offset })}`;
const envOf = (project, r) =>
  [link(runsOf(project, r.environment), r.environment), r.pr ? ` pr ${r.pr}` : ""];

export async function projectPage(project, params, signal) {
  const offset = Number(params.get("offset") || 0);
  const env = params.get("env") || "";
  const only = env ? `&environment=${encodeURIComponent(env)}` : "";
  const [runs, deploys, envs, versions] = await Promise.all([
    api(`/v1/projects/${seg(project)}/runs?limit=25&offset=${offset}${only}`),
    api(`/v1/projects/${seg(project)}/deploys?limit=1`),
    api(`/v1/projects/${seg(project)}/environments`),
    api(`/v1/projects/${seg(project)}/versions`),
  ]);
  const short = (v) => h("code", {}, (v || "").slice(0, 19) || "-");
  const latest = deploys.deploys[0];
  const prod = versions.versions.find((v) => v.slot === "prod");
  const pager = h("p", {},
    offset ? link(runsOf(project, env, Math.max(0, offset - 25)), "← newer") : "",
    " ", runs.next ? link(runsOf(project, env, runs.next.offset), "older →") : "");
  const lineage = lineageSection(project, params);
  show(signal, project, [link("#/", "projects"), h("span", {}, project)],
    h("h1", {}, project),
    h("p", { class: "toolbar", id: "project-nav" },
      link(`#/projects/${seg(project)}/jobs`, "jobs"),
      link(`#/projects/${seg(project)}/hooks`, "webhooks")),
    // What the default environment runs; the last deploy only before anything was promoted
    // (a refused promotion or a pull request's version is no project's version).
    h("p", {}, prod
      ? ["prod runs version ", short(prod.version),
         ` since ${when(prod.promoted_at)} by ${prod.promoted_by || "?"}`]
      : latest
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
    h("p", { id: "runs-filter" }, env
      ? ["environment ", h("code", {}, env), " · ", link(runsOf(project, ""), "all environments")]
      : h("span", { class: "muted" }, "all environments: pick one in the environment column")),
    table(["run", "status", "environment", "command", "job", "trigger", "outcomes", "duration",
      "requested by", "requested"],
      runs.runs.map((r) => [runLink(r.run_id), pill(r.status), envOf(project, r),
        h("code", {}, r.command?.label || ""), r.job, r.trigger, totals(r.totals),
        seconds(r.started_at, r.finished_at), r.requested_by || "", when(r.requested_at)]),
      { id: "runs" }),
    pager);
  const drawn = await lineage.draw();
  stillOn(signal);
  window.viewer = drawn;
  ready(signal);
}
