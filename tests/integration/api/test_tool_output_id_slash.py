"""A ``tool_call_id`` that holds ``/`` pages back through the tool-outputs API.

Ids are the client's (or its provider's) text, and some hold a slash. The route's
``{tool_call_id}`` took one path segment, and the server decodes ``%2F`` to ``/`` before
routing (uvicorn puts the decoded path in ``scope["path"]``), so the id was a 404 however the
caller quoted it, the console's ``encodeURIComponent`` included. Both forms reach it now.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from tests.fakes.upstream import FakeUpstream
from tests.integration.api.conftest import ProxyServer
from tests.integration.api.read_tool_output_helpers import chat, history
from tests.integration.api.test_read_tool_output_answers import (
    config_path,  # noqa: F401  (the module's config: maxChars 2000, raw outputs kept)
)
from tests.integration.transcripts import api, blob, marker_args, read_all

CID = "functions/read_file/0"


@pytest.mark.parametrize("quoted", [True, False], ids=["percent-encoded", "raw-slash"])
def test_an_id_with_a_slash_pages_back(
    proxy: ProxyServer, fake_upstream: FakeUpstream, quoted: bool
) -> None:
    output = blob(9000, "slash")
    chat(proxy, f"slash-{quoted}", history(CID, output))
    sent = next(m["content"] for m in fake_upstream.bodies()[-1]["messages"] if m["role"] == "tool")
    assert (marker_args(sent) or {}).get("id") == f"{CID}@2"
    with api(proxy) as http:
        for handle in (CID, f"{CID}@2"):  # the bare id and the marker's pinned handle
            path_id = quote(handle, safe="") if quoted else handle
            assert read_all(http, f"slash-{quoted}", path_id) == output
        other = http.get(f"/v1/sessions/slash-{quoted}/tool-outputs/functions/read_file")
        assert other.status_code == 404, other.text  # a prefix of the id is another id
