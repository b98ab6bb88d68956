"""The console's static files ship in the wheel: pyproject's package-data names each one."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from proxy.ui import STATIC_DIR

REPO = Path(__file__).resolve().parents[2]


def test_every_static_file_is_package_data() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["proxy.ui"]
    files = [p.relative_to(STATIC_DIR.parent).as_posix() for p in STATIC_DIR.iterdir()]
    assert {"static/index.html", "static/app.js", "static/app.css"} <= set(files)
    for name in files:
        assert any(fnmatch.fnmatch(name, g) for g in globs), f"{name} would not ship"


def test_the_page_loads_nothing_from_another_host() -> None:
    for path in STATIC_DIR.iterdir():
        text = path.read_text()
        assert "http://" not in text and "https://" not in text, path.name
        assert "new EventSource" not in text, path.name  # it cannot send the key header
