"""``config check`` judges the tracing settings as ``serve`` does before it starts (README,
CLI): it passed an exporter ``serve`` then refused, exit 0 and ``valid``."""

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
