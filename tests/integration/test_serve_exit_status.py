"""``cascade-proxy serve`` exits as ``migrate`` does for a database a real server refused:
2 for a name the server does not have, which no retry finds (it said 3, a database to
retry, for every refusal); ``tests/unit/test_cli_migrate.py`` has ``migrate``'s."""

from __future__ import annotations

import os

from tests.integration.conftest import dsn_with_db
from tests.unit.starts import SERVE, run_start


def test_a_database_name_the_server_refuses_is_a_setting_to_mend(pg_dsn: str) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/"),
        "DATABASE_URL": dsn_with_db(pg_dsn, "no_such_database"),
    }
    refused = run_start(SERVE, env)
    assert refused.returncode == 2, refused.stderr
    assert 'database "no_such_database" does not exist' in refused.stderr
