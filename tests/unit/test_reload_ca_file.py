"""A reload whose provider ``caFile`` cannot be loaded is refused (``config.rejected``, the
config in force kept), as the file would otherwise take effect and each of that provider's
requests be a 502; a ``caFile`` already in force keeps its last bundle while it is replaced,
so a reload during a rotation is not refused for it."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import trustme

from proxy.cascade.types import CONFIG_REJECTED, CONFIG_RELOADED
from proxy.config import load_config
from proxy.config_watch import ConfigHolder
from proxy.transport import ProviderTransport, check_ca_files, refuse_ca_files


def _write(path: Path, ca_file: str, limit: int = 1000) -> Path:
    provider: dict[str, Any] = {"baseUrl": "https://llm.internal/v1", "caFile": ca_file}
    path.write_text(
        json.dumps(
            {
                "providers": {"private": provider},
                "agents": {"default": {"provider": "private"}},
                "models": {"default": {"contextLimit": limit}},
            }
        )
    )
    return path


def _holder(tmp_path: Path, ca_file: str) -> tuple[ConfigHolder, ProviderTransport]:
    path = _write(tmp_path / "agents.json", ca_file)
    holder = ConfigHolder(load_config(path, {}), path)
    transport = ProviderTransport(max_connections=2)
    holder.vet = functools.partial(refuse_ca_files, transport)
    check_ca_files(transport, holder.current)  # the start's warm-up loads it
    return holder, transport


def test_a_new_ca_file_that_cannot_be_loaded_is_refused(tmp_path: Path) -> None:
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    holder, _ = _holder(tmp_path, str(tmp_path / "ca.pem"))
    before = holder.current
    for bad in (tmp_path / "missing.pem", tmp_path / "empty.pem"):
        bad.parent.mkdir(exist_ok=True)
        if bad.name == "empty.pem":
            bad.write_text("not a bundle")
        _write(holder.path or tmp_path, str(bad), limit=2000)
        name, data = holder.reload(env={})
        assert name == CONFIG_REJECTED
        assert data["reason"].startswith(f"providers.private.caFile: {bad} cannot be loaded")
        assert holder.current is before


def test_a_ca_file_in_force_is_not_refused_while_it_is_replaced(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(bundle))
    holder, _ = _holder(tmp_path, str(bundle))
    bundle.unlink()  # mid-rotation: its last bundle stays in force
    _write(holder.path or tmp_path, str(bundle), limit=2000)
    assert holder.reload(env={})[0] == CONFIG_RELOADED
    assert holder.current.models["default"].context_limit == 2000


def test_check_without_a_transport_names_each_bad_ca_file(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path / "agents.json", str(tmp_path / "nope.pem")), {})
    (problem,) = check_ca_files(None, cfg)
    assert problem.startswith(f"providers.private.caFile: {tmp_path / 'nope.pem'} cannot")


def test_a_failure_acting_on_a_reload_leaves_it_in_force(tmp_path: Path) -> None:
    """``on_reloaded`` (the pools' retirement) runs after the swap: its failure is logged, and
    the reload is not reported as refused while the new config serves."""
    trustme.CA().cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    holder, _ = _holder(tmp_path, str(tmp_path / "ca.pem"))

    def fail(_: Any) -> None:
        raise RuntimeError("boom")

    holder.on_reloaded = fail
    _write(holder.path or tmp_path, str(tmp_path / "ca.pem"), limit=3000)
    assert holder.reload(env={})[0] == CONFIG_RELOADED
    assert holder.current.models["default"].context_limit == 3000
