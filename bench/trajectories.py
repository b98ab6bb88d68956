"""Load the recorded transcripts in ``../shared/data/trajectories`` as OpenAI chat messages.

Each source format (see SOURCES.md there) is converted to ``{"role", "content", "tool_calls",
"tool_call_id"}`` dicts by its loader in :mod:`bench.trajectory_formats`. Plain-text actions
(SWE-agent 0.x) become one ``tool_calls`` entry per assistant turn with a stable synthetic id
and the observation becomes the matching ``tool`` message, so that tool pairing can be checked
on every format.

A *step* is one model call: the history up to the last message before an assistant turn is the
prompt, and the recorded assistant message is the answer. ``FILES`` lists the files in the order
of SOURCES.md; a file's number is its position there (1-based), which is the numbering the bench
reports use.

The files are read from the shared folder next to the repository (``<repo>/../shared``) or from
``$CASCADE_TRAJECTORIES``; they are never copied into the repository.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DATA_DIR",
    "FILES",
    "TrajectoryFile",
    "Conversation",
    "Step",
    "load",
    "steps",
    "conversation_steps",
    "resolve",
    "detect_format",
]

Message = dict[str, Any]

DATA_DIR = Path(
    os.environ.get("CASCADE_TRAJECTORIES")
    or Path(__file__).resolve().parents[2] / "shared" / "data" / "trajectories"
)


@dataclass(frozen=True, slots=True)
class TrajectoryFile:
    number: int
    name: str
    fmt: str

    @property
    def path(self) -> Path:
        return DATA_DIR / self.name


FILES: tuple[TrajectoryFile, ...] = (
    TrajectoryFile(1, "SWE-agent__mini-swe-agent__django__django-11910.traj.json", "mini-swe"),
    TrajectoryFile(2, "SWE-agent__mini-swe-agent__sqlfluff__sqlfluff-1763.traj.json", "mini-swe"),
    TrajectoryFile(3, "princeton-nlp__SWE-agent__pydicom__pydicom-1458.traj", "swe-agent"),
    TrajectoryFile(4, "OpenHands__benchmarks__traj_safety-metrics.json", "openhands-events"),
    TrajectoryFile(5, "OpenHands__benchmarks__output.critic_attempt_1.jsonl", "openhands-output"),
    TrajectoryFile(6, "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl", "claude-code"),
    TrajectoryFile(7, "marot__spotter__agent-acompact-e1f845.jsonl", "claude-code"),
    TrajectoryFile(8, "sierra-research__tau-bench__gpt-4o-airline.json", "tau-bench"),
)
"""The eight transcripts, numbered in SOURCES.md order."""


@dataclass(frozen=True, slots=True)
class Conversation:
    """One agent session: ``id`` is unique within its file (e.g. ``task3-trial1``)."""

    id: str
    messages: tuple[Message, ...]


@dataclass(frozen=True, slots=True)
class Step:
    """One model call: ``prompt`` was sent, ``reply`` is what the model answered."""

    conversation: str
    index: int
    prompt: tuple[Message, ...]
    reply: Message


def resolve(spec: str | int | Path) -> TrajectoryFile:
    """Find a file by number (``4``), by name or by a unique name fragment."""
    text = str(spec)
    if text.isdigit():
        return FILES[int(text) - 1]
    name = Path(text).name
    hits = [f for f in FILES if f.name == name] or [f for f in FILES if text in f.name]
    if len(hits) != 1:
        raise KeyError(f"no single trajectory file matches {spec!r}")
    return hits[0]


def load(path: str | Path | TrajectoryFile, *, fmt: str | None = None) -> list[Conversation]:
    """Read one transcript file and return its conversations as OpenAI chat messages.

    ``path`` is a :class:`TrajectoryFile`, a number or name from ``FILES``, or any file on
    disk (its format is then ``fmt`` or sniffed from its name and first bytes).
    """
    if isinstance(path, TrajectoryFile):
        real, fmt = path.path, fmt or path.fmt
    elif Path(path).exists():
        real = Path(path)
        fmt = fmt or detect_format(real)
    else:
        tf = resolve(path)
        real, fmt = tf.path, fmt or tf.fmt
    from bench.trajectory_formats import LOADERS  # it imports this module's types

    return LOADERS[fmt](real)


def detect_format(path: Path) -> str:
    """Guess a file's format: by the known names first, then by its suffix and first record."""
    known = [f.fmt for f in FILES if f.name == path.name]
    if known:
        return known[0]
    if path.name.endswith(".traj.json"):
        return "mini-swe"
    if path.suffix == ".traj":
        return "swe-agent"
    with path.open(encoding="utf-8") as fh:
        head = fh.read(4096)
    if path.suffix == ".jsonl":
        return "openhands-output" if '"history"' in head else "claude-code"
    return "tau-bench" if '"traj"' in head else "openhands-events"


def steps(source: str | Path | TrajectoryFile | Conversation | Sequence[Message]) -> list[Step]:
    """All model calls of a file (every conversation, in order) or of one message list."""
    if isinstance(source, Conversation):
        return conversation_steps(source.messages, conversation=source.id)
    if isinstance(source, (str, Path, TrajectoryFile)):
        return [s for conv in load(source) for s in steps(conv)]
    return conversation_steps(source)


def conversation_steps(messages: Sequence[Message], *, conversation: str = "main") -> list[Step]:
    """Split a message list at each assistant turn that has at least one message before it."""
    out: list[Step] = []
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and i > 0:
            out.append(Step(conversation, len(out), tuple(messages[:i]), m))
    return out
