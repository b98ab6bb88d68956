"""``pressure.admitted``: a chat's ask of its key after a wait for its session's compaction
refuses a key a reload limited to other agents with the 403 the chat gets as it takes its
session (``history.py``), which names the session, as ``POST /compact``'s does."""

from __future__ import annotations

import pytest

from proxy.errors import PermissionDenied
from proxy.services.pressure import admitted
from proxy.services.request import ChatContext


def _ctx(agents: tuple[str, ...] | None) -> ChatContext:
    return ChatContext(tenant="team", session_id="sess-41", headers={}, admit=lambda: agents)


def test_a_key_narrowed_meanwhile_is_the_403_naming_the_session() -> None:
    check = admitted(_ctx(("reviewer",)), "coder")
    assert check is not None
    with pytest.raises(PermissionDenied) as denied:
        check()
    expected = PermissionDenied.agent(("reviewer",), "coder", session_id="sess-41")
    assert str(denied.value) == str(expected)
    assert denied.value.code == "agent_not_allowed"


@pytest.mark.parametrize("agents", [None, ("coder",), ("coder", "reviewer")])
def test_a_key_that_still_reaches_the_agent_passes(agents: tuple[str, ...] | None) -> None:
    check = admitted(_ctx(agents), "coder")
    assert check is not None
    check()


def test_without_an_ask_there_is_no_check() -> None:
    assert admitted(ChatContext(tenant="t", session_id="s", headers={}), "coder") is None
