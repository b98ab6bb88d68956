// Pure rendering helpers: data in, DOM nodes out. No fetches here.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

const fmt = new Intl.NumberFormat("en");
export const num = (n) => fmt.format(n || 0);

export function ago(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleString();
}

export const PARTS = [
  ["system", "System"],
  ["summary", "Summary"],
  ["messages", "Messages"],
  ["tool_results", "Tool results"],
];

// The usage panel: the bar's segments (each part against the limit), its legend, the text
// line, and the reclaimed line, shown only when some stage reclaimed anything.
export function renderUsage(session, { bar, legend, text, reclaimed }) {
  if (!session.context_limit) { // a session not started yet: no limit, nothing counted
    text.textContent = "No usage yet: the first message starts the session.";
    bar.removeAttribute("aria-valuemax");
    bar.setAttribute("aria-valuenow", "0");
    bar.setAttribute("aria-valuetext", "No usage yet");
    bar.dataset.occupancy = "0";
    bar.replaceChildren();
    legend.replaceChildren();
    reclaimed.hidden = true;
    reclaimed.textContent = "";
    return;
  }
  const limit = session.context_limit;
  const occupancy = session.occupancy || 0;
  const usage = session.usage || {};
  const share = (100 * occupancy / limit).toFixed(1);
  text.textContent = `${num(occupancy)} / ${num(limit)} tokens (${share}%)`;
  bar.setAttribute("aria-valuemax", String(limit));
  bar.setAttribute("aria-valuenow", String(occupancy));
  // what the text line shows, in words: a bare aria-valuenow is read as a number of tokens
  const said = `${share}% of the window, ${num(occupancy)} of ${num(limit)} tokens`;
  bar.setAttribute("aria-valuetext", said);
  bar.dataset.occupancy = String(occupancy);
  bar.replaceChildren();
  legend.replaceChildren();
  // The parts are the proxy's calibrated estimates of the window as it stands now; the
  // occupancy is what the provider counted for the last prompt.
  const estimated = PARTS.reduce((sum, [k]) => sum + (usage[k] || 0), 0);
  if (estimated > 0 && Math.abs(estimated - occupancy) > 0.02 * limit) {
    text.textContent += ` · about ${num(estimated)} now`; // the window changed since
    bar.setAttribute("aria-valuetext", `${said}, about ${num(estimated)} now`);
  }
  for (const [key, label] of PARTS) {
    const tokens = usage[key] || 0;
    const seg = el("span", { class: `seg seg-${key}`, title: `${label}: ${num(tokens)}` });
    seg.style.width = `${Math.min(100, 100 * tokens / limit)}%`;
    bar.append(seg);
    legend.append(el("li", { class: `seg-${key}` }, el("i"), `${label} ${num(tokens)}`));
  }
  if (estimated === 0 && occupancy > 0) {
    const seg = el("span", { class: "seg seg-messages" });
    seg.style.width = `${Math.min(100, 100 * occupancy / limit)}%`;
    bar.append(seg);
  }
  const by = session.reclaimed || {};
  const stages = [["eviction", "eviction"], ["truncation", "truncation"],
    ["summarisation", "summarisation"]].filter(([k]) => (by[k] || 0) > 0);
  reclaimed.hidden = stages.length === 0;
  reclaimed.textContent = stages.length
    ? "Reclaimed: " + stages.map(([k, label]) => `${label} ${num(by[k])}`).join(" · ")
    : "";
}

// The summary, one block per "## " section (the summariser's headings); each line in the
// direction of its own first strong letter, as a message's text is.
export function renderSummary(summary, into) {
  into.replaceChildren();
  if (!summary) {
    into.append(el("p", { class: "hint", text: "No summary yet." }));
    return;
  }
  into.append(el("p", { class: "hint",
    text: `Version ${summary.version} · folds messages before #${summary.boundary} · ` +
      `${num(summary.tokens)} tokens` }));
  const text = String(summary.content || "")
    .replace(/<\/?conversation_summary>/g, "").trim();
  let section = null;
  for (const line of text.split("\n")) {
    const heading = line.match(/^#{1,3}\s+(.*)$/);
    if (heading) {
      section = el("section", {}, el("h3", { text: heading[1], dir: "auto" }));
      into.append(section);
    } else if (line.trim()) {
      if (!section) { section = el("section"); into.append(section); }
      section.append(el("p", { text: line.replace(/^\s*[-*]\s+/, "• "), dir: "auto" }));
    }
  }
}

export function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((p) => (p && typeof p.text === "string" ? p.text : `[${p && p.type}]`))
      .join("\n");
  }
  return JSON.stringify(content);
}

// The handoff nudge's toast text.
export function handoffText(data) {
  const pct = typeof data.fraction === "number" ? ` (${Math.round(100 * data.fraction)}% full)`
    : "";
  const why = data.message || data.reason || "even after compaction the context stays high";
  return `Consider handing off to a new session${pct}: ${why}.`;
}

// The handle a row's raw output is read by: a tool result's id pinned to its position, as
// its marker names it (an id can come back, `call_0` every turn, and alone it reads the
// newest result); an observation's own handle (a hash of its text: one handle, one text).
export function rawHandle(row) {
  return row.role === "tool" ? `${row.tool_call_id}@${row.pos}` : row.tool_call_id;
}

// What a raw output's status says of what was paged back ({text, next, total, capped,
// original}): how much is shown, and that a press reads the next page, or that all is
// shown; when the proxy's copy was capped (`rawCapBytes`), that it holds only the first
// bytes of the result, not all of it.
export function rawStatus(shown) {
  if (shown.next < shown.total) {
    return `${num(shown.next)} of ${num(shown.total)} characters shown: ` +
      "press again for the next page";
  }
  if (!shown.capped) return "All shown";
  const kept = new TextEncoder().encode(shown.text).length;
  return `All the proxy kept is shown: the first ${num(kept)} of ${num(shown.original)} bytes`;
}

export const SHOW_RAW = "Show the raw output"; // a raw-output button's words, every press

// What a raw output's status beside its button says (`text`), set only when it changes: the
// status is a live region, read out politely as each page comes, where the button's name
// stays as it was (a screen reader says a focused button's name again each time it
// changes, at every page read).
export function rawSaid(li, text) {
  const status = li.querySelector("[data-testid=raw-status]");
  if (status.textContent !== text) status.textContent = text;
}

// What a row's paged-back output is kept under: its handle, and the row's creation time,
// since a result that replaces it at its position (the client sent the history again with
// another result there, under the same id) has the same handle and text of its own.
export function rawKey(row) {
  return `${rawHandle(row)} ${row.created_at}`;
}

// A cut's marker when no copy was kept (persistRaw off, or secrets): "re-run the tool".
const NO_COPY = /\n\[\.\.\. truncated \d+ chars(; re-run the tool if you need the rest| \(output contained secrets and was not kept; re-run the tool if you need it\)) \.\.\.\]\n/;

// One message of the list, with its marks; `tool` the name of the tool a result answers;
// onPage(row, li) for a result that can be paged
// back (cut at ingestion, or evicted, folded into the summary since or not). A redacted one cannot: its secret is never stored, so
// no copy of it is kept and the tool-outputs endpoint answers 404 for it; nor can one cut
// with no copy kept (persistRaw off), truncated all the same, whose marker says so. Its text takes the
// direction of its own first strong letter (dir="auto"): a right-to-left message reads so on
// this left-to-right page.
export function renderMessage(row, onPage, folded = false, tool = "") {
  const m = row.message || {};
  const marks = [];
  if (folded) marks.push(el("span", { class: "mark", "data-mark": "summarised", text: "in the summary" }));
  if (row.truncated) marks.push(el("span", { class: "mark", "data-mark": "truncated", text: "truncated" }));
  if (row.evicted) marks.push(el("span", { class: "mark", "data-mark": "evicted", text: "evicted" }));
  if (row.trimmed) marks.push(el("span", { class: "mark", "data-mark": "trimmed", text: "trimmed" }));
  if (row.redacted) marks.push(el("span", { class: "mark", "data-mark": "redacted", text: "redacted" }));
  const calls = (m.tool_calls || []).map((c) => {
    const text = `${c.function ? c.function.name : c.type}(${c.function ? c.function.arguments : ""})`;
    return el("code", { class: "call", text, tabindex: scrolls(text) });
  });
  const body = contentText(m.content);
  const li = el("li", {
    class: `msg role-${row.role}${row.trimmed ? " gone" : ""}${folded ? " folded" : ""}`,
    "data-testid": "message", "data-pos": row.pos, "data-role": row.role,
    "data-tool-call-id": row.tool_call_id,
  },
  el("div", { class: "msg-head" }, el("span", { class: "role", text: row.role }),
    row.tool_call_id ? el("code", { class: "hint", text: row.tool_call_id }) : null,
    ...marks, el("span", { class: "hint tokens", text: `${num(row.tokens)} tok` })),
  // a folded row's text is clipped (app.css), not scrolled: no Tab stop moves it
  el("pre", { class: "body", dir: "auto", text: body, tabindex: folded ? null : scrolls(body) }),
  ...calls);
  // An evicted result folded since is summarised, not evicted (the API says so), and its
  // placeholder still names the raw output it pages back.
  const cleared = folded && contentText(m.content).startsWith("[context-cleared]");
  const kept = row.truncated && !NO_COPY.test(contentText(m.content));
  if ((kept || row.evicted || cleared) && row.tool_call_id && !row.redacted) {
    // named by its result too (its aria-label, the visible words first): a screen reader's
    // list of buttons tells one result's from another's, and a selection copies only what
    // is seen (text hidden in the button was copied with it). The name stays as it pages:
    // what was read is said by the status after it (rawSaid)
    const of = row.role === "tool" ? ` of ${tool ? `${tool} ` : ""}(${row.tool_call_id})`
      : ` of message ${row.pos}`;
    li.append(el("button", { type: "button", class: "link", "data-testid": "raw-page",
      "aria-label": SHOW_RAW + of, text: SHOW_RAW,
      onclick: (e) => { if (e.currentTarget.ariaDisabled !== "true") onPage(row, li); } }),
    el("span", { class: "hint raw-status", "data-testid": "raw-status", role: "status" }));
  }
  return li;
}

// A box of text long enough to scroll in its max-height (app.css: about 15 lines) is a tab
// stop ("0"), so a keyboard scrolls it too; a short one is none (null). Judged from the text:
// a row out of sight is not laid out (content-visibility), so its height cannot be measured.
// Each line counts the lines it wraps to at WRAP characters (fewer than the narrowest column
// holds), so a long line among short ones counts for what it takes; counting stops at ROWS.
const WRAP = 50;
const ROWS = 12;
export function scrolls(text) {
  let rows = 0;
  for (let at = 0; at <= text.length && rows <= ROWS; at++) {
    const end = text.indexOf("\n", at);
    const line = (end < 0 ? text.length : end) - at;
    rows += Math.max(1, Math.ceil(line / WRAP));
    if (end < 0) break;
    at = end;
  }
  return rows > ROWS ? "0" : null;
}

// A reply still streaming (one per choice): its text so far, marked, replaced by the stored
// message when the turn ends. The text is set as text, never parsed as markup.
export function renderStreaming(choice, text, several) {
  return el("li", {
    class: "msg role-assistant streaming", "data-testid": "message-streaming",
    "data-role": "assistant", "data-choice": choice, "aria-busy": "true",
  },
  el("div", { class: "msg-head" }, el("span", { class: "role", text: "assistant" }),
    several ? el("code", { class: "hint", text: `choice ${choice}` }) : null,
    el("span", { class: "mark", "data-mark": "streaming", text: "streaming…" })),
  el("pre", { class: "body", dir: "auto", text }));
}
