"""The image, offline (no Docker engine here): a wheel install finds its migrations, and the
Dockerfile's healthcheck, layers, user, baked files and build context; what the compose
service may write. tests/integration/test_image_start.py runs the image's start command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from proxy.settings import Settings
from tests.integration import dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _image_env() -> dict[str, str]:
    return dockerfile.env(DOCKERFILE)


def test_a_wheel_install_finds_its_migrations(tmp_path: Path) -> None:
    """``pip install .`` (the Dockerfile) leaves no source tree beside the package: the
    migrations travel as the wheel's data files and db.py finds them under the prefix."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("cascade_proxy-*.whl")
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    # --ignore-installed: without it pip first uninstalls the project's own editable install
    # from the running .venv (its cascade-proxy script with it), since it is the same project
    subprocess.run(
        [*pip, "install", "--no-deps", "--ignore-installed", "--prefix", str(env), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    deps = next(p for p in sys.path if p.endswith("site-packages"))
    probe = (
        f"import sys; sys.path.append({deps!r}); import proxy; "
        "from proxy.store.migrations import MIGRATIONS_DIR; "
        "print(proxy.__file__); print(MIGRATIONS_DIR)"
    )
    out = subprocess.run(
        [str(env / "bin" / "python"), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.split("\n")
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
    check = " ".join(lines[start : start + 2])
    assert "--start-period=" in check
    assert "os.environ.get('CASCADE_PORT', '8080')" in check and ":8080/" not in check
    command = check.split("CMD ", 1)[1].split(" || ")[0]
    code = command.removeprefix("python -c ").strip('"')
    compile(code, "HEALTHCHECK", "exec")  # what the image will run is valid Python


def test_the_compose_proxy_writes_only_to_tmp_and_its_data_volume() -> None:
    import yaml

    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["cascade"]
    assert service["read_only"] is True
    assert service["tmpfs"] == ["/tmp"]
    mounts = {v.split(":")[1]: v for v in service["volumes"]}
    assert mounts["/app/config"].endswith(":ro")
    writable = {target for target, v in mounts.items() if not v.endswith(":ro")}
    assert writable == {_image_env()["CASCADE_DATA_DIR"]}


def test_the_dependency_layer_is_built_before_the_code_is_copied() -> None:
    steps = dockerfile.instructions(DOCKERFILE)
    copies = [(i, s.args.split()) for i, s in enumerate(steps) if s.keyword == "COPY"]
    runs = [(i, s.args) for i, s in enumerate(steps) if s.keyword == "RUN"]
    code = min(i for i, args in copies if {"proxy", "pyproject.toml"} & set(args[:-1]))
    lock = min(i for i, args in copies if args[:-1] == ["constraints.txt"])
    lock_path = next(args[-1] for i, args in copies if i == lock)
    deps = next(i for i, args in runs if args == f"pip install -r {lock_path}")
    assert lock < deps < code
    # the code's own install keeps to the same pins
    assert any(f"pip install -c {lock_path} " in args for i, args in runs if i > code)


def test_the_image_runs_as_a_user_that_cannot_write_code_or_config() -> None:
    steps = dockerfile.instructions(DOCKERFILE)
    (user,) = [s.args for s in steps if s.keyword == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) >= 1000  # numeric: runAsNonRoot can verify it
    text = " ".join(s.args for s in steps if s.keyword in ("RUN", "COPY"))
    assert "chown" not in text  # COPY --chown and RUN chown alike
    assert "chmod" not in text
    data = _image_env()["CASCADE_DATA_DIR"]
    assert f"-m 0700 {data}" in text  # the one directory the user owns
    after_user = steps[[s.keyword for s in steps].index("USER") :]
    assert not [s for s in after_user if s.keyword in ("RUN", "COPY", "ADD")]


def test_the_image_has_no_embedded_postgres() -> None:
    text = DOCKERFILE.read_text()
    assert "[embedded]" not in text and "pgserver" not in text


def test_the_image_bakes_the_default_tokenizer() -> None:
    steps = dockerfile.instructions(DOCKERFILE)
    bake = next(s.args for s in steps if s.keyword == "RUN" and "tiktoken.get_encoding" in s.args)
    assert Settings.model_fields["tokenizer"].default in bake
    # baked where the runtime looks (proxy/tokenizers.py: tiktoken reads TIKTOKEN_CACHE_DIR)
    assert _image_env()["TIKTOKEN_CACHE_DIR"]
    env_at = next(
        i for i, s in enumerate(steps) if s.keyword == "ENV" and "TIKTOKEN_CACHE_DIR=" in s.args
    )
    assert env_at < steps.index(next(s for s in steps if s.args == bake))


def test_the_build_context_holds_every_file_the_dockerfile_copies() -> None:
    """.dockerignore keeps the context small (a .venv is hundreds of MB); it must not keep out
    what a COPY needs."""
    allowed = {
        line[1:].rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    for step in dockerfile.instructions(DOCKERFILE):
        if step.keyword == "COPY" and not step.args.startswith("--from"):
            for source in step.args.split()[:-1]:
                assert source in allowed, source
                assert (ROOT / source).exists(), source
