"""The heavy tests (tests/conftest.py) are named by test modules that exist: a renamed or moved
file would otherwise lose its mark unnoticed and run beside the others under ``make test``."""

from __future__ import annotations

from tests.conftest import HEAVY, ROOT


def test_every_heavy_path_is_a_test_module() -> None:
    missing = [path for path in HEAVY if not (ROOT / path).is_file()]
    assert not missing, missing
    assert all(path.rsplit("/", 1)[-1].startswith("test_") for path in HEAVY)
