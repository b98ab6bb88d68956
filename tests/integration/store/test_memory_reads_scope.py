"""Which facts a session's agent reads is one SQL spelling (``store.memory._reads_scope``),
used by the prompt's read (``SESSION_FACTS``) and a deleted fact's search of the turns that
show it (``SHOWING_TURNS``): each answers, for every scope and agent, what the rule each
statement wrote out before answered, NULLs too."""

from __future__ import annotations

from typing import Any

from proxy.store import memory

SCOPES = ["global", "agent:a", "agent:b", "agent:default", "agent:", "Global", "session:s", None]
AGENTS = ["a", "b", "default", "", "agent:a", "Default", None]

WAS_SESSION_FACTS = (
    "(m.scope = 'global' OR (s.agent <> 'default' AND m.scope = 'agent:' || s.agent))"
)
WAS_SHOWING_TURNS = "($2 = 'global' OR (agent <> 'default' AND $2 = 'agent:' || agent))"


async def test_a_sessions_facts_are_those_the_rule_read_before(pool: Any) -> None:
    rows = await pool.fetch(
        f"SELECT m.scope, s.agent, {WAS_SESSION_FACTS} AS was,"
        f" {memory._reads_scope('m.scope', 's.agent')} AS now"
        " FROM unnest($1::text[]) AS m(scope) CROSS JOIN unnest($2::text[]) AS s(agent)",
        SCOPES,
        AGENTS,
    )
    assert len(rows) == len(SCOPES) * len(AGENTS)
    assert [(r["scope"], r["agent"], r["now"]) for r in rows] == [
        (r["scope"], r["agent"], r["was"]) for r in rows
    ]
    read = {(r["scope"], r["agent"]) for r in rows if r["now"]}
    own = {("agent:a", "a"), ("agent:b", "b"), ("agent:", "")}  # no name is "" (AGENT_NAME)
    assert read == {("global", a) for a in AGENTS} | own


async def test_the_turns_searched_for_a_deleted_fact_are_those_searched_before(pool: Any) -> None:
    for scope in SCOPES:
        rows = await pool.fetch(
            f"SELECT agent, {WAS_SHOWING_TURNS} AS was, {memory._reads_scope('$2', 'agent')} AS now"
            " FROM unnest($1::text[]) AS s(agent)",
            AGENTS,
            scope,
        )
        assert [(r["agent"], r["now"]) for r in rows] == [(r["agent"], r["was"]) for r in rows]


def test_the_rule_is_spelled_from_the_statements_own_names_alone() -> None:
    """No value reaches the SQL text: both arguments are the statements' column and
    parameter names, the scope and the agent compared as bound values."""
    assert memory._reads_scope("$2", "agent") in memory.SHOWING_TURNS
    assert memory._reads_scope("m.scope", "s.agent") in memory.SESSION_FACTS
