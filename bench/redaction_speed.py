"""How fast :func:`proxy.cascade.redaction.redact` is, against the plain all-patterns loop.

``python -m bench.redaction_speed [--quick] [--sizes 10000,100000,1000000]``

For each kind of realistic tool output (Python source from the stdlib, service and test logs,
pretty-printed API JSON, and the tool results of the recorded transcripts when
``../shared/data/trajectories`` is there) and each size, it times ``before`` (every pattern's
``subn`` over the whole text, in order: the straightforward implementation) and ``after``
(``redact``) on the same text in the same process, interleaved, and prints the median time of
one call and the ratio. Each kind runs twice: as is (``clean``), and with a few secrets of
different shapes spliced in (``secrets``, one per ~3 KB). Every pair of outputs is checked to
be identical before it is timed.

``python -m bench.redaction_speed --against main [--rounds 15] [--rules]`` instead times this
checkout's ``redact`` against another revision's (its ``proxy/cascade/redaction.py`` and the
scanner that module uses, ``redaction_scan.py`` and ``literals.py``, read with ``git show``;
the patterns are this checkout's, so it times the code, not the rules; with ``--rules`` each
side has its own revision's built-in patterns too, ``secret_*.py``, so it times both) on the
texts the proxy
really redacts: every message of recorded transcripts 1, 2, 4 and 6 (when
``../shared/data/trajectories`` is there) and the load generator's agent workload
(``bench.loadgen_workload.make_workload("large")``). Each round redacts each corpus once with
each version, alternating which goes first; it prints the median and range of a pass, and
refuses to time anything unless both versions return identical results on every text.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import sysconfig
import time
import types
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from proxy.cascade.redaction import REDACTED, compile_patterns, redact

__all__ = ["against", "before", "corpora", "main", "messages", "revision", "revision_patterns"]

SIZES = (10_000, 100_000, 1_000_000)
_STDLIB_FILES = (
    "argparse.py",
    "subprocess.py",
    "http/client.py",
    "email/message.py",
    "json/decoder.py",
    "logging/__init__.py",
    "asyncio/base_events.py",
    "urllib/request.py",
)


def before(text: str, patterns: Sequence[re.Pattern[str]]) -> tuple[str, int]:
    """The reference: each pattern's ``subn`` over the output of the previous one."""
    total = 0
    for pattern in patterns:
        groups = tuple(name for name in pattern.groupindex if name.startswith("secret"))

        def repl(m: re.Match[str], groups: tuple[str, ...] = groups) -> str:
            for name in groups:
                if m.group(name) is not None:
                    start, end = m.start(name) - m.start(), m.end(name) - m.start()
                    return m.group(0)[:start] + REDACTED + m.group(0)[end:]
            return REDACTED

        text, n = pattern.subn(repl, text)
        total += n
    return text, total


def _code() -> Iterator[str]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    for name in _STDLIB_FILES:
        path = lib / name
        if path.exists():
            yield path.read_text(encoding="utf-8")


def _logs(rng: random.Random) -> Iterator[str]:
    levels = ("INFO", "INFO", "INFO", "DEBUG", "WARNING", "ERROR")
    paths = ("/api/v1/users/{}", "/api/v1/orders/{}/items", "/healthz", "/static/app.{}.js")
    for i in range(4000):
        ts = f"2024-05-{1 + i // 1000:02d}T12:{i // 60 % 60:02d}:{i % 60:02d}.{i * 37 % 1000:03d}Z"
        kind = rng.random()
        if kind < 0.5:
            path = rng.choice(paths).format(rng.randint(1, 99999))
            yield (
                f"{ts} {rng.choice(levels)} uvicorn.access 10.0.{rng.randint(0, 255)}."
                f'{rng.randint(1, 254)}:{rng.randint(1024, 65535)} - "GET {path} HTTP/1.1" '
                f"{rng.choice((200, 200, 200, 304, 404, 500))} {rng.randint(1, 900)}ms\n"
            )
        elif kind < 0.8:
            test = f"tests/unit/test_{rng.choice(('models', 'views', 'utils'))}.py::test_case_{i}"
            yield f"{test} {rng.choice(('PASSED', 'PASSED', 'FAILED'))} [{i % 100:3d}%]\n"
        elif kind < 0.95:
            yield (
                f"{ts} {rng.choice(levels)} worker[{rng.randint(1, 8)}] processed batch "
                f"id={rng.getrandbits(64):016x} rows={rng.randint(0, 5000)} "
                f"elapsed={rng.random() * 3:.3f}s cache_hits={rng.randint(0, 99)}\n"
            )
        else:
            yield (
                'Traceback (most recent call last):\n  File "/srv/app/handlers.py", line '
                f"{rng.randint(10, 900)}, in handle\n    result = session.execute(query)\n"
                "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) connection "
                'to server at "db" (10.0.0.5), port 5432 failed: timeout expired\n'
            )


def _json(rng: random.Random) -> Iterator[str]:
    for i in range(400):
        issue = {
            "url": f"https://api.github.com/repos/acme/widgets/issues/{i}",
            "id": rng.getrandbits(40),
            "number": i,
            "title": f"Crash when parsing config section {i}",
            "user": {"login": f"dev{i % 37}", "id": rng.getrandbits(24), "type": "User"},
            "labels": [{"name": "bug", "color": "d73a4a"}],
            "state": rng.choice(("open", "closed")),
            "comments": rng.randint(0, 40),
            "created_at": f"2024-0{1 + i % 9}-1{i % 10}T08:00:00Z",
            "body": "Steps to reproduce:\n1. run `widgets sync`\n2. observe the stack trace",
        }
        yield json.dumps(issue, indent=2) + "\n"
        usage = {"prompt_tokens": rng.randint(100, 9000), "completion_tokens": 312}
        yield json.dumps({"model": "gpt-4o", "max_tokens": 1024, "usage": usage}, indent=2)


def _trajectories() -> Iterator[str]:
    try:
        from bench import trajectories
    except ImportError:  # pragma: no cover - run from outside the repository
        return
    for f in trajectories.FILES:
        if not f.path.exists():
            continue
        for conv in trajectories.load(f):
            for msg in conv.messages:
                if msg.get("role") == "tool" and isinstance(msg.get("content"), str):
                    yield msg["content"]


def corpora() -> dict[str, str]:
    """Each kind of tool output, concatenated (deterministic)."""
    rng = random.Random(7)
    out = {
        "code": "\n".join(_code()),
        "logs": "".join(_logs(rng)),
        "json": "".join(_json(rng)),
        "trajectories": "\n".join(_trajectories()),
    }
    return {name: text for name, text in out.items() if text}


def _secrets(rng: random.Random) -> list[str]:
    alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def run(n: int) -> str:
        return "".join(rng.choice(alnum) for _ in range(n))

    return [
        f"OPENAI_API_KEY=sk-proj-{run(40)}",
        f"  -H 'Authorization: Bearer {run(32)}'",
        f'  "password": "{run(12)}",',
        f"aws_access_key_id = AKIA{run(16).upper()}",
        f"git remote set-url origin https://ghp_{run(36)}@github.com/acme/widgets",
        f"DATABASE_URL=postgres://app:{run(10)}@db:5432/app  # password={run(8)}",
    ]


def _sized(text: str, size: int, rng: random.Random, with_secrets: bool) -> str:
    start = rng.randrange(max(1, len(text) - size)) if len(text) > size else 0
    body = (text * (size // max(1, len(text)) + 2))[start : start + size]
    if not with_secrets:
        return body
    lines = body.split("\n")
    for _ in range(max(1, size // 3000)):
        lines.insert(rng.randrange(len(lines) + 1), rng.choice(_secrets(rng)))
    return "\n".join(lines)[:size]


def _time(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(text: str, rounds: int) -> tuple[float, float, int]:
    """(median seconds per call before, after, secrets found), interleaved round by round."""
    patterns = compile_patterns(())
    expected = before(text, patterns)
    if redact(text, patterns) != expected:
        raise SystemExit("redact differs from the reference: refusing to time it")
    calls = max(1, 200_000 // max(1, len(text)))
    old, new = [], []
    for _ in range(rounds):
        old.append(_time(lambda: before(text, patterns), calls))
        new.append(_time(lambda: redact(text, patterns), calls))
    return statistics.median(old), statistics.median(new), expected[1]


Redact = Callable[[str, Sequence[re.Pattern[str]]], tuple[str, int]]
TRANSCRIPTS = (1, 2, 4, 6)


def messages() -> dict[str, list[str]]:
    """The texts of every message the proxy would redact, per source: each transcript's
    messages (text parts included, each message once) and the agent workload's history."""
    from bench import loadgen_workload, trajectories

    out: dict[str, list[str]] = {}
    for number in TRANSCRIPTS:
        source = trajectories.resolve(number)
        if not source.path.exists():
            continue
        seen: dict[int, str] = {}
        for step in trajectories.steps(source):
            for msg in (*step.prompt, step.reply):
                content = msg.get("content")
                for part in content if isinstance(content, list) else [{"text": content}]:
                    text = part.get("text") if isinstance(part, dict) else None
                    if isinstance(text, str) and text:
                        seen.setdefault(id(text), text)
        out[f"transcript {number}"] = list(seen.values())
    workload = loadgen_workload.make_workload("large")
    history = [m["content"] for m in workload.base if isinstance(m.get("content"), str)]
    out["agent workload"] = [*history, workload.tool_result]
    return out


def _load(rev: str, name: str) -> types.ModuleType:
    """``proxy.cascade.<name>`` as of git revision ``rev``, its imports bound to the modules
    that :func:`revision` has loaded from ``rev`` so far (in ``sys.modules`` meanwhile)."""
    path = f"proxy/cascade/{name}.py"
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType(f"_{name}_{rev}")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module


def revision(rev: str) -> Redact:
    """``redact`` as of git revision ``rev`` with its scanner, loaded beside this checkout's."""
    saved = {name: sys.modules[f"proxy.cascade.{name}"] for name in ("literals", "redaction_scan")}
    try:
        for name in saved:  # in import order: the scanner imports ``literals``
            sys.modules[f"proxy.cascade.{name}"] = _load(rev, name)
        fn: Redact = _load(rev, "redaction").redact
    finally:
        sys.modules.update({f"proxy.cascade.{name}": module for name, module in saved.items()})
    return fn


_PATTERN_MODULES = ("secret_blocks", "secret_code", "secret_tokens", "secret_patterns")


def revision_patterns(rev: str) -> tuple[re.Pattern[str], ...]:
    """The built-in patterns as of git revision ``rev`` (its ``secret_*.py``, in import order,
    each bound to the ones before it), compiled by this checkout's ``compile_patterns``."""
    names = [f"proxy.cascade.{name}" for name in _PATTERN_MODULES]
    saved = {name: sys.modules.get(name) for name in names}
    try:
        for name in _PATTERN_MODULES:
            sys.modules[f"proxy.cascade.{name}"] = _load(rev, name)
        sources: tuple[str, ...] = sys.modules["proxy.cascade.secret_patterns"].DEFAULT_PATTERNS
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    return compile_patterns(sources, use_defaults=False)


def against(rev: str, rounds: int, rules: bool = False) -> int:
    """Time ``revision(rev)`` against this checkout's ``redact`` on :func:`messages` (with
    ``rules``, each with its own revision's patterns)."""
    patterns = compile_patterns(())
    old_patterns = revision_patterns(rev) if rules else patterns
    old = revision(rev)
    print(
        f"python {sys.version.split()[0]}; {rev} against this checkout, {rounds} rounds, "
        + ("each side's own patterns" if rules else "this checkout's patterns on both sides")
    )
    print(f"{'corpus':<18}{'texts':>6}{'KB':>7}{'found':>6}{rev:>20}{'this':>20}{'x':>7}")
    for name, texts in messages().items():
        found = 0
        for text in texts:
            expected = old(text, old_patterns)
            if redact(text, patterns) != expected:
                raise SystemExit(f"{name}: the two versions differ: refusing to time them")
            found += expected[1]
        times: dict[str, list[float]] = {"old": [], "new": []}
        for i in range(rounds):
            sides = (("old", old, old_patterns), ("new", redact, patterns))
            for key, fn, used in sides if i % 2 == 0 else sides[::-1]:
                start = time.perf_counter()
                for text in texts:
                    fn(text, used)
                times[key].append(time.perf_counter() - start)
        a, b = (statistics.median(times[k]) for k in ("old", "new"))
        cells = [
            f"{statistics.median(v) * 1e3:.2f} ({min(v) * 1e3:.2f}-{max(v) * 1e3:.2f})"
            for v in times.values()
        ]
        size = sum(map(len, texts)) // 1000
        print(
            f"{name:<18}{len(texts):>6}{size:>7}{found:>6}"
            f"{cells[0]:>20}{cells[1]:>20}{a / b:>6.2f}x"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, sizes up to 100 KB")
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--against", metavar="REV", help="time REV's redact against this one")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of --against")
    parser.add_argument("--rules", action="store_true", help="--against with REV's patterns")
    args = parser.parse_args(argv)
    if args.against:
        return against(args.against, args.rounds, args.rules)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.quick:
        sizes = [s for s in sizes if s <= 100_000]
    rounds = 5 if args.quick else 15
    rng = random.Random(11)
    print(f"python {sys.version.split()[0]}; median of {rounds} interleaved rounds per cell")
    print(f"{'kind':<14}{'size':>9}{'variant':>9}{'found':>7}{'before':>12}{'after':>12}{'x':>8}")
    ratios: dict[str, list[float]] = {"clean": [], "secrets": []}
    for name, corpus in corpora().items():
        for size in sizes:
            for variant in ("clean", "secrets"):
                text = _sized(corpus, size, rng, variant == "secrets")
                old, new, found = measure(text, rounds)
                ratios[variant].append(old / new)
                print(
                    f"{name:<14}{size:>9}{variant:>9}{found:>7}{old * 1e3:>10.3f}ms"
                    f"{new * 1e3:>10.3f}ms{old / new:>7.1f}x"
                )
    for variant, values in ratios.items():
        if values:
            print(f"{variant}: median speed-up {statistics.median(values):.1f}x, "
                  f"min {min(values):.1f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
