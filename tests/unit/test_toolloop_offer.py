"""``fit_offer``: ``read_tool_output`` goes only beside a client's own non-empty ``tools``
(never with legacy ``functions``, nor for several choices), and a prompt without it names no
handle."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.cascade.pipeline import Assembled
from proxy.cascade.truncation import truncate_tool_result
from proxy.config_context import ContextConfig, RedactionConfig, ToolOutputConfig
from proxy.services.toolloop import carries_tools, fit_offer
from tests.unit.cascade.builders import assistant_calls, tool, user

CTX = ContextConfig()
TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
FUNCTIONS = [{"name": "run", "parameters": {"type": "object"}}]
OWN = [{"type": "function", "function": {"name": "read_tool_output", "parameters": {}}}]


def assembled(offer: bool = True) -> Assembled:
    cfg = ToolOutputConfig(max_chars=2000, compact=False)
    cut = truncate_tool_result(
        tool("call_1", "x" * 9000), cfg=cfg, redaction=RedactionConfig(enabled=False)
    ).message
    msgs = (user("go"), assistant_calls(("call_1", "run", {})), cut)
    return Assembled(msgs, msgs, (), (), (), offer, tokens=0)


def handles(a: Assembled) -> bool:
    return any("read_tool_output" in str(m.get("content")) for m in a.messages)


@pytest.mark.parametrize(
    ("body", "offered"),
    [
        ({}, False),
        ({"tools": []}, False),
        ({"tools": None}, False),
        ({"functions": FUNCTIONS}, False),
        ({"functions": FUNCTIONS, "function_call": "auto"}, False),
        ({"tools": TOOLS, "functions": FUNCTIONS}, False),
        ({"tools": TOOLS}, True),
        ({"tools": TOOLS, "tool_choice": "none"}, True),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "run"}}}, True),
        ({"tools": TOOLS, "n": 1}, True),
        ({"tools": TOOLS, "n": 2}, False),
    ],
    ids=[
        "no-tools",
        "empty-tools",
        "null-tools",
        "functions",
        "function-call",
        "tools-and-functions",
        "tools",
        "tool-choice-none",
        "tool-choice-named",
        "one-choice",
        "several-choices",
    ],
)
def test_offered_only_beside_the_clients_own_tools(body: dict[str, Any], offered: bool) -> None:
    assert carries_tools(body, CTX) is offered
    before = assembled()
    after = fit_offer(before, body, CTX)
    assert after.offer_read_tool is offered
    assert handles(after) is offered  # the prompt names the tool exactly when it goes along
    assert (after is before) is offered
    assert before.messages[2]["content"] != after.messages[2]["content"] or offered


def test_a_handle_the_config_no_longer_offers_is_reworded_too() -> None:
    # persistRaw turned off mid-session: the stored markers still name the tool.
    off = ContextConfig.model_validate({"toolOutput": {"persistRaw": False}})
    after = fit_offer(assembled(offer=False), {"tools": TOOLS}, off)
    assert not after.offer_read_tool and not handles(after)
    # With raw outputs kept, no offer means ``assemble`` found no handle: nothing to reword.
    unchanged = assembled(offer=False)
    assert fit_offer(unchanged, {}, CTX) is unchanged


def test_the_clients_own_read_tool_output_keeps_the_markers() -> None:
    after = fit_offer(assembled(), {"tools": [*TOOLS, *OWN]}, CTX)
    assert not after.offer_read_tool and handles(after)


def test_offer_without_tools_opts_a_toolless_request_in_but_never_functions_nor_n() -> None:
    opted = ContextConfig.model_validate({"toolOutput": {"offerWithoutTools": True}})
    for body in ({}, {"tools": []}, {"tools": None}, {"tools": TOOLS}):
        assert carries_tools(body, opted), body
        after = fit_offer(assembled(), body, opted)
        assert after.offer_read_tool and handles(after)
    several = ({"n": 2}, {"tools": TOOLS, "n": 3})  # README: nor for ``n`` above 1
    for body in ({"functions": FUNCTIONS}, {"tools": TOOLS, "functions": FUNCTIONS}, *several):
        assert not carries_tools(body, opted), body
        assert not fit_offer(assembled(), body, opted).offer_read_tool
