"""bench.stream_chunks: one short run of every target, this checkout standing in as the base."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.stream_chunks import main

# Loads both cores or times the proxy: make test runs it alone, after the rest.
pytestmark = pytest.mark.heavy

pytest.importorskip("psutil", reason="the bench extra measures process CPU with psutil")

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_every_target_relays_every_chunk_and_reports_its_cpu(tmp_path: Path) -> None:
    out = tmp_path / "stream_chunks.json"
    main(
        ["--chunks", "40", "--chunk-delay-ms", "0", "--streams", "2", "--rounds", "2",
         "--pause", "0", "--base", str(ROOT), "--out", str(out)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert set(result["rounds"]) == {"floor", "cascade", "base"}
    for rounds in result["rounds"].values():
        assert [r["round"] for r in rounds] == [1, 2]
        for r in rounds:
            assert r["statuses"] == [200]
            assert r["frames"] == 2 * (40 + 3)  # role, 40 pieces, finish, [DONE]
            assert r["cpu_us_per_chunk"] is None or r["cpu_us_per_chunk"] >= 0
    assert set(result["summary"]) == {"floor", "cascade", "base"}


def test_a_base_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["--base", str(tmp_path)])
