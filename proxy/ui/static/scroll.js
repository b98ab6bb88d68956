// Where the session view's page is scrolled: its end, which it follows while the reader
// stays there.

const $ = (id) => document.getElementById(id);

// The page is scrolled to (about) its end.
export function atEnd() {
  const page = document.scrollingElement;
  return page.scrollHeight - page.scrollTop - page.clientHeight < 40;
}

// The window made shorter (resized, zoomed in, an on-screen keyboard) keeps the page's top,
// which takes the end out of sight of a reader who was there: the next rows would no longer
// follow. A reader at the end as of the page's last scroll is put back there; one scrolled
// up stays.
let following = true;
addEventListener("scroll", () => { following = atEnd(); }, { passive: true });
addEventListener("resize", () => {
  if (following && !$("session-view").hidden) $("composer").scrollIntoView({ block: "end" });
});

// The page scrolled to the composer, and again a few frames on while the page's height
// changes: a row out of sight is laid out at a guessed height (app.css), and the rows
// scrolled into sight take their own once they are drawn, a frame or two later. Each frame
// decides from where the page is: it goes on only while the reader is still at the end, or
// where the last frame left them (rows below them taking their height); scrolled up from
// there, by any means (a wheel, a key, the scrollbar, find in page, a screen reader), they
// stay. A key typed or a press that scrolls nothing does not stop it.
let run = 0; // the toEnd that follows the tail; any other's frames left do nothing

export function toEnd(frames = 10, height = -1, mine = ++run, top = -1) {
  const page = document.scrollingElement;
  if (mine !== run || page.scrollHeight === height) return;
  if (top >= 0 && page.scrollTop < top && !atEnd()) return; // the reader went up
  $("composer").scrollIntoView({ block: "end" });
  const now = page.scrollHeight;
  const at = page.scrollTop;
  if (frames) {
    requestAnimationFrame(() => requestAnimationFrame(() => toEnd(frames - 1, now, mine, at)));
  }
}
