"""proxy/cli.py: what ``cascade-proxy serve`` sets up before the app starts."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from proxy.cli import main


def test_a_bad_config_or_setting_is_one_line_and_exit_2_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "agents.json"
    bad.write_text('{"context": {"redaction": {"patterns": ["(unclosed"]}}}')
    logger = logging.getLogger("cascade")
    saved = (logger.handlers[:], logger.level, logger.propagate)  # serve sets them
    try:
        assert main(["serve", "--config", str(tmp_path / "missing.json")]) == 2
        assert main(["serve", "--config", str(bad)]) == 2
        monkeypatch.setenv("CASCADE_PORT", "abc")
        assert main(["serve"]) == 2
        monkeypatch.delenv("CASCADE_PORT")
        monkeypatch.setenv("CASCADE_MAX_BODY_BYTES", "-5")  # every request would be a 413
        assert main(["serve"]) == 2
        with pytest.raises(SystemExit) as usage:  # uvicorn took it and listened elsewhere
            main(["serve", "--port", "99999"])
        assert usage.value.code == 2
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    err = capsys.readouterr().err
    assert "missing.json does not exist" in err
    assert "redaction.patterns: invalid redaction pattern '(unclosed'" in err
    assert "port" in err and "Traceback" not in err
    assert "max_body_bytes" in err and "99999 is not a TCP port" in err
