// The session view: usage panel, summary, message list with paging of raw outputs, the
// actions, the composer, and the live event stream.

import { api, chatStream, followEvents } from "./api.js";
import { LiveView } from "./live.js";
import {
  el, handoffText, num, rawHandle, rawKey, rawStatus, renderMessage, renderSummary, renderUsage,
} from "./render.js";

const $ = (id) => document.getElementById(id);
const PAGE_CHARS = 4000;

export class SessionView {
  constructor(id, ui) {
    this.id = id;
    this.ui = ui; // {toast, confirmAction, handleError}
    this.session = null;
    this.rows = [];
    this.abort = new AbortController();
    this.refreshing = null;
    this.again = false;
    this.suggestion = null;
    this.asking = null; // the lookup of the suggestions waiting (askMemory)
    this.askAgain = false;
    this.raw = new Map(); // a row's rawKey -> what was paged back
    this.handoff = null; // the toast of this session's handoff nudge
    this.live = new LiveView($("message-list")); // the reply streaming now, after the rows
    this.following = false; // the event stream is open or reconnecting
    this.missing = false; // the last load found no such session
    this.wire();
  }

  wire() {
    const on = (node, type, fn) => node.addEventListener(type, fn, { signal: this.abort.signal });
    on($("composer"), "submit", (e) => { e.preventDefault(); this.send(); });
    on($("composer-input"), "keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); this.send(); }
    });
    for (const button of document.querySelectorAll("[data-action]")) {
      on(button, "click", () => this.act(button.dataset.action));
    }
    on($("memory-save"), "click", () => this.answerMemory(true));
    on($("memory-dismiss"), "click", () => this.answerMemory(false));
  }

  open() {
    $("session-title").textContent = this.id;
    // nothing of the session shown before stays, whatever this one's load answers
    for (const id of ["session-meta", "message-list", "assistant-message", "status-line",
      "usage-text", "usage-bar", "usage-legend", "summary"]) $(id).replaceChildren();
    $("usage-reclaimed").hidden = true;
    $("composer-model").value = "";
    this.refresh();
    this.follow();
  }

  // The event stream, while the session exists. A lost stream is said once, not on every
  // retry; it reconnects by itself, and when it is back the warning goes (it would still say
  // "reconnecting"). Reconnected, the view catches up: a reply that was streaming may have
  // lost deltas meanwhile, so it ends, and the stored messages show what was stored. A 404
  // ends the stream: the view shows the session as not found, and follows again once a load
  // finds it (the composer's first message started it). A 403 (this key may not) ends it.
  follow() {
    if (this.following) return;
    this.following = true;
    let lost = null;
    let again = false; // the stream was open before: this is a reconnection
    followEvents(this.id, (name, data) => this.onEvent(name, data), this.abort.signal,
      (state, err) => {
        if (state === "gone" || state === "forbidden") {
          this.following = false;
          if (lost) { lost.remove(); lost = null; }
          if (state === "gone") this.refresh();
        }
        if (state === "live") {
          if (again) this.live.end();
          if (again || lost) this.refresh();
          if (lost) {
            lost.remove();
            lost = null;
            this.ui.toast("Live updates are back.", "info", 4000);
          }
          again = true;
        }
        if (state === "reconnecting" && err && !lost) {
          lost = this.ui.handleError(err, "The live updates stopped; reconnecting") ||
            document.createElement("div"); // a 401 signed out instead: nothing to remove
        }
      });
  }

  close() {
    this.abort.abort();
    this.live.drop();
    $("memory-prompt").hidden = true;
    if (this.handoff) this.handoff.remove(); // about this view's session: it goes with it
  }

  // One refresh at a time; a request for another while one runs runs once after it.
  refresh() {
    if (this.refreshing) { this.again = true; return this.refreshing; }
    this.refreshing = this.load().finally(() => {
      this.refreshing = null;
      if (this.again) { this.again = false; this.refresh(); }
    });
    return this.refreshing;
  }

  // A reply that ended before this load began is in what it loads: the load drops it. A 404
  // forgets the raw outputs paged back: a session started again under this id has its own.
  async load() {
    const ended = this.live.ended();
    try {
      const [session, messages] = await Promise.all([api.session(this.id), api.messages(this.id)]);
      if (this.abort.signal.aborted) return;
      this.session = session;
      this.rows = messages.data;
      this.live.drop(ended);
      if (this.missing) { this.missing = false; this.follow(); }
      this.render();
    } catch (err) {
      if (err.status === 404) {
        if (this.session) { // deleted while shown: what the page showed of it goes too
          if (!this.sending) $("assistant-message").textContent = "";
          $("status-line").textContent = "";
          this.suggestion = null; $("memory-prompt").hidden = true;
          if (this.handoff) this.handoff.remove();
        }
        this.session = null;
        this.rows = [];
        this.raw.clear();
        this.missing = true;
        this.live.drop();
        this.render();
        return;
      }
      this.ui.handleError(err, "Could not load the session");
    }
  }

  render() {
    const s = this.session;
    $("session-meta").textContent = s
      ? `agent ${s.agent} · model ${s.model || "?"} · ${num(s.message_count)} messages` +
        (s.parent_id ? ` · branched from ${s.parent_id}` : "")
      : "no session with this id (not started yet, or deleted): send a message to start it";
    renderUsage(s || { context_limit: 0, occupancy: 0, usage: {}, reclaimed: {} }, {
      bar: $("usage-bar"), legend: $("usage-legend"), text: $("usage-text"),
      reclaimed: $("usage-reclaimed"),
    });
    renderSummary(s && s.summary, $("summary"));
    this.fillModel();
    // Rows before the summary's boundary (the leading system rows aside) are folded into it.
    const boundary = s && s.summary ? s.summary.boundary : 0;
    $("message-list").replaceChildren(...this.rows.map((row) => {
      const folded = row.pos < boundary && row.role !== "system" && row.role !== "developer";
      const li = renderMessage(row, (r, node) => this.pageBack(r, node), folded);
      if (row.tool_call_id && li.querySelector("[data-testid=raw-page]")) {
        this.showRaw(li, rawKey(row));
      }
      return li;
    }));
    this.live.show();
  }

  // The model to send with: the session's, else one the provider lists (a new session).
  async fillModel() {
    const input = $("composer-model");
    if (this.session && this.session.model) { input.value = this.session.model; return; }
    if (input.value) return;
    this.modelsAsked = this.modelsAsked || this.listModels();
    await this.modelsAsked;
  }

  async listModels() {
    const input = $("composer-model");
    try {
      const ids = ((await api.models()).data || []).map((m) => m.id).filter(Boolean);
      $("model-list").replaceChildren(...ids.map((id) => el("option", { value: id })));
      if (!input.value && ids.length) input.value = ids[0];
    } catch (_) { /* the person types one */ }
  }

  // The raw output of a cut or evicted result, a page at a time (the proxy caps a page at
  // the agent's maxChars; its header says which characters it holds). What was paged back
  // is kept here, so a refresh of the list does not lose it.
  async pageBack(row, li) {
    const key = rawKey(row);
    const shown = this.raw.get(key) || { text: "", next: 0, total: 0 };
    try {
      const out = await api.toolOutput(this.id, rawHandle(row), shown.next, PAGE_CHARS);
      const { text, end } = unwrapPage(out.page, shown.next);
      this.raw.set(key, { text: shown.text + text, next: end, total: out.total_chars,
        capped: out.capped, original: out.original_bytes });
      const current = $("message-list").querySelector(`[data-pos="${row.pos}"]`) || li;
      this.showRaw(current, key);
    } catch (err) {
      this.ui.handleError(err, "Could not page the output back");
    }
  }

  showRaw(li, key) {
    const shown = this.raw.get(key);
    if (!shown) return;
    let pre = li.querySelector("[data-testid=raw-output]");
    if (!pre) {
      pre = el("pre", { class: "raw", "data-testid": "raw-output" });
      li.append(pre);
    }
    pre.textContent = shown.text;
    const button = li.querySelector("[data-testid=raw-page]");
    button.textContent = rawStatus(shown);
    button.disabled = shown.next >= shown.total;
  }

  // The history to resend, as the client sent it (a cut or evicted result in full): the
  // stored prompt form would read as an edited history. A new session has none.
  async history() {
    try {
      const rows = (await api.messages(this.id, "sent")).data;
      return rows.map((r) => r.message);
    } catch (err) {
      if (err.status === 404) return [];
      throw err;
    }
  }

  async send() {
    const input = $("composer-input");
    const text = input.value.trim();
    if (!text || this.sending) return;
    this.sending = true;
    // This page's own turn: its reply streams in the answer box, so the turn's deltas (the
    // last may come after the stream's end) are not shown again in the list, until the
    // turn's last event.
    this.own = { ended: false };
    $("composer-send").disabled = true;
    const answer = $("assistant-message");
    answer.textContent = "";
    answer.dataset.state = "streaming";
    try {
      const body = { messages: [...(await this.history()), { role: "user", content: text }] };
      if (!$("composer-model").value.trim()) await this.fillModel();
      const model = $("composer-model").value.trim();
      if (model) body.model = model;
      await chatStream(this.id, body, (_piece, whole) => { answer.textContent = whole; },
        { signal: this.abort.signal });
      input.value = "";
      answer.dataset.state = "done";
    } catch (err) {
      answer.dataset.state = "failed";
      this.own = null; // a turn that failed may send no last event
      if (!this.abort.signal.aborted) this.ui.handleError(err, "The message was not answered");
    } finally {
      this.sending = false;
      if (this.own && this.own.ended) this.own = null;
      $("composer-send").disabled = false;
      if (!this.abort.signal.aborted) this.refresh();
    }
  }

  async act(action) {
    const questions = {
      branch: `Branch ${this.id} into a new session with a copy of its history?`,
      reset: `Reset ${this.id}? Its messages, raw outputs and summaries are forgotten.`,
      compact: `Compact ${this.id} now? Its older messages are folded into a summary.`,
      delete: `Delete ${this.id} and everything it owns? This cannot be undone.`,
    };
    if (!(await this.ui.confirmAction(questions[action]))) return;
    const status = $("status-line");
    try {
      if (action === "branch") {
        const out = await api.branch(this.id);
        this.ui.toast(`Branched into ${out.id}`);
        location.hash = `#/s/${encodeURIComponent(out.id)}`;
      } else if (action === "reset") {
        await api.reset(this.id);
        this.raw.clear(); // forgotten with it: the new rows may reuse a tool_call_id
        status.textContent = "Session reset.";
        this.refresh();
      } else if (action === "compact") {
        status.textContent = "Compacting…";
        const out = await api.compact(this.id);
        status.textContent = out.compacted
          ? `Compacted: ${num(out.tokens_before)} → ${num(out.tokens_after)} tokens.`
          : `Nothing to compact${out.reason ? `: ${out.reason}` : ""}.`;
        this.refresh();
      } else if (action === "delete") {
        await api.remove(this.id);
        this.ui.toast(`Deleted ${this.id}`);
        location.hash = "#/";
      }
    } catch (err) {
      status.textContent = "";
      this.ui.handleError(err, `Could not ${action} the session`);
    }
  }

  onEvent(name, data) {
    const status = $("status-line");
    switch (name) {
      case "session.message.delta.appended":
        if (!this.own) this.live.add(data);
        break;
      case "context.usage": // a turn's last event, whether or not it stored a reply
      case "session.message.appended":
        if (name === "context.usage" && this.own) {
          if (this.sending) this.own.ended = true;
          else this.own = null;
        }
        this.live.end();
        this.refresh();
        break;
      case "session.reset": this.raw.clear(); // its raw outputs went with it; reload it too
      case "context.truncated":
      case "context.trimmed":
      case "context.evicted": // not toasted: routine, and the panel shows it
        this.refresh();
        break;
      case "context.compaction.started":
        status.textContent = "Compacting the older messages…";
        break;
      case "context.compaction.completed":
        status.textContent = "Compacted" + (data.tokens_before != null
          ? `: ${num(data.tokens_before)} → ${num(data.tokens_after)} tokens.` : ".");
        this.refresh();
        break;
      case "context.compaction.failed":
        status.textContent = `Compaction failed${data.reason ? `: ${data.reason}` : ""}.`;
        break;
      case "context.handoff_suggested":
        this.handoff = this.ui.toast(handoffText(data), "handoff", 0, `handoff:${this.id}`);
        break;
      case "memory.suggestion":
        this.askMemory();
        break;
      default:
        break;
    }
  }

  // A memory.suggestion event (live, or replayed from the start when the stream opens) is
  // a cue to ask the proxy which of this session's suggestions nobody has answered yet: a
  // replayed one may have been answered since, and several may be waiting. They are asked
  // one at a time, oldest first; one lookup at a time, a cue during it runs one more after.
  askMemory() {
    if (this.asking) { this.askAgain = true; return this.asking; }
    this.asking = this.nextMemory().finally(() => {
      this.asking = null;
      if (this.askAgain) { this.askAgain = false; this.askMemory(); }
    });
    return this.asking;
  }

  async nextMemory() {
    try {
      const pending = ((await api.pendingMemory()).data || [])
        .filter((s) => s.session_id === this.id);
      if (this.abort.signal.aborted) return;
      if (pending.length) this.showMemory(pending[0], pending.length);
      else { this.suggestion = null; $("memory-prompt").hidden = true; }
    } catch (err) {
      if (!this.abort.signal.aborted) this.ui.handleError(err, "Could not list the suggestions");
    }
  }

  showMemory(data, waiting = 1) {
    const facts = (data.facts || []).map((f) =>
      (typeof f === "string" ? f : f.text || f.fact || f.content || JSON.stringify(f)));
    this.suggestion = { id: data.suggestion_id || data.id, facts };
    $("memory-title").textContent =
      `Remember ${facts.length === 1 ? "this thing" : `these ${facts.length} things`}?` +
      (waiting > 1 ? ` (1 of ${waiting} waiting)` : "");
    $("memory-facts").replaceChildren(...facts.map((f) => el("li", { text: f })));
    $("memory-prompt").hidden = false;
  }

  async answerMemory(save) {
    const s = this.suggestion;
    if (!s) return;
    try {
      await (save ? api.acceptMemory(s.id) : api.rejectMemory(s.id));
      $("memory-prompt").hidden = true;
      this.suggestion = null;
      if (save) this.ui.toast(`Saved ${s.facts.length === 1 ? "it" : `${s.facts.length} facts`}.`);
    } catch (err) {
      this.ui.handleError(err, save ? "Could not save to memory" : "Could not dismiss");
    }
    this.askMemory(); // the next one waiting, or none (this one answered elsewhere meanwhile)
  }
}

// A page as the tool-outputs endpoint gives it: a header naming its characters, the text,
// and a note naming the next offset when there is more.
export function unwrapPage(page, offset) {
  const head = page.match(/^\[read_tool_output id=.* chars (\d+)-(\d+) of (\d+)\]\n/);
  if (!head) return { text: page, end: offset + page.length };
  const text = page.slice(head[0].length).replace(/\n\[\.\.\. more: read_tool_output\(.*\) \.\.\.\]$/, "");
  return { text, end: Number(head[2]) };
}
