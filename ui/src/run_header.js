// A run's header: what was asked (command, selection, version, target, trigger or job),
// by whom, where it stands (the queue's reason and place while it waits), its counts.
import { h, pill, seconds, totals, when } from "./dom.js";

// The command as dbt would be called with it, from the command as submitted.
export function commandLine(command) {
  if (!command) return "";
  if (command.label === "retry") return `retry ${command.dbt_retry_job}`;
  const parts = [command.label];
  if (command.select?.length) parts.push("--select", ...command.select);
  if (command.exclude?.length) parts.push("--exclude", ...command.exclude);
  if (command.selector) parts.push("--selector", command.selector);
  if (command.full_refresh) parts.push("--full-refresh");
  if (command.vars && Object.keys(command.vars).length) {
    parts.push("--vars", JSON.stringify(command.vars));
  }
  return parts.join(" ");
}

const short = (digest) => (digest?.length > 19 ? `${digest.slice(0, 19)}…` : digest || "");

// A field another part of jetdbt may add to a run (its saved job, its trigger): read from
// the run or its command, whichever has it, shown only when present.
const named = (run, field) => {
  const value = run[field] ?? run.command?.[field];
  if (value == null || value === "") return null;
  return typeof value === "object" ? JSON.stringify(value) : String(value);
};

function facts(run) {
  const result = run.result || {};
  const where = [result.warehouse, result.target].filter(Boolean).join(" / ");
  const rows = [
    ["command", h("code", {}, commandLine(run.command))],
    ["selection", [...(run.command?.select || []), ...(run.command?.exclude || [])
      .map((e) => `not ${e}`)].join(", ") || "everything"],
    ["version", run.version ? h("code", { title: run.version }, short(run.version)) : "not started"],
    ["target", where],
    ["job", named(run, "job")],
    ["trigger", named(run, "trigger")],
    ["requested", `${run.requested_by || "?"}${run.team ? ` (${run.team})` : ""}`
      + ` ${when(run.requested_at)}${run.door ? ` via ${run.door}` : ""}`],
    ["duration", seconds(run.started_at, run.finished_at)],
    ["outcomes", totals(run.totals || result.totals)],
  ];
  if (run.status === "queued") {
    rows.push(["queued", h("span", { id: "queue" }, run.queue_reason || "waiting to start",
      run.queue_position ? ` · place ${run.queue_position} in its queue` : "",
      run.queued_at ? ` · since ${when(run.queued_at)}` : "")]);
  } else if (run.queued_seconds) {
    rows.push(["waited", `${run.queued_seconds.toFixed(1)} s in the queue`]);
  }
  if (result.cancelled_by) rows.push(["cancelled by", result.cancelled_by]);
  return rows.filter(([, v]) => v !== null && v !== "");
}

export function runHeader(run, actions) {
  return [
    h("h1", {}, "run ", run.run_id, " ", pill(run.status)),
    h("dl", { id: "run-facts", class: "facts" },
      facts(run).flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    h("p", { class: "toolbar", id: "actions" }, actions),
  ];
}
