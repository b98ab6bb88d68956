// What a live region says, at most once a GAP: a burst of events that each change its text
// (a compaction's start and end, a handoff nudge's new fraction, a hundred of them replayed)
// queued one announcement each. The first change is written at once; those that follow
// within the GAP wait, and only the last of them is written when it ends. An empty text
// (the region cleared) is written at once and drops any text waiting: it announces nothing.
// An alert's (role=alert: an error toast) is written at once too: what it says now is what
// the person must hear now, not a second later.

const GAP = 1000;
const waits = new WeakMap(); // node -> {timer, text (undefined: nothing waits)}

export function say(node, text) {
  const wait = waits.get(node);
  if (text === "" || node.closest("[role=alert]")) {
    if (wait) { clearTimeout(wait.timer); waits.delete(node); }
    if (node.textContent !== text) node.textContent = text; // the same again says nothing
    return;
  }
  if (wait) { wait.text = text; return; }
  if (node.textContent !== text) node.textContent = text;
  quiet(node);
}

function quiet(node) {
  const wait = { text: undefined };
  wait.timer = setTimeout(() => {
    waits.delete(node);
    if (wait.text !== undefined && node.isConnected) say(node, wait.text);
  }, GAP);
  waits.set(node, wait);
}
