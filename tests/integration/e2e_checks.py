"""The invariants the end-to-end property replay (test_e2e_properties.py) checks on every
prompt the fake upstream received, and on the session the proxy kept.

- :func:`check_fits`: the prompt fits the agent's window less its reserved output, counted
  as the provider counts (the fake's ``prompt_tokens``, which the proxy calibrates to);
- :func:`check_paired`: every assistant tool call has its result right after it, and no
  result lacks its call;
- :meth:`Handles.check`: every handle the prompt names (a cut's marker, an eviction's
  placeholder, a lossless pointer, ``id`` or ``id@position``) reads back through
  ``GET /v1/sessions/{id}/tool-outputs/{handle}`` as the exact (redacted) result it stands for;
- :func:`check_read_answer`: the proxy's answer to the model's own ``read_tool_output`` call
  is the right slice of that result;
- :func:`check_history`: the session's stored messages are what the client sent;
- :class:`Listener`: the session's live event stream, transient events included.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from proxy.cascade.eviction import PLACEHOLDER_PREFIX
from proxy.cascade.pins import unpin
from proxy.cascade.redaction import compile_patterns, redact, redact_message
from proxy.embeddings import embedding_text
from proxy.history import canonical_message
from tests.integration.e2e_model import COUNT, READ_PREFIX, handles_in, text_of
from tests.integration.transcripts import page_slice

__all__ = [
    "Handles",
    "Listener",
    "check_fits",
    "check_history",
    "check_paired",
    "check_prefix",
    "check_related",
    "check_suffix",
    "names_own",
    "summary_of",
    "check_read_answer",
    "redacted",
]

Message = dict[str, Any]
_POINTER = re.compile(r"\[(\d+) lines: same as lines (\d+)-(\d+) of tool result (\S+?)\]$", re.M)
_PATTERNS = compile_patterns(())


def redacted(text: str) -> str:
    """``text`` as the proxy stores it: every default secret pattern masked."""
    return redact(text, _PATTERNS)[0]


def check_fits(where: str, prompt: Sequence[Message], room: int) -> None:
    """The prompt leaves the reserved output room, counted as the provider counts it
    (``e2e_model.COUNT``)."""
    tokens = COUNT(prompt)
    assert tokens <= room, f"{where}: prompt of {tokens} tokens over the {room} the window has"


def check_paired(where: str, prompt: Sequence[Message]) -> None:
    i = 0
    while i < len(prompt):
        ids = [c["id"] for c in prompt[i].get("tool_calls") or []]
        j = i + 1
        while j < len(prompt) and prompt[j].get("role") == "tool":
            j += 1
        got = [m.get("tool_call_id") for m in prompt[i + 1 : j]]
        assert sorted(got) == sorted(ids), f"{where}: message {i} calls {ids}, answered {got}"
        i = j


def summary_of(prompt: Sequence[Message]) -> str | None:
    for m in prompt:
        text = text_of(m.get("content"))
        if text.startswith("<conversation_summary>"):
            return text[: text.find("</conversation_summary>")]
    return None


def check_prefix(where: str, prev: Sequence[Message], prompt: Sequence[Message]) -> bool:
    """Within a turn, with the same summary, a step's prompt extends the last one's: every
    earlier message arrives again as it was, but for an eviction's placeholder in place of
    a result and the ``<plan>`` block, which moves to the new tail. False when a compaction
    in between changed the summary, or the overflow guard dropped old rounds (the prompt is
    shorter): the prefix then changes once, by design."""
    if summary_of(prev) != summary_of(prompt) or len(prompt) < len(prev):
        return False  # a compaction, or the overflow guard dropped old rounds
    for j, (a, b) in enumerate(zip(prev, prompt, strict=False)):
        if a == b:
            continue
        ta, tb = text_of(a.get("content")), text_of(b.get("content"))
        if j == len(prev) - 1 and _without_plan(ta) == tb:
            continue
        if a.get("role") == "tool" and tb.startswith(PLACEHOLDER_PREFIX):
            assert a.get("tool_call_id") == b.get("tool_call_id"), f"{where}: message {j}"
            continue
        raise AssertionError(
            f"{where}: message {j} ({a.get('role')}) changed within the turn:"
            f" {str(a)[:400]!r} -> {str(b)[:400]!r}"
        )
    return True


_HIT = re.compile(
    r"^\[(.+?), message (\d+), (summarised|evicted|trimmed), score -?[0-9.]+\]$", re.M
)


def check_related(
    where: str, prompt: Sequence[Message], history: Sequence[Message], live: int
) -> int:
    """Each ``<related_context>`` hit quotes the message it names (by position in the
    history), and that message is one the prompt no longer carries as sent: before the
    live part (``live``, its first position), or cleared in it."""
    hits = 0
    offset = len(prompt) - (len(history) - live)  # prompt index of history position ``live``
    for m in prompt:
        text = text_of(m.get("content"))
        start = text.find("<related_context>\n")
        if start < 0:
            continue
        block = text[start : text.index("</related_context>", start)]
        found = list(_HIT.finditer(block))
        for k, hit in enumerate(found):
            who, pos, origin = hit[1], int(hit[2]), hit[3]
            end = found[k + 1].start() if k + 1 < len(found) else len(block)
            snippet = block[hit.end() + 1 : end].rstrip("\n")
            assert pos < len(history), f"{where}: hit on message {pos} of {len(history)}"
            target = history[pos]
            if who.startswith("tool result of "):
                handle = f"{target.get('tool_call_id')}@{pos}"
                assert who.removeprefix("tool result of ") == handle, where
            else:
                assert target.get("role") == who, f"{where}: hit {pos} is {target.get('role')}"
            body = embedding_text(redact_message(target, _PATTERNS)[0])
            body = body.replace("</related_context>", "</related-context>")
            assert body.startswith(snippet.removesuffix("…").rstrip()), (
                f"{where}: hit on message {pos} quotes {snippet[:200]!r}, not {body[:200]!r}"
            )
            if pos >= live:
                shown = text_of(prompt[offset + pos - live].get("content"))
                assert origin == "evicted" and shown.startswith(PLACEHOLDER_PREFIX), (
                    f"{where}: hit on message {pos} ({origin}) is still in the prompt as sent"
                )
            hits += 1
    return hits


def _shape(messages: Sequence[Message]) -> list[tuple[Any, Any]]:
    return [(m.get("role"), m.get("tool_call_id")) for m in messages]


def check_suffix(where: str, prompt: Sequence[Message], history: Sequence[Message]) -> int:
    """Nothing goes missing: after the system messages and the first user message (which
    carries the summary once there is one), the prompt is the client's history from some
    point on, in order; all of it while no summary or trim took the front."""
    head = 0
    while head < len(prompt) and prompt[head].get("role") == "system":
        head += 1
    summarised = summary_of(prompt) is not None
    if summarised:
        assert prompt[head].get("role") == "user", f"{where}: no first user message"
        head += 1
    tail = _shape(prompt[head:])
    assert tail == _shape(history)[len(history) - len(tail) :], f"{where}: the live part lost"
    if not summarised and len(prompt) == len(history):
        assert _shape(prompt) == _shape(history), f"{where}: the prompt is not the history"
        return 0
    return len(history) - len(tail)


def _read_all(http: httpx.Client, sid: str, handle: str) -> str | None:
    """The whole stored output ``handle`` names, paged back; None on a 404."""
    out, offset = [], 0
    while True:
        r = http.get(
            f"/v1/sessions/{sid}/tool-outputs/{handle}", params={"offset": offset, "limit": 20000}
        )
        if r.status_code == 404 and offset == 0:
            return None
        assert r.status_code == 200, (handle, offset, r.text)
        a, b, total, text = page_slice(r.json()["page"])
        assert a == offset, (handle, a, offset)
        out.append(text)
        if b >= total:
            return "".join(out)
        assert b > a, f"{handle}: page at {a} of {total} made no progress"
        offset = b


def _without_plan(text: str) -> str:
    """``text`` without the ``<plan>`` block recitation appends to the prompt's last message."""
    if not text.endswith("</plan>"):
        return text
    if text.startswith("<plan>\n"):
        return ""  # appended to a message with no text: the block alone
    cut = text.rfind("\n\n<plan>\n")
    return text[:cut] if cut >= 0 else text


def names_own(handle: str, msg: Message) -> bool:
    """Whether ``handle`` (a bare id or ``id@position``) is the message's own result's."""
    pinned = unpin(handle)
    return (pinned[0] if pinned else handle) == msg.get("tool_call_id")


def _results(cid: str, history: Sequence[Message]) -> int:
    return sum(m.get("role") == "tool" and m.get("tool_call_id") == cid for m in history)


class Handles:
    """Resolves the handles prompts name against what the client sent, and checks each
    distinct (handle, expected text) once through the API."""

    def __init__(self, http: httpx.Client, sid: str) -> None:
        self.http = http
        self.sid = sid
        self.checked: set[tuple[str, str]] = set()
        self.count = 0
        self.pointers = 0
        self.ambiguous: set[str] = set()
        """Bare ids named in a prompt that name several results of the client's history."""

    def expected(self, handle: str, history: Sequence[Message]) -> str:
        """The redacted text of the result ``handle`` names in ``history`` (the client's
        messages as sent on this step): ``id@pos`` the one at that position, an id alone its
        newest result."""
        pinned = unpin(handle)
        if pinned is not None:
            cid, pos = pinned
            assert pos < len(history), f"{handle}: no position {pos} in {len(history)}"
            msg = history[pos]
            assert msg.get("tool_call_id") == cid, f"{handle}: position {pos} is {msg}"
            return redacted(text_of(msg.get("content")))
        for msg in reversed(history):
            if msg.get("role") == "tool" and msg.get("tool_call_id") == handle:
                return redacted(text_of(msg.get("content")))
        raise AssertionError(f"handle {handle!r} names no result the client sent")

    def check_pointer(
        self,
        where: str,
        own: str,
        pointer: tuple[int, int, int, str],
        history: Sequence[Message],
    ) -> None:
        """A lossless pointer's lines are the lines it names of the result it names, which
        reads back; and the pointing result's own text (``own``, its handle) holds them."""
        n, a, b, target = pointer
        want = self.expected(target, history)
        lines = re.split(r"\r?\n", want)[a - 1 : b]
        assert len(lines) == n == b - a + 1, f"{where}: pointer to {target} {a}-{b} of {n}"
        text = self.expected(own, history).replace("\r\n", "\n")
        assert "\n".join(lines) in text, f"{where}: pointer to {target} in {own}"
        self.verify(where, target, want)
        self.pointers += 1

    def verify(self, where: str, handle: str, want: str) -> None:
        """``handle`` reads back through the API as ``want`` (once per distinct pair)."""
        key = (handle, hashlib.sha256(want.encode("utf-8", "surrogatepass")).hexdigest())
        if key in self.checked:
            return
        got = _read_all(self.http, self.sid, handle)
        assert got is not None, f"{where}: handle {handle} named in the prompt is a 404"
        assert got == want, f"{where}: {handle} reads back {len(got)} chars, not its {len(want)}"
        self.checked.add(key)
        self.count += 1

    def check(self, where: str, prompt: Sequence[Message], history: Sequence[Message]) -> None:
        for m in prompt:
            if str(m.get("tool_call_id") or "").startswith(READ_PREFIX):
                continue  # a page the proxy answered: it quotes the next page's handle
            text = _without_plan(text_of(m.get("content")))
            handles = handles_in(text)
            # the compacted result's own handle: pinned, it names the position of a reused id
            own = next((h["id"] for h in handles if names_own(h["id"], m)), m.get("tool_call_id"))
            for n, a, b, target in _POINTER.findall(text):
                self.check_pointer(where, str(own), (int(n), int(a), int(b), target), history)
            for args in handles:
                handle = args["id"]
                want = self.expected(handle, history)
                if unpin(handle) is None and _results(handle, history) > 1:
                    self.ambiguous.add(handle)  # a bare id reads its newest result
                if "offset" in args and "limit" in args and names_own(handle, m):
                    off, lim = args["offset"], args["limit"]
                    assert text.startswith(want[:off]), f"{where}: {handle} head differs"
                    assert text.endswith(want[off + lim :]), f"{where}: {handle} tail differs"
                self.verify(where, handle, want)


def check_read_answer(
    where: str, prompt: Sequence[Message], read: Mapping[str, Any], want: str
) -> None:
    """The internal round's prompt ends with the model's call and the proxy's page of it."""
    call, page = prompt[-2], prompt[-1]
    assert [c["id"] for c in call.get("tool_calls") or []] == [read["call_id"]], where
    assert page.get("tool_call_id") == read["call_id"], where
    a, b, total, text = page_slice(text_of(page.get("content")))
    off = read["args"].get("offset", 0)
    assert (a, total) == (off, len(want)), f"{where}: page {a}-{b} of {total}, asked {off}"
    assert b - a <= read["args"].get("limit", b - a) and text == want[a:b], where


def _canon(msg: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(canonical_message(msg))
    if "content" in out and not isinstance(out["content"], list):
        out["content"] = redacted(str(out["content"] or ""))
    out.pop("content", None) if out.get("content") == "" else None
    return out


def check_history(http: httpx.Client, sid: str, sent: Sequence[Message]) -> None:
    """The stored messages, in order, are the client's (redacted), none lost or superseded."""
    r = http.get(f"/v1/sessions/{sid}/messages", params={"limit": 10000, "form": "sent"})
    assert r.status_code == 200, r.text
    rows = r.json()["data"]
    assert not [row["pos"] for row in rows if row["superseded"]]
    stored = [_canon(row["message"]) for row in rows]
    want = [_canon(m) for m in sent]
    assert len(stored) == len(want), (
        f"stored {len(stored)} messages, the client sent {len(want)}",
        [(m["role"], str(m.get("content"))[:40]) for m in stored][-4:],
        [(m["role"], str(m.get("content"))[:40]) for m in want][-4:],
    )
    for i, (a, b) in enumerate(zip(stored, want, strict=True)):
        assert a == b, f"message {i} stored as {str(a)[:300]} but sent as {str(b)[:300]}"


class Listener:
    """The session's live event stream, read on a thread: transient events (an eviction's)
    are never stored, so only a watcher sees them. HTTP/1.0 on a plain socket, so the body is
    the SSE text as sent and a shutdown of the socket ends the read at once."""

    def __init__(self, origin: str, sid: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        host, port = origin.removeprefix("http://").split(":")
        self._sock = socket.create_connection((host, int(port)), timeout=10)
        self._sock.sendall(
            f"GET /v1/sessions/{sid}/events HTTP/1.0\r\nHost: {host}\r\n"
            "Authorization: Bearer sk-test-client\r\nLast-Event-ID: 0\r\n\r\n".encode()
        )
        self._sock.settimeout(None)
        self._file = self._sock.makefile("rb")
        status = self._file.readline()
        assert b" 200 " in status, status
        while self._file.readline().strip():
            pass
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Listener:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(10)
        self._file.close()
        self._sock.close()

    def _run(self) -> None:
        name = ""
        with contextlib.suppress(OSError, ValueError):
            for raw in self._file:
                line = raw.decode().rstrip("\r\n")
                if line.startswith("event:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("data:"):
                    self.events.append((name, json.loads(line.split(":", 1)[1])))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [data for n, data in self.events if n == name]
