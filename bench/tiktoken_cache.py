"""tiktoken's ``o200k_base`` file, written from ``bpe-openai``'s bundled vocabulary.

The proxy counts with tiktoken, which downloads its BPE file on first use; offline (this
bench's machines) it falls back to the chars/token estimate, and a replay then measures a
proxy that is not the one deployed (the Docker image bakes the file in): the estimate can
count a new block of dense text low enough that the overflow guard lets the prompt past the
window, which the bench counts as over the limit. ``bpe-openai`` holds the same ranks, so the
file is rebuilt from it; tiktoken checks the file's SHA-256 before it uses it.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

__all__ = ["O200K_URL", "write_o200k"]

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


def write_o200k(cache_dir: Path) -> bool:
    """Write ``o200k_base`` into ``cache_dir`` under the name tiktoken looks it up by (the
    SHA-1 of its URL); False when ``bpe-openai`` is not installed."""
    try:
        import bpe_openai

        enc = bpe_openai.get_encoding("o200k_base")
    except Exception:  # noqa: BLE001 - any failure means: leave the proxy to its estimate
        return False
    lines: list[bytes] = []
    for rank in range(enc.n_vocab):  # the ranks past the mergeable ones are special or unused
        if enc.is_special_token(rank):
            continue
        try:
            token = enc.decode_single_token_bytes(rank)
        except Exception:  # noqa: BLE001, S112 - an unused rank: no token to write
            continue
        lines.append(base64.b64encode(token) + b" %d" % rank)
    cache_dir.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha1(O200K_URL.encode()).hexdigest()  # noqa: S324 - tiktoken's cache key
    (cache_dir / name).write_bytes(b"\n".join(lines) + b"\n")
    return True
