"""What the lossless ingest stage did in a replay, and proof that nothing was lost.

After a file is replayed through the proxy, :func:`ingest_report` looks at what reached the
upstream: every tool result is compared with the transcript's original, and each one sent as
``[compacted losslessly …]`` is counted under the transforms its text shows (JSON minified,
JSON with arrays of objects as tables, repeated lines collapsed, lines pointed to earlier
results) with the tokens it saved, marker
included. Each compacted result is then paged back from the proxy, page by page, through
``GET /v1/sessions/{id}/tool-outputs/{tool_call_id}``: the route that serves the same pages
``read_tool_output`` gives the model (``services.toolloop.read_page``). The pages put
together must be the original byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench import trajectories
from bench.cost import Tokenizer

__all__ = ["TRANSFORMS", "IngestStats", "ingest_report", "page_back", "transforms_of"]

COMPACTED = "[compacted losslessly from "
TRANSFORMS = ("json", "tables", "collapse", "pointers")
"""The transforms of ``proxy/cascade/lossless.py``, as this report names them."""

_HEADER = re.compile(r"\[read_tool_output id=.* chars (\d+)-(\d+) of (\d+)\]\n")
_POINTER = re.compile(r"^\[\d+ lines: same as lines \d+-\d+ of tool result .+\]$", re.MULTILINE)
_REPEAT = re.compile(r"^\[previous line repeated \d+ more times\]$", re.MULTILINE)


@dataclass
class IngestStats:
    """Per file: tool results seen, and per transform the results it changed and the tokens
    saved on them (a result two transforms changed counts under both, its saving under the
    ``combined`` key too, so the per-transform savings are not summed twice)."""

    results: int = 0
    compacted: int = 0
    saved_tokens: int = 0
    changed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRANSFORMS, 0))
    saved: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TRANSFORMS, 0))
    combined: int = 0
    combined_saved: int = 0
    checked: int = 0
    recovered: int = 0
    shared_ids: int = 0
    failures: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "results": self.results,
            "compacted": self.compacted,
            "saved_tokens": self.saved_tokens,
            "changed": self.changed,
            "saved": self.saved,
            "combined": self.combined,
            "combined_saved": self.combined_saved,
            "checked": self.checked,
            "recovered": self.recovered,
            "shared_ids": self.shared_ids,
            "failures": self.failures[:10],
        }


def _is_json(body: str) -> bool:
    try:
        json.loads(body)
    except ValueError:
        return False
    return True


def transforms_of(sent: str) -> list[str]:
    """The transforms a compacted result's text shows (JSON is minified or tabulated alone)."""
    body = sent.split("\n", 1)[1] if "\n" in sent else ""
    if body[:1] in "[{" and _is_json(body):
        return ["json"]
    if "[#table [" in body and " (one row per object; ~ = key absent)\n" in body:
        return ["tables"]
    found = []
    if _REPEAT.search(body):
        found.append("collapse")
    if _POINTER.search(body):
        found.append("pointers")
    return found


def page_back(client: httpx.Client, session: str, tool_call_id: str) -> str:
    """The stored original, put together from the pages the proxy serves for it."""
    out: list[str] = []
    offset = 0
    while True:
        resp = client.get(
            f"/v1/sessions/{session}/tool-outputs/{tool_call_id}", params={"offset": offset}
        )
        resp.raise_for_status()
        page = str(resp.json()["page"])
        head = _HEADER.match(page)
        if head is None:
            raise ValueError(f"unexpected page header: {page[:120]!r}")
        start, end, total = (int(g) for g in head.groups())
        if start != offset:
            raise ValueError(f"page starts at {start}, asked for {offset}")
        out.append(page[head.end() : head.end() + end - start])
        if end >= total:
            return "".join(out)
        if end <= start:
            raise ValueError("empty page before the end")
        offset = end


def _originals(conv: trajectories.Conversation) -> tuple[dict[str, str], int]:
    """Each result's text by its ``tool_call_id``, and how many results share an id with
    another (file 8 reuses ids within a conversation: which of them a handle names is
    ambiguous, so those are left out)."""
    texts: dict[str, list[str]] = {}
    for m in conv.messages:
        if m.get("role") == "tool" and isinstance(m.get("content"), str):
            texts.setdefault(str(m.get("tool_call_id")), []).append(m["content"])
    unique = {cid: found[0] for cid, found in texts.items() if len(found) == 1}
    return unique, sum(len(found) for found in texts.values() if len(found) > 1)


def ingest_report(
    conversations: Sequence[trajectories.Conversation],
    prompts: Sequence[tuple[str, Sequence[Mapping[str, Any]]]],
    *,
    base_url: str,
    session_id: Callable[[str], str],
    tokenizer: Tokenizer,
    api_key: str = "x",
) -> IngestStats:
    """Count what the ingest stage did to each tool result of ``conversations``, as first sent
    upstream in ``prompts`` ((session, messages) per main request, in order), and page back
    every compacted one from the proxy at ``base_url`` (its root, not ``/v1``)."""
    stats = IngestStats()
    sessions = {session_id(c.id): c for c in conversations}
    first_sent: dict[tuple[str, str], str] = {}
    for session, messages in prompts:
        for m in messages:
            if m.get("role") == "tool" and isinstance(m.get("content"), str):
                first_sent.setdefault((session, str(m.get("tool_call_id"))), m["content"])
    auth = {"authorization": f"Bearer {api_key}"}  # the sessions are the client key's
    with httpx.Client(base_url=base_url, headers=auth, timeout=60) as client:
        for session, conv in sessions.items():
            originals, shared = _originals(conv)
            stats.results += len(originals)
            stats.shared_ids += shared
            for cid, original in originals.items():
                sent = first_sent.get((session, cid))
                if sent is None or not sent.startswith(COMPACTED):
                    continue
                stats.compacted += 1
                kinds = transforms_of(sent)
                saved = tokenizer.count([{"role": "tool", "content": original}]) - tokenizer.count(
                    [{"role": "tool", "content": sent}]
                )
                stats.saved_tokens += saved
                for kind in kinds:
                    stats.changed[kind] += 1
                    stats.saved[kind] += saved
                if len(kinds) > 1:
                    stats.combined += 1
                    stats.combined_saved += saved
                stats.checked += 1
                try:
                    back = page_back(client, session, cid)
                except (httpx.HTTPError, ValueError, KeyError) as exc:
                    stats.failures.append(f"{cid}: {exc}")
                    continue
                if back == original:
                    stats.recovered += 1
                else:
                    stats.failures.append(f"{cid}: {len(back)} chars back, {len(original)} sent")
    return stats


def render_ingest(rows: Sequence[tuple[int, int, IngestStats]]) -> str:
    """A table per file: (file, limit, stats) rows, one line per transform."""
    out = [
        "| file | limit | transform | results changed | share of tool results | tokens saved |",
        "|---|---|---|---|---|---|",
    ]
    for number, limit, s in rows:
        n = max(1, s.results)
        for kind in TRANSFORMS:
            out.append(
                f"| {number} | {limit // 1000}k | {kind} | {s.changed[kind]} "
                f"| {s.changed[kind] / n:.0%} | {s.saved[kind]:,} |"
            )
        out.append(
            f"| {number} | {limit // 1000}k | any (of them {s.combined} by two or more) "
            f"| {s.compacted} / {s.results} | {s.compacted / n:.0%} | {s.saved_tokens:,} |"
        )
        skipped = f" ({s.shared_ids} results with a reused id not counted)" if s.shared_ids else ""
        out.append(
            f"| {number} | {limit // 1000}k | paged back byte for byte{skipped} | "
            f"{s.recovered} / {s.checked} | | |"
        )
    return "\n".join(out)


def dumps(stats: IngestStats) -> str:
    return json.dumps(stats.as_dict())
