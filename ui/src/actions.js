// What a person may start from the viewer: each a command through the API with the tab's
// token. A button the token's role may not use is drawn disabled, naming the role the API
// would ask for; any refusal the API sends is shown beside its button.
import { api, post, seg } from "./api.js";
import { ROLES } from "./constants.js";
import { h } from "./dom.js";

// Every command the viewer sends is a POST, which the API lets a runner send.
const NEEDS = "runner";

let whoami = null;
// The token's principal and role, read once per tab (null when the API would not say).
export const me = () => (whoami ??= api("/v1/whoami", { lasting: true }).catch(() => null));
export const forgetMe = () => { whoami = null; };

const allowed = (role) => ROLES.indexOf(role) >= ROLES.indexOf(NEEDS);

function button(id, text, role, send) {
  const problem = h("span", { class: "problem", id: `${id}-problem` });
  const el = h("button", { type: "button", id }, text);
  if (!allowed(role)) {
    el.disabled = true;
    el.title = `needs role ${NEEDS}; this token has ${role || "none"}`;
  }
  el.addEventListener("click", async () => {
    el.disabled = true;
    problem.textContent = "";
    try {
      await send();
    } catch (err) {
      problem.textContent = err.message;
      el.disabled = false;
    }
  });
  return h("span", {}, el, " ", problem);
}

async function startRun(project, body, path = `/v1/projects/${seg(project)}/runs`) {
  const { run_id } = await post(path, body);
  location.hash = `#/runs/${seg(run_id)}`;
}

const short = (v) => (v ? v.slice(0, 19) : "?");

// A run's actions: cancel while it goes; once it ended, run it again with the same
// arguments, or resume it from what failed (on the version it ran).
export function runActions(run, role) {
  const live = ["requested", "queued", "running"].includes(run.status);
  if (live) {
    return [button("cancel", "cancel", role, () => post(`/v1/runs/${seg(run.run_id)}/cancel`))];
  }
  const out = [];
  if (run.command && run.command.label !== "retry") {
    const args = run.result?.invocation_args?.args || {};
    out.push(button("run-again", "run again with the same arguments", role,
      () => startRun(run.project, { command: run.command, args })));
  }
  if (["failed", "cancelled", "error"].includes(run.status)) {
    out.push(button("retry", `resume from failure (version ${short(run.version)})`, role,
      () => startRun(run.project, { command: { label: "retry", dbt_retry_job: run.run_id } })));
  }
  return out;
}

// A graph node's action: build it and everything downstream of it (`--select name+`).
export function nodeActions(project, node, role) {
  if (!node?.name) return [];
  return [button("run-children", `run ${node.name} and its children`, role,
    () => startRun(project, { command: { label: "build", select: [`${node.name}+`] } }))];
}

// A saved job's actions: run it now; pause its schedule while active, resume it while
// paused (`changed(state)` once the job command is accepted: the page reads it back).
export function jobActions(project, job, role, changed) {
  const path = `/v1/projects/${seg(project)}/jobs`;
  const out = [button(`run-now-${job.name}`, "run now", role,
    () => startRun(project, {}, `${path}/${seg(job.name)}/runs`))];
  const state = job.schedule?.state;
  const next = { active: "pause", paused: "resume" }[state];
  if (next) {
    out.push(button(`${next}-${job.name}`, next, role, async () => {
      await post(path, { action: next, name: job.name });
      await changed(next === "pause" ? "paused" : "active");
    }));
  }
  return out;
}
