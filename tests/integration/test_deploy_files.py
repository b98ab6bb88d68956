"""docker-compose.yml against the Compose specification, offline (no Docker engine here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_compose_file_validates_against_compose_spec() -> None:
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(ROOT / "docker-compose.yml")],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key is caught."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((ROOT / "docker-compose.yml").read_text().replace("depends_on", "depend_on"))
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0


def test_a_wheel_install_finds_its_migrations(tmp_path: Path) -> None:
    """``pip install .`` (the Dockerfile) leaves no source tree beside the package: the
    migrations travel as the wheel's data files and db.py finds them under the prefix."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("cascade_proxy-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    # --ignore-installed: without it pip first uninstalls the project's own editable install
    # from the running .venv (its cascade-proxy script with it), since it is the same project
    subprocess.run([*pip, "install", "--no-deps", "--ignore-installed", "--prefix", str(env),
                    str(wheel)], check=True, capture_output=True, timeout=300)
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    probe = (
        f"import sys; sys.path.append({deps!r}); import proxy; "
        "from proxy.store.db import MIGRATIONS_DIR; print(proxy.__file__); print(MIGRATIONS_DIR)"
    )
    out = subprocess.run([str(env / "bin" / "python"), "-c", probe], check=True,
                         capture_output=True, text=True, cwd=tmp_path).stdout.split("\n")
    assert out[0].startswith(str(env))  # the installed copy, not the checkout
    installed = Path(out[1])
    assert installed == env / "share" / "cascade-proxy" / "migrations"
    expected = sorted(p.name for p in (ROOT / "migrations").glob("*.sql"))
    assert sorted(p.name for p in installed.glob("*.sql")) == expected
    assert Path(sys.executable).with_name("cascade-proxy").exists()  # .venv left as it was


def test_the_image_healthcheck_asks_the_port_the_proxy_serves_on() -> None:
    # It named 8080 while CASCADE_PORT, which the image sets and a deployment may change,
    # decides where the proxy listens; and migrations at start-up need a start period.
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("HEALTHCHECK"))
    check = " ".join(lines[start:start + 2])
    assert "--start-period=" in check
    assert "os.environ.get('CASCADE_PORT', '8080')" in check and ":8080/" not in check
    command = check.split("CMD ", 1)[1].split(" || ")[0]
    code = command.removeprefix("python -c ").strip('"')
    compile(code, "HEALTHCHECK", "exec")  # what the image will run is valid Python
