// The console: a sessions list and a session view, switched by the URL's fragment
// (#/ and #/s/<id>). Everything it shows comes from the proxy's own API.

import { api, ApiError, forgetKey, storedKey, storeKey } from "./api.js";
import { el, ago, num } from "./render.js";
import { SessionView } from "./session.js";
import { forgetDrafts } from "./composer.js";
import { say } from "./say.js";

const $ = (id) => document.getElementById(id);
let current = null; // the open SessionView
let sessions = [];

// A toast; one with a `key` replaces the text of the one already shown under that key (a
// session's repeated handoff nudge updates its toast, it does not stack another), and one
// without is the toast of the same kind already saying the same, its time started again (a
// proxy away fails every try alike: each stacked another until they covered the page).
export function toast(text, kind = "info", ms = 12000, key = null) {
  const shown = [...$("toasts").children].find((node) => (key === null
    ? !node.dataset.key && node.dataset.kind === kind &&
      node.said === text
    : node.dataset.key === key));
  if (shown) {
    shown.said = text;
    if (shown.written) say(shown.querySelector("span"), text); // a burst is not said each
    shown.ms = ms;
    later(shown);
    return shown;
  }
  const node = el("div", { class: `toast toast-${kind}`, "data-testid": "toast",
    "data-kind": kind, "data-key": key, role: kind === "error" ? "alert" : "status" },
  el("span"),
  el("button", { type: "button", class: "link", "aria-label": "Close", text: "×",
    onclick: () => node.remove() }));
  node.ms = ms;
  // held while the pointer is on it or the focus in it: it does not go from under a person
  // reading it, or from their keyboard's place on its close button
  node.addEventListener("pointerenter", () => clearTimeout(node.timer));
  node.addEventListener("focusin", () => clearTimeout(node.timer));
  node.addEventListener("pointerleave", () => later(node));
  node.addEventListener("focusout", (e) => { if (!node.contains(e.relatedTarget)) later(node); });
  // Each toast is a live region of its own (its role), and the box holding them none: one
  // inside another was announced twice. It goes in empty and its text (`said`, the last
  // given) is written once a frame has shown it: a region that comes with its text already
  // in it is not announced, only a change of one the reader already has. An alert is
  // announced as it comes, so its text goes in at once; so does a hidden page's (no frame).
  node.said = text;
  const write = () => {
    node.written = true;
    say(node.querySelector("span"), node.said); // its next words wait their turn (say.js)
  };
  $("toasts").append(node);
  if (kind === "error" || document.hidden) write();
  else requestAnimationFrame(() => setTimeout(write));
  later(node);
  return node;
}

// A toast's time (`ms`; 0: until closed) starts again, unless the pointer or the focus holds it.
function later(node) {
  clearTimeout(node.timer);
  if (node.ms && !node.matches(":hover, :focus-within")) {
    node.timer = setTimeout(() => node.remove(), node.ms);
  }
}

export function confirmAction(text) {
  const dialog = $("confirm");
  $("confirm-text").textContent = text;
  dialog.returnValue = "";
  dialog.showModal();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

// The proxy's own 401: the key it was sent is not one it takes.
function signedOut(err) {
  return err instanceof ApiError && err.status === 401 && err.challenged;
}

// The proxy's 401 anywhere: the key is wrong or missing; ask again (a provider's 401 it
// relays is a toast: `challenged`). Else the error's toast, for `ms` (0: until the caller or
// the person closes it, for a state that lasts, not an event).
export function handleError(err, what, ms = 12000) {
  if (signedOut(err)) {
    forgetKey();
    showLogin(err.message);
    return null;
  }
  return toast(`${what}: ${err.message}`, "error", ms);
}

// The view shown, and the tab named after it (two tabs, or the browser's history, tell the
// sessions apart by it).
function show(id, name) {
  for (const view of ["login", "list-view", "session-view"]) $(view).hidden = view !== id;
  $("forget-key").hidden = id === "login"; // signing in is where a key is changed
  document.title = `${name} · Cascade console`;
}

function showLogin(reason) {
  if (current) { current.close(); current = null; }
  forgetList();
  forgetDrafts(); // after the view's close kept its own
  $("toasts").replaceChildren(); // each about the last key's work: they go with it
  show("login", "Sign in");
  $("where").textContent = reason ? `Sign-in needed: ${reason}` : "";
  $("login-key").focus();
}

function occupancyBar(s, limit) {
  const bar = el("div", { class: "bar small" });
  const seg = el("span", { class: "seg seg-messages" });
  seg.style.width = `${Math.min(100, 100 * (s.occupancy || 0) / (limit || 1))}%`;
  bar.append(seg);
  return bar;
}

// The list reads LIST_ROWS sessions at a time (the API's order: the latest activity first),
// and its "show more" button (data-testid sessions-more) the next LIST_ROWS; the filter asks
// the proxy for the sessions it matches (`?q=`), a page at a time too: a proxy with
// thousands of sessions sends one page per visit to the list, not every session, and the
// filter still finds any. `sessions` are the rows read for `listQuery`, `listCursor` the place
// after the last of them (the page's next_cursor: a session made or used between two pages
// goes to the front, before it, so the next page neither repeats a row nor skips one still
// past it, as an offset pushed down by it did; the one at the front shows at the next read
// from the top), `listMore` whether more follow.
const LIST_ROWS = 500;
const FILTER_MS = 250; // typing pauses this long before the proxy is asked
let listQuery = "";
let listCursor = null; // the next page's place: the last page's next_cursor
let listMore = false;
let filterTimer = null;

// A row opens its session on a click anywhere in it but its link, which does what a link
// does (Ctrl+click: a new tab, and this one stays on the list); from the keyboard the link
// is the row's one stop (Enter follows it), so a session costs one Tab press.
function sessionRow(s) {
  return el("tr", {
    "data-testid": "session-row", "data-session-id": s.id, class: "row",
    onclick: (e) => {
      if (!e.target.closest("a")) location.hash = `#/s/${encodeURIComponent(s.id)}`;
    },
  },
  el("td", {}, el("a", { href: `#/s/${encodeURIComponent(s.id)}`, text: s.id })),
  el("td", { text: s.agent }),
  el("td", { text: num(s.message_count) }),
  el("td", {}, occupancyBar(s, s.context_limit),
    el("span", { class: "hint", text: s.context_limit
      ? `${num(s.occupancy)} / ${num(s.context_limit)}`
      : num(s.occupancy) })),
  el("td", { class: "hint", text: ago(s.updated_at), title: s.updated_at || "",
    "data-at": s.updated_at }));
}

// The list is read when it opens, not kept live: its "… ago" times age while it stays open
// (a list left open said "3 s ago" of a session hours after).
const AGE_MS = 30000;
setInterval(() => {
  if ($("list-view").hidden) return;
  for (const td of $("session-list").querySelectorAll("td[data-at]")) {
    td.textContent = ago(td.dataset.at);
  }
}, AGE_MS);

// The button while a page is read: it takes no press (a second would read the same page, a
// press during a first page would page the list it replaces), yet keeps the focus, which a
// disabled button gives up to the page's body, where the keyboard starts over at the top.
function reading(on) {
  $("sessions-more").setAttribute("aria-disabled", String(on));
}

// The rows `added` to the list (all of them: `sessions`, for a first page), appended to the
// rows shown for a next page, so a long list does not build its rows again at each press.
// The last page hides the button; the focus on it goes to the first session that page added.
function renderList(added, more) {
  const pressed = document.activeElement === $("sessions-more");
  const retried = document.activeElement === $("list-retry");
  $("sessions-more").hidden = !listMore;
  $("list-retry").hidden = true;
  reading(false);
  const rows = added.map(sessionRow);
  if (more) $("session-list").append(...rows);
  else $("session-list").replaceChildren(...rows);
  if ((pressed && !listMore) || retried) (rows[0]?.querySelector("a") || $("list-title")).focus();
  // Empty says why: no session at all for this key, or none the filter matches.
  $("list-empty").textContent = listQuery
    ? `No session matches "${listQuery}".` : "No sessions yet for this key.";
  $("list-empty").hidden = sessions.length > 0;
}

// What the list read with the key signed out: the next key may be another tenant's, and its
// first read may fail, so no row, next page or filter of the last key's stays to show under
// it or to be read with it; a read still under way is answered to no one.
function forgetList() {
  listing++;
  clearTimeout(filterTimer);
  sessions = [];
  listQuery = "";
  listCursor = null;
  listMore = false;
  $("filter").value = "";
  $("sessions-more").hidden = true;
  reading(false);
  $("session-list").replaceChildren();
  $("list-empty").hidden = true;
  $("list-retry").hidden = true;
}

// A first page the proxy did not answer (away, restarting): said where the rows go, with a
// button that reads it again (data-testid sessions-retry); the toast alone went and left an
// empty table that nothing filled but a reload. A next page's own button reads it again.
// The rows of the last read go (and its next page): under another filter, or the list left
// and opened again, they are not the list asked for, yet showed as its answer.
function listFailed(err) {
  sessions = [];
  listCursor = null;
  listMore = false;
  $("sessions-more").hidden = true;
  $("session-list").replaceChildren();
  $("list-empty").textContent = `Could not list the sessions: ${err.message}`;
  $("list-empty").hidden = false;
  $("list-retry").hidden = false;
}

// Each opening of the list, and each filter, reads its first page again, and the button the
// page after the rows shown; only the latest read is shown: an earlier one answering after it
// (the list left and opened again, the filter changed meanwhile) holds another list.
let listing = 0;

async function readList(more) {
  if (!more) clearTimeout(filterTimer); // a filter typed meanwhile is read after a next page
  const asked = ++listing;
  const q = more ? listQuery : $("filter").value.trim();
  const after = more ? listCursor : null;
  reading(true);
  try {
    const page = await api.sessions(q, after, LIST_ROWS);
    if (asked !== listing) return;
    const kept = more ? sessions : [];
    const seen = new Set(kept.map((s) => s.id));
    const added = page.data.filter((s) => !seen.has(s.id));
    sessions = kept.concat(added);
    listQuery = q;
    listCursor = page.next_cursor || null;
    listMore = page.has_more && page.data.length > 0 && listCursor !== null;
    renderList(added, more);
  } catch (err) {
    if (asked !== listing) return;
    reading(false);
    // a first page's failure is said where the rows go (a live status) alone: a toast, an
    // alert, saying it too was read out twice; the proxy's 401 still asks for the key
    if (more || signedOut(err)) handleError(err, "Could not list the sessions");
    else listFailed(err);
  }
}

function openList() {
  show("list-view", "Sessions");
  $("where").textContent = "";
  readList(false);
}

// What the proxy takes as a session id; another (a "/" in it, a space, "." or "..", which
// a URL path resolves away) would reach no route or a 400, so the page says so instead of
// showing it as a new session.
const SESSION_ID = /^(?!\.\.?$)[A-Za-z0-9._:-]{1,128}$/;

function badId(id) {
  if (SESSION_ID.test(id)) return false;
  toast(`${JSON.stringify(id.slice(0, 140))} is not a session id: 1 to 128 letters, digits ` +
    "and . _ : -, not . or ..", "error");
  return true;
}

function sessionIn(hash) {
  const m = hash.match(/^#\/s\/(.+)$/);
  if (!m) return null;
  try { return decodeURIComponent(m[1]); } catch (_) { return m[1]; } // a stray "%"
}

// Every view, the page's first on a load or a reload too, puts the focus on its heading,
// named by then: left on the body, the keyboard starts at the page's top and a screen reader
// says nothing of the view. The session view's skip link comes right after its heading, so
// the first Tab from there reaches it.
function route() {
  if (storedKey() === null) { showLogin(); return; }
  const id = sessionIn(location.hash);
  if (current) { current.close(); current = null; }
  let heading = "list-title";
  if (id !== null && !badId(id)) {
    show("session-view", id);
    current = new SessionView(id, { toast, confirmAction, handleError });
    current.open();
    heading = "session-title";
  } else {
    openList();
  }
  $(heading).focus({ preventScroll: true }); // the view scrolls as it did
}

// What the Authorization header cannot carry, said by its code point: a key is printable
// ASCII, and one pasted with an invisible character (a zero-width space, a no-break space)
// would fail every call with the browser's words about headers, not the key.
function unsendable(key) {
  const bad = [...key].find((c) => c < " " || c > "~");
  if (bad === undefined) return null;
  const point = bad.codePointAt(0).toString(16).toUpperCase().padStart(4, "0");
  return `the key holds a character no HTTP header carries (U+${point}); paste it again`;
}

// A toast that goes with the keyboard's focus in it (its close button pressed, the outage
// it told of over) gave the focus up to the page's body: a keyboard started over at the top
// and a screen reader said nothing. It goes back where it came from, or to the view's heading.
function keepToastFocus() {
  let from = null;
  $("toasts").addEventListener("focusin", (e) => {
    if (!$("toasts").contains(e.relatedTarget)) from = e.relatedTarget;
  });
  // left for another place, or for none (a click on the page's text) while the toast stays:
  // the person moved the focus, and a toast going or coming later is no reason to move it
  $("toasts").addEventListener("focusout", (e) => {
    if (e.relatedTarget) {
      if (!$("toasts").contains(e.relatedTarget)) from = null;
    } else {
      queueMicrotask(() => { if (e.target.isConnected) from = null; });
    }
  });
  new MutationObserver(() => {
    const lost = !document.activeElement || document.activeElement === document.body;
    if (!lost || !from) return;
    const back = from.isConnected && from.checkVisibility() ? from
      : [$("session-title"), $("list-title"), $("login-key")].find((n) => n.checkVisibility());
    from = null;
    if (back) back.focus();
  }).observe($("toasts"), { childList: true });
}

function boot() {
  keepToastFocus();
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const key = $("login-key").value.trim();
    $("login-key").value = "";
    const why = unsendable(key);
    if (why) { showLogin(why); return; }
    storeKey(key);
    $("where").textContent = "";
    route();
  });
  $("forget-key").addEventListener("click", () => { forgetKey(); showLogin(); });
  $("filter").addEventListener("input", () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => readList(false), FILTER_MS);
  });
  $("list-retry").addEventListener("click", () => readList(false));
  $("sessions-more").addEventListener("click", () => {
    if ($("sessions-more").getAttribute("aria-disabled") !== "true") readList(true);
  });
  $("new-session").addEventListener("submit", (e) => {
    e.preventDefault();
    const field = $("new-session-id");
    const id = field.value.trim();
    // only spaces satisfy `required`: cleared, the field says an id is needed as when empty
    if (!id) { field.value = ""; field.reportValidity(); return; }
    if (!badId(id)) location.hash = `#/s/${encodeURIComponent(id)}`;
  });
  window.addEventListener("hashchange", route);
  route();
}

boot();
