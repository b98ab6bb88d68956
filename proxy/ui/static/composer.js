// The session view's composer: a message sent through the session's chat endpoint, with the
// history resent as the client sent it, and the answer streamed into the answer box.

import { api, chatStream } from "./api.js";
import { el } from "./render.js";

const $ = (id) => document.getElementById(id);

export class Composer {
  constructor(view) {
    this.view = view; // the SessionView: its id, session, ui, abort and refresh
    this.sending = false;
    // This page's own turn while it runs: its reply streams in the answer box, so the turn's
    // deltas (the last may come after the stream's end) are not shown again in the list,
    // until the turn's last event. Events come after the answers they tell of, so a message
    // sent before the last turn's last event came waits for that one first (`before`).
    this.own = null;
    this.modelsAsked = null;
  }

  // The turn's last event (context.usage), whether or not it stored a reply.
  turnEnded() {
    if (!this.own) return;
    if (this.own.before) { this.own.before -= 1; return; } // an earlier turn's
    if (this.sending) this.own.ended = true;
    else this.own = null;
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
  // stored prompt form would read as an edited history. A new session has none.
  async history() {
    try {
      const rows = (await api.messages(this.view.id, "sent")).data;
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
    const signal = this.view.abort.signal;
    this.sending = true;
    this.own = { ended: false, before: this.own ? this.own.before + 1 : 0 };
    $("composer-send").disabled = true;
    const answer = $("assistant-message");
    answer.textContent = "";
    answer.dataset.state = "streaming";
    try {
      const body = { messages: [...(await this.history()), { role: "user", content: text }] };
      if (!$("composer-model").value.trim()) await this.fillModel();
      const model = $("composer-model").value.trim();
      if (model) body.model = model;
      await chatStream(this.view.id, body, (_piece, whole) => { answer.textContent = whole; },
        { signal });
      input.value = "";
      answer.dataset.state = "done";
    } catch (err) {
      answer.dataset.state = "failed";
      this.own = null; // a turn that failed may send no last event
      if (!signal.aborted) this.view.ui.handleError(err, "The message was not answered");
    } finally {
      this.sending = false;
      if (this.own && this.own.ended) this.own = null;
      $("composer-send").disabled = false;
      if (!signal.aborted) this.view.refresh();
    }
  }
}
