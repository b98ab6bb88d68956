// The session view's composer: a message sent through the session's chat endpoint, with the
// history resent as the client sent it, and the answer streamed into the answer box.

import { api, chatStream, storedKey } from "./api.js";
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

// Send while a message is on its way: it takes no press (send returns at once), yet keeps
// the focus, which a disabled button gives up to the page's body for the answer's length.
export function sendable(on) {
  $("composer-send").setAttribute("aria-disabled", String(!on));
}

// What was typed in each session's composer and not sent, by session id: the composer is
// one element for every view, and a draft showed under the next session opened.
const drafts = new Map();

// The key signs out: its drafts go with it, since the next key may be another tenant's, with
// sessions of its own under the same ids.
export function forgetDrafts() {
  drafts.clear();
}

// This page's own turns whose last event has not come yet, by session id and key, oldest
// first. They outlive the view that sent them: a view opened again on the session queues its
// turns after them (its first message waits for theirs, as the next one in the sending view
// does) and its event stream ends them. The key is part of it: the next key signed in may be
// another tenant's, whose session under the same id is another, and whose stream never
// brings the last key's turns' events; or the same tenant's, whose session it is (`earlier`).
const queues = new Map();

// A turn whose key signed out before its request went: the next key signed in may be another
// tenant's, with a session of its own under the same id, which is no place for the last
// key's history and message. It is dropped unsaid: a toast would name the last key's session.
class SignedOut extends Error {}

export class Composer {
  constructor(view) {
    this.view = view; // the SessionView: its id, session, ui, abort and refresh
    this.sending = false;
    this.modelsAsked = null;
    this.outgoing = null; // the text of the message being sent
    // What marks this view's turns in the session's queue: not the view itself, which a turn
    // left queued (its session not opened again) would keep in memory with all its rows.
    this.mark = {};
    this.key = storedKey(); // whose turns in `queues` are this view's
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

  // The view read its session, made at `made` (null: a 404, none under the id now). A done
  // turn of this key's sent when none was known made this one. A turn of a session made at
  // another moment, or of none now, was the deleted one's: its last event never comes, so it
  // ends, and no message waits LAST_EVENT_WAIT_MS for it. One still on its way to a session
  // not known yet stays: it may be making the session.
  known(made) {
    if (made !== null) for (const t of this.turns) if (t.made === null && t.done) t.made = made;
    const stale = (t) => (t.made !== null && t.made !== made) || (made === null && t.done);
    const gone = this.turns.filter(stale);
    for (const turn of gone) turn.end();
    if (gone.length) this.turns = this.turns.filter((t) => !gone.includes(t));
  }

  // The session's turns waiting for their last event (`queues`). Events come after the
  // answers they tell of: a turn ends at the first last event after those of the turns
  // before it.
  get turns() {
    return (queues.get(this.view.id) || new Map()).get(this.key) || [];
  }

  set turns(list) {
    this.queue(this.key, list);
  }

  queue(key, list) {
    const byKey = queues.get(this.view.id) || new Map();
    if (list.length) byKey.set(key, list);
    else byKey.delete(key);
    if (byKey.size) queues.set(this.view.id, byKey);
    else queues.delete(this.view.id);
  }

  // The turns other keys sent in the session id, [key, turns] for each key.
  others() {
    return [...(queues.get(this.view.id) || new Map())].filter(([key]) => key !== this.key);
  }

  // When the session this view shows was made (null: none yet). A session made again under
  // the id, or another tenant's, was made at another moment.
  made() {
    const s = this.view.session;
    return (s && s.created_at) || null;
  }

  // The turn a message waits for: this key's last, else the last another key sent in this
  // very session, as a key of the same tenant does (keys of one tenant share its sessions):
  // sent without that turn's reply, the history would read as an edit and supersede it. One
  // of a session not known to be another (that turn made it, or this view has not read it
  // yet) is waited for too, which costs another tenant's message at most that turn and
  // LAST_EVENT_WAIT_MS.
  earlier() {
    const own = this.turns;
    if (own.length) return own[own.length - 1];
    const made = this.made();
    const theirs = this.others().map(([, list]) => list[list.length - 1])
      .filter((t) => t.made === null || made === null || t.made === made);
    return theirs[theirs.length - 1];
  }

  // A turn of this view is still to end: its reply streams in the answer box, so its deltas
  // (the last may come after the stream's end) are not shown again in the list. One still
  // waiting for the turn before it has asked nothing yet (`asked`): an earlier view's turn
  // streams in the list meanwhile.
  get own() {
    return this.turns.some((t) => t.by === this.mark && t.asked);
  }

  // The event stream is live again after it was lost: a turn whose connection broke before
  // (`broken`: a proxy killed mid-answer) and whose last event the replay did not bring
  // never gets it; it ends, and no longer takes other clients' replies for its own.
  reconnected() {
    for (const turn of this.turns.filter((t) => t.broken)) turn.end();
    this.turns = this.turns.filter((t) => !t.broken);
  }

  // A turn's last event (context.usage), whether or not it stored a reply. It names the
  // request of its turn: one of the page's own ends it and those before it (events come in
  // order); another's (a second tab's, another client's) ends none. One that names none (a
  // proxy before it did) ends the oldest, unless the stream's first replay brought it.
  turnEnded(data = {}, replayed = false) {
    const id = data.request_id;
    if (typeof id === "string") {
      // another key's turn, when this stream brings its event: the same tenant's session
      for (const [key, list] of [[this.key, this.turns], ...this.others()]) {
        const at = list.findIndex((t) => t.id === id);
        for (const turn of list.slice(0, at + 1)) turn.end();
        this.queue(key, list.slice(at + 1));
      }
      return;
    }
    const turn = replayed ? null : this.turns[0];
    if (!turn) return;
    turn.end();
    this.turns = this.turns.slice(1);
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
  // once that turn's last event came (`earlier`), or it would lack the reply; a turn an
  // earlier view sent may still stream: its answer comes first.
  async history(earlier) {
    if (earlier) {
      await earlier.sent;
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
  // another view's now; a failure is said all the same.
  async send() {
    const input = $("composer-input");
    const text = input.value.trim();
    if (!text || this.sending) return;
    const closed = this.view.abort.signal;
    const here = (fn) => { if (!closed.aborted) fn(); };
    const key = storedKey();
    this.sending = true;
    this.outgoing = text;
    const earlier = this.earlier();
    const turn = { id: turnId(), by: this.mark, made: this.made() };
    turn.ended = new Promise((done) => { turn.end = done; });
    let answered;
    turn.sent = new Promise((done) => { answered = done; });
    this.turns = [...this.turns, turn];
    sendable(false);
    const answer = $("assistant-message");
    // a live region whose whole text is set again at each delta: busy until the turn ends,
    // a screen reader reads the answer once, whole, not all of it again at every piece
    answer.setAttribute("aria-busy", "true");
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
      if (storedKey() !== key) throw new SignedOut(); // checked as the request is made
      turn.asked = true;
      await chatStream(this.view.id, body,
        (_piece, whole) => here(() => grow(answer, whole)), { requestId: turn.id });
      here(() => {
        if (input.value.trim() === text) input.value = ""; // not the next one typed meanwhile
        answer.dataset.state = "done";
      });
    } catch (err) {
      here(() => { answer.dataset.state = "failed"; });
      // a turn refused before its stream opened sends no last event; one whose stream
      // opened sends it however the stream ended, and stays to take it
      if (!err.opened) this.turns = this.turns.filter((t) => t !== turn);
      if (err instanceof SignedOut) return;
      else if (err.status === undefined) turn.broken = true; // the connection, not an event
      // said wherever the page is: left, the view no longer shows it, so it names the session
      this.view.ui.handleError(err, closed.aborted
        ? `The message to ${this.view.id} was not answered` : "The message was not answered");
    } finally {
      turn.done = true;
      answered();
      this.sending = false;
      this.outgoing = null;
      here(() => {
        sendable(true);
        answer.removeAttribute("aria-busy");
        this.view.refresh();
      });
    }
  }
}
