// The session view's composer: a message sent through the session's chat endpoint, with the
// history resent as the client sent it, and the answer streamed into the answer box.

import { api, chatStream } from "./api.js";
import { el } from "./render.js";

const $ = (id) => document.getElementById(id);

// How long a message waits for the page's previous turn's last event, which is stored with
// that turn's reply, before it reads the history it resends (a stream that is down may
// never bring the event).
export const LAST_EVENT_WAIT_MS = 5000;

// A request id of the page's own: crypto.randomUUID needs a secure context, which a console
// served over plain HTTP on a LAN address is not.
function turnId() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return "ui-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

// The answer box's text so far. The box is bounded (app.css): while it shows its end, it
// follows the new lines down; scrolled up in it, the reader stays where they are.
function grow(box, text) {
  const following = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
  box.textContent = text;
  if (following) box.scrollTop = box.scrollHeight;
}

// What was typed in each session's composer and not sent, by session id: the composer is
// one element for every view, and a draft showed under the next session opened.
const drafts = new Map();

export class Composer {
  constructor(view) {
    this.view = view; // the SessionView: its id, session, ui, abort and refresh
    this.sending = false;
    // This page's own turns whose last event has not come yet, oldest first: their replies
    // stream in the answer box, so their deltas (the last may come after the stream's end)
    // are not shown again in the list. Events come after the answers they tell of: a turn
    // ends at the first last event after those of the turns before it.
    this.turns = [];
    this.modelsAsked = null;
    this.outgoing = null; // the text of the message being sent
  }

  // The view opens: its session's draft, or nothing.
  restore() {
    $("composer-input").value = drafts.get(this.view.id) || "";
  }

  // The view closes: what is typed stays its session's, unless it is the message on its way.
  keep() {
    const text = $("composer-input").value;
    if (text.trim() && text.trim() !== this.outgoing) drafts.set(this.view.id, text);
    else drafts.delete(this.view.id);
  }

  get own() {
    return this.turns.length > 0;
  }

  // A turn's last event (context.usage), whether or not it stored a reply. It names the
  // request of its turn: one of the page's own ends it and those before it (events come in
  // order); another's (a second tab's, another client's) ends none. One that names none (a
  // proxy before it did) ends the oldest, unless the stream's first replay brought it.
  turnEnded(data = {}, replayed = false) {
    const id = data.request_id;
    if (typeof id === "string") {
      const at = this.turns.findIndex((t) => t.id === id);
      for (const turn of at < 0 ? [] : this.turns.splice(0, at + 1)) turn.end();
      return;
    }
    const turn = replayed ? null : this.turns.shift();
    if (turn) turn.end();
  }

  // The model to send with: the session's, else one the provider lists (a new session).
  async fillModel() {
    const input = $("composer-model");
    const s = this.view.session;
    if (s && s.model) { input.value = s.model; return; }
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

  // The history to resend, as the client sent it (a cut or evicted result in full): the
  // stored prompt form would read as an edited history. A new session has none. The reply
  // of the page's previous turn is stored just after its answer, so the history is read
  // once that turn's last event came (`earlier`), or it would lack the reply.
  async history(earlier) {
    if (earlier) {
      await new Promise((done) => {
        earlier.ended.then(done);
        setTimeout(done, LAST_EVENT_WAIT_MS);
      });
    }
    try {
      const rows = (await api.messages(this.view.id, "sent")).data;
      return rows.map((r) => r.message);
    } catch (err) {
      if (err.status === 404) return [];
      throw err;
    }
  }

  // A turn runs to its end once sent, the view left or not: its request is not cut when
  // the view closes (a look at the list meanwhile would lose the answer, the question stored
  // with no reply). What it shows goes to its own view only: a closed view's elements are
  // another view's now.
  async send() {
    const input = $("composer-input");
    const text = input.value.trim();
    if (!text || this.sending) return;
    const closed = this.view.abort.signal;
    const here = (fn) => { if (!closed.aborted) fn(); };
    this.sending = true;
    this.outgoing = text;
    const earlier = this.turns[this.turns.length - 1];
    const turn = { id: turnId() };
    turn.ended = new Promise((done) => { turn.end = done; });
    this.turns.push(turn);
    $("composer-send").disabled = true;
    const answer = $("assistant-message");
    answer.textContent = "";
    answer.dataset.state = "streaming";
    let model = $("composer-model").value.trim();
    try {
      const body = {
        messages: [...(await this.history(earlier)), { role: "user", content: text }],
      };
      if (!model && !closed.aborted) {
        await this.fillModel();
        model = $("composer-model").value.trim();
      }
      if (model) body.model = model;
      await chatStream(this.view.id, body,
        (_piece, whole) => here(() => grow(answer, whole)), { requestId: turn.id });
      here(() => { input.value = ""; answer.dataset.state = "done"; });
    } catch (err) {
      here(() => { answer.dataset.state = "failed"; });
      // a turn refused before its stream opened sends no last event; one whose stream
      // opened sends it however the stream ended, and stays to take it
      if (!err.opened) this.turns = this.turns.filter((t) => t !== turn);
      here(() => this.view.ui.handleError(err, "The message was not answered"));
    } finally {
      this.sending = false;
      this.outgoing = null;
      here(() => { $("composer-send").disabled = false; this.view.refresh(); });
    }
  }
}
