// The session view's message list: the stored rows, brought up to date with only what
// changed, and the raw outputs of cut and evicted results paged back.
//
// A long agent session holds thousands of rows, and showing them all makes the first load
// slow: the list holds a window, the last WINDOW rows at first (from `start`, the offset of
// the first one held), and "load earlier" (data-testid load-earlier) adds WINDOW rows before
// it at a time. Its event stream tells of several changes per tool round, so a live event
// fetches only the rows after the last one held (`offset` counts the rows in position order:
// stable while the session only grows), with that last row again as an overlap: when it comes
// back as held, the rows before it are taken as unchanged and the new ones are appended, to
// the data and to the page. When it does not (a reset, an edited history superseding the
// tail, the row itself changed), or when the caller says earlier rows changed in place (a
// trim, a compaction, a reconnected stream that may have missed those), the window is read
// again (as many rows as it held, ending at the session's last) and the list rebuilt. An
// eviction names the results it cleared: the rows are read again from the first of those
// held on, and only the items of rows that changed are built again (`evicted`). So it is when
// a `context.truncated` named a row held uncut: a tool's output sent as a user message (an
// observation) is cut in place on the step after the one it came in, with only that event,
// the one a result cut as it comes in sends too.

import { api } from "./api.js";
import { el, rawHandle, rawKey, rawSaid, rawStatus, renderMessage } from "./render.js";

// What a press on a raw output's button reads: pages of the proxy's on to this many
// characters more. The proxy's page is the model's (the agent's maxChars, its context's
// share), far less than a person reads through: a large spill took a press per page.
export const PRESS_CHARS = 50000;
export const WINDOW = 200; // the rows a first load shows, and "load earlier" adds

export class MessageRows {
  constructor(id, list, onError, signal) {
    this.id = id;
    this.list = list; // the <ol> the rows are shown in
    this.onError = onError; // (err, what)
    this.signal = signal; // aborted: the view closed, and the list shows another's rows
    this.rows = [];
    this.start = 0; // the offset of the first row held: those before it are not loaded
    this.shown = 0; // how many of the rows the list shows
    this.boundary = 0; // the summary's boundary the list was folded at
    this.raw = new Map(); // a row's rawKey -> what was paged back
    this.paging = new Set(); // the rawKeys a press is reading now
    this.keys = new WeakMap(); // an item of the list -> the rawKey of the row it shows
    this.cut = new Set(); // the handles context.truncated named since the last fetch began
    this.gone = new Set(); // the handles context.evicted named since the last fetch began
    this.dirty = []; // the indexes of held rows a fetch changed in place, for render
  }

  // A context.evicted event's results, by the handles its placeholders name: the next fetch
  // reads the rows again from the first of them held then on. They are found when it begins,
  // not now: a load under way may place the window elsewhere before. False when it names
  // none (an event from before handles were named): the caller reloads the whole window then.
  evicted(handles) {
    if (!Array.isArray(handles)) return false;
    for (const handle of handles) this.gone.add(handle);
    return true;
  }

  // A context.truncated event's result, by the handle its marker names (rawHandle).
  named(handle) {
    if (typeof handle === "string") this.cut.add(handle);
  }

  // The rows to take: with `whole`, or no row yet, the window again; with a held row an
  // eviction or a context.truncated named since (one held uncut: rewritten in place), the
  // rows from the first such on, changed in place (`from`), or the window again when they
  // are no longer the rows held; else the rows after the last one held, or the window again
  // when that one is no longer as it was. `count` resolves to the
  // session's length (its message_count), which places the window at the end. The rows are
  // read after the session is: what they show is at least as new as the count shown beside
  // them, so a reset elsewhere never shows "0 messages" over the rows it removed.
  // A fetch that fails leaves the next one to the caller: a whole one (SessionView.load).
  async fetch(whole, count) {
    const cut = this.cut;
    const gone = this.gone;
    this.cut = new Set();
    this.gone = new Set();
    const total = await count();
    const have = this.rows.length;
    const from = cut.size || gone.size
      ? this.rows.findIndex((row) => row.tool_call_id && (gone.has(rawHandle(row)) ||
        (!row.truncated && cut.has(rawHandle(row)))))
      : -1;
    if (!whole && from >= 0) {
      const out = (await api.messages(this.id, "prompt", this.start + from)).data;
      if (inPlace(out, this.rows.slice(from))) return { whole: false, from, rows: out };
      whole = true;
    }
    if (!whole && have) {
      const out = (await api.messages(this.id, "prompt", this.start + have - 1)).data;
      if (out.length && same(out[0], this.rows[have - 1])) return { whole: false, rows: out.slice(1) };
    }
    const start = Math.max(0, total - Math.max(WINDOW, have));
    return { whole: true, start, rows: (await api.messages(this.id, "prompt", start)).data };
  }

  // The WINDOW rows (or fewer) before the first one held, added to the data and the page;
  // nothing when a load rebuilt the window meanwhile. Rows that do not end before the first
  // held (the history changed under them) are not taken: the caller reloads the window.
  async earlier(signal) {
    const start = this.start;
    const from = Math.max(0, start - WINDOW);
    if (start === 0) return true;
    const out = (await api.messageRange(this.id, from, start - from)).data;
    if (this.start !== start || signal.aborted) return true;
    const first = this.rows[0];
    if (first && (out.length !== start - from || out[out.length - 1].pos >= first.pos)) return false;
    this.rows = [...out, ...this.rows];
    this.start = from;
    this.shown += out.length;
    this.list.prepend(...out.map((row) => this.item(row)));
    return true;
  }

  // What fetch answered, into the data; render shows it.
  take({ whole, start, from, rows }) {
    if (whole) {
      this.rows = rows;
      this.start = start;
      this.shown = 0;
    } else if (from !== undefined) {
      rows.forEach((row, i) => {
        const at = from + i;
        if (at >= this.rows.length) this.rows.push(row);
        else if (!same(row, this.rows[at])) { this.rows[at] = row; this.dirty.push(at); }
      });
    } else {
      for (const row of rows) this.rows.push(row);
    }
  }

  clear() {
    this.rows = [];
    this.start = 0;
    this.shown = 0;
    this.gone.clear();
    this.dirty = [];
    this.raw.clear();
  }

  // Rows before the summary's boundary (the leading system rows aside) are folded into it:
  // a new boundary refolds the list, else only the rows not shown yet are added. Whatever
  // streams after the rows (the live reply) is the caller's to show again after.
  // An item built again takes the focus the one it replaces had (refocus).
  render(boundary) {
    if (boundary !== this.boundary) this.shown = 0;
    this.boundary = boundary;
    const dirty = this.dirty;
    this.dirty = [];
    const focus = focused(this.list);
    if (this.shown) {
      for (const at of dirty) this.list.children[at].replaceWith(this.item(this.rows[at]));
    }
    const fresh = this.rows.slice(this.shown).map((row) => this.item(row));
    if (this.shown === 0) this.list.replaceChildren(...fresh);
    else this.list.append(...fresh);
    this.shown = this.rows.length;
    refocus(this.list, focus);
  }

  // A view left open on a working agent follows every row it adds: held past 2 * WINDOW
  // while the page follows the tail, the rows before the last WINDOW go, from the data and
  // the page ("load earlier" brings them back), so the page, and the window a whole reload
  // reads again, stay the size a fresh open has. True when some went. After render only:
  // the rows and the list's items are then one for one. The row the keyboard's focus or a
  // selection is in stays, with those after it: the person is on it (a raw output read from
  // the keyboard, text being copied); a later load trims the rest once they have moved on.
  trim() {
    if (this.rows.length <= 2 * WINDOW || this.shown !== this.rows.length) return false;
    const drop = before(this.list, this.rows.length - WINDOW);
    if (!drop) return false;
    this.rows = this.rows.slice(drop);
    this.start += drop;
    this.shown -= drop;
    const range = document.createRange();
    range.setStartBefore(this.list.firstElementChild);
    range.setEndAfter(this.list.children[drop - 1]);
    range.deleteContents();
    return true;
  }

  item(row) {
    const folded = row.pos < this.boundary && row.role !== "system" && row.role !== "developer";
    const li = renderMessage(row, (r, node) => this.pageBack(r, node), folded, this.tool(row));
    if (row.tool_call_id && li.querySelector("[data-testid=raw-page]")) {
      this.keys.set(li, rawKey(row));
      this.showRaw(li, rawKey(row));
    }
    return li;
  }

  // The name of the tool a result answers: its own `name`, else the call of that id in the
  // nearest row before it held ("" when that row is not loaded).
  tool(row) {
    if (row.role !== "tool") return "";
    if (row.message && typeof row.message.name === "string") return row.message.name;
    for (let i = this.rows.length - 1; i >= 0; i--) {
      const calls = this.rows[i].pos < row.pos && this.rows[i].message?.tool_calls;
      const call = (calls || []).find((c) => c && c.id === row.tool_call_id);
      if (call) return call.function?.name || "";
    }
    return "";
  }

  // The raw output of a cut or evicted result, PRESS_CHARS a press: the proxy's pages (each
  // capped at the agent's maxChars; its header says which characters it holds), shown as
  // each comes. What was paged back is kept here, so a reload of the list does not lose it;
  // a press while one reads is dropped (both read the same place, and showed it twice).
  // A read belongs to its row: once the list no longer shows that row (the view closed, a
  // reset, a result superseded at its position under the same call id, the row trimmed
  // away) it stops and writes nothing more, neither into the row now at that place nor an
  // error about a row no longer there.
  async pageBack(row, li) {
    const key = rawKey(row);
    if (this.paging.has(key)) return;
    this.paging.add(key);
    this.showRaw(li, key);
    try {
      for (let read = 0; read < PRESS_CHARS;) {
        const before = this.raw.get(key);
        const shown = before || { text: "", next: 0, total: 0 };
        const out = await api.toolOutput(this.id, rawHandle(row), shown.next, PRESS_CHARS - read);
        if (!this.at(row, key)) return;
        if (this.raw.get(key) !== before) break; // forgotten meanwhile (a reset)
        const { text, end } = unwrapPage(out.page, shown.next);
        this.raw.set(key, { text: shown.text + text, next: end, total: out.total_chars,
          capped: out.capped, original: out.original_bytes });
        this.showRaw(this.at(row, key), key, text);
        if (end <= shown.next || end >= out.total_chars) break;
        read += end - shown.next;
      }
    } catch (err) {
      if (this.at(row, key)) this.onError(err, "Could not page the output back");
    } finally {
      this.paging.delete(key);
    }
    const now = this.at(row, key);
    if (now) this.showRaw(now, key);
  }

  // The item the list shows now of the row `key` names (a load may have drawn it again),
  // else null: the view closed (the list shows another session's rows, where one at the
  // same place may have the same key: a branch's copy), or the item at the row's place
  // shows another row, or none.
  at(row, key) {
    if (this.signal.aborted) return null;
    const li = this.list.querySelector(`[data-pos="${row.pos}"]`);
    return li && this.keys.get(li) === key ? li : null;
  }

  // What was paged back of `key`, in its row `li`: `added` (a page read now) goes after the
  // text shown, a spill's megabytes not set again at each page; else the whole text.
  // Nothing read yet, the status says whether its first page is being read.
  showRaw(li, key, added = null) {
    const shown = this.raw.get(key);
    const button = li.querySelector("[data-testid=raw-page]");
    const reading = this.paging.has(key);
    if (!shown) {
      rawSaid(li, reading ? "Reading…" : "");
      button.setAttribute("aria-disabled", String(reading));
      return;
    }
    let pre = li.querySelector("[data-testid=raw-output]");
    if (pre && added !== null) {
      pre.append(added);
    } else {
      pre = pre || li.appendChild(el("pre", { class: "raw", "data-testid": "raw-output", dir: "auto",
        tabindex: "0" }));
      pre.textContent = shown.text;
    }
    // "Reading…" for the whole press, not each page's count: the status is a live region,
    // and a press reads some thirty pages, each of which it would announce
    rawSaid(li, reading ? "Reading…" : rawStatus(shown));
    // reading, or all read: it takes no press (renderMessage), yet keeps the focus, which a
    // disabled button gives up to the page's body, where the keyboard's place is lost
    button.setAttribute("aria-disabled", String(reading || shown.next >= shown.total));
  }
}

// How many of the list's first `n` items may go: those before the first one the focus, or
// either end of a selection, is in.
function before(list, n) {
  const sel = document.getSelection();
  const ends = sel && !sel.isCollapsed ? [sel.anchorNode, sel.focusNode] : [];
  let first = n;
  for (let node of [document.activeElement, ...ends]) {
    if (!node || !list.contains(node)) continue;
    if (node === list) return 0; // a selection's end between items: keep them all
    while (node.parentNode !== list) node = node.parentNode;
    first = Math.min(first, Array.prototype.indexOf.call(list.children, node));
  }
  return first;
}

// Rows read again from a held one on (`out`) that are the rows held there (`held`), changed
// in place at most: each at the same position and creation, and none gone.
function inPlace(out, held) {
  return out.length >= held.length &&
    held.every((row, i) => out[i].pos === row.pos && out[i].created_at === row.created_at);
}

// One row as the API gave it both times: the same position, creation, text and marks.
function same(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// A page as the tool-outputs endpoint gives it: a header naming its characters, the text,
// and a note naming the next offset when there is more.
export function unwrapPage(page, offset) {
  const head = page.match(/^\[read_tool_output id=.* chars (\d+)-(\d+) of (\d+)\]\n/);
  if (!head) return { text: page, end: offset + page.length };
  const text = page.slice(head[0].length).replace(/\n\[\.\.\. more: read_tool_output\(.*\) \.\.\.\]$/, "");
  return { text, end: Number(head[2]) };
}

// Where the keyboard's focus is in the list: the focused element, its row's position, the
// tool call its row answers, and which of the row's elements it is (its data-testid, a raw
// output's button, else its tag and classes, a message's scrolling text, and the nth of
// those), or null when the focus is elsewhere.
function focused(list) {
  const had = document.activeElement;
  const li = had && had !== list && list.contains(had) ? had.closest("[data-pos]") : null;
  if (!li) return null;
  const like = had.dataset.testid ? `[data-testid="${CSS.escape(had.dataset.testid)}"]`
    : had.localName + [...had.classList].map((c) => `.${CSS.escape(c)}`).join("");
  return { had, pos: li.dataset.pos, call: li.dataset.toolCallId, like,
    nth: [...li.querySelectorAll(like)].indexOf(had) };
}

// A live event rebuilt the row the focus was in (a raw output's button pressed from the
// keyboard, a long message scrolled with the arrow keys, then a compaction or a trim read the
// window again): the focus fell to the page's body, and a keyboard started over at the top.
// It goes to the same element of that row built again, or to the row itself when it has no
// such element or that one takes no focus now. A tool result is found by its call's id, the
// nearest to where it was (an edited history moves the rows after the edit), any other row
// by its position.
function refocus(list, focus) {
  if (!focus || focus.had.isConnected) return;
  const near = (n) => Math.abs(Number(n.dataset.pos) - Number(focus.pos));
  const li = focus.call
    ? [...list.children].filter((n) => n.dataset.toolCallId === focus.call)
      .sort((a, b) => near(a) - near(b))[0]
    : list.querySelector(`:scope > [data-pos="${CSS.escape(focus.pos)}"]`);
  if (!li) return;
  const same = focus.nth < 0 ? null : li.querySelectorAll(focus.like)[focus.nth];
  if (same) same.focus();
  if (same && document.activeElement === same) return;
  li.tabIndex = -1;
  li.focus();
}
