"""Just enough of a Dockerfile reader for the tests that check the image without a Docker
engine: instructions with their continuation lines joined, ENV as a dict, CMD as argv."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import NamedTuple

__all__ = ["Instruction", "instructions", "env", "cmd"]


class Instruction(NamedTuple):
    keyword: str  # upper-case: FROM, ENV, COPY, RUN, ...
    args: str


def instructions(path: Path) -> list[Instruction]:
    """The file's instructions in order; comments dropped, ``\\`` continuations joined."""
    out: list[Instruction] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        out.append(Instruction(keyword.upper(), re.sub(r"\s+", " ", args).strip()))
        pending = ""
    return out


def env(path: Path) -> dict[str, str]:
    """Every ``ENV K=V ...`` of the file, later values winning."""
    values: dict[str, str] = {}
    for ins in instructions(path):
        if ins.keyword == "ENV":
            for pair in shlex.split(ins.args):
                key, _, value = pair.partition("=")
                values[key] = value
    return values


def cmd(path: Path) -> list[str]:
    """The last ``CMD``, which must be in exec (JSON array) form."""
    (last,) = [ins for ins in instructions(path) if ins.keyword == "CMD"][-1:]
    argv = json.loads(last.args)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv
