// Where the session view's page is scrolled: its end, which it follows while the reader
// stays there.

const $ = (id) => document.getElementById(id);

// The page is scrolled to (about) its end.
export function atEnd() {
  const page = document.scrollingElement;
  return page.scrollHeight - page.scrollTop - page.clientHeight < 40;
}

// The page scrolled to the composer, and again a few frames on while the page's height
// changes: a row out of sight is laid out at a guessed height (app.css), and the rows
// scrolled into sight take their own once they are drawn, a frame or two later. The reader's
// own hand (a wheel, a touch, a key, a press) ends it: who scrolls up meanwhile stays there.
let run = 0; // the toEnd that follows the tail; any other's frames left do nothing
for (const type of ["wheel", "touchmove", "keydown", "pointerdown"]) {
  addEventListener(type, () => { run += 1; }, { capture: true, passive: true });
}

export function toEnd(frames = 10, height = -1, mine = ++run) {
  const page = document.scrollingElement;
  if (mine !== run || page.scrollHeight === height) return;
  $("composer").scrollIntoView({ block: "end" });
  const now = page.scrollHeight;
  if (frames) requestAnimationFrame(() => requestAnimationFrame(() => toEnd(frames - 1, now, mine)));
}
