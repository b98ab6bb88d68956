"""bench.common: helpers every benchmark shares."""

from __future__ import annotations

from pathlib import Path

from bench.common import out_file


def test_out_file_names_a_file_inside_a_directory_and_keeps_a_file_path(tmp_path: Path) -> None:
    # `--out DIR` once ran a 15-minute overhead bench into IsADirectoryError at its end.
    assert out_file(tmp_path, "overhead.json") == tmp_path / "overhead.json"
    target = tmp_path / "run" / "o.json"  # not there yet: the benchmark creates its parent
    assert out_file(target, "overhead.json") == target
