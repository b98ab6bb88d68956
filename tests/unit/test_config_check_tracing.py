"""``config check`` judges the tracing and metrics settings as ``serve`` does before it
starts (README, CLI): it passed what ``serve`` then refused, exit 0 and ``valid``."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER names 'zipkin'"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "notaurl", "OTEL_EXPORTER_OTLP_ENDPOINT: not an http(s)"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL is 'grpc'"),
    ],
)
def test_config_check_refuses_the_tracing_settings_serve_refuses(
    variable: str,
    value: str,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tmp_path / "agents.json"
    config.write_text("{}")
    for name in ("CASCADE_TRACING", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"):
        monkeypatch.delenv(name, raising=False)
    if variable == "OTEL_EXPORTER_OTLP_PROTOCOL":  # judged once OTLP is on
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv(variable, value)
    assert main(["config", "check", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith(f"cascade-proxy config check: {said}")


def test_config_check_refuses_a_multiprocess_dir_serve_refuses_and_makes_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``serve`` refuses a ``PROMETHEUS_MULTIPROC_DIR`` it cannot write; ``config check``
    said valid. It judges without making the directory or clearing what is in it."""
    config = tmp_path / "agents.json"
    config.write_text("{}")
    taken = tmp_path / "a-file"
    taken.write_text("")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(taken))
    assert main(["config", "check", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        f"cascade-proxy config check: PROMETHEUS_MULTIPROC_DIR: {taken} is not a directory"
        " this process can write (File exists)\n"
    )
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(taken / "below"))
    assert main(["config", "check", "--config", str(config)]) == 2
    assert "(Not a directory)" in capsys.readouterr().err
    fresh = tmp_path / "metrics" / "here"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(fresh))
    assert main(["config", "check", "--config", str(config)]) == 0
    assert not fresh.parent.exists()


def test_config_check_refuses_no_database_as_serve_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``DATABASE_URL`` and without the embedded server's package, ``serve`` exits
    at once naming what to do; ``config check`` said valid."""
    from proxy import pgembed

    config = tmp_path / "agents.json"
    config.write_text("{}")
    monkeypatch.setattr(pgembed, "_PACKAGE", "no_such_package_here")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["config", "check", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith("cascade-proxy config check: no database: set ")
    monkeypatch.setenv("DATABASE_URL", "postgresql://db/cascade")
    assert main(["config", "check", "--config", str(config)]) == 0
