// A project's saved jobs, as a dbt Cloud or Dagster user scans them: what each runs and
// when, its schedule and next fire, its last runs, and run now / pause / resume for a token
// whose role may (the API decides; actions.js draws the others disabled).
import { jobActions, me } from "./actions.js";
import { api, seg } from "./api.js";
import { h, link, pill, ready, show, sleep, table, when } from "./dom.js";
import { commandLine } from "./run_header.js";

const LAST_RUNS = 5;
// After a pause or resume is accepted, the jobs list is read again until it shows it.
const SETTLE_TRIES = 40;
const SETTLE_MS = 250;

const jobsOf = (project) => api(`/v1/projects/${seg(project)}/jobs?limit=500`);
const runsOf = (project, name) =>
  api(`/v1/projects/${seg(project)}/runs?job=${seg(name)}&limit=${LAST_RUNS}`);

function what(spec) {
  const triggers = [
    spec.after ? `after ${spec.after.job} (${spec.after.outcome})` : null,
    ...(spec.on_relation || []).map((r) => `on a write of ${r}`),
  ].filter(Boolean);
  return [h("code", {}, commandLine(spec.command)),
    spec.environment ? h("div", { class: "muted" }, `in ${spec.environment}`) : "",
    triggers.map((t) => h("div", { class: "muted" }, t))];
}

function schedule(s) {
  if (!s) return h("span", { class: "muted" }, "none");
  return [h("code", {}, s.cron), s.tz ? ` ${s.tz}` : "", " ", pill(s.state),
    h("div", { class: "muted" }, s.fires ? `fired ${s.fires}×`
      + `${s.coalesced ? `, ${s.coalesced} joined a run` : ""}, last ${when(s.last_fired_at)}`
      : "not fired yet")];
}

function nextFire(s) {
  if (!s) return "";
  if (s.state !== "active") return h("span", { class: "muted" }, s.state);
  return s.next_at ? when(s.next_at) : h("span", { class: "muted" }, "not known yet");
}

const lastRuns = (runs) => (runs.length
  ? runs.map((r) => h("a", { href: `#/runs/${seg(r.run_id)}`, class: "run-chip",
    title: `${r.run_id}: ${r.status}, ${r.trigger || "?"} ${when(r.requested_at)}` },
  pill(r.status)))
  : h("span", { class: "muted" }, "never run"));

export async function jobsPage(project, signal) {
  const [{ jobs }, who] = await Promise.all([jobsOf(project), me()]);
  const runs = await Promise.all(jobs.map((j) => runsOf(project, j.name)));

  // The job command was accepted: the runner records it, then its projection shows it.
  const changed = (name) => async (state) => {
    for (let tries = 0; tries < SETTLE_TRIES; tries++) {
      const now = (await jobsOf(project)).jobs.find((j) => j.name === name);
      if (now?.schedule?.state === state) return jobsPage(project, signal);
      await sleep(SETTLE_MS);
    }
    throw new Error(`sent; the jobs list does not show it ${state} yet: reload to see`);
  };

  show(signal, `${project} jobs`, [link("#/", "projects"), link(`#/projects/${seg(project)}`, project),
    h("span", {}, "jobs")],
    h("h1", {}, `${project}: jobs`),
    jobs.length ? table(["job", "command", "schedule", "next fire", "last runs", ""],
      jobs.map((j, i) => [
        [h("strong", {}, j.name),
          h("div", { class: "muted" }, `saved by ${j.saved_by} ${when(j.saved_at)}`)],
        what(j.spec), schedule(j.schedule), nextFire(j.schedule), lastRuns(runs[i].runs),
        h("span", { class: "toolbar" }, jobActions(project, j, who?.role, changed(j.name))),
      ]), { id: "jobs" }, (i) => ({ "data-job": jobs[i].name }))
      : h("p", { class: "muted" }, "no saved job: `jetdbt job save NAME --project ",
        project, " --command build`"));
  ready(signal);
}
