"""Earlier texts of migration files that a commit on main shipped before the file was edited.

The runner refuses a database whose ledger holds a checksum other than the file's own: an
applied migration must never change under it. Three files were edited after a commit on main
had applied them, so a database that ran one of those commits holds a checksum no file has
now, and without this list it could never be served by a later release. Each earlier text is
accepted as the file applied because what it left is what the current text leaves once the
later migrations have run:

- 0009: only its comment changed.
- 0016: the body of ``cascade_begin_step_v2``, which 0018 drops.
- 0019: its first text read the window inside ``cascade_append_v1`` and created no
  ``cascade_window_v1``, which 0020-0023 call; 0024 creates it where it is missing.
  ``cascade_append_v1`` keeps that first body there (no current code calls it).

Any other checksum is still an edit and is refused.
"""

from __future__ import annotations

__all__ = ["shipped_earlier"]

_EARLIER: dict[int, frozenset[str]] = {
    9: frozenset({"302941aa9264e086c38d607238c0073d4da8801bd1d6493f82b7cf624329689b"}),
    16: frozenset({"9f61e34592c9a4a8745ef235bd4ef59ec7261feb36e085209d1f62b566549f03"}),
    19: frozenset({"adad83656ac6e1912e7f560650907d218ecad8f4ff3b8e61b07cc9dcc968328b"}),
}


def shipped_earlier(version: int, checksum: str) -> bool:
    """Whether ``checksum`` is an earlier text of migration ``version`` that main shipped."""
    return checksum in _EARLIER.get(version, frozenset())
