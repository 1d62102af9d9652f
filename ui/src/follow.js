// A run's event stream, read in a worker of its own: while the page draws a large graph
// its main thread is busy for whole frames, and a stream read there waits for them.
// Here each event is read and parsed as it arrives, stamped with its arrival time, and
// posted to the page with the others of the same read.
//
// Server-sent events over fetch (EventSource cannot send a token): each message's id is
// its stream sequence; a dropped connection resumes after the last one with Last-Event-ID.
// The page posts {runId, token} once; the worker posts {opened}, {events}, {ended} or
// {refused} back (times as epoch milliseconds).

const now = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

function parseMessage(block) {
  const fields = {};
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const at = line.indexOf(": ");
    fields[line.slice(0, at)] = line.slice(at + 2);
  }
  if (!fields.id) return null;
  return { id: Number(fields.id), event: fields.event, data: JSON.parse(fields.data) };
}

async function follow(runId, token) {
  let last = 0;
  for (;;) {
    try {
      const headers = { Authorization: `Bearer ${token}` };
      if (last) headers["Last-Event-ID"] = String(last);
      const resp = await fetch(`/v1/runs/${encodeURIComponent(runId)}/events`, { headers });
      if (resp.status === 404) { await sleep(1000); continue; }
      if (resp.status === 401) { postMessage({ refused: "token refused" }); return; }
      if (!resp.ok) throw new Error(`event stream: ${resp.status}`);
      postMessage({ opened: now() });
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) { postMessage({ ended: now() }); return; }  // the run ended
        const arrived = now();
        buffer += value;
        const events = [];
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const message = parseMessage(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (message) { last = message.id; events.push({ ...message, arrived }); }
        }
        if (events.length) postMessage({ events });
      }
    } catch {
      await sleep(1000);  // a dropped connection: resume after `last`
    }
  }
}

addEventListener("message", ({ data }) => follow(data.runId, data.token), { once: true });
