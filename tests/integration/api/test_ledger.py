"""The identifier ledger through a real compaction (issue 22 item 8).

The fake fast model answers a briefing that names no file, URL or hash; the stored summary must
still hold every identifier of the folded span (up to ``ledgerCap``), newest first, under
``## Files & State``, and ``context.compaction.completed`` must count them.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from proxy.cascade.briefing import section
from tests.fakes.upstream import FakeUpstream
from tests.integration.api.compaction_stack import CLIENT_KEY, Agent, Model, briefing, stack, words
from tests.integration.api.conftest import replied

TURNS = [
    ("src/parser/lexer.py", "https://docs.example.com/grammar.html", "`parse_expr`"),
    ("tests/test_lexer.py", "https://github.com/acme/parser/issues/42", "`Token.kind`"),
    ("/etc/parser/config.toml", "http://localhost:8443/health", "commit 9f3c2a1b7e"),
]


def _say_all(agent: Agent) -> None:
    for path, url, code in TURNS:
        agent.say(f"Look at {path} and {url}, mind {code}. " + words(150, path))


def _compact(origin: str, session: str) -> None:
    with httpx.Client(
        base_url=origin, timeout=10, headers={"authorization": f"Bearer {CLIENT_KEY}"}
    ) as h:
        replied(h, session)  # the fold takes in the last reply, stored just after its answer
        resp = h.post(f"/v1/sessions/{session}/compact")
    assert resp.status_code == 200, resp.text


def test_every_path_and_url_of_the_folded_span_is_in_the_summary(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    with stack(tmp_path, db_dsn, fake_upstream, Model(), summarize={"keepRecent": 0}) as s:
        agent = Agent(s.client("ledger"))
        _say_all(agent)
        _compact(s.proxy.origin, "ledger")
        (row,) = s.summaries("ledger")
        files = section(row["content"], "Files & State") or ""
        expected = [
            "9f3c2a1b7e",
            "http://localhost:8443/health",
            "/etc/parser/config.toml",
            "Token.kind",
            "https://github.com/acme/parser/issues/42",
            "tests/test_lexer.py",
            "parse_expr",
            "https://docs.example.com/grammar.html",
            "src/parser/lexer.py",
        ]
        for ident in expected:
            assert f"`{ident}`" in files, ident
        # newest first: the last turn's identifiers come before the first turn's
        assert files.index("config.toml") < files.index("test_lexer.py") < files.index("lexer.py`")
        (done,) = s.events("ledger", "context.compaction.completed")
        assert done["identifiers_kept"] == 0
        assert done["identifiers_added"] == len(expected)
        assert done["identifiers_dropped"] == 0


def test_the_cap_drops_the_oldest_and_the_event_counts_what_the_model_kept(
    tmp_path: Path, db_dsn: str, fake_upstream: FakeUpstream
) -> None:
    model = Model(brief=lambda req: briefing("- edited `tests/test_lexer.py`"))
    summarize = {"keepRecent": 0, "ledgerCap": 2}
    with stack(tmp_path, db_dsn, fake_upstream, model, summarize=summarize) as s:
        agent = Agent(s.client("capped"))
        _say_all(agent)
        _compact(s.proxy.origin, "capped")
        (row,) = s.summaries("capped")
        files = section(row["content"], "Files & State") or ""
        assert files == (
            "- edited `tests/test_lexer.py`\n- `/etc/parser/config.toml`\n"
            "- `http://localhost:8443/health`"
        )
        (done,) = s.events("capped", "context.compaction.completed")
        assert (
            done["identifiers_kept"],
            done["identifiers_added"],
            done["identifiers_dropped"],
        ) == (1, 2, 6)
