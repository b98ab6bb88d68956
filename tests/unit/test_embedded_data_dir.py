"""An embedded PostgreSQL directory that cannot be made is one line naming
``CASCADE_DATA_DIR`` (a DatabaseUnavailable, which serve and migrate print as a refusal),
not a FileNotFoundError traceback out of the start."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.pgembed import start_embedded
from proxy.store.db import DatabaseUnavailable


@pytest.mark.parametrize("runtime_dir_set", [False, True], ids=["run", "pgdata"])
def test_a_data_dir_that_cannot_be_made_is_a_refusal(
    runtime_dir_set: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    if runtime_dir_set:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    else:
        monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    with pytest.raises(DatabaseUnavailable) as refused:
        start_embedded(in_the_way)
    made = "pgdata" if runtime_dir_set else "run"
    assert str(refused.value) == (
        f"cannot make the embedded PostgreSQL's directory {in_the_way / made}"
        " (CASCADE_DATA_DIR): Not a directory"
    )
