// A project's webhooks, each with its latest delivery attempts and why each failed (the
// notifier's own words: `answered 500`, `no HTTP answer`, ...; never what a receiver sent).
// No secret reaches this page: the API never serves one after the add.
import { api, seg } from "./api.js";
import { h, link, pill, runLink, ready, show, table, totals, when } from "./dom.js";

const ATTEMPTS = 25;

const deliveriesOf = (project, hook) =>
  api(`/v1/projects/${seg(project)}/hooks/${seg(hook)}/deliveries?limit=${ATTEMPTS}`);

// Each delivery as its latest attempt left it (attempts come newest first).
function deliveryStates(attempts) {
  const latest = new Map();
  for (const d of attempts) if (!latest.has(d.delivery_id)) latest.set(d.delivery_id, d.state);
  const counts = {};
  for (const state of latest.values()) counts[state] = (counts[state] || 0) + 1;
  return { deliveries: latest.size, counts };
}

function summary(attempts, more) {
  if (!attempts.length) return "none yet";
  const { deliveries, counts } = deliveryStates(attempts);
  const noun = deliveries === 1 ? "delivery" : "deliveries";
  return `${deliveries} ${noun}: ${totals(counts)}`
    + (more ? ` (of its latest ${ATTEMPTS} attempts)` : "");
}

function hookSection(hook, { deliveries, next }) {
  const answer = (d) => (d.status ? `HTTP ${d.status}` : h("span", { class: "muted" }, "none"));
  return h("section", { class: "hook", id: `hook-${hook.name}` },
    h("h2", {}, hook.name),
    h("dl", { class: "facts" },
      h("dt", {}, "posts to"), h("dd", {}, h("code", {}, hook.url)),
      h("dt", {}, "on"), h("dd", {}, hook.on.join(", ")),
      h("dt", {}, "runs of"), h("dd", {}, hook.job ? `job ${hook.job}` : "every run"),
      h("dt", {}, "saved"), h("dd", {}, `by ${hook.saved_by} ${when(hook.saved_at)}`),
      h("dt", {}, "deliveries"),
      h("dd", { id: `hook-${hook.name}-states` }, summary(deliveries, next))),
    deliveries.length ? table(["at", "event", "run", "attempt", "answer", "state", "why"],
      deliveries.map((d) => [when(d.at), d.event, runLink(d.run_id), d.attempt, answer(d),
        pill(d.state), d.error ? h("span", { class: "problem" }, d.error) : ""]),
      { class: "deliveries" }, (i) => ({ "data-state": deliveries[i].state })) : "");
}

export async function hooksPage(project, signal) {
  const { hooks } = await api(`/v1/projects/${seg(project)}/hooks?limit=500`);
  const attempts = await Promise.all(hooks.map((k) => deliveriesOf(project, k.name)));
  show(signal, `${project} webhooks`, [link("#/", "projects"),
    link(`#/projects/${seg(project)}`, project), h("span", {}, "webhooks")],
    h("h1", {}, `${project}: webhooks`),
    ...(hooks.length ? hooks.map((k, i) => hookSection(k, attempts[i]))
      : [h("p", { class: "muted" }, "no webhook: `jetdbt hook add NAME --project ", project,
        " --url URL --on failure`")]));
  ready(signal);
}
