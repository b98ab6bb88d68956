// A reply as it streams, from the session's `session.message.delta.appended` events: the
// text of each choice so far (LiveReply, pure), shown at the end of the message list
// (LiveView) until the stored messages have it.
//
// A delta carries the text since the previous one for its `choice`; one too long for a single
// notification comes as consecutive events with `part` and `parts` (0-based), which are held
// until all of them are in and then joined in `part` order, so a piece is never shown out of
// place. The reply ends with the turn (`end`): the view keeps showing it until the stored
// messages, reloaded, have it instead.

import { renderStreaming } from "./render.js";

// A streaming reply with no delta for this long is dropped: its stream ended with no event
// at all (say, the database was down when the reply was to be stored).
export const STALE_MS = 60000;

export class LiveReply {
  constructor() {
    this.text = new Map(); // choice -> text so far
    this.pending = new Map(); // choice -> {parts, pieces: Map(part -> text)}
    this.ended = false;
  }

  // Take one event's data; true when some choice's text grew.
  add(data) {
    const choice = Number.isInteger(data.choice) ? data.choice : 0;
    if (typeof data.delta !== "string") return false; // cut to a marker: nothing to show
    const parts = data.parts;
    if (!Number.isInteger(parts) || parts <= 1 || !Number.isInteger(data.part)) {
      this.flush(choice);
      return this.append(choice, data.delta);
    }
    let held = this.pending.get(choice);
    if (!held || held.parts !== parts || held.pieces.has(data.part)) {
      this.flush(choice); // a new delta's pieces: whatever came of an earlier one goes first
      held = { parts, pieces: new Map() };
      this.pending.set(choice, held);
    }
    held.pieces.set(data.part, data.delta);
    if (held.pieces.size < parts) return false;
    return this.flush(choice);
  }

  // Whatever pieces of a delta are in, in part order.
  flush(choice) {
    const held = this.pending.get(choice);
    if (!held) return false;
    this.pending.delete(choice);
    const order = [...held.pieces.keys()].sort((a, b) => a - b);
    return this.append(choice, order.map((k) => held.pieces.get(k)).join(""));
  }

  append(choice, text) {
    if (!text) return false;
    this.text.set(choice, (this.text.get(choice) || "") + text);
    return true;
  }

  // [choice, text] pairs, by choice.
  choices() {
    return [...this.text.entries()].sort((a, b) => a[0] - b[0]);
  }
}

// A streaming text's last piece at least this long ends at its next line break: the text
// goes on in a new piece, a block of its own (app.css), so a delta lays out the last piece
// again, not the whole reply.
export const PIECE_CHARS = 2000;

// Append `added` to a streaming text's box: to its last piece, or a new one after a line break.
function append(pre, added) {
  const last = pre.lastChild;
  if (!last) { pre.append(piece(added)); return; }
  const text = last.firstChild || last;
  const nl = added.lastIndexOf("\n");
  if (text.length + added.length < PIECE_CHARS || nl < 0) { text.appendData(added); return; }
  text.appendData(added.slice(0, nl + 1));
  if (nl + 1 < added.length) pre.append(piece(added.slice(nl + 1)));
  else pre.append(piece(""));
}

function piece(text) {
  const span = document.createElement("span");
  span.className = "piece";
  span.append(document.createTextNode(text));
  return span;
}

// The streaming reply of one session view: one item per choice after the stored messages.
export class LiveView {
  constructor(list) {
    this.list = list;
    this.reply = null;
    this.timer = null;
    this.items = []; // the items shown: kept, so a delta never searches the whole list
    this.shown = null; // the reply the items show
    this.lengths = []; // how much of each choice's text its item holds
  }

  // A delta: a new reply when none streams (or the last one ended), its text grows.
  add(data) {
    if (!this.reply || this.reply.ended) this.reply = new LiveReply();
    if (!this.reply.add(data)) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => { this.drop(); this.show(); }, STALE_MS);
    this.show();
  }

  // The turn ended (its reply stored, or none): a load begun after this drops the reply.
  end() {
    if (this.reply) this.reply.ended = true;
  }

  ended() {
    return this.reply && this.reply.ended ? this.reply : null;
  }

  // Drop the reply (only `which`, when given: a newer one keeps streaming).
  drop(which) {
    if (which === null || (which !== undefined && which !== this.reply)) return;
    this.reply = null;
    clearTimeout(this.timer);
  }

  // The reply's items, built again. Each text is a bounded box (a message's body): one that
  // showed its end (or is new) follows its newest lines; one the reader scrolled up in
  // stays where it was.
  show() {
    if (this.reply && this.reply === this.shown && this.grow()) return;
    const was = new Map();
    for (const li of this.items) {
      const pre = li.querySelector("pre.body");
      const end = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
      was.set(li.dataset.choice, end ? null : pre.scrollTop);
      li.remove();
    }
    this.items = [];
    if (!this.reply) return;
    const choices = this.reply.choices();
    const items = choices.map(([choice, text]) => renderStreaming(choice, text, choices.length > 1));
    this.list.append(...items);
    this.items = items;
    this.shown = this.reply;
    this.lengths = choices.map(([, text]) => text.length);
    for (const li of items) {
      const pre = li.querySelector("pre.body");
      const top = was.get(li.dataset.choice);
      pre.scrollTop = top === undefined || top === null ? pre.scrollHeight : top;
    }
  }

  // The items shown take what their choices' text grew by, appended to the text they hold:
  // a delta costs its own length, where building the item again cost the whole reply's. They
  // go back after the rows when those were rebuilt or added after them. False when the
  // choices are no longer those shown (a new one came): the items are built again.
  grow() {
    const choices = this.reply.choices();
    if (choices.length !== this.items.length ||
      choices.some(([choice], i) => this.items[i].dataset.choice !== String(choice))) return false;
    const moved = this.list.lastElementChild !== this.items[this.items.length - 1];
    choices.forEach(([, text], i) => {
      const li = this.items[i];
      const pre = li.querySelector("pre.body");
      const top = pre.scrollTop;
      const end = !li.isConnected || pre.scrollHeight - top - pre.clientHeight < 8;
      const added = text.slice(this.lengths[i]);
      this.lengths[i] = text.length;
      append(pre, added);
      if (moved) this.list.append(li);
      pre.scrollTop = end ? pre.scrollHeight : top;
    });
    return true;
  }
}
