// The run viewer: projects, a project's runs, jobs and webhooks, a run's live DAG, a node
// across runs, a relation. Plain DOM, hash routes, every data call with the bearer token
// kept in sessionStorage for this tab.
// This module routes; each page is a module of its own.
import { Unauthorized, drawingPage } from "./api.js";
import { h, view } from "./dom.js";
import { hooksPage } from "./page_hooks.js";
import { jobsPage } from "./page_jobs.js";
import { nodePage } from "./page_node.js";
import { projectPage } from "./page_project.js";
import { projectsPage } from "./page_projects.js";
import { relationPage } from "./page_relation.js";
import { runPage } from "./page_run.js";
import { askToken, keepTokens, token } from "./token.js";

let leaving = new AbortController();  // aborted when the page changes (its event stream)

async function route() {
  leaving.abort();
  leaving = new AbortController();
  const { signal } = leaving;
  drawingPage(signal);
  delete document.body.dataset.ready;
  delete document.body.dataset.runEnded;
  if (!token()) { askToken(); return; }
  const [path, query] = location.hash.replace(/^#/, "").split("?");
  const params = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  try {
    if (parts[0] === "projects" && parts[2] === "jobs") await jobsPage(parts[1], signal);
    else if (parts[0] === "projects" && parts[2] === "hooks") await hooksPage(parts[1], signal);
    else if (parts[0] === "projects" && parts[2] === "nodes" && parts[3]) {
      await nodePage(parts[1], parts.slice(3).join("/"), signal);
    } else if (parts[0] === "projects" && parts[1]) await projectPage(parts[1], params, signal);
    else if (parts[0] === "runs" && parts[1]) await runPage(parts[1], params, signal);
    else if (parts[0] === "relations" && parts[1]) await relationPage(parts.slice(1).join("/"), signal);
    else await projectsPage(signal);
  } catch (err) {
    if (signal.aborted) return;  // the page the tab has left (`Left`, or how it failed)
    if (err instanceof Unauthorized) { askToken(err.message); return; }
    view.replaceChildren(h("p", { class: "problem", id: "problem" }, err.message));
  }
}

keepTokens(route);
window.addEventListener("hashchange", route);
route();
