"""bench.common: helpers every benchmark shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.common import emit, out_file


def test_out_file_names_a_file_inside_a_directory_and_keeps_a_file_path(tmp_path: Path) -> None:
    # `--out DIR` once ran a 15-minute overhead bench into IsADirectoryError at its end.
    assert out_file(tmp_path, "overhead.json") == tmp_path / "overhead.json"
    target = tmp_path / "run" / "o.json"  # not there yet: the benchmark creates its parent
    assert out_file(target, "overhead.json") == target


def test_emit_prints_the_result_and_writes_it_where_out_says(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    emit({"a": 1}, tmp_path, "capacity.json")
    assert json.loads(capsys.readouterr().out) == {"a": 1}
    assert json.loads((tmp_path / "capacity.json").read_text()) == {"a": 1}
    emit({"b": 2}, None, "capacity.json")  # printed only
    assert json.loads(capsys.readouterr().out) == {"b": 2}
