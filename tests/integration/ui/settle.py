"""States a UI test waits for before it checks that something did not happen, in place of a
fixed wait: a fixed wait is too short on a loaded machine (the check then proves nothing)
and too long on a quiet one.

``settled`` waits for the page to have run what it had queued: a task turn (a message on a
channel, which a faked clock does not hold) and, unless the page's clock is faked, two
animation frames (a toast's text goes in a frame after its box). ``count_shown`` counts the
elements ever shown with a text, however briefly: checked after a later state, it says
whether an earlier one came, by order, not by time."""

from __future__ import annotations

from typing import Any

_SETTLED = """(frames) => new Promise((done) => {
  const channel = new MessageChannel();
  channel.port1.onmessage = () => {
    if (!frames) return done();
    requestAnimationFrame(() => requestAnimationFrame(() => done()));
  };
  channel.port2.postMessage(0);
})"""

_COUNT_SHOWN = """([name, selector, text]) => {
  const seen = new Set();
  window.shownCounts = window.shownCounts || {};
  window.shownCounts[name] = () => seen.size;
  const look = () => document.querySelectorAll(selector).forEach((n) => {
    if (n.textContent.includes(text)) seen.add(n);
  });
  look();
  new MutationObserver(look).observe(document.documentElement,
    { childList: true, subtree: true, characterData: true });
}"""


def settled(page: Any, *, frames: bool = True) -> None:
    """The page has run the tasks queued before this call (and drawn two frames, unless
    ``frames`` is False: a faked clock holds the page's animation frames)."""
    page.evaluate(_SETTLED, frames)


def count_shown(page: Any, name: str, selector: str, text: str) -> None:
    """Count from now on the elements matching ``selector`` ever shown holding ``text``;
    ``shown(page, name)`` reads the count."""
    page.evaluate(_COUNT_SHOWN, [name, selector, text])


def shown(page: Any, name: str) -> int:
    return int(page.evaluate("(name) => window.shownCounts[name]()", name))
