"""How fast the JSON path of :func:`proxy.cascade.lossless.compact_text` is, against the
implementation it replaced.

``python -m bench.json_speed [--rounds 9]``

``before`` is that implementation (at branch ``distinct``), kept here as the reference: the
text parsed, minified by a substitution with a Python call per token, the minified text
parsed to compare, then the text parsed a third time for the tables, which were written with
``json.dumps`` per string. ``compact_text`` parses once and shares the value, skips the tables
when no array opens on an object, joins tokens found in C, and writes the tables by type.

The corpora: every JSON tool result of transcripts 4 (OpenHands) and 8 (tau-bench) when
``../shared/data/trajectories`` is there, and synthetic indented JSON of 1, 10 and 100 KB,
with an array of records (``table``) and without (``plain``). Each pair of outputs is checked
to be identical first; then ``before`` and ``compact_text`` are timed in the same process,
alternating, and the median time of one call and the median ratio are printed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.trajectories import load, resolve
from proxy.cascade.lossless import Compacted, compact_text
from proxy.cascade.tables import ABSENT, MIN_ROWS

__all__ = ["before", "tabulate_before", "real_results", "synthetic", "main"]

_TOKENS = re.compile(r'("(?:[^"\\]|\\.)*")|[ \t\n\r]+', re.DOTALL)


class _Raw(str):
    pass


class _Obj(list[tuple[str, Any]]):
    pass


def _parse(text: str) -> Any:
    return json.loads(
        text, object_pairs_hook=_Obj, parse_float=_Raw, parse_int=_Raw, parse_constant=_Raw
    )


def _tokens(s: str) -> object:
    return json.loads(s, parse_float=str, parse_int=str, parse_constant=str, object_pairs_hook=list)


def _columns(items: Sequence[Any]) -> list[str] | None:
    if len(items) < MIN_ROWS or not all(isinstance(x, _Obj) and x for x in items):
        return None
    order: dict[str, int] = {}
    for obj in items:
        for key, _ in obj:
            order.setdefault(key, len(order))
    for obj in items:
        at = [order[key] for key, _ in obj]
        if len(set(at)) != len(at) or at != sorted(at):
            return None
    return list(order)


def _key(key: str) -> str:
    return json.dumps(key, ensure_ascii=False)


def _emit(value: Any, tables: list[int], *, flat: bool = False) -> str:
    if isinstance(value, _Raw):
        return str(value)
    if isinstance(value, str):
        return _key(value)
    if value is True or value is False or value is None:
        return json.dumps(value)
    if isinstance(value, _Obj):
        return "{" + ",".join(f"{_key(k)}:{_emit(v, tables, flat=flat)}" for k, v in value) + "}"
    columns = None if flat else _columns(value)
    if columns is None:
        return "[" + ",".join(_emit(v, tables, flat=flat) for v in value) + "]"
    tables.append(len(value))
    header = "[" + ",".join(_key(c) for c in columns) + "]"
    lines = [f"[#table {header} (one row per object; {ABSENT} = key absent)"]
    for obj in value:
        cells = dict(obj)
        row = [_emit(cells[c], tables, flat=True) if c in cells else ABSENT for c in columns]
        lines.append("[" + ",".join(row) + "]")
    lines.append("]")
    return "\n".join(lines)


def tabulate_before(text: str) -> tuple[str, int] | None:
    """``tables.tabulate_json`` as the replaced implementation wrote it."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{":
        return None
    try:
        value = _parse(stripped)
    except (ValueError, RecursionError):
        return None
    tables: list[int] = []
    try:
        out = _emit(value, tables)
        out.encode("utf-8")
    except (RecursionError, UnicodeEncodeError):
        return None
    if not tables or len(out) >= len(stripped):
        return None
    return out, len(tables)


def before(text: str) -> Compacted | None:
    """The JSON result of ``compact_text`` as the replaced implementation computed it (None
    when it took neither JSON transform)."""
    stripped = text.strip()
    minified = None
    if stripped and stripped[0] in "[{":
        try:
            tokens = _tokens(text)
            candidate = _TOKENS.sub(lambda m: m.group(1) or "", stripped)
            if candidate != text and _tokens(candidate) == tokens:
                minified = candidate
        except (ValueError, RecursionError):  # RecursionError used to escape: now not JSON
            pass
    tabular = tabulate_before(text) if text.lstrip()[:1] in ("[", "{") else None
    if tabular is not None and (minified is None or len(tabular[0]) < len(minified)):
        return Compacted(tabular[0], json_minified=True, json_tables=tabular[1])
    return Compacted(minified, json_minified=True) if minified is not None else None


def real_results(numbers: Sequence[int] = (4, 8)) -> list[str]:
    """The distinct tool results of those transcripts that open like JSON (none when the
    transcripts are not on this machine)."""
    out: dict[str, None] = {}
    for number in numbers:
        if not resolve(number).path.exists():
            return []
        for conversation in load(resolve(number)):
            for m in conversation.messages:
                content = m.get("content")
                is_tool = m.get("role") == "tool" and isinstance(content, str)
                if is_tool and content.lstrip()[:1] in ("[", "{"):
                    out[content] = None
    return list(out)


def synthetic(size: int, *, table: bool, seed: int = 1) -> str:
    """Indented JSON of about ``size`` characters: records under ``results`` (``table``), or
    an object of small objects with no array of objects."""
    rng = random.Random(seed)
    rows: list[Any] = []
    plain: dict[str, Any] = {}
    i = 0
    while True:
        if table:
            rows.append(
                {
                    "id": i,
                    "name": f"item {i}",
                    "score": round(rng.random() * 100, 3),
                    "tags": ["a", "b"],
                    "ok": i % 2 == 0,
                    "note": None,
                }
            )
            text = json.dumps({"results": rows, "total": len(rows)}, indent=2)
        else:
            plain[f"key_{i}"] = {"value": i * 1.5, "label": f"label {i}", "flags": [True, None]}
            text = json.dumps(plain, indent=2)
        if len(text) >= size:
            return text
        i += 1


def _after(text: str) -> Compacted | None:
    done = compact_text(text)
    return done if done is not None and done.json_minified else None


def _time(fn: Callable[[str], object], texts: Sequence[str], repeat: int) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        for text in texts:
            fn(text)
    return (time.perf_counter() - start) / repeat / len(texts)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    corpora: dict[str, list[str]] = {}
    real = real_results()
    if real:
        corpora[f"real JSON results of files 4+8 ({len(real)})"] = real
    for size in (1_000, 10_000, 100_000):
        for table in (True, False):
            corpora[f"synthetic {size // 1000} KB {'table' if table else 'plain'}"] = [
                synthetic(size, table=table)
            ]
    print("| corpus | before (µs/call) | after (µs/call) | after/before: median (range) |")
    print("|---|---|---|---|")
    for name, texts in corpora.items():
        for text in texts:
            assert before(text) == _after(text), f"{name}: outputs differ"
        repeat = max(1, 300_000 // sum(map(len, texts)))
        old: list[float] = []
        new: list[float] = []
        for _ in range(args.rounds):
            old.append(_time(before, texts, repeat))
            new.append(_time(_after, texts, repeat))
        ratios = sorted(b / a for a, b in zip(old, new, strict=True))
        print(
            f"| {name} | {statistics.median(old) * 1e6:.0f} | {statistics.median(new) * 1e6:.0f}"
            f" | {statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}) |"
        )


if __name__ == "__main__":
    main()
