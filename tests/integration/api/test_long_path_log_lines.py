"""A request's path goes into its log lines cut to a bound, with how much more it had: a
tool call id or an unknown path of tens of KB made an access line and an error line that
long each, and a log pipeline splits a line past 16 KB (Docker's) into pieces no JSON
reader parses."""

from __future__ import annotations

import httpx

from tests.integration.api.conftest import Records


def test_a_long_path_is_cut_in_every_log_line(http: httpx.Client, records: Records) -> None:
    long_id = "x" * 30_000
    for path in (f"/v1/sessions/s/tool-outputs/{long_id}", f"/v1/nowhere/{long_id}"):
        assert http.get(path).status_code == 404
    lines = records.access(2)
    assert all(len(line["path"]) < 2100 for line in lines), [len(x["path"]) for x in lines]
    assert all("more characters" in line["path"] for line in lines), lines[0]["path"][-60:]
    messages = [r.getMessage() for r in records.records if r.name.startswith("cascade")]
    assert messages and max(len(m) for m in messages) < 8192, max(len(m) for m in messages)
