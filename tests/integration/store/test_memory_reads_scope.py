"""Which facts a session's agent reads is one SQL spelling (``store.memory._reads_scope``),
used by a deleted fact's search of the turns that show it (``SHOWING_TURNS``), which answers
for every scope and agent what the rule written out before answered, NULLs too; the prompt's
read (``SESSION_FACTS``), which reads each scope as a range of its own, returns for every
agent the facts of exactly the scopes the rule reads."""

from __future__ import annotations

from typing import Any

from proxy.store import memory
from tests.integration.store.helpers import create_session

TENANT = "reads-scope"  # a tenant of its own: no other test's sessions or facts

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


def test_the_turns_search_spells_the_rule_from_its_own_names_alone() -> None:
    """No value reaches the SQL text: both arguments are the statement's parameter and
    column names, the scope and the agent compared as bound values."""
    assert memory._reads_scope("$2", "agent") in memory.SHOWING_TURNS


async def test_a_sessions_facts_are_those_the_rule_reads(conn: Any) -> None:
    """``SESSION_FACTS`` reads each of its two scopes as a range of its own (migration
    0035's index), not through ``_reads_scope``: for every agent, a session's facts are
    exactly those of the scopes the rule reads for it, oldest first."""
    scopes = [s for s in SCOPES if s is not None]  # memory.scope is NOT NULL
    agents = [a for a in AGENTS if a is not None]  # as sessions.agent is
    for i, agent in enumerate(agents):
        await create_session(conn, tenant=TENANT, session_id=f"s{i}", agent=agent, model=None)
    for scope in scopes:
        await conn.execute(
            "INSERT INTO memory (tenant, scope, fact) VALUES ($1, $2, $3)", TENANT, scope, scope
        )
    rule = memory._reads_scope("$1", "$2")
    for i, agent in enumerate(agents):
        read = [s for s in scopes if await conn.fetchval(f"SELECT {rule}", s, agent)]
        assert await memory.session_facts(conn, tenant=TENANT, session_id=f"s{i}") == read, agent
