// The proxy's API as the console uses it: every call carries the key in the Authorization
// header (never in a URL), and streams (chat answers, session events) are read with fetch
// and a stream reader: EventSource cannot send that header.

const KEY = "cascade.console.key";

// The proxy's root: "" at the host's root, "/prefix" behind a front server that maps a prefix
// to it. This module is loaded from <root>/ui/static/api.js, so the API is under the same root.
export const ROOT = new URL("../..", import.meta.url).pathname.replace(/\/$/, "");

export function storedKey() {
  return sessionStorage.getItem(KEY);
}

export function storeKey(value) {
  sessionStorage.setItem(KEY, value);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY);
}

// `challenged`: the answer names the proxy's scheme in WWW-Authenticate, as the proxy's own
// 401 does (the key the console gave it); a provider's 401 it relays has none: that key is
// the provider's, and signing in again would not change it.
export class ApiError extends Error {
  constructor(status, message, code, challenged = false) {
    super(message);
    this.status = status;
    this.code = code;
    this.challenged = challenged;
  }
}

function headers(extra = {}) {
  const out = { ...extra };
  const key = storedKey();
  if (key) out.Authorization = `Bearer ${key}`;
  return out;
}

async function failure(resp) {
  let message = `${resp.status} ${resp.statusText}`;
  let code = null;
  try {
    const body = await resp.json();
    if (body && body.error) {
      message = body.error.message || message;
      code = body.error.code;
    }
  } catch (_) { /* not JSON: keep the status line */ }
  return new ApiError(resp.status, message, code, resp.headers.has("WWW-Authenticate"));
}

// A request that reached nothing (the proxy away, restarting, the network down) fails with
// the browser's own words ("Failed to fetch"), which name neither the proxy nor the way out:
// it is said in the console's, still a TypeError (no status: no answer came), marked
// `unreached`: a later try may get through, as it may for an answer cut short (call), where
// another error with no status (an answer that is not JSON, a fault of the page's own)
// meets the same again. An abort is passed on
// as it is.
async function reach(url, init) {
  try {
    return await fetch(url, init);
  } catch (err) {
    if (!(err instanceof TypeError)) throw err;
    const out = new TypeError(`the proxy could not be reached (${err.message}); is it running?`);
    out.unreached = true;
    throw out;
  }
}

export async function call(method, path, body, { signal } = {}) {
  const init = { method, headers: headers(), signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await reach(ROOT + path, init);
  if (!resp.ok) throw await failure(resp);
  try {
    return await resp.json();
  } catch (err) { // a TypeError: the answer cut short (the proxy restarting), worth a retry
    if (err instanceof TypeError) err.unreached = true; // a SyntaxError: it is no JSON
    throw err;
  }
}

// Every row of a list endpoint from the `from`th on, a page at a time until the list says no
// more follow (`has_more`): one answer holds at most `page` rows (the endpoint's cap), and a
// list cut there would hide sessions, or resend a long history shorter than it is, which the
// proxy would take for an edit of its tail. An empty page ends it whatever it says.
export async function everything(path, page, from = 0) {
  const rows = [];
  const sep = path.includes("?") ? "&" : "?";
  for (;;) {
    const out = await call("GET", `${path}${sep}limit=${page}&offset=${from + rows.length}`);
    for (const row of out.data) rows.push(row);
    if (!out.has_more || out.data.length === 0) return { ...out, data: rows, has_more: false };
  }
}

// A list's page after `cursor` (a page's next_cursor) as a query parameter to append; none
// for the first page.
const after = (cursor) => (cursor ? `&cursor=${encodeURIComponent(cursor)}` : "");

export const api = {
  // `n` sessions, latest activity first, from the start or after `cursor` (a page's
  // next_cursor: the place after its last row, which sessions made or gone between the two
  // reads do not move, as they move an offset); with `q`, only those whose id, agent or
  // model holds it (the proxy filters before it cuts the page)
  sessions: (q, cursor, n) => call("GET", `/v1/sessions?limit=${n}${after(cursor)}` +
    (q ? `&q=${encodeURIComponent(q)}` : "")),
  models: () => call("GET", "/v1/models"),
  session: (id) => call("GET", `/v1/sessions/${encodeURIComponent(id)}`),
  // the history from its `from`th row on (`offset` counts the rows in position order)
  messages: (id, form = "prompt", from = 0) => everything(
    `/v1/sessions/${encodeURIComponent(id)}/messages?form=${form}`, 10000, from),
  // `n` rows of the history in its prompt form from its `from`th on (n within one page)
  messageRange: (id, from, n) => call(
    "GET", `/v1/sessions/${encodeURIComponent(id)}/messages?form=prompt&limit=${n}&offset=${from}`),
  toolOutput: (id, callId, offset, limit) => call(
    "GET",
    `/v1/sessions/${encodeURIComponent(id)}/tool-outputs/${encodeURIComponent(callId)}` +
      `?offset=${offset}&limit=${limit}`,
  ),
  branch: (id) => call("POST", `/v1/sessions/${encodeURIComponent(id)}/branch`, {}),
  reset: (id) => call("POST", `/v1/sessions/${encodeURIComponent(id)}/reset`),
  compact: (id) => call("POST", `/v1/sessions/${encodeURIComponent(id)}/compact`),
  remove: (id) => call("DELETE", `/v1/sessions/${encodeURIComponent(id)}`),
  // Every suggestion of the session nobody has answered, page after page (the proxy keeps
  // the session's alone, so other sessions' are never read), each page from the last one's
  // next_cursor: one answered meanwhile (in another tab, from the CLI) would move an offset
  // past a suggestion never read.
  pendingMemory: async (id) => {
    const data = [];
    for (let cursor = ""; ;) {
      const page = await call("GET", "/v1/memory/suggestions?session_id=" +
        `${encodeURIComponent(id)}&limit=1000${after(cursor)}`);
      data.push(...(page.data || []));
      cursor = page.next_cursor;
      if (!page.has_more || !cursor || !(page.data || []).length) return { data };
    }
  },
  acceptMemory: (sid) =>
    call("POST", `/v1/memory/suggestions/${encodeURIComponent(sid)}/accept`),
  rejectMemory: (sid) =>
    call("POST", `/v1/memory/suggestions/${encodeURIComponent(sid)}/reject`),
};

// Server-sent events from a fetch body: yields {event, data, id} per frame; `heard` is told
// of every piece read, a comment (a ping) too, `said` of each comment's text, and `named` of
// the id of a frame with no data (an EventSource's last event id all the same).
export async function* sseFrames(
  resp, heard = () => {}, said = () => {}, retry = () => {}, named = () => {},
) {
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let frame = { event: "message", data: [], id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    heard();
    buffer += value;
    let nl;
    while ((nl = buffer.search(/\r\n|\r|\n/)) >= 0) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + (buffer.startsWith("\r\n", nl) ? 2 : 1));
      if (line === "") {
        if (frame.data.length) {
          yield { event: frame.event, data: frame.data.join("\n"), id: frame.id };
        } else if (frame.id) {
          named(frame.id);
        }
        frame = { event: "message", data: [], id: null };
      } else if (line.startsWith(":")) {
        said(line.slice(1).trim());
      } else {
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let val = colon < 0 ? "" : line.slice(colon + 1);
        if (val.startsWith(" ")) val = val.slice(1);
        if (field === "event") frame.event = val;
        else if (field === "data") frame.data.push(val);
        else if (field === "id") frame.id = val;
        else if (field === "retry" && /^[0-9]+$/.test(val)) retry(Number(val));
      }
    }
  }
}

// Send the history plus one message to the session's chat endpoint, streaming; onDelta gets
// each piece of the answer's text. Resolves to the whole answer. A failure once the stream
// opened is marked `opened`: the proxy ends that turn with its last event all the same.
export async function chatStream(sessionId, body, onDelta, { signal, requestId } = {}) {
  const extra = { "Content-Type": "application/json", Accept: "text/event-stream" };
  if (requestId) extra["X-Request-Id"] = requestId; // the turn's context.usage names it
  const resp = await reach(`${ROOT}/s/${encodeURIComponent(sessionId)}/v1/chat/completions`, {
    method: "POST",
    headers: headers(extra),
    body: JSON.stringify({ ...body, stream: true }),
    signal,
  });
  if (!resp.ok) throw await failure(resp);
  let text = "";
  try {
    for await (const frame of sseFrames(resp)) {
      if (frame.data === "[DONE]") break;
      let chunk;
      try { chunk = JSON.parse(frame.data); } catch (_) { continue; }
      if (chunk.error) throw new ApiError(502, chunk.error.message || "the stream failed");
      for (const choice of chunk.choices || []) {
        const piece = choice.delta && choice.delta.content;
        if (piece) {
          text += piece;
          onDelta(piece, text);
        }
      }
    }
  } catch (err) {
    if (err && typeof err === "object") err.opened = true;
    throw err;
  }
  return text;
}

// The session's event stream, reconnecting with Last-Event-ID until signal aborts. It is
// live (onState("live")) once the proxy says so, with the comment `: live` after its
// replay: an event published from then on comes, so what the caller reads then is current. A 404
// (a deleted session, or one not started yet) ends it: onState("gone"), and no more requests
// until the caller follows again. So does a 403 (the key may not use the session's agent,
// which no retry changes): onState("forbidden", err). A failure (a 5xx, the network, a stream cut) reconnects
// after a pause that doubles from RETRY_MS up to RETRY_MAX_MS; one that went live resets it.
// A stream that said when to reconnect (`retry:`, which the proxy spreads over its streams
// when it ends them all at once) is reconnected after that instead.
// So does a stream that says nothing for STALL_MS: the proxy pings every 15 s, so a silence
// that long is a connection gone without a word (a laptop that slept, a network that
// changed), which would otherwise hang until the system gave up on it, the events meanwhile
// (a transient context.evicted among them) unseen.
export const RETRY_MS = 1000;
export const RETRY_MAX_MS = 30000;
export const STALL_MS = 45000;

export async function followEvents(sessionId, onEvent, signal, onState = () => {}) {
  let lastId = null;
  let wait = RETRY_MS;
  let told = null; // the stream's own `retry:` (ms), for the reconnect after it
  while (!signal.aborted) {
    told = null;
    const attempt = new AbortController();
    const stop = () => attempt.abort();
    signal.addEventListener("abort", stop, { once: true });
    let timer = null;
    const heard = () => {
      clearTimeout(timer);
      timer = setTimeout(() => attempt.abort(new Error(
        `no word from the proxy for ${STALL_MS / 1000} s`)), STALL_MS);
    };
    try {
      const h = headers({ Accept: "text/event-stream" });
      if (lastId) h["Last-Event-ID"] = lastId;
      heard();
      const resp = await reach(`${ROOT}/v1/sessions/${encodeURIComponent(sessionId)}/events`,
        { headers: h, signal: attempt.signal });
      if (resp.status === 404) { onState("gone"); return; }
      if (resp.status === 403) { onState("forbidden", await failure(resp)); return; }
      if (!resp.ok) throw await failure(resp);
      const said = (text) => {
        if (text !== "live") return;
        onState("live");
        wait = RETRY_MS;
      };
      const retry = (ms) => { told = ms; };
      const named = (id) => { lastId = id; }; // a stream's last frame may name no event
      for await (const frame of sseFrames(resp, heard, said, retry, named)) {
        if (frame.id) lastId = frame.id;
        let data = {};
        try { data = JSON.parse(frame.data); } catch (_) { /* keep {} */ }
        onEvent(frame.event, data);
      }
      if (!signal.aborted) onState("reconnecting"); // the proxy ended it: not live meanwhile
    } catch (err) {
      if (signal.aborted) return;
      onState("reconnecting", err);
    } finally {
      clearTimeout(timer);
      signal.removeEventListener("abort", stop);
    }
    await pause(told ?? wait, signal);
    wait = Math.min(2 * wait, RETRY_MAX_MS);
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}
