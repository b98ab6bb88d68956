// The session view's "Remember these N things?" prompt: the session's memory suggestions
// nobody has answered yet, asked one at a time, oldest first.

import { api } from "./api.js";
import { el } from "./render.js";
import { atEnd } from "./scroll.js";

const $ = (id) => document.getElementById(id);

// The prompt sits in the window's corner: while it shows, the page ends with room for it, so
// scrolled to its end the composer is above it, not under it; the composer keeps as much room
// below it when the view scrolls it into sight (rows coming in while it follows the end).
// Shown while the page is at its end, the prompt does not cover the composer there either.
function room(on) {
  const page = document.scrollingElement;
  const end = atEnd();
  const below = on ? `calc(${$("memory-prompt").offsetHeight}px + 2rem)` : "";
  $("main").style.paddingBottom = below;
  // a window too narrow for the prompt and the toasts side by side stacks them (app.css)
  document.documentElement.style.setProperty("--prompt-room", below);
  $("composer").style.scrollMarginBottom = below;
  const tall = page.scrollHeight > page.clientHeight;
  if (on && end && tall) $("composer").scrollIntoView({ block: "end" });
}

export class MemoryPrompt {
  constructor(id, ui, signal) {
    this.id = id;
    this.ui = ui; // {toast, handleError}
    this.signal = signal; // aborted when the view closes
    this.suggestion = null;
    this.asking = null; // the lookup of the suggestions waiting (ask)
    this.askAgain = false;
    this.answering = false; // an accept or reject is on its way
    // where the focus came into the prompt from; kept while it comes from nowhere (an
    // answer's next suggestion given the focus the hidden prompt lost to the page's body)
    this.opener = null;
    const on = (type, fn) => $("memory-prompt").addEventListener(type, fn, { signal });
    on("focusin", (e) => {
      const from = e.relatedTarget;
      if (from && !$("memory-prompt").contains(from)) this.opener = from;
    });
    on("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); this.putAway(); } });
  }

  // Escape: the prompt goes unanswered (the suggestion still waits, asked again at its next
  // cue or the view's next open; the CLI and the API answer it too), and the focus goes
  // back where it came from, or to the composer when that place is gone.
  putAway() {
    if (this.answering) return;
    const back = this.opener && this.opener.isConnected && this.opener.checkVisibility()
      ? this.opener : $("composer-input");
    this.hide();
    back.focus();
  }

  // A memory.suggestion event (live, or replayed from the start when the stream opens) is
  // a cue to ask the proxy which of this session's suggestions nobody has answered yet: a
  // replayed one may have been answered since, and several may be waiting. One lookup at
  // a time; a cue during it runs one more after.
  ask() {
    if (this.asking) { this.askAgain = true; return this.asking; }
    this.asking = this.next().finally(() => {
      this.asking = null;
      if (this.askAgain) { this.askAgain = false; this.ask(); }
    });
    return this.asking;
  }

  async next() {
    try {
      const pending = (await api.pendingMemory(this.id)).data || [];
      if (this.signal.aborted) return;
      if (pending.length) this.show(pending[0], pending.length);
      else this.hide();
    } catch (err) {
      if (!this.signal.aborted) this.ui.handleError(err, "Could not list the suggestions");
    }
  }

  show(data, waiting = 1) {
    const facts = (data.facts || []).map((f) =>
      (typeof f === "string" ? f : f.text || f.fact || f.content || JSON.stringify(f)));
    this.suggestion = { id: data.suggestion_id || data.id, facts };
    $("memory-title").textContent =
      `Remember ${facts.length === 1 ? "this thing" : `these ${facts.length} things`}?` +
      (waiting > 1 ? ` (1 of ${waiting} waiting)` : "");
    $("memory-facts").replaceChildren(...facts.map((f) => el("li", { text: f, dir: "auto" })));
    $("memory-prompt").hidden = false;
    room(true);
    // A region appearing is not read out: the live region beside it (role=status) says the
    // question and its facts once for each suggestion asked; asked again (a replayed event)
    // it is not said again.
    const said = `${$("memory-title").textContent} ${facts.join("; ")}. ` +
      "Save or Dismiss in the memory prompt.";
    if ($("memory-announce").textContent !== said) $("memory-announce").textContent = said;
  }

  hide() {
    this.suggestion = null;
    $("memory-prompt").hidden = true;
    $("memory-announce").textContent = "";
    room(false);
  }

  // One answer at a time: a second press while the first is on its way (a double click)
  // would answer the suggestion again, which the proxy refuses.
  // Answered from the keyboard, the focus keeps a place: the prompt hidden under it gave it
  // up to the page's body; the same button of the next suggestion has it, or the composer
  // when none waits (unless the person went somewhere else meanwhile).
  async answer(save) {
    const s = this.suggestion;
    if (!s || this.answering) return;
    this.answering = true;
    const button = document.activeElement;
    const held = $("memory-prompt").contains(button);
    try {
      await (save ? api.acceptMemory(s.id) : api.rejectMemory(s.id));
      this.hide();
      if (save) this.ui.toast(`Saved ${s.facts.length === 1 ? "it" : `${s.facts.length} facts`}.`);
    } catch (err) {
      this.ui.handleError(err, save ? "Could not save to memory" : "Could not dismiss");
    } finally {
      this.answering = false;
    }
    await this.ask(); // the next one waiting, or none (this one answered elsewhere meanwhile)
    const lost = !document.activeElement || document.activeElement === document.body;
    if (held && lost && !this.signal.aborted) {
      ($("memory-prompt").hidden ? $("composer-input") : button).focus();
    }
  }
}
