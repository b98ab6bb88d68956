// The session view: usage panel, summary, the message list (rows.js), the actions, the
// composer (composer.js), the memory prompt (memory.js), the live event stream, and what it
// says while the proxy fails it (outage.js).

import { act } from "./actions.js";
import { api, followEvents, RETRY_MAX_MS, RETRY_MS } from "./api.js";
import { Composer, sendable } from "./composer.js";
import { LiveView } from "./live.js";
import { MemoryPrompt } from "./memory.js";
import { handoffText, num, renderSummary, renderUsage } from "./render.js";
import { Outage, passing } from "./outage.js";
import { MessageRows, WINDOW } from "./rows.js";
import { atEnd, toEnd } from "./scroll.js";
import { say } from "./say.js";

const $ = (id) => document.getElementById(id);

export class SessionView {
  constructor(id, ui) {
    this.id = id;
    this.ui = ui; // {toast, confirmAction, handleError}
    this.session = null;
    this.abort = new AbortController();
    this.refreshing = null;
    this.again = false;
    this.whole = false; // the next load reloads the whole history
    this.handoff = null; // the toast of this session's handoff nudge
    this.outage = new Outage(ui); // what is said while the proxy fails the view
    this.tries = 0; // loads failed in a row: the next try waits longer (retryLater)
    this.retry = null; // the timer of the next try
    this.messages = new MessageRows(id, $("message-list"), (err, what) => ui.handleError(err, what),
      this.abort.signal);
    this.live = new LiveView($("message-list")); // the reply streaming now, after the rows
    this.composer = new Composer(this);
    this.memory = new MemoryPrompt(id, ui, this.abort.signal);
    this.following = false; // the event stream is open or reconnecting
    this.missing = false; // the last load found no such session
    // The stream's first replay is under way: the context.usage events it brings are those of
    // turns before the view opened, which end none of the page's own.
    this.replaying = false;
    this.loadingEarlier = false; // a "load earlier" is under way
    this.evictionShown = null; // the eviction total the rows shown reflect (reclaimed.eviction)
    this.evictionHeard = 0; // the largest a turn's context.usage named before that was known
    this.wire();
  }

  wire() {
    const on = (node, type, fn) => node.addEventListener(type, fn, { signal: this.abort.signal });
    const send = () => this.composer.send();
    on($("composer"), "submit", (e) => { e.preventDefault(); send(); });
    on($("composer-input"), "keydown", (e) => {
      // while an input method composes, Ctrl+Enter is its key (it confirms the candidate);
      // keyCode 229 is how engines and input methods without isComposing mark it
      if (e.isComposing || e.keyCode === 229) return;
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); send(); }
    });
    for (const button of document.querySelectorAll("[data-action]")) {
      on(button, "click", () => this.act(button.dataset.action));
    }
    on($("load-earlier"), "click", () => this.earlier());
    on($("skip-to-composer"), "click", () => $("composer-input").focus());
    on($("memory-save"), "click", () => this.memory.answer(true));
    on($("memory-dismiss"), "click", () => this.memory.answer(false));
  }

  open() {
    $("session-title").textContent = this.id;
    // nothing of the session shown before stays, whatever this one's load answers
    for (const id of ["session-meta", "message-list", "assistant-message",
      "usage-text", "usage-bar", "usage-legend", "summary"]) $(id).replaceChildren();
    say($("status-line"), ""); // and nothing a closed view said waits to be said
    $("usage-reclaimed").hidden = true;
    $("assistant-message").removeAttribute("aria-busy"); // a closed view's turn may still run
    $("load-earlier").hidden = true;
    $("composer-model").value = "";
    sendable(true); // a turn a closed view sent may still run
    this.composer.restore();
    this.refresh(true);
    this.replaying = true;
    this.follow();
  }

  // The event stream, while the session exists. A lost stream is said once, not on every
  // retry, and said until it is back, however long that takes (a proxy restarting); it
  // reconnects by itself, and when it is back the warning goes (it would still say
  // "reconnecting"). Reconnected, the view catches up: a reply that was streaming may have
  // lost deltas meanwhile, so it ends, and the rows shown are read again (an event that
  // changed them in place, such as the transient context.evicted, which no Last-Event-ID
  // replays, may be among those missed), once the stream says it is live (`: live`, after
  // its replay), so a change made while it subscribed is in that read or comes as an event. A 404 ends the stream: the view shows
  // the session as not found, and follows again once a load finds it (the composer's first
  // message started it). A 403 (this key may not) ends it. The view closed, nothing
  // reconnects: the warning goes with it.
  follow() {
    if (this.following) return;
    this.following = true;
    let again = false; // the stream was open before: this is a reconnection
    $("session-view").dataset.stream = "connecting";
    followEvents(this.id, (name, data) => this.onEvent(name, data), this.abort.signal,
      (state, err) => {
        // the stream's state, on the view for a test to wait on ("live": its replay is in)
        if (!this.abort.signal.aborted) $("session-view").dataset.stream = state;
        if (state !== "reconnecting") this.replaying = false;
        if (state === "gone" || state === "forbidden") {
          this.following = false;
          this.outage.cleared("lost");
          if (state === "gone") this.refresh(true);
        }
        if (state === "live") {
          if (again) { this.live.end(); this.composer.reconnected(); }
          if (again || this.outage.lost) this.refresh(true);
          if (this.outage.lost) {
            this.outage.cleared("lost");
            this.ui.toast("Live updates are back.", "info", 4000);
          }
          again = true;
        }
        const { outage } = this;
        if (state === "reconnecting" && err && !outage.lost) { // said until the stream is back
          outage.alert("lost", err, "The live updates stopped; reconnecting");
          outage.lost = outage.lost || document.createElement("div"); // a 401: none to remove
        }
      });
  }

  close() {
    this.composer.keep();
    this.abort.abort();
    delete $("session-view").dataset.stream;
    this.live.drop();
    this.memory.hide(); // and the room the page kept for it
    if (this.handoff) this.handoff.remove(); // about this view's session: it goes with it
    this.outage.close();
    clearTimeout(this.retry);
  }

  // A load that failed (the proxy away or restarting, a 5xx) is tried again by itself, 1 s
  // on, then twice as long each time up to 30 s (the event stream's pauses), for as long as
  // it fails: an event stream that stays healthy brings no event that loads the view again,
  // which stayed empty until a reload. The failure is said once, until a load is answered:
  // each try raises no other alert, nor the same again once the person has closed it. The
  // proxy back, the stream live loads the view too (follow).
  retryLater(err) {
    const said = "Could not load the session; trying again, every " +
      `${RETRY_MAX_MS / 1000} s at most, until it answers`;
    if (!this.outage.failed && !this.outage.alert("failed", err, said)) {
      return; // a 401: signed out, nothing to try again
    }
    clearTimeout(this.retry);
    this.retry = setTimeout(() => this.refresh(true),
      Math.min(RETRY_MAX_MS, RETRY_MS * 2 ** this.tries));
    this.tries += 1;
  }

  // A load was answered (the session, or a refusal no try changes): no try is pending, and
  // the failure said is no longer so.
  loaded() {
    this.tries = 0;
    clearTimeout(this.retry);
    this.outage.cleared("failed");
  }

  // One load at a time, and at most one more queued: a burst of events while one runs
  // loads once after it. `whole` (earlier rows changed in place) makes the next load reload
  // the whole history; else it fetches the rows after those shown (MessageRows.fetch).
  refresh(whole = false) {
    if (whole) this.whole = true;
    if (this.refreshing) { this.again = true; return this.refreshing; }
    const reload = this.whole;
    this.whole = false;
    this.busy(true);
    this.refreshing = this.load(reload).finally(() => this.settled());
    return this.refreshing;
  }

  // A load (or "load earlier") ended: the one queued meanwhile goes, else the list is idle.
  settled() {
    this.refreshing = null;
    if (this.again) { this.again = false; this.refresh(); } else this.busy(false);
  }

  // The list says (aria-busy) while a load of its rows runs or waits its turn: the rows may be
  // rebuilt meanwhile, which assistive technology then waits out, and whoever watches the
  // page can tell when the view has caught up with the events it was sent. A closed view's
  // load leaves the list, now another view's, alone.
  busy(on) {
    if (this.abort.signal.aborted) return;
    const list = $("message-list");
    if (on) list.setAttribute("aria-busy", "true");
    else list.removeAttribute("aria-busy");
  }

  // A reply that ended before this load began is in what it loads: the load drops it. The
  // view opens on its newest rows, by the composer, and stays there as rows come in while
  // the page is scrolled to its end; scrolled up (reading earlier rows) it stays put. A 404
  // forgets the raw outputs paged back: a session started again under this id has its own.
  async load(whole) {
    const ended = this.live.ended();
    try {
      const asked = api.session(this.id);
      const [session, rows] = await Promise.all([
        asked, this.messages.fetch(whole, async () => (await asked).message_count || 0)]);
      if (this.abort.signal.aborted) return;
      this.loaded();
      const stick = this.session === null || atEnd(); // opening, or following the tail
      this.session = session;
      if (session.created_at) this.composer.known(session.created_at);
      this.messages.take(rows);
      if (rows.whole || rows.from !== undefined) this.shownEviction(session);
      this.live.drop(ended);
      if (this.missing) { this.missing = false; this.follow(); }
      this.render();
      if (stick && this.messages.trim()) this.showEarlier();
      if (stick && this.messages.rows.length) toEnd();
    } catch (err) {
      if (this.abort.signal.aborted) return; // closed: the page shows another view now
      this.whole = true; // what this load was to bring (a row rewritten ...) is not known
      if (err.status === 404) {
        if (this.session) { // deleted while shown: what the page showed of it goes too
          if (!this.composer.sending) $("assistant-message").textContent = "";
          say($("status-line"), "");
          this.memory.hide();
          if (this.handoff) this.handoff.remove();
        }
        this.loaded(); // an answer: no such session, which a try again does not change
        this.session = null;
        this.composer.known(null); // a turn of the deleted session's ends
        this.messages.clear();
        this.missing = true;
        this.live.drop();
        this.render();
        return;
      }
      // refused (a key limited to other agents): said where the session's details go too,
      // so the view does not pass for an empty session once the toast has gone
      if (err.status === 403) $("session-meta").textContent = `Refused: ${err.message}`;
      if (passing(err)) {
        this.retryLater(err);
      } else { // no try is pending: the refusal is said, not "trying again" with it
        this.loaded();
        this.ui.handleError(err, "Could not load the session");
      }
    }
  }

  // A whole read reads the session first (its message_count places the rows), so the rows
  // reflect at least the eviction total it names. One a turn named before any read was done
  // and that this read does not reflect reads the rows again, once.
  shownEviction(session) {
    const total = session.reclaimed ? session.reclaimed.eviction : 0;
    const heard = this.evictionShown === null ? this.evictionHeard : 0;
    this.evictionShown = total;
    if (heard > total) this.refresh(true);
  }

  // Whether a turn's context.usage names an eviction the rows shown do not reflect: one
  // whose transient context.evicted this view never got (it was sent between the first read
  // of the rows and the stream's opening). The usage event is persisted: the stream replays
  // it, or sends it live.
  evictedUnseen(data) {
    const total = data.reclaimed_tokens;
    if (typeof total !== "number") return false;
    if (this.evictionShown === null) {
      this.evictionHeard = Math.max(this.evictionHeard, total);
      return false;
    }
    return total > this.evictionShown;
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
    this.composer.fillModel();
    this.messages.render(s && s.summary ? s.summary.boundary : 0);
    this.live.show();
    this.showEarlier();
  }

  // The rows before the window, WINDOW at a time; rows that no longer fit before it (the
  // history changed meanwhile) reload the window instead. It takes its turn with the loads
  // (`refreshing`): a reload of the window begun before it would otherwise end after it and
  // drop the rows it added, and one asked for meanwhile waits for it. The button is not
  // disabled while it loads: a disabled button loses the keyboard's focus. The last press
  // hides it: the focus on it goes to the first row, which it added (left on a hidden
  // button, it fell to the page's body, and a screen reader said nothing of where it was).
  async earlier() {
    if (this.loadingEarlier) return;
    this.loadingEarlier = true;
    const button = $("load-earlier");
    const pressed = document.activeElement === button; // from the keyboard
    try {
      while (this.refreshing) await this.refreshing;
      const step = this.messages.earlier(this.abort.signal);
      this.busy(true);
      this.refreshing = step.catch(() => {}).finally(() => this.settled());
      if (!(await step)) this.refresh(true);
    } catch (err) {
      if (!this.abort.signal.aborted) this.ui.handleError(err, "Could not load the earlier messages");
    } finally {
      this.loadingEarlier = false;
      if (!this.abort.signal.aborted) this.showEarlier();
      const first = $("message-list").firstElementChild;
      const left = [button, document.body].includes(document.activeElement);
      if (pressed && left && button.hidden && first) {
        first.tabIndex = -1;
        first.focus();
      }
    }
  }

  showEarlier() {
    const button = $("load-earlier");
    const before = this.session ? this.messages.start : 0;
    button.hidden = before === 0;
    const adds = Math.min(WINDOW, before); // what a press adds: fewer than WINDOW at the start
    button.textContent = `Show ${num(adds)} earlier message${adds === 1 ? "" : "s"} ` +
      `(${num(before)} not shown)`;
  }

  act(action) {
    return act(this, action);
  }

  // Events that add rows (a turn's, a result cut as it came in) fetch the rows after those
  // shown; those that change earlier rows in place (a reset, a trim, an eviction, a
  // compaction) reload the whole history.
  onEvent(name, data) {
    const status = $("status-line");
    switch (name) {
      case "session.message.delta.appended":
        if (!this.composer.own) this.live.add(data);
        break;
      case "context.usage": // a turn's last event, whether or not it stored a reply
      case "session.message.appended":
        if (name === "context.usage") this.composer.turnEnded(data, this.replaying);
        this.live.end();
        this.refresh(name === "context.usage" && this.evictedUnseen(data));
        break;
      case "context.truncated": // a result cut as it came in, or an observation after it
        this.messages.named(data.handle);
        this.refresh();
        break;
      case "context.evicted": // not toasted: routine, and the panel shows it
        this.refresh(!this.messages.evicted(data.handles));
        break;
      case "session.reset": this.messages.raw.clear(); // its raw outputs went with it
      case "context.trimmed":
        this.refresh(true);
        break;
      case "context.compaction.started":
        say(status, "Compacting the older messages…");
        break;
      case "context.compaction.completed":
        say(status, "Compacted" + (data.tokens_after != null
          ? `: ${num(data.tokens_before)} → ${num(data.tokens_after)} tokens.` : "."));
        this.refresh(true);
        break;
      case "context.compaction.failed":
        say(status, `Compaction failed${data.reason ? `: ${data.reason}` : ""}.`);
        break;
      case "context.handoff_suggested":
        this.handoff = this.ui.toast(handoffText(data), "handoff", 0, `handoff:${this.id}`);
        break;
      case "memory.suggestion":
        this.memory.ask();
        break;
      default:
        break;
    }
  }
}
