// How a run's events change what its page knows: `run`, its record, and `state`, each
// node's record by unique_id. Drawing is the page's; this is only the record kept current.

// A node event: the unique_id it touched, or null for any other event.
export function applyNodeEvent(state, data) {
  if (data.type === "node.started.v1") {
    state.set(data.unique_id, { ...(state.get(data.unique_id) || {}), unique_id: data.unique_id,
      name: data.name, resource_type: data.resource_type,
      status: "running", outcome: null, started_at: data.started_at || data.at });
    return data.unique_id;
  }
  if (data.type === "node.finished.v1") {
    state.set(data.node.unique_id, data.node);
    return data.node.unique_id;
  }
  return null;
}

// A run event: "started", "queued", "refused" or "finished" (its end), else null.
export function applyRunEvent(run, state, data) {
  switch (data.type) {
    case "run.started.v1":
      Object.assign(run, { status: "running", started_at: data.at, version: data.version,
        queue_position: null });
      return "started";
    case "run.queued.v1":
      Object.assign(run, { status: "queued", queue_reason: data.reason,
        queue_position: data.position, queued_at: run.queued_at || data.at });
      return "queued";
    case "run.refused.v1":
      Object.assign(run, { status: "refused", finished_at: data.at, refused_reason: data.reason });
      return "refused";
    case "run.finished.v1":
    case "run.finished.v2":
      Object.assign(run, { status: data.result.status, finished_at: data.at,
        totals: data.result.totals, result: data.result });
      for (const n of data.result.nodes) state.set(n.unique_id, n);
      return "finished";
    default:
      return null;
  }
}
