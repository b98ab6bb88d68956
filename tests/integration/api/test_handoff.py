"""The handoff nudge through the real proxy (issue 22 item 7), read from the SSE stream.

Compaction runs inline here (``background`` off) so each step's occupancy is measured after
it. A user message too large to fold keeps occupancy over ``atFraction`` after a compaction:
the stream gets one ``context.handoff_suggested`` with the numbers, not another while the
session stays high, and one again after a compaction brought it below and it climbed back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from proxy.cascade.types import HANDOFF_SUGGESTED, USAGE
from proxy.settings import Settings
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import FAST, Model, words
from tests.integration.api.conftest import ProxyServer, write_config
from tests.integration.api.test_config_reload import named
from tests.integration.api.test_events import EventStream, chat, open_events, user

LIMIT = 4000
AT = 0.4


def _proxy(tmp_path: Path, db_dsn: str, fake: FakeUpstream, handoff: dict[str, Any]) -> Any:
    fake.default = Model()
    ctx = {
        "summarize": {
            "softFraction": 0.5,
            "hardFraction": 0.95,
            "keepRecent": 4,
            "background": False,
        },
        "eviction": {"enabled": False},
        "handoff": handoff,
    }
    path = write_config(
        tmp_path / "agents.json",
        fake.url,
        context=ctx,
        models={
            "default": {"contextLimit": LIMIT, "reservedOutput": 300},
            FAST: {"contextLimit": 32000},
        },
    )
    return ProxyServer(
        Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3, watch_config=False)
    )


def _run(proxy: ProxyServer, sid: str) -> list[tuple[str, list[Any]]]:
    """Send the scripted turns; for each, the handoff frames the stream carried with it."""
    script = [f"{i} " + words(450, f"t{i}") for i in range(5)]
    script += [
        "big " + words(1900, "big"),
        "small one",
        "small two",
        "small three",
        "small four",
        "big2 " + words(2800, "again"),
    ]
    history: list[Any] = []
    out: list[tuple[str, list[Any]]] = []
    stream: EventStream | None = None
    with open_events_later(proxy, sid) as opener:
        for text in script:
            history.append(user(text))
            history.append(chat(proxy.origin, sid, history))
            stream = stream or opener()
            frames = stream.until(named(USAGE))
            out.append((text.split()[0], [f.data for f in frames if f.event == HANDOFF_SUGGESTED]))
    return out


class open_events_later:
    """The stream opens once the session exists (a stream of an unknown session is a 404)."""

    def __init__(self, proxy: ProxyServer, sid: str) -> None:
        self.proxy, self.sid, self.cm = proxy, sid, None

    def __enter__(self) -> Any:
        def opener() -> EventStream:
            self.cm = open_events(self.proxy.origin, self.sid)
            return self.cm.__enter__()

        return opener

    def __exit__(self, *exc: object) -> None:
        if self.cm is not None:
            self.cm.__exit__(*exc)


def test_one_nudge_per_crossing_with_the_numbers(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    proxy = _proxy(tmp_path, db_dsn, fake_upstream, {"enabled": True, "atFraction": AT}).start()
    try:
        steps = _run(proxy, "hand")
    finally:
        proxy.stop()
    nudged = [name for name, frames in steps if frames]
    assert nudged == ["big", "big2"], steps
    for _, frames in steps:
        assert len(frames) <= 1
    (first,) = dict(steps)["big"]
    assert first["limit"] == LIMIT and first["at_fraction"] == AT
    assert first["fraction"] >= AT
    assert first["fraction"] == pytest.approx(first["occupancy"] / LIMIT, abs=1e-4)
    assert first["session_id"] == "hand"


def test_off_by_default(tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream) -> None:
    proxy = _proxy(tmp_path, db_dsn, fake_upstream, {}).start()
    try:
        steps = _run(proxy, "quiet")
    finally:
        proxy.stop()
    assert [name for name, frames in steps if frames] == []


def _tool_round(i: int, tokens: int) -> list[dict[str, Any]]:
    call = {"id": f"call_{i}", "type": "function",
            "function": {"name": "read_file", "arguments": f'{{"path": "f{i}.py"}}'}}  # fmt: skip
    return [
        user(f"read f{i}.py"),
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"call_{i}", "content": words(tokens, f"file{i}")},
    ]


@pytest.mark.parametrize("evict", [True, False], ids=["evicting", "not-evicting"])
def test_the_nudge_measures_the_prompt_sent_after_the_steps_own_eviction(
    evict: bool, tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    """A compacted session's second big tool round takes the window over ``atFraction``; the
    step's eviction clears the first round, and the prompt sent is under it: no nudge. Without
    eviction the same step is over it, and nudged (the control)."""
    fake_upstream.default = Model()
    ctx = {
        "summarize": {"softFraction": 0.7, "hardFraction": 0.95, "keepRecent": 2,
                      "background": False},
        "eviction": {"enabled": evict, "atFraction": 0.3, "keepRecentRounds": 1,
                     "clearAtLeast": 300, "minResultTokens": 100},
        "handoff": {"enabled": True, "atFraction": 0.45},
    }  # fmt: skip
    path = write_config(
        tmp_path / "agents.json",
        fake_upstream.url,
        context=ctx,
        models={
            "default": {"contextLimit": LIMIT, "reservedOutput": 300},
            FAST: {"contextLimit": 32000},
        },
    )
    proxy = ProxyServer(
        Settings(database_url=db_dsn, config=path, keepalive_seconds=0.3, watch_config=False)
    ).start()
    steps: list[tuple[str, list[Any]]] = []
    try:
        history: list[Any] = []
        with open_events_later(proxy, "sent") as opener:
            stream: EventStream | None = None
            script = [("t", [user(words(450, f"t{i}"))]) for i in range(7)]
            script += [(f"r{i}", _tool_round(i, 900)) for i in (1, 2)]
            for name, messages in script:
                history += messages
                history.append(chat(proxy.origin, "sent", history))
                stream = stream or opener()
                frames = stream.until(named(USAGE))
                steps.append((name, [f.data for f in frames if f.event == HANDOFF_SUGGESTED]))
        last = fake_upstream.bodies()[-1]
    finally:
        proxy.stop()
    assert any("## Objective" in str(m.get("content")) for m in last["messages"]), "compacted"
    cleared = any("[context-cleared]" in str(m.get("content")) for m in last["messages"])
    assert cleared is evict
    nudged = [name for name, frames in steps if frames]
    assert nudged == ([] if evict else ["r2"]), steps
