// Talking to the API: every call with the tab's bearer token, a 401 as Unauthorized (the
// page then asks for a token), any other refusal as an Error carrying the status.
import { Left } from "./dom.js";
import { token } from "./token.js";

export class Unauthorized extends Error {}

// The page being drawn. The router gives each its own signal and aborts it on the next
// route, so a slow answer to the page before never replaces the page the tab is on.
let drawing = new AbortController().signal;
export function drawingPage(signal) { drawing = signal; }

function headers(extra = {}) {
  return { Authorization: `Bearer ${token()}`, ...extra };
}

// A value from the URL or an answer, as one path segment: "../" or "?" in a run id read
// from the location must not reach another route with the viewer's token.
export const seg = encodeURIComponent;

// A read belongs to the page that asked; a command (`lasting`) is sent whatever the tab does.
export async function api(path, { lasting = false, ...options } = {}) {
  const signal = lasting ? undefined : drawing;
  let resp, body;
  try {
    resp = await fetch(path, { ...options, signal, headers: headers(options.headers) });
    if (resp.status === 401) throw new Unauthorized((await resp.json()).error);
    body = resp.headers.get("content-type")?.includes("json") ? await resp.json() : null;
  } catch (err) {
    throw signal?.aborted ? new Left(path) : err;
  }
  if (signal?.aborted) throw new Left(path);
  if (!resp.ok) {
    const err = new Error(body?.error || `${resp.status} ${resp.statusText}`);
    err.status = resp.status;
    throw err;
  }
  return body;
}

// A JSON POST: a command the API publishes as the token's principal.
export function post(path, body = {}) {
  return api(path, { lasting: true, method: "POST", body: JSON.stringify(body),
    headers: { "Content-Type": "application/json" } });
}

// The run's events, read by follow.js in a worker of its own and posted here in order.
// Each gets a user-timing mark at the time it reached the browser, its detail saying when
// this page handled it: bench/bench_viewer.py reads both.
export function follow(runId, onEvent, signal) {
  if (signal.aborted) return Promise.reject(new Left());
  const worker = new Worker("follow.js");
  signal.addEventListener("abort", () => worker.terminate());
  const since = (epochMs) => epochMs - performance.timeOrigin;
  return new Promise((ended, refused) => {
    worker.onmessage = ({ data }) => {
      if (data.opened) performance.mark("jetdbt:stream-open", { startTime: since(data.opened) });
      for (const message of data.events || []) {
        const { type, unique_id, node } = message.data;
        performance.mark("jetdbt:event", { startTime: since(message.arrived), detail: {
          type, unique_id: unique_id || node?.unique_id, seq: message.id,
          handled: performance.timeOrigin + performance.now() } });
        onEvent(message);
      }
      if (data.ended || data.refused) worker.terminate();
      if (data.ended) ended();
      if (data.refused) refused(new Unauthorized(data.refused));
    };
    worker.postMessage({ runId, token: token() });
  });
}
