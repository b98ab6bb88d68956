"""What a chat or embeddings body of tiny items costs to read: peak RSS and time, each in a
fresh process.

``python -m bench.body_memory [--mib 32] [--shapes '[[]]',0] [--routes chat,embeddings]``

For each route and shape, a body of ``--mib`` MiB (``CASCADE_MAX_BODY_BYTES``'s default) is
built with that item repeated (in an unknown field of a chat body, in an embeddings body's
``input``), and read as both routes read it: first counted (``jsonio.values_count`` at the
default ``MAX_BODY_VALUES``), then parsed (``loads_exact``) only when the count passes.
``unbounded`` parses without the count, as before the bound.
The body is written to a file the child reads whole; peak RSS is the child's ``ru_maxrss``
less its peak once it holds the body, before it is read as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

SHAPES = ("[[]]", "{}", "[]", "0", "1.5", '""', '"text, with [brackets]"')

_CHILD = """
import json, resource, sys, time
from proxy.jsonio import MAX_BODY_VALUES, loads_exact, values_count

with open(sys.argv[1], "rb") as f:
    raw = f.read()
bounded = sys.argv[2] == "1"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB: the peak with the body
t = time.perf_counter()
refused = bounded and values_count(raw, MAX_BODY_VALUES) > MAX_BODY_VALUES
body = None if refused else loads_exact(raw)
took = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"refused": refused, "seconds": round(took, 3),
                  "peak_mb": round((peak - before) / 1024)}))
"""


HEADS = {
    "chat": b'{"model":"m","messages":[{"role":"user","content":"hi"}],"extra":[',
    "embeddings": b'{"model":"m","input":[',
}
"""Each route's body up to the array its items fill."""


def measure(shape: str, size: int, bounded: bool, route: str = "chat") -> dict[str, object]:
    head = HEADS[route]
    item = shape.encode() + b","
    with tempfile.NamedTemporaryFile(suffix=".json") as body:
        body.write(head + item * ((size - len(head) - 3) // len(item)) + b"0]}")
        body.flush()
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, body.name, "1" if bounded else "0"],
            check=True,
            capture_output=True,
            text=True,
        )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=32)
    parser.add_argument("--shapes", default=",".join(SHAPES[:4]))
    parser.add_argument("--routes", default=",".join(HEADS))
    args = parser.parse_args()
    size = args.mib << 20
    print("| route | shape | mode | refused | seconds | peak MB over holding the body |")
    print("|---|---|---|---|---|---|")
    for route in args.routes.split(","):
        for shape in args.shapes.split(","):
            for bounded in (False, True):
                r = measure(shape, size, bounded, route)
                mode = "bounded" if bounded else "unbounded"
                cells = f"{r['refused']} | {r['seconds']} | {r['peak_mb']}"
                print(f"| {route} | `{shape}` | {mode} | {cells} |")


if __name__ == "__main__":
    main()
