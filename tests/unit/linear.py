"""One check that a scan of hostile text grows with the text, not with its square.

A bound on the seconds one run takes (``< 0.2``) fails on a machine slowed by other work
and says nothing on a fast one; a ratio of two runs measured side by side does neither:
the load slows both. The text is built at a quarter of its size and at its size: linear
time costs about 4 times as much (less, with the fixed cost), quadratic 16."""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.cascade.redaction import compile_patterns, redact

PATTERNS = compile_patterns(())

RATIO = 10  # between linear's 4 and quadratic's 16
NOISE = 0.05  # a text read in less CPU time is fast enough however the two compare


def cpu_seconds(run: Callable[[], object]) -> float:
    """The CPU time of one run (other processes on the machine do not count)."""
    start = time.process_time()
    run()
    return time.process_time() - start


def assert_linear(
    text: Callable[[int], str], count: int, read: Callable[[str], object] | None = None
) -> None:
    """Reading ``text(count)`` costs under ``RATIO`` times what ``text(count // 4)`` does;
    ``read`` is the default redaction unless given. Each is measured up to three times,
    the least kept, until they compare so (a stray slow run is no failure)."""
    reader = read or (lambda given: redact(given, PATTERNS))
    small, big = text(count // 4), text(count)
    small_cost = big_cost = float("inf")
    for _ in range(3):
        big_cost = min(big_cost, cpu_seconds(lambda: reader(big)))
        if big_cost < NOISE:
            return
        small_cost = min(small_cost, cpu_seconds(lambda: reader(small)))
        if big_cost < RATIO * small_cost:
            return
    raise AssertionError(f"{big_cost:.3f} s against {small_cost:.3f} s for a quarter")
