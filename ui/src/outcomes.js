// What a node is drawn as in a run, and a model's test badge: one rule for each, so the
// graph, the badges, the failure panel and the timeline never disagree.

// `node` is the run's record of it (none: dbt never reached it). A node still running
// when its run has ended did not finish: drawn as cancelled (its run was) or unknown,
// never as running; so is one the runner recorded as stopped by a cancel.
export function drawnOutcome(node, run) {
  const ended = Boolean(run.finished_at);
  if (!node) return ended ? "not_selected" : "pending";
  if (node.status === "cancelled") return "cancelled";
  if (node.status === "running") {
    if (!ended) return "running";
    return run.status === "cancelled" ? "cancelled" : "unknown";
  }
  return node.outcome || node.status;
}

// A mark per outcome a test can have; a test not run (pending, not selected, running,
// cancelled) gets none, so `✓` only ever counts tests that passed.
const MARKS = [["passed", "✓"], ["warned", "⚠"], ["failed", "✗"], ["skipped", "⊘"]];

export function badge(outcomes) {
  const counts = new Map();
  for (const o of outcomes) counts.set(o, (counts.get(o) || 0) + 1);
  return MARKS.filter(([o]) => counts.get(o)).map(([o, mark]) => `${mark}${counts.get(o)}`)
    .join(" ");
}
