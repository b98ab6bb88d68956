"""The identifier ledger keeps what earlier compactions kept.

A compaction folds the span and the previous summary into a new briefing. The ledger used
to read the span alone, so an identifier an earlier compaction had put in the summary (its
own ledger line included) was gone for good as soon as a later briefing left it out: the
second summary named only the second span's paths and URLs. It now reads the previous
summary too, as the oldest part of what was folded, so the cap drops those first.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from proxy.cascade.briefing import section
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, Model, stack, words
from tests.integration.api.conftest import replied

FIRST = ("src/parser/lexer.py", "https://docs.example.com/grammar.html")
SECOND = ("tests/test_lexer.py", "https://github.com/acme/parser/issues/42")


def _compact(origin: str, session: str) -> None:
    with httpx.Client(
        base_url=origin, timeout=10, headers={"authorization": f"Bearer {CLIENT_KEY}"}
    ) as h:
        replied(h, session)  # the fold takes in the last reply, stored just after its answer
        resp = h.post(f"/v1/sessions/{session}/compact")
    assert resp.status_code == 200, resp.text


def _files(content: str) -> str:
    return section(content, "Files & State") or ""


def test_a_second_compaction_keeps_the_first_ones_identifiers(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    # The fast model's briefing names no identifier, as a forgetful model's would.
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"keepRecent": 0}) as s:
        agent = Agent(s.client("carried"))
        agent.say(f"Look at {FIRST[0]} and {FIRST[1]}. " + words(150, "a"))
        _compact(s.proxy.origin, "carried")
        agent.say(f"Now {SECOND[0]} and {SECOND[1]}. " + words(150, "b"))
        _compact(s.proxy.origin, "carried")
        first, second = s.summaries("carried")
        assert all(f"`{i}`" in _files(first["content"]) for i in FIRST)
        files = _files(second["content"])
        for ident in (*SECOND, *FIRST):
            assert f"`{ident}`" in files, (ident, files)
        # newest first: the second span's before what the first summary carried
        assert files.index(SECOND[0]) < files.index(FIRST[0])


def test_the_cap_drops_what_the_previous_summary_carried_first(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    summarize = {"keepRecent": 0, "ledgerCap": 2}
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize=summarize) as s:
        agent = Agent(s.client("capped2"))
        agent.say(f"Look at {FIRST[0]} and {FIRST[1]}. " + words(150, "a"))
        _compact(s.proxy.origin, "capped2")
        agent.say(f"Now {SECOND[0]} and {SECOND[1]}. " + words(150, "b"))
        _compact(s.proxy.origin, "capped2")
        _, second = s.summaries("capped2")
        files = _files(second["content"])
        assert all(f"`{i}`" in files for i in SECOND)
        assert not any(i in files for i in FIRST)
        done = s.events("capped2", "context.compaction.completed")[-1]
        assert done["identifiers_added"] == 2 and done["identifiers_dropped"] == 2
