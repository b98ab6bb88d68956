"""One loader per transcript format: each file's records as OpenAI chat messages.

The formats are those of SOURCES.md (in ``../shared/data/trajectories``): A. mini-swe-agent
v2, B. SWE-agent 0.x, C. OpenHands V1 events and outputs, D. Claude Code session JSONL,
E. tau-bench. :data:`LOADERS` maps each format's name (``TrajectoryFile.fmt``) to its loader;
:func:`bench.trajectories.load` picks one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.trajectories import DATA_DIR, FILES, Conversation, Message

__all__ = ["LOADERS", "load_claude_code"]

# --- helpers ----------------------------------------------------------------------------------


def _synthetic_id(*parts: object) -> str:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:24]
    return f"call_{digest}"


def _call(cid: str, name: str, arguments: str | Mapping[str, Any]) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def _clean_calls(calls: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for c in calls:
        fn = c.get("function") or {}
        out.append(_call(str(c["id"]), str(fn.get("name")), fn.get("arguments") or "{}"))
    return out


def _assistant(content: str | None, calls: list[dict[str, Any]], **extra: Any) -> Message:
    msg: Message = {"role": "assistant", "content": content}
    if calls:
        msg["tool_calls"] = calls
    msg.update({k: v for k, v in extra.items() if v})
    return msg


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text") or "") if isinstance(p, Mapping) else str(p) for p in content
        )
    return "" if content is None else str(content)


# --- A. mini-swe-agent v2 ---------------------------------------------------------------------


def _load_mini_swe(path: Path) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    msgs: list[Message] = []
    for m in raw["messages"]:
        role = m.get("role")
        if role == "assistant":
            msgs.append(
                _assistant(
                    m.get("content"),
                    _clean_calls(m.get("tool_calls") or ()),
                    reasoning_content=m.get("reasoning_content"),
                )
            )
        elif role == "tool":
            msgs.append(
                {"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]}
            )
        elif role in ("system", "user"):
            msgs.append({"role": role, "content": m["content"]})
    return [Conversation(str(raw.get("instance_id") or path.stem), tuple(msgs))]


# --- B. SWE-agent 0.x -------------------------------------------------------------------------


def _load_swe_agent(path: Path) -> list[Conversation]:
    raw = json.loads(path.read_text(encoding="utf-8"))
    msgs: list[Message] = []
    pending: str | None = None
    for n, h in enumerate(raw["history"]):
        role = h.get("role")
        if role == "assistant" and h.get("action"):
            action = str(h["action"])
            cid = _synthetic_id(path.name, n, action)
            name = action.strip().split(maxsplit=1)[0] if action.strip() else "bash"
            thought = h.get("thought")
            content = thought if thought is not None else h.get("content")
            msgs.append(_assistant(content, [_call(cid, name, {"command": action})]))
            pending = cid
        elif role == "user" and pending is not None and not h.get("is_demo"):
            msgs.append({"role": "tool", "tool_call_id": pending, "content": _text(h["content"])})
            pending = None
        else:
            msgs.append({"role": role, "content": _text(h.get("content"))})
    return [Conversation(path.name.split("__")[-1].removesuffix(".traj"), tuple(msgs))]


# --- C. OpenHands V1 events -------------------------------------------------------------------


def _observation_text(obs: Mapping[str, Any]) -> str:
    for key in ("output", "message", "content", "error"):
        value = obs.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list):
            return _text(value)
    return ""


def _openhands_messages(events: Sequence[Mapping[str, Any]], instruction: str | None) -> list:
    msgs: list[Message] = [{"role": "user", "content": instruction}] if instruction else []
    open_response: str | None = None
    for e in events:
        kind = e.get("kind")
        if kind == "ActionEvent":
            tc = e.get("tool_call") or {}
            call = _call(
                str(e.get("tool_call_id") or tc.get("id")),
                str(e.get("tool_name") or tc.get("name")),
                tc.get("arguments") or "{}",
            )
            rid = e.get("llm_response_id")
            thought = _text(e.get("thought")) or None
            last = msgs[-1] if msgs else None
            if rid and rid == open_response and last and last.get("role") == "assistant":
                last["tool_calls"].append(call)
                if thought:
                    last["content"] = "\n".join(filter(None, [last.get("content"), thought]))
            else:
                msgs.append(
                    _assistant(thought, [call], reasoning_content=e.get("reasoning_content"))
                )
            open_response = rid
        elif kind == "ObservationEvent":
            obs = e.get("observation") or {}
            msgs.append(
                {
                    "role": "tool",
                    "tool_call_id": e["tool_call_id"],
                    "content": _observation_text(obs),
                }
            )
        elif kind == "MessageEvent":
            lm = e.get("llm_message") or {}
            role = lm.get("role") or ("assistant" if e.get("source") == "agent" else "user")
            msgs.append({"role": role, "content": _text(lm.get("content"))})
            open_response = None
    return msgs


def _instruction_for(instance_id: str) -> str | None:
    companion = DATA_DIR / FILES[4].name
    if not companion.exists():
        return None
    with companion.open(encoding="utf-8") as fh:
        for line in fh:
            if f'"{instance_id}"' in line[:200]:
                row = json.loads(line)
                if row.get("instance_id") == instance_id:
                    return str(row.get("instruction") or "") or None
    return None


def _load_openhands_events(path: Path) -> list[Conversation]:
    """File 4 has no instruction; it is the ``safety-metrics`` line of file 5 (SOURCES.md)."""
    events = json.loads(path.read_text(encoding="utf-8"))
    stem = path.name.removesuffix(".json").split("traj_")[-1]
    instance = f"safety-{stem.removeprefix('safety-')}"
    msgs = _openhands_messages(events, _instruction_for(instance))
    return [Conversation(instance, tuple(msgs))]


def _load_openhands_output(path: Path) -> list[Conversation]:
    out = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                row = json.loads(line)
                msgs = _openhands_messages(row.get("history") or [], row.get("instruction"))
                out.append(Conversation(str(row.get("instance_id")), tuple(msgs)))
    return out


# --- D. Claude Code session JSONL -------------------------------------------------------------


def _claude_records(path: Path) -> Iterator[Mapping[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                yield json.loads(line)


def _claude_user(content: Any) -> list[Message]:
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    out: list[Message] = []
    texts: list[str] = []
    for block in content or ():
        if block.get("type") == "tool_result":
            body = block.get("content")
            text = body if isinstance(body, str) else _text(body)
            out.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        else:
            texts.append(f"[{block.get('type')}]")
    if texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _merge_block(msg: Message, block: Mapping[str, Any]) -> None:
    kind = block.get("type")
    if kind == "text":
        msg["content"] = (msg.get("content") or "") + str(block.get("text") or "")
    elif kind == "thinking":
        msg["reasoning_content"] = (msg.get("reasoning_content") or "") + str(
            block.get("thinking") or ""
        )
    elif kind == "tool_use":
        call = _call(str(block["id"]), str(block.get("name")), block.get("input") or {})
        msg.setdefault("tool_calls", []).append(call)


def load_claude_code(path: Path, *, restart_at_compaction: bool = False) -> list[Conversation]:
    """Merge per-block assistant records by ``message.id``; skip UI bookkeeping records.

    The real auto-compaction in file 6 is skipped by default (the no-compaction baseline: the
    earlier messages stay, the injected summary message is dropped), so every policy manages
    the same uncompacted history. ``restart_at_compaction`` replays it faithfully instead.
    """
    msgs: list[Message] = []
    by_id: dict[str, Message] = {}
    for rec in _claude_records(path):
        kind = rec.get("type")
        if kind == "system" and rec.get("subtype") == "compact_boundary":
            if restart_at_compaction:
                msgs, by_id = [], {}
            continue
        if kind == "user":
            if rec.get("isCompactSummary") and not restart_at_compaction:
                continue
            msgs.extend(_claude_user((rec.get("message") or {}).get("content")))
        elif kind == "assistant":
            message = rec.get("message") or {}
            mid = str(message.get("id") or rec.get("uuid"))
            target = by_id.get(mid)
            if target is None:
                target = by_id[mid] = {"role": "assistant", "content": None}
                msgs.append(target)
            for block in message.get("content") or ():
                _merge_block(target, block)
    return [Conversation(path.name.split("__")[-1].removesuffix(".jsonl"), tuple(msgs))]


# --- E. tau-bench -----------------------------------------------------------------------------


def _load_tau_bench(path: Path) -> list[Conversation]:
    runs = json.loads(path.read_text(encoding="utf-8"))
    out = []
    for run in runs:
        msgs: list[Message] = []
        for m in run["traj"]:
            if m["role"] == "assistant":
                msgs.append(_assistant(m.get("content"), _clean_calls(m.get("tool_calls") or ())))
            elif m["role"] == "tool":
                msgs.append(
                    {
                        "role": "tool",
                        "tool_call_id": m["tool_call_id"],
                        "name": m.get("name"),
                        "content": m.get("content") or "",
                    }
                )
            else:
                msgs.append({"role": m["role"], "content": m.get("content") or ""})
        out.append(Conversation(f"task{run['task_id']}-trial{run['trial']}", tuple(msgs)))
    return out


LOADERS = {
    "mini-swe": _load_mini_swe,
    "swe-agent": _load_swe_agent,
    "openhands-events": _load_openhands_events,
    "openhands-output": _load_openhands_output,
    "claude-code": load_claude_code,
    "tau-bench": _load_tau_bench,
}
