"""bench.capacity with several worker processes: the pool split, the commands, and one small
run of a two-worker replica against a two-worker floor (real processes on loopback)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.capacity import _cascade_cmd, _floor_cmd, main
from bench.procs import FLOOR_UPSTREAM, floor_app

# Loads both cores or times the proxy: make test runs it alone, after the rest.
pytestmark = pytest.mark.heavy


def _args(pool: int, workers: int) -> argparse.Namespace:
    return argparse.Namespace(pool=pool, workers=workers)


def test_each_worker_gets_its_share_of_the_pool(tmp_path: Path) -> None:
    cmd, env = _cascade_cmd(_args(10, 2), 8081, tmp_path / "a.json", "postgresql://x/y", tmp_path)
    assert env["CASCADE_POOL_MAX_SIZE"] == "5"
    assert cmd[cmd.index("--workers") + 1] == "2"
    assert "proxy.app:create_app" in cmd and "--factory" in cmd
    metrics = Path(env["PROMETHEUS_MULTIPROC_DIR"])
    assert metrics.is_dir() and not any(metrics.iterdir())  # empty, as multiprocess mode needs
    (tmp_path / "3").mkdir()
    _, env = _cascade_cmd(
        _args(10, 3), 8081, tmp_path / "a.json", "postgresql://x/y", tmp_path / "3"
    )
    assert env["CASCADE_POOL_MAX_SIZE"] == "3"  # 3 x 3 within 10, never over


def test_one_worker_is_the_serve_command(tmp_path: Path) -> None:
    cmd, env = _cascade_cmd(_args(10, 1), 8081, tmp_path / "a.json", "postgresql://x/y", tmp_path)
    assert cmd[1] == "serve"
    assert env["CASCADE_POOL_MAX_SIZE"] == "10" and "PROMETHEUS_MULTIPROC_DIR" not in env
    assert "bench.floor" in _floor_cmd(1, 9000, "http://u")
    assert "bench.procs:floor_app" in _floor_cmd(2, 9000, "http://u")


def test_the_floor_factory_reads_its_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FLOOR_UPSTREAM, "http://127.0.0.1:9")
    assert any(getattr(r, "path", "") == "/{path:path}" for r in floor_app().routes)


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_two_worker_replica_serves_every_stream_within_its_pool(tmp_path: Path) -> None:
    out = tmp_path / "capacity.json"
    main(
        ["--sessions", "12", "--rounds", "2", "--answer-seconds", "0.5", "--pause", "5.5",
         "--pool", "4", "--workers", "2", "--floor-workers", "2", "--out", str(out)]
    )  # fmt: skip
    result = json.loads(out.read_text())
    assert result["workers"] == 2 and result["floor_workers"] == 2
    assert all(v["all_ok"] for v in result["verdict"])
    assert 1 <= result["cascade_pool_connections_peak"] <= 4
    assert result["cascade_connections_peak"] <= 4 + 2  # and one listening connection each
