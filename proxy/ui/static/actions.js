// A session view's actions (branch, reset, compact, delete), each asked first: what they
// say on the status line, and where the page goes after.

import { api } from "./api.js";
import { num } from "./render.js";
import { say } from "./say.js";

const $ = (id) => document.getElementById(id);

export async function act(view, action) {
  const questions = {
    branch: `Branch ${view.id} into a new session with a copy of its history?`,
    reset: `Reset ${view.id}? Its messages, raw outputs and summaries are forgotten.`,
    compact: `Compact ${view.id} now? Its older messages are folded into a summary.`,
    delete: `Delete ${view.id} and everything it owns? This cannot be undone.`,
  };
  if (!(await view.ui.confirmAction(questions[action]))) return;
  const status = $("status-line");
  try {
    if (action === "branch") {
      const out = await api.branch(view.id);
      view.ui.toast(`Branched into ${out.id}`);
      location.hash = `#/s/${encodeURIComponent(out.id)}`;
    } else if (action === "reset") {
      await api.reset(view.id);
      view.messages.raw.clear(); // forgotten with it: the new rows may reuse a tool_call_id
      say(status, "Session reset.");
      view.refresh(true);
    } else if (action === "compact") {
      say(status, "Compacting…");
      const out = await api.compact(view.id);
      say(status, out.compacted
        ? `Compacted: ${num(out.tokens_before)} → ${num(out.tokens_after)} tokens.`
        : `Nothing to compact${out.reason ? `: ${out.reason}` : ""}.`);
      view.refresh(true);
    } else if (action === "delete") {
      await api.remove(view.id);
      $("composer-input").value = ""; // no draft kept: a session started again has none
      view.ui.toast(`Deleted ${view.id}`);
      location.hash = "#/";
    }
  } catch (err) {
    say(status, "");
    view.ui.handleError(err, `Could not ${action} the session`);
  }
}
