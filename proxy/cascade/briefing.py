"""The summary's five sections: reading them out of whatever a fast model wrote.

A compaction's briefing (``proxy.cascade.summary``) is stored as exactly :data:`SECTIONS`, in
order. Models wrap their answers in code fences, add preambles and write near-miss headings,
so :func:`parse_briefing` maps every recognisable form onto the canonical headings (a JSON
object keyed by the section names too; a reasoning model's thinking ahead of it is no part
of it), keeping a previous briefing's text where the new one leaves a section out;
:func:`section` reads one back (the recitation stage quotes the open tasks). Pure.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["SECTIONS", "parse_briefing", "says_nothing", "section", "without_thinking"]

SECTIONS = ("## Objective", "## Decisions & Facts", "## Files & State", "## Open Tasks",
            "## Next Step")  # fmt: skip
_NONE = "(none)"
_EMPTY = frozenset({"", "none", "n/a", "nothing"})
"""What a section with nothing to say reads as, once its list marker, brackets and closing
full stop are gone: the fast model is asked for "(none)" and also writes "- None" or "N/A"."""

_ALIASES: dict[str, int] = {
    **dict.fromkeys(("objective", "objectives", "goal", "goals", "mainobjective"), 0),
    **dict.fromkeys(("decisionsfacts", "factsdecisions", "decisions", "facts"), 1),
    **dict.fromkeys(("keydecisionsfacts", "keyfacts", "keydecisions", "factsfindings"), 1),
    **dict.fromkeys(("filesstate", "files", "state", "filescurrentstate", "currentstate"), 2),
    **dict.fromkeys(("filesstatus", "stateoffiles", "fileschanged", "workspacestate"), 2),
    **dict.fromkeys(("opentasks", "tasks", "todo", "todos", "remainingtasks", "pendingtasks"), 3),
    **dict.fromkeys(("nextstep", "nextsteps", "immediatenextstep", "nextaction"), 4),
}
_NUMBER = r"^\s*(?:\d+[.)]\s*)?"
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s*(?P<name>.*?)\s*#*\s*$")
_BOLD_HEADING = re.compile(_NUMBER + r"(\*\*|__)(?P<name>[^*_]+?)(\*\*|__)\s*(?P<rest>.*)$")
_PLAIN_HEADING = re.compile(_NUMBER + r"(?P<name>[A-Za-z][A-Za-z &/-]{1,40}?)\s*:\s*(?P<rest>.*)$")
_UNKNOWN_MD = re.compile(r"^\s{0,3}#{1,6}\s+(?P<name>\S.*?)\s*#*\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_THINKING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?</\1>", re.DOTALL | re.IGNORECASE)
"""A reasoning model's thinking ahead of its answer, when no reasoning parser serves it apart:
it may draft the very headings, so only what follows it is the briefing."""
_THINKING_END = re.compile(
    r"^[ \t]*</(?:think|thinking|reasoning)>[ \t]*$", re.MULTILINE | re.IGNORECASE
)
"""A line that only closes a thinking block: its opening tag may have been in the prompt (a
chat template that opens it there) or after a preamble. What comes before the first such
line outside a code fence is thinking; one inside a fence is the briefing's own quote (a
session about think tags)."""


def without_thinking(text: str) -> str:
    """``text`` without the thinking ahead of the answer (``_THINKING``, ``_THINKING_END``).
    The fence lines before each closing line are counted from the previous one on, so the
    answer is read once however many closing lines its code quotes."""
    text = _THINKING.sub("", text, count=1)
    fences, counted = 0, 0
    for end in _THINKING_END.finditer(text):
        fences += _fence_lines(text[counted : end.start()])  # whole lines: both start one
        counted = end.start()
        if fences % 2 == 0:
            return text[end.end() :]
    return text


def _fence_lines(lines: str) -> int:
    """How many of ``lines`` open or close a code fence."""
    return sum(1 for line in lines.splitlines() if _FENCE.match(line))


def _key(name: str) -> int | None:
    norm = re.sub(r"\band\b", "", name.lower().replace("&", " "))
    return _ALIASES.get(re.sub(r"[^a-z]", "", norm))


def _match_heading(line: str, blocked: set[int]) -> tuple[int | None, str, bool]:
    """``(section, rest of line, is_markdown_heading)``; section is None for body text.

    Bold and ``Name:`` forms only start a section in ``blocked``-free positions.
    """
    if md := _MD_HEADING.match(line):
        name = md["name"].strip("*_ ")
        idx = _key(name)
        if idx is None and ":" in name:
            head, _, rest = name.partition(":")
            if (idx := _key(head)) is not None:
                return idx, rest.strip(), True
        return idx, "", True
    for pattern in (_BOLD_HEADING, _PLAIN_HEADING):
        m = pattern.match(line)
        if m and (idx := _key(m["name"].rstrip(":"))) is not None and idx not in blocked:
            return idx, m["rest"].lstrip(":*_ ").strip(), False
    return None, "", False


def _json_lines(value: Any) -> list[str]:
    """A JSON section's body as lines: a list or object becomes a bullet list, an empty one
    ``(none)``: it says there is nothing (no open task left), where a missing section keeps
    the previous summary's text."""
    if isinstance(value, list | dict) and not value:
        return [_NONE]
    if isinstance(value, list):
        return [f"- {v if isinstance(v, str) else json.dumps(v)}" for v in value]
    if isinstance(value, dict):
        return [f"- {k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in value.items()]
    return [] if value is None else str(value).splitlines()


def _json_sections(lines: list[str]) -> dict[int, list[str]]:
    """The sections of an answer written as one JSON object (a fast model in JSON mode), its
    keys the section names (``open_tasks``), or one object wrapping such an object beside keys
    of its own; empty when it is no such object."""
    text = "\n".join(lines).strip()
    if text.endswith(("```", "~~~")):
        text = text[:-3].strip()
    if not text.startswith("{"):
        return {}
    try:  # one nested past what Python's recursion allows is no such object
        data = json.loads(text)
        if not isinstance(data, dict):
            return {}
        inner = [v for v in data.values() if isinstance(v, dict)]
        # the object or one it wraps, whichever holds more sections (the object on a tie): a
        # wrapper's own key may be a section's alias ("state": "done")
        return max((_keyed_sections(d) for d in [data, *inner]), key=len)
    except (ValueError, RecursionError):
        return {}


_WORD_BREAK = re.compile(r"[_-]|(?<=[a-z])(?=[A-Z])")


def _keyed_sections(data: dict[Any, Any]) -> dict[int, list[str]]:
    """The sections of one JSON object's keys that name one (``open_tasks``, ``openTasks``:
    its words split at ``_``, ``-`` and a lower-to-upper case change, as ``and`` is read)."""
    keyed = {_key(_WORD_BREAK.sub(" ", str(k))): v for k, v in data.items()}
    return {i: _json_lines(v) for i, v in keyed.items() if i is not None}


def _split_sections(text: str) -> dict[int, list[str]]:
    lines = text.strip().splitlines()
    if lines and _FENCE.match(lines[0]):
        lines = lines[1:]
    if found_json := _json_sections(lines):
        return found_json
    # a section that has a real markdown heading somewhere is never started by a bold or
    # "Name:" line, so body text such as "Next step: ..." cannot hijack a stored briefing
    md_keys = {
        k
        for ln in lines
        if _MD_HEADING.match(ln) and (k := _match_heading(ln, set())[0]) is not None
    }
    found: dict[int, list[str]] = {}
    current: int | None = None
    in_fence = False
    for line in lines:
        idx, rest, is_md = _match_heading(line, set(found) | md_keys)
        if in_fence and not (is_md and idx is not None):
            idx, is_md = None, False  # inside a code block only a canonical heading counts
        if _FENCE.match(line) and current is not None:
            in_fence = not in_fence
        if idx is not None:
            current = idx
            body = found.setdefault(idx, [])
            if rest:
                body.append(rest)
        elif current is not None:
            if is_md and (md := _UNKNOWN_MD.match(line)):  # demote so only five headings remain
                line = f"**{md['name']}**"
            found[current].append(line)
    for body in found.values():
        fences = [i for i, ln in enumerate(body) if _FENCE.match(ln)]
        if len(fences) % 2 == 1 and not "".join(body[fences[-1] + 1 :]).strip():
            del body[fences[-1]]  # the closing fence of a fenced answer
    return found


def _body(lines: list[str]) -> str:
    return "\n".join(lines).strip()


def says_nothing(body: str) -> bool:
    """Whether a section's body has nothing to say (``(none)``, ``- None``, ``N/A``, empty)."""
    text = body.strip().lower().lstrip("-*• ").strip().rstrip(".").strip()
    return text.removeprefix("(").removesuffix(")").strip() in _EMPTY


def parse_briefing(text: str, *, previous: str | None = None) -> str:
    """Normalise the fast model's answer to exactly :data:`SECTIONS`, in order.

    Models wrap answers in code fences, add preambles, and write near-miss headings
    (``# Objective``, ``**Open Tasks**``, ``Decisions and Facts:``); all map onto the canonical
    headings. A missing or empty section keeps ``previous``'s text when it has one, else
    becomes ``(none)``. Raises ``ValueError`` when no section is recognisable at all, or when
    every one it has is empty or says nothing (``says_nothing``): such an answer says nothing
    of the span it would fold away, nor keeps what the previous summary said.
    """
    found = _split_sections(without_thinking(text))  # a stored briefing has no thinking
    if not found:
        raise ValueError("the summary has none of the sections " + ", ".join(SECTIONS))
    if all(says_nothing(_body(lines)) for lines in found.values()):
        raise ValueError("every section is empty")
    old = _split_sections(previous) if previous else {}
    out: list[str] = []
    for idx, heading in enumerate(SECTIONS):
        body = _body(found.get(idx, [])) or _body(old.get(idx, [])) or _NONE
        out.append(f"{heading}\n{body}")
    return "\n\n".join(out)


def section(summary: str, name: str) -> str | None:
    """Body of one section (``"## Open Tasks"`` or ``"Open Tasks"``), or None when absent."""
    idx = _key(name.lstrip("# "))
    if idx is None:
        raise ValueError(f"unknown section {name!r}; expected one of {', '.join(SECTIONS)}")
    body = _body(_split_sections(summary).get(idx, []))
    return body or None
